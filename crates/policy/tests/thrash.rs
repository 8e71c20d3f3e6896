//! Model tests of `engine::thrash`: a cgroup of a `freeze_thrashing` tier whose own
//! memory.pressure `full avg10` reaches `stall_psi_full_avg10` while a protected cgroup of a
//! higher tier runs is frozen, at most its tier's stall bound at a time, then runs at least
//! `THRASH_REST_MS` before it may be frozen again.

mod common;

use common::*;
use memqos_policy::{Action, Reason, THRASH_REST_MS};

const TIERS: &str = r#"
[[tier]]
name = "critical"
match = ["high*"]
protect = "low"
[[tier]]
name = "batch"
match = ["low*"]
throttle = true
freeze_thrashing = true
stall = { after_ms = 5000 }
"#;

/// `high` (600 MiB, protected) beside `low1` (150 MiB), sampled every 100 ms, with `policy`
/// lines added to `min_write_interval_ms = 0`.
fn demo_with(tiers: &str, policy: &str) -> Sim {
    let mut sim = Sim::new(config(tiers, &format!("min_write_interval_ms = 0\n{policy}")));
    sim.tick_ms = 100;
    sim.add("high", 600 * MB);
    sim.add("low1", 150 * MB);
    sim
}

fn demo(tiers: &str) -> Sim {
    demo_with(tiers, "")
}

/// TIERS without `freeze_thrashing`.
fn without_the_option() -> String {
    edit_tier(TIERS, "batch", |t| {
        t.remove("freeze_thrashing");
    })
}

#[test]
fn a_lower_cgroup_thrashing_beside_a_running_protected_one_is_frozen() {
    let mut sim = demo(TIERS);
    set_full(sim.cg("low1"), 39.0);
    assert!(freezes(&sim.tick()).is_empty(), "below the line (stall_psi_full_avg10 = 40)");
    set_full(sim.cg("low1"), 85.0);
    let d = freezes(&sim.tick());
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!((d[0].0.as_str(), d[0].1), ("low1", true));
    assert_eq!(d[0].2, Reason::Thrashing { beside: "high".into(), psi_full_avg10: 85.0, refault_bytes_per_s: 0 });
    assert_eq!(sim.engine.status().thrashing, ["low1"]);
    // Frozen, its pressure decays: it stays frozen while the protected cgroup runs.
    set_full(sim.cg("low1"), 0.0);
    sim.run(3000, |_| {});
    assert!(sim.cgs["low1"].current.frozen);
}

#[test]
fn nothing_is_frozen_without_the_option_or_without_a_protected_cgroup_running() {
    let mut sim = demo(&without_the_option());
    set_full(sim.cg("low1"), 95.0);
    sim.run(2000, |_| {});
    assert!(sim.writes("low1", memqos_policy::Knob::Freeze).is_empty(), "no freeze_thrashing");

    let mut sim = demo(TIERS);
    sim.cg("high").populated = Some(false);
    set_full(sim.cg("low1"), 95.0);
    sim.run(2000, |_| {});
    assert!(sim.writes("low1", memqos_policy::Knob::Freeze).is_empty(), "the protected cgroup is empty");
}

#[test]
fn it_is_thawed_when_the_protected_cgroup_ends() {
    let mut sim = demo(TIERS);
    set_full(sim.cg("low1"), 85.0);
    sim.tick();
    assert!(sim.cgs["low1"].current.frozen);
    sim.remove("high");
    let d = freezes(&sim.tick());
    assert_eq!(d, [("low1".to_string(), false, Reason::CauseGone { by: "high".into() })]);
    assert!(sim.engine.status().thrashing.is_empty());
    // Emptied rather than removed: thawed too.
    let mut sim = demo(TIERS);
    set_full(sim.cg("low1"), 85.0);
    sim.tick();
    sim.cg("high").populated = Some(false);
    let d = freezes(&sim.tick());
    assert_eq!(d, [("low1".to_string(), false, Reason::Relieved { by: "high".into() })]);
}

#[test]
fn the_stall_bound_thaws_it_and_it_runs_a_rest_before_it_may_be_frozen_again() {
    let mut sim = demo(TIERS);
    set_full(sim.cg("low1"), 85.0);
    sim.tick();
    let frozen_at = sim.now - sim.tick_ms;
    // Still thrashing by its (stale) figure the whole time: only the bound thaws it.
    sim.run(5000, |_| {});
    let thaws: Vec<(u64, Reason)> = sim
        .log
        .iter()
        .filter(|(_, d)| d.action == Action::Freeze(false))
        .map(|(t, d)| (*t, d.reason.clone()))
        .collect();
    assert_eq!(thaws.len(), 1, "{thaws:?}");
    assert_eq!(thaws[0].0 - frozen_at, 5000, "thawed at its tier's stall.after_ms");
    assert!(matches!(thaws[0].1, Reason::StallBound { bound_ms: 5000, .. }), "{thaws:?}");
    let thawed_at = thaws[0].0;
    // It thrashes again at once: not frozen before the rest is over, then frozen again.
    sim.run(THRASH_REST_MS + 200, |_| {});
    let again: Vec<u64> =
        sim.log.iter().filter(|(t, d)| *t > thawed_at && d.action == Action::Freeze(true)).map(|(t, _)| *t).collect();
    assert_eq!(again.len(), 1, "{again:?}");
    assert_eq!(again[0] - thawed_at, THRASH_REST_MS);
}

#[test]
fn the_reason_names_the_highest_tiers_largest_protected_cgroup() {
    let tiers = r#"
[[tier]]
name = "critical"
match = ["high*"]
protect = "low"
[[tier]]
name = "normal"
match = ["mid*"]
protect = "low"
[[tier]]
name = "batch"
match = ["low*"]
throttle = true
freeze_thrashing = true
"#;
    let mut sim = demo(tiers);
    sim.add("high2", 700 * MB);
    sim.add("mid", 900 * MB);
    set_full(sim.cg("low1"), 60.0);
    let d = freezes(&sim.tick());
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].2, Reason::Thrashing { beside: "high2".into(), psi_full_avg10: 60.0, refault_bytes_per_s: 0 });
}

#[test]
fn a_protected_cgroup_is_never_frozen_for_thrashing_and_a_reload_without_the_option_thaws() {
    let mut sim = demo(TIERS);
    set_full(sim.cg("high"), 95.0);
    set_full(sim.cg("low1"), 95.0);
    sim.tick();
    assert!(!sim.cgs["high"].current.frozen);
    assert!(sim.cgs["low1"].current.frozen);
    let plain = config(&without_the_option(), "min_write_interval_ms = 0");
    let cfg = plain.clone();
    sim.engine.reconfigure(plain, |p| cfg.tiers.classify(p));
    sim.cfg = cfg;
    let d = freezes(&sim.tick());
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!((d[0].0.as_str(), d[0].1), ("low1", false));
}

/// Runs `ms` with low1 refaulting `mb_per_s` (each 100 ms tick's share), PSI quiet.
fn refaulting(sim: &mut Sim, mb_per_s: u64, ms: u64) {
    sim.run(ms, |s| {
        let c = s.cg("low1");
        c.refault_delta_bytes = mb_per_s * MB / 10;
        c.refault_window_ms = 100;
    });
}

#[test]
fn refaults_count_where_psi_misses_them_averaged_over_about_ten_seconds() {
    // 20 MiB/s against the 8M line: the average crosses it after about five seconds
    // (20 x (1 - e^(-t/10)) >= 8 at t = 5.1 s), not on the first tick.
    let mut sim = demo(TIERS);
    refaulting(&mut sim, 20, 4000);
    assert!(sim.writes("low1", memqos_policy::Knob::Freeze).is_empty(), "not yet: a burst is not thrashing");
    refaulting(&mut sim, 20, 2000);
    let w = sim.writes("low1", memqos_policy::Knob::Freeze);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!((5000..=5300).contains(&w[0].0), "{w:?}");
    let Reason::Thrashing { refault_bytes_per_s, psi_full_avg10, .. } = &sim.log.last().unwrap().1.reason else {
        panic!("{:?}", sim.log.last())
    };
    assert!((8 * MB..9 * MB).contains(refault_bytes_per_s), "{refault_bytes_per_s}");
    assert_eq!(*psi_full_avg10, 0.0);

    // Below the line for a minute: never frozen. With the line at 0, refaults do not count.
    let mut sim = demo(TIERS);
    refaulting(&mut sim, 7, 60_000);
    assert!(sim.writes("low1", memqos_policy::Knob::Freeze).is_empty());
    let mut sim = demo_with(TIERS, "thrash_refault_rate = \"0\"");
    refaulting(&mut sim, 100, 30_000);
    assert!(sim.writes("low1", memqos_policy::Knob::Freeze).is_empty(), "thrash_refault_rate = 0: PSI only");
}
