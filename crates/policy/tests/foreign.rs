//! Coexistence with other managers of the same knobs: systemd units' MemoryHigh=/MemoryLow=,
//! kubelet's MemoryQoS memory.min/low (`policy.foreign_knobs`), and systemd-oomd's
//! ManagedOOMPreference xattrs as tier hints (`tier.xattr`).

mod common;

use common::*;
use memqos_policy::{Action, Config, Knob, Limit};

fn contention(policy: &str) -> Sim {
    let mut sim = Sim::new(config(THREE_TIERS, policy));
    sim.add("critical/db", 500 * MB);
    sim.add("batch/a", 400 * MB);
    sim.add("batch/b", 200 * MB);
    sim
}

fn set_high(sim: &mut Sim, id: &str, bytes: u64) {
    sim.cg(id).original.high = Limit::Bytes(bytes);
    sim.cg(id).current.high = Limit::Bytes(bytes);
}

/// The memory.high values written to `id` above `bytes`.
fn highs_above(sim: &Sim, id: &str, bytes: u64) -> Vec<(u64, Action)> {
    sim.writes(id, Knob::High)
        .into_iter()
        .filter(|(_, a)| matches!(a, Action::High(l) if *l > Limit::Bytes(bytes)))
        .collect()
}

#[test]
fn a_units_own_memory_high_is_a_ceiling_not_an_exemption() {
    // MemoryHigh=450M in the unit (or a tenant's own write): throttled all the same, by the
    // lower of memqos's cut and 450M, and released back to 450M, never above it.
    let mut sim = contention("");
    set_high(&mut sim, "batch/a", 450 * MB);
    sim.run(10_000, |s| s.set_stall("critical/db", 20.0));
    assert!(sim.high("batch/a") < Limit::Bytes(400 * MB), "{:?}", sim.high_trail_mb("batch/a"));
    sim.run(60_000, |s| s.set_stall("critical/db", 0.0));
    assert_eq!(sim.high("batch/a"), Limit::Bytes(450 * MB), "{:?}", sim.high_trail_mb("batch/a"));
    assert!(highs_above(&sim, "batch/a", 450 * MB).is_empty(), "{:?}", sim.high_trail_mb("batch/a"));
    // What the journal puts back at stop: their value.
    assert_eq!(sim.cg("batch/a").original.high, Limit::Bytes(450 * MB));
}

#[test]
fn a_tight_foreign_high_is_cut_below_and_put_back_to_theirs_never_above() {
    // Their 100M is below what the cgroup holds: memqos's cuts go lower still, and every
    // release stops at their 100M.
    let mut sim = contention("");
    set_high(&mut sim, "batch/a", 100 * MB);
    sim.run(10_000, |s| s.set_stall("critical/db", 20.0));
    assert!(sim.high("batch/a") < Limit::Bytes(100 * MB), "{:?}", sim.high_trail_mb("batch/a"));
    sim.run(60_000, |s| s.set_stall("critical/db", 0.0));
    assert_eq!(sim.high("batch/a"), Limit::Bytes(100 * MB), "{:?}", sim.high_trail_mb("batch/a"));
    assert!(highs_above(&sim, "batch/a", 100 * MB).is_empty(), "{:?}", sim.high_trail_mb("batch/a"));
}

#[test]
fn override_cuts_a_foreign_high_and_restores_it() {
    let mut sim = contention("foreign_knobs = \"override\"");
    set_high(&mut sim, "batch/a", 450 * MB);
    sim.run(10_000, |s| s.set_stall("critical/db", 20.0));
    assert!(sim.high("batch/a") < Limit::Bytes(400 * MB));
    // The journal puts back what was written: only memory.high, to the unit's 450M.
    let written: Vec<_> = sim.written().into_iter().filter(|(cgroup, _)| cgroup == "batch/a").collect();
    assert_eq!(written, vec![("batch/a".to_string(), Knob::High)]);
    assert_eq!(sim.cg("batch/a").original.high, Limit::Bytes(450 * MB));
}

#[test]
fn kubelet_memory_min_is_left_alone_and_its_pressure_still_throttles() {
    let mut sim = contention("");
    // kubelet's MemoryQoS: memory.min = requests on a Guaranteed pod's container.
    sim.cg("critical/db").original.min = Limit::Bytes(256 * MB);
    sim.cg("critical/db").current.min = Limit::Bytes(256 * MB);
    sim.run(10_000, |s| s.set_stall("critical/db", 20.0));
    assert!(sim.writes("critical/db", Knob::Low).is_empty());
    assert!(sim.writes("critical/db", Knob::Min).is_empty());
    assert!(!sim.writes("batch/a", Knob::High).is_empty(), "protected pressure must still throttle");

    // Without the foreign floor memqos does protect it.
    let mut sim = contention("");
    sim.run(2_000, |_| {});
    assert!(!sim.writes("critical/db", Knob::Low).is_empty());
}

const XATTR_TIERS: &str = r#"
cgroup_root = "/sys/fs/cgroup"
[[tier]]
name = "oomd-omit"
match = ["**"]
xattr = ["user.oomd_omit"]
protect = "low"
[[tier]]
name = "oomd-avoid"
match = ["system.slice/**"]
xattr = ["user.oomd_avoid", "user.memqos_protect"]
[[tier]]
name = "rest"
match = ["**"]
throttle = true
"#;

#[test]
fn xattr_tiers_take_only_cgroups_carrying_the_attribute() {
    let cfg = Config::from_str(XATTR_TIERS, "x.toml").unwrap();
    assert!(cfg.tiers.uses_xattrs());
    let name = |path: &str, set: &[&str]| {
        let mut asked = Vec::new();
        let t = cfg.tiers.classify_with(path, |x| {
            asked.push(x.to_string());
            set.contains(&x)
        });
        (cfg.tiers.get(t.unwrap()).unwrap().name.clone(), asked)
    };
    assert_eq!(name("user.slice/a.scope", &["user.oomd_omit"]).0, "oomd-omit");
    assert_eq!(name("system.slice/b.service", &["user.oomd_avoid"]).0, "oomd-avoid");
    assert_eq!(name("system.slice/b.service", &["user.memqos_protect"]).0, "oomd-avoid");
    // The avoid tier's glob does not match user.slice: its xattrs are not even asked for.
    let (tier, asked) = name("user.slice/c.scope", &["user.oomd_avoid"]);
    assert_eq!(tier, "rest");
    assert_eq!(asked, vec!["user.oomd_omit"]);
    // Plain classify never matches an xattr tier.
    assert_eq!(cfg.tiers.classify("system.slice/b.service").map(|t| t.0), Some(2));
}

#[test]
fn xattr_names_outside_user_are_rejected_with_the_field() {
    let bad = XATTR_TIERS.replace("\"user.oomd_omit\"", "\"trusted.oomd_omit\"");
    let e = Config::from_str(&bad, "x.toml").unwrap_err().to_string();
    assert!(e.contains("x.toml:6") && e.contains("tier[0].xattr") && e.contains("trusted.oomd_omit"), "{e}");
    let empty = XATTR_TIERS.replace("xattr = [\"user.oomd_omit\"]", "xattr = []");
    assert!(Config::from_str(&empty, "x.toml").unwrap_err().to_string().contains("tier[0].xattr"));
    let e = Config::from_str(
        "cgroup_root = \"/a\"\n[[tier]]\nname = \"t\"\nmatch = [\"**\"]\n[policy]\nforeign_knobs = \"fight\"\n",
        "y.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("foreign_knobs") || e.contains("fight"), "{e}");
}

#[test]
fn metrics_are_off_by_default_and_errors_name_the_field() {
    let base = "cgroup_root = \"/a\"\n[[tier]]\nname = \"t\"\nmatch = [\"**\"]\n";
    assert_eq!(Config::from_str(base, "m.toml").unwrap().metrics, memqos_policy::Metrics::default());
    let on =
        format!("{base}[metrics]\nlisten = \"127.0.0.1:9590\"\ntextfile = \"/var/lib/node-exporter/memqos.prom\"\n");
    let m = Config::from_str(&on, "m.toml").unwrap().metrics;
    assert_eq!(m.listen, Some("127.0.0.1:9590".parse().unwrap()));
    assert_eq!(m.textfile.as_deref(), Some(std::path::Path::new("/var/lib/node-exporter/memqos.prom")));
    let e = Config::from_str(&format!("{base}[metrics]\nlisten = \"localhost\"\n"), "m.toml").unwrap_err().to_string();
    assert!(e.starts_with("m.toml:6:") && e.contains("metrics.listen") && e.contains("\"localhost\""), "{e}");
    let e =
        Config::from_str(&format!("{base}[metrics]\ntextfile = \"memqos.prom\"\n"), "m.toml").unwrap_err().to_string();
    assert!(e.contains("metrics.textfile") && e.contains("absolute"), "{e}");
}

#[test]
fn a_tier_that_privileges_is_not_taken_by_name_from_an_untrusted_owner() {
    let cfg = Config::from_str(
        r#"
cgroup_root = "/sys/fs/cgroup/agents"
[[tier]]
name = "runtime"
match = ["*/runtime"]
protect = "low"
[[tier]]
name = "favoured"
match = ["*/favoured.*"]
oom_score_adj = -500
[[tier]]
name = "tagged"
match = ["*/tagged.*"]
xattr = ["user.memqos_tagged"]
[[tier]]
name = "shunned"
match = ["*/shunned.*"]
oom_score_adj = 500
[[tier]]
name = "calls"
match = ["**"]
throttle = true
"#,
        "t.toml",
    )
    .unwrap();
    assert!(cfg.tiers.any_privileged());
    let name = |path: &str, trusted: bool| {
        let t = cfg.tiers.classify_owned(path, trusted, |_| true).unwrap();
        cfg.tiers.get(t).unwrap().name.clone()
    };
    // Root's or the delegation owner's cgroups get what their names say.
    assert_eq!(name("s1/runtime", true), "runtime");
    assert_eq!(name("s1/favoured.1", true), "favoured");
    assert_eq!(name("s1/tagged.1", true), "tagged");
    // A tenant's own cgroups with those names fall through to the next tier that matches:
    // no protection, no negative oom_score_adj, no xattr hint.
    assert_eq!(name("s1/runtime", false), "calls");
    assert_eq!(name("s1/favoured.1", false), "calls");
    assert_eq!(name("s1/tagged.1", false), "calls");
    // A tier that gives nothing at the others' expense is theirs to take.
    assert_eq!(name("s1/shunned.1", false), "shunned");
    assert!(cfg.tiers.get(cfg.tiers.by_name("runtime").unwrap()).unwrap().is_privileged());
    assert!(!cfg.tiers.get(cfg.tiers.by_name("shunned").unwrap()).unwrap().is_privileged());
}
