//! Engine behaviour beyond the seed scenarios: flapping, churn, floors, tier order,
//! escalation, signal sources, protection, restore.

mod common;

use common::*;
use memqos_policy::{Action, BpfKind, Knob, Limit, Reason, SignalEvent, TierIndex, Trigger};

fn contention() -> Sim {
    let mut sim = Sim::new(config(THREE_TIERS, ""));
    sim.add("critical/db", 500 * MB);
    sim.add("low/a", 300 * MB);
    sim.add("batch/a", 400 * MB);
    sim.add("batch/b", 200 * MB);
    sim
}

fn is_lowering(d: &memqos_policy::Decision) -> bool {
    matches!(d.action, Action::High(_)) && !is_release(&d.reason)
}

#[test]
fn flapping_signal_only_ratchets_down_and_never_releases() {
    let mut sim = contention();
    let mut on = false;
    sim.run(60_000, |s| {
        on = !on; // pressure on every other tick
        s.set_stall("critical/db", if on { 20.0 } else { 0.0 });
    });
    let highs: Vec<_> = sim.log.iter().filter(|(_, d)| d.knob() == Knob::High).collect();
    assert!(highs.iter().all(|(_, d)| is_lowering(d)), "released while the signal flapped");
    // Each cgroup moves down monotonically, at most once a second, and stops at the floor:
    // batch/a needs 10 steps (400 -> 32 by 40), batch/b 9, then low/a 9 (300 -> 32 by 30).
    assert_eq!(sim.high_trail_mb("batch/a").len(), 10);
    assert_eq!(sim.high_trail_mb("batch/b").len(), 9);
    assert_eq!(sim.high_trail_mb("low/a"), vec![270, 240, 210, 180, 150, 120, 90, 60, 32]);
    // Once everything is at the floor the flapping produces no writes at all.
    let last = highs.last().unwrap().0;
    assert!(last < 40_000, "still writing at {last}");

    // Calm afterwards: release starts exactly hold_ms after the last pressured tick.
    let last_pressure = sim.now - 2 * sim.tick_ms;
    sim.run(10_000, |s| s.set_stall("critical/db", 0.0));
    let first_release = sim.log.iter().find(|(_, d)| matches!(d.reason, Reason::Release { .. })).unwrap();
    assert_eq!(first_release.0, last_pressure + 5000);
}

#[test]
fn pressure_shorter_than_hold_never_releases_and_writes_stay_bounded() {
    let mut sim = contention();
    let mut tick = 0;
    sim.run(120_000, |s| {
        // One pressured tick every 4 s: calm periods are shorter than hold_ms (5 s).
        s.set_stall("critical/db", if tick % 8 == 0 { 20.0 } else { 0.0 });
        tick += 1;
    });
    assert!(sim.log.iter().all(|(_, d)| d.knob() != Knob::High || is_lowering(d)));
    // One step per pressured tick at most: 30 pressured ticks in 120 s.
    assert!(sim.writes("batch/a", Knob::High).len() <= 10);
    let per_tick_max = sim.log.iter().fold(std::collections::BTreeMap::new(), |mut m, (t, _)| {
        *m.entry(*t).or_insert(0) += 1;
        m
    });
    assert!(per_tick_max.values().all(|&n| n <= 4), "write burst: {per_tick_max:?}");
}

#[test]
fn stale_avg10_without_new_stall_is_not_pressure() {
    let mut sim = contention();
    sim.run(5_000, |s| {
        let c = s.cg("critical/db");
        c.psi.some.avg10 = 30.0; // the tail of an old 10 s average
        c.psi_some_delta_us = 0;
    });
    assert!(sim.log.iter().all(|(_, d)| d.knob() == Knob::Low));
}

#[test]
fn disappearing_cgroup_mid_throttle_gets_no_decisions_and_restarts_fresh() {
    let mut sim = contention();
    sim.run(3_000, |s| s.set_stall("critical/db", 20.0));
    assert_eq!(sim.high_trail_mb("batch/a"), vec![360, 320, 280]);
    sim.remove("batch/a");
    let before = sim.log.len();
    sim.run(3_000, |s| s.set_stall("critical/db", 20.0));
    assert!(sim.log[before..].iter().all(|(_, d)| d.cgroup != "batch/a"));
    assert_eq!(sim.engine.status().tracked, 3);

    // Same path again: a new cgroup with default knobs. No memory of the old one (no rate
    // limit carried over): it is cut at once, from its usage.
    sim.add("batch/a", 100 * MB);
    let d = sim.tick();
    let cut: Vec<_> = d.iter().filter(|d| d.cgroup == "batch/a").map(|d| d.action).collect();
    assert_eq!(cut, vec![Action::High(Limit::Bytes(90 * MB))]);
}

#[test]
fn cgroup_recreated_between_ticks_is_a_new_cgroup() {
    let mut sim = Sim::new(config(THREE_TIERS, "min_write_interval_ms = 5000"));
    sim.add("critical/db", 500 * MB);
    sim.add("batch/a", 400 * MB);
    sim.cg("batch/a").id = memqos_policy::CgroupId(7);
    sim.run(1_000, |s| s.set_stall("critical/db", 20.0));
    assert_eq!(sim.high_trail_mb("batch/a"), vec![360]);
    // Removed and created again under the same name before the next sample: only the
    // kernel id tells. The engine forgets the old one's rate limit and originals.
    sim.remove("batch/a");
    sim.add("batch/a", 100 * MB);
    sim.cg("batch/a").id = memqos_policy::CgroupId(8);
    let d = sim.tick();
    let cut: Vec<_> = d.iter().filter(|d| d.cgroup == "batch/a").map(|d| d.action).collect();
    assert_eq!(cut, vec![Action::High(Limit::Bytes(90 * MB))]);
}

#[test]
fn protected_cgroup_disappearing_ends_its_pressure() {
    let mut sim = contention();
    sim.run(2_000, |s| s.set_stall("critical/db", 20.0));
    assert!(!sim.writes("batch/a", Knob::High).is_empty());
    sim.remove("critical/db");
    let gone_at = sim.now;
    sim.run(10_000, |_| {});
    // No protected cgroup is left to hold room for: released on the first tick without it,
    // not hold_ms (5 s) after the last pressure.
    let release = sim.log.iter().find(|(_, d)| d.knob() == Knob::High && !is_lowering(d)).unwrap();
    assert_eq!(release.0, gone_at, "{}", release.1);
    assert!(matches!(release.1.reason, Reason::NothingToProtect { calm_for_ms: 500 }), "{}", release.1);
    assert!(
        sim.log.iter().all(|(_, d)| !matches!(d.reason, Reason::Release { .. })),
        "hold_ms release after the early one"
    );
}

#[test]
fn protected_cgroup_emptying_releases_without_the_hold() {
    // The experiments' shape: a protected task finishes, its cgroup lingers empty.
    let mut sim = contention();
    sim.run(2_000, |s| s.set_stall("critical/db", 20.0));
    let cut = sim.high("batch/a");
    assert!(cut < Limit::Max);
    sim.run(1_000, |s| s.set_stall("critical/db", 0.0));
    assert_eq!(sim.high("batch/a"), cut, "released within hold_ms while db still runs");
    let c = sim.cg("critical/db");
    c.populated = Some(false);
    c.usage_bytes = 0;
    let emptied_at = sim.now;
    sim.run(1_000, |_| {});
    let first = sim.log.iter().find(|(t, d)| *t >= emptied_at && d.cgroup == "batch/a").unwrap();
    assert_eq!(first.0, emptied_at);
    assert!(matches!(first.1.reason, Reason::NothingToProtect { .. }), "{}", first.1);
    // A protected cgroup made but not yet run is someone to hold room for.
    let mut sim = contention();
    sim.run(2_000, |s| s.set_stall("critical/db", 20.0));
    sim.add("critical/next", 0);
    sim.cg("critical/next").populated = Some(false);
    sim.remove("critical/db");
    sim.run(3_000, |_| {});
    assert!(
        sim.log.iter().all(|(_, d)| d.knob() != Knob::High || is_lowering(d)),
        "released with critical/next waiting"
    );
}

#[test]
fn lower_tiers_alone_at_the_guard_keep_the_hold() {
    // No protected cgroup at all: the guard still cuts to keep the parent from its limit,
    // and the hold damps the cut/regrow cycle as before.
    let mut sim = Sim::new(config(THREE_TIERS, ""));
    sim.parent.max = Limit::Bytes(1000 * MB);
    sim.add("batch/a", 600 * MB);
    sim.add("batch/b", 380 * MB);
    sim.run(1_000, |_| {});
    assert!(sim.high("batch/a") < Limit::Max, "the guard cut nothing");
    let last_cut = sim.log.iter().filter(|(_, d)| is_lowering(d)).map(|(t, _)| *t).max().unwrap();
    sim.run(1_000, |s| {
        s.cg("batch/a").usage_bytes = 300 * MB;
    });
    sim.run(8_000, |_| {});
    let release = sim.log.iter().find(|(_, d)| d.knob() == Knob::High && !is_lowering(d)).unwrap();
    assert!(matches!(release.1.reason, Reason::Release { .. }), "{}", release.1);
    assert!(release.0 >= last_cut + 5000, "released {} ms after the last cut", release.0 - last_cut);
}

/// The guard at one moment: 980 MB of a 1000 MB parent, its line at 936 MB.
fn at_the_guard(swapless: bool) -> Sim {
    let mut sim = Sim::new(config(THREE_TIERS, ""));
    sim.parent.max = Limit::Bytes(1000 * MB);
    sim.parent.swapless = swapless;
    sim.add("critical/db", 300 * MB);
    sim.add("low/a", 200 * MB);
    sim.add("batch/a", 300 * MB);
    sim.add("batch/b", 180 * MB);
    sim
}

/// The memory.high writes of one guard tick: one per batch cgroup, each for the guard, saying
/// whether the host had swap.
fn guard_cuts(d: &[memqos_policy::Decision], swapless: bool) -> Vec<&memqos_policy::Decision> {
    let cuts: Vec<_> = d.iter().filter(|d| d.knob() == Knob::High).collect();
    assert_eq!(cuts.len(), 2, "{d:?}");
    assert!(
        cuts.iter().all(|d| matches!(d.reason, Reason::HeadroomGuard { swapless: s, .. } if s == swapless)),
        "{d:?}"
    );
    cuts
}

#[test]
fn with_swap_the_guard_cuts_below_usage_what_reclaim_can_push_out() {
    let mut sim = at_the_guard(false);
    guard_cuts(&sim.tick(), false);
    // 44 MB over the line, from the lowest tier in proportion to usage.
    let (a, b) = (sim.high("batch/a").bytes().unwrap(), sim.high("batch/b").bytes().unwrap());
    assert!(a < 300 * MB && b < 180 * MB, "{a} {b}");
    assert!((300 * MB - a) + (180 * MB - b) >= 44 * MB - 8192, "took {} MB", (480 * MB - a - b) / MB);
    assert_eq!(sim.high("low/a"), Limit::Max, "the higher throttle tier is touched only after the lowest");
}

#[test]
fn swapless_the_guard_caps_at_what_a_cgroup_holds_and_never_below() {
    // Without swap a high below usage frees no anonymous memory: it would only freeze the
    // task holding it. The same tiers are chosen (lowest first), each capped at its usage.
    let mut sim = at_the_guard(true);
    let d = sim.tick();
    let cuts = guard_cuts(&d, true);
    assert!(cuts[0].reason.to_string().ends_with("(no swap: capped at what it holds)"), "{}", cuts[0].reason);
    assert_eq!(sim.high("batch/a"), Limit::Bytes(300 * MB));
    assert_eq!(sim.high("batch/b"), Limit::Bytes(180 * MB));
    assert_eq!(sim.high("low/a"), Limit::Max, "the higher throttle tier is touched only after the lowest");
    // A capped task that frees part of a burst is capped lower (it cannot regrow into it,
    // while the guard holds); one that crept above its cap is never raised by a cut.
    sim.cg("batch/a").usage_bytes = 250 * MB;
    sim.cg("batch/b").usage_bytes = 190 * MB;
    sim.run(1_000, |_| {}); // past min_write_interval_ms
    assert_eq!(sim.high("batch/a"), Limit::Bytes(250 * MB));
    assert_eq!(sim.high("batch/b"), Limit::Bytes(180 * MB));
}

#[test]
fn swapless_the_proportional_step_still_cuts_below_usage() {
    // Only the guard's target changes without swap: protected pressure still slows the
    // lowest tier by a step (the delay the RFC's hook gives), below what it holds.
    let mut sim = at_the_guard(true);
    sim.parent.max = Limit::Max;
    sim.set_stall("critical/db", 20.0);
    sim.tick();
    sim.tick();
    assert_eq!(sim.high("batch/a"), Limit::Bytes(270 * MB));
}

#[test]
fn cgroup_appearing_under_pressure_joins_the_throttled_tier() {
    let mut sim = contention();
    sim.run(2_000, |s| s.set_stall("critical/db", 20.0));
    sim.add("batch/new", 1000 * MB);
    let d = sim.tick();
    let new: Vec<_> = d.iter().filter(|d| d.cgroup == "batch/new").map(|d| d.action).collect();
    assert_eq!(new, vec![Action::High(Limit::Bytes(900 * MB))]);
}

#[test]
fn floor_is_never_crossed() {
    let mut sim = Sim::new(config(THREE_TIERS, "step_ratio = 0.9\nmin_high = \"100M\""));
    sim.add("critical/db", 500 * MB);
    sim.add("batch/a", 400 * MB);
    sim.add("batch/small", 80 * MB); // already under the floor: nothing to take
    sim.add("batch/set", 400 * MB);
    sim.cg("batch/set").original.high = Limit::Bytes(64 * MB); // admin's own high under the floor
    sim.cg("batch/set").current.high = Limit::Bytes(64 * MB);
    sim.run(10_000, |s| s.set_stall("critical/db", 50.0));
    assert_eq!(sim.high_trail_mb("batch/a"), vec![100]); // 400 - 360 = 40 -> clamped to 100
    assert!(sim.writes("batch/small", Knob::High).is_empty());
    assert!(sim.writes("batch/set", Knob::High).is_empty());
}

const FIVE_TIERS: &str = r#"
[[tier]]
name = "critical"
match = ["critical/*"]
protect = "low"
[[tier]]
name = "high"
match = ["high/*"]
protect = "low"
throttle = true
[[tier]]
name = "normal"
match = ["normal/*"]
throttle = true
[[tier]]
name = "low"
match = ["low/*"]
throttle = true
[[tier]]
name = "batch"
match = ["batch/*"]
throttle = true
"#;

/// Runs 5 tiers x 2 cgroups with `stalling` under pressure; at every tick checks that a tier
/// is only cut while every tier below it is at the floor. Returns the order tiers were first
/// cut in.
fn tier_order(stalling: &str) -> Vec<String> {
    let mut sim = Sim::new(config(FIVE_TIERS, "step_ratio = 0.5"));
    for tier in ["critical", "high", "normal", "low", "batch"] {
        sim.add(&format!("{tier}/big"), 200 * MB);
        sim.add(&format!("{tier}/small"), 100 * MB);
    }
    let floor = Limit::Bytes(sim.cfg.policy.min_high);
    let mut order: Vec<String> = Vec::new();
    for _ in 0..60 {
        sim.set_stall(stalling, 30.0);
        let at_floor = |s: &Sim, t: TierIndex| s.cgs.values().filter(|c| c.tier == t).all(|c| c.current.high == floor);
        let floors: Vec<bool> = (0..5).map(|t| at_floor(&sim, TierIndex(t))).collect();
        let now = sim.now;
        for d in sim.tick().iter().filter(|d| is_lowering(d)) {
            let tier = sim.tier(&d.cgroup);
            assert!(tier > sim.tier(stalling), "t={now} cut {d}: at or above the stalling tier");
            assert!(floors[tier.0 + 1..].iter().all(|&f| f), "t={now} cut {d} before lower tiers hit the floor");
            let name = sim.cfg.tiers.get(tier).unwrap().name.clone();
            if !order.contains(&name) {
                order.push(name);
            }
        }
    }
    order
}

#[test]
fn multi_tier_order_lowest_first_never_the_pressured_tier_or_above() {
    assert_eq!(tier_order("critical/big"), ["batch", "low", "normal", "high"]);
    assert_eq!(tier_order("high/big"), ["batch", "low", "normal"]);
    // normal is not protected: its stalls are its own business.
    assert!(tier_order("normal/small").is_empty());
}

/// `TWO_TIERS` with `freeze = true` on batch.
fn freeze_tiers() -> String {
    edit_tier(TWO_TIERS, "batch", |t| {
        t.insert("freeze".into(), true.into());
    })
}

#[test]
fn freeze_escalation_then_thaw_before_release() {
    let mut sim = Sim::new(config(&freeze_tiers(), ""));
    sim.add("critical/db", 500 * MB);
    sim.add("batch/a", 400 * MB);
    sim.add("batch/b", 200 * MB);
    sim.run(25_000, |s| s.set_stall("critical/db", 20.0)); // t = 0 .. 24500
    let freezes: Vec<_> = sim.log.iter().filter(|(_, d)| d.action == Action::Freeze(true)).collect();
    // Largest first, one per freeze_after_ms (10 s) of uninterrupted stall.
    let got: Vec<_> = freezes.iter().map(|(t, d)| (*t, d.cgroup.as_str())).collect();
    assert_eq!(got, vec![(10_000, "batch/a"), (20_000, "batch/b")]);
    assert!(matches!(&freezes[0].1.reason, Reason::Stalled { by, stalled_for_ms: 10_000 } if by == "critical/db"));

    sim.run(10_000, |s| s.set_stall("critical/db", 0.0)); // relieved at t = 25000
    let thaws: Vec<_> = sim
        .log
        .iter()
        .filter(|(_, d)| d.action == Action::Freeze(false))
        .map(|(t, d)| (*t, d.cgroup.as_str()))
        .collect();
    // batch/b was frozen at 20000: 5 s ago, past the write interval, so both thaw at once.
    assert_eq!(thaws, vec![(25_000, "batch/a"), (25_000, "batch/b")]);
    let first_release = sim.log.iter().find(|(_, d)| matches!(d.reason, Reason::Release { .. })).unwrap().0;
    assert!(first_release > 25_000, "release must come after the thaw");
    assert!(!sim.cgs["batch/a"].current.frozen && !sim.cgs["batch/b"].current.frozen);
}

#[test]
fn thaw_waits_for_rate_limit_and_release_waits_for_thaw() {
    let mut sim = Sim::new(config(&freeze_tiers(), "hold_ms = 0\nmin_write_interval_ms = 3000"));
    sim.add("critical/db", 500 * MB);
    sim.add("batch/a", 400 * MB);
    sim.run(10_500, |s| s.set_stall("critical/db", 20.0)); // frozen at t = 10000
    assert_eq!(sim.writes("batch/a", Knob::Freeze), vec![(10_000, Action::Freeze(true))]);
    sim.run(5_000, |s| s.set_stall("critical/db", 0.0));
    let kinds: Vec<_> = sim.log.iter().filter(|(t, _)| *t > 10_000).map(|(t, d)| (*t, d.action)).collect();
    // Relieved at 10500 but frozen only 500 ms ago: thaw at 13000, release on a later tick.
    assert_eq!(kinds[0], (13_000, Action::Freeze(false)));
    assert!(matches!(kinds[1], (t, Action::High(_)) if t > 13_000), "{kinds:?}");
}

#[test]
fn thaw_when_the_stalling_cgroup_disappears() {
    let mut sim = Sim::new(config(&freeze_tiers(), ""));
    sim.add("critical/db", 500 * MB);
    sim.add("critical/web", 100 * MB);
    sim.add("batch/a", 400 * MB);
    sim.run(11_000, |s| s.set_stall("critical/db", 20.0));
    assert!(sim.cgs["batch/a"].current.frozen);
    sim.remove("critical/db");
    // Another protected cgroup keeps stalling, but the one that caused the freeze is gone.
    sim.set_stall("critical/web", 20.0);
    let d = sim.tick();
    assert_eq!(d[0].action, Action::Freeze(false));
    assert!(matches!(&d[0].reason, Reason::CauseGone { by } if by == "critical/db"));
}

#[test]
fn no_escalation_by_default_and_kill_only_when_opted_in() {
    let mut sim = contention(); // freeze = false, kill = false everywhere
    sim.run(120_000, |s| s.set_stall("critical/db", 50.0));
    assert!(sim.log.iter().all(|(_, d)| !matches!(d.action, Action::Freeze(_) | Action::Kill)));

    let tiers = edit_tier(&freeze_tiers(), "batch", |t| {
        t.remove("freeze");
        t.insert("kill".into(), true.into());
    });
    let mut sim = Sim::new(config(&tiers, ""));
    sim.add("critical/db", 500 * MB);
    sim.add("batch/a", 400 * MB);
    sim.add("batch/b", 200 * MB);
    sim.run(65_000, |s| s.set_stall("critical/db", 50.0));
    let kills: Vec<_> =
        sim.log.iter().filter(|(_, d)| d.action == Action::Kill).map(|(t, d)| (*t, d.cgroup.as_str())).collect();
    assert_eq!(kills, vec![(30_000, "batch/a"), (60_000, "batch/b")]);
}

#[test]
fn signal_sources_can_be_switched_off() {
    // PSI off: avg10 and triggers are ignored.
    let tiers = format!("[signals]\npsi = false\n{THREE_TIERS}");
    let mut sim = Sim::new(config(&tiers, ""));
    sim.add("critical/db", 500 * MB);
    sim.add("batch/a", 400 * MB);
    sim.run(5_000, |s| {
        s.set_stall("critical/db", 90.0);
        s.cg("critical/db").signals.push(SignalEvent::PsiTrigger);
        s.cg("critical/db").signals.push(SignalEvent::BpfThreshold { value: 1, counter: None });
        // bpf off by default
    });
    assert!(sim.writes("batch/a", Knob::High).is_empty());

    // A PSI trigger alone is pressure when PSI is on; BPF events count once enabled.
    let tiers = format!("[signals]\nbpf = true\n{THREE_TIERS}");
    let mut sim = Sim::new(config(&tiers, ""));
    sim.add("critical/db", 500 * MB);
    sim.add("batch/a", 400 * MB);
    // The counter that crossed is carried to the reason, and said in the log's sentence.
    sim.cg("critical/db").signals.push(SignalEvent::BpfThreshold { value: 7, counter: Some(BpfKind::Scan) });
    let d = sim.tick();
    let scan = Trigger::Bpf { value: 7, counter: Some(BpfKind::Scan) };
    assert!(matches!(&d[0].reason, Reason::ProtectedPressure { trigger, .. } if *trigger == scan), "{d:?}");
    assert!(d[0].reason.to_string().contains("bpf scan threshold crossed (7)"), "{}", d[0].reason);
    sim.now += 1000;
    sim.cg("critical/db").signals.push(SignalEvent::PsiTrigger);
    let d = sim.tick();
    assert!(matches!(&d[0].reason, Reason::ProtectedPressure { trigger: Trigger::PsiTrigger, .. }), "{d:?}");
}

#[test]
fn events_low_and_parent_limit_events_are_pressure() {
    let mut sim = contention();
    sim.cg("critical/db").events_delta.low = 3;
    let d = sim.tick();
    assert!(matches!(&d[0].reason, Reason::ProtectedPressure { trigger: Trigger::LowEvents { count: 3 }, .. }));

    // Parent-level pressure has no pressured tier: every throttle tier is a candidate,
    // still lowest first.
    let mut sim = contention();
    sim.parent.events_delta.max = 2;
    let d = sim.tick();
    let cut: Vec<_> = d.iter().filter(|d| d.knob() == Knob::High).map(|d| d.cgroup.as_str()).collect();
    assert_eq!(cut, vec!["batch/a", "batch/b"]);
    assert!(matches!(d[0].reason, Reason::ParentLimitEvents { max: 2, oom: 0 }));
}

#[test]
fn stall_at_its_own_limit_is_not_ours_to_fix() {
    let mut sim = contention();
    sim.cg("critical/db").current.max = Limit::Bytes(520 * MB); // 500 MB used: within the guard
    sim.run(5_000, |s| s.set_stall("critical/db", 50.0));
    assert!(sim.log.iter().all(|(_, d)| d.knob() != Knob::High));
}

#[test]
fn stall_rate_alone_triggers() {
    let mut sim = contention();
    sim.tick(); // the first tick has no elapsed time to compute a rate from
    let c = sim.cg("critical/db");
    c.psi.some.avg10 = 0.5;
    c.psi_some_delta_us = 100_000; // 100 ms of 500 ms = 20 %
    let d = sim.tick();
    let Reason::ProtectedPressure { trigger: Trigger::StallRate { pct }, .. } = d[0].reason else { panic!("{d:?}") };
    assert!((pct - 20.0).abs() < 1e-9);
}

#[test]
fn protection_follows_the_working_set_with_hysteresis() {
    let tiers = THREE_TIERS.replacen("protect = \"low\"", "protect = \"min\"", 1);
    let mut sim = Sim::new(config(&tiers, "ws_window_ms = 10000"));
    sim.parent.max = Limit::Bytes(1024 * MB);
    sim.add("critical/db", 200 * MB);
    sim.tick(); // 200 * 1.1 = 220 -> 224 MB (16 MB steps)
                // Small wobble: 200..203 MB stays within the same 16 MB step: no writes.
    for i in 0..10 {
        sim.cg("critical/db").usage_bytes = (200 + i % 4) * MB;
        sim.tick();
    }
    sim.cg("critical/db").usage_bytes = 300 * MB; // grows: 330 -> 336 MB at once
    sim.tick();
    sim.cg("critical/db").usage_bytes = 100 * MB; // shrinks: kept for the 10 s window
    sim.run(12_000, |_| {});
    sim.cg("critical/db").usage_bytes = 2000 * MB; // clamped to the parent's limit
    sim.tick();
    let trail = sim.writes("critical/db", Knob::Min);
    let mb = |m: u64| Action::Min(Limit::Bytes(m * MB));
    assert_eq!(trail, vec![(0, mb(224)), (5500, mb(336)), (15500, mb(112)), (18000, mb(1024))]);
}

#[test]
fn protection_never_goes_below_the_administrators_value() {
    let mut sim = contention();
    sim.cg("critical/db").original.low = Limit::Bytes(1024 * MB);
    sim.cg("critical/db").current.low = Limit::Bytes(1024 * MB);
    sim.run(5_000, |_| {});
    assert!(sim.log.is_empty());
}

#[test]
fn knobs_memqos_does_not_manage_are_left_alone() {
    let mut sim = contention();
    // The journal says critical/db had high = max, but it is 1G now: the admin's change.
    sim.cg("critical/db").current.high = Limit::Bytes(1024 * MB);
    sim.run(10_000, |_| {});
    assert!(sim.writes("critical/db", Knob::High).is_empty());
    // Only what memqos wrote is journaled and put back.
    assert_eq!(sim.written(), [("critical/db".to_string(), Knob::Low)].into());
}

#[test]
fn restart_with_journaled_originals_releases_after_hold() {
    let mut sim = contention();
    // A previous daemon left batch/a throttled; the journal says it was max.
    sim.cg("batch/a").current.high = Limit::Bytes(100 * MB);
    sim.run(6_000, |_| {});
    assert_eq!(sim.writes("batch/a", Knob::High), vec![(5000, Action::High(Limit::Bytes(400 * MB)))]);
}

#[test]
fn malformed_observations_are_tolerated() {
    let mut sim = contention();
    sim.run(1_000, |_| {});
    let mut obs = memqos_policy::Observation { now_ms: 100, ..Default::default() }; // time went back
    obs.cgroups.push(memqos_policy::CgroupObs::named("ghost", TierIndex(9), MB)); // no such tier
    let dup = memqos_policy::CgroupObs::named("batch/a", TierIndex(2), MB);
    obs.cgroups.push(dup.clone());
    obs.cgroups.push(dup);
    assert!(sim.engine.tick(&obs).is_empty());
    assert_eq!(sim.engine.status().tracked, 1);
}

#[test]
fn decisions_serialize_as_json_lines() {
    let mut sim = contention();
    sim.set_stall("critical/db", 12.5);
    let d = sim.tick();
    let json = serde_json::to_string(&d[0]).unwrap();
    assert_eq!(
        json,
        r#"{"cgroup":"batch/a","action":{"high":377487360},"reason":{"kind":"protected_pressure","by":"critical/db","trigger":{"kind":"psi_some_avg10","value":12.5}}}"#
    );
    assert_eq!(d[0].to_string(), "batch/a/memory.high = 377487360: pressure in critical/db: psi some avg10 12.50%");
    let back: memqos_policy::Decision = serde_json::from_str(&json).unwrap();
    assert_eq!(back, d[0]);
}

#[test]
fn an_emptied_protected_cgroup_reserves_nothing_and_gives_its_protection_back() {
    // critical/db peaked at 500 MB and went quiet at 50 MB: its protection (550 -> 560 MB)
    // reserves 510 MB of regrowth, so batch/a growing to 450 MB crosses the guard line of a
    // 1 GB parent (500 + 510 > 1024 - 64). While its task lives that is the point; once it
    // has exited, it is not.
    let run = |populated: bool| {
        let mut sim = Sim::new(config(THREE_TIERS, "ws_window_ms = 600000"));
        sim.parent.max = Limit::Bytes(1024 * MB);
        sim.add("critical/db", 500 * MB);
        sim.add("batch/a", 300 * MB);
        sim.run(2_000, |_| {});
        sim.cg("critical/db").usage_bytes = 50 * MB;
        sim.cg("critical/db").populated = Some(populated);
        sim.cg("batch/a").usage_bytes = 450 * MB;
        sim.log.clear();
        sim.run(4_000, |_| {});
        let throttled = sim.high("batch/a") != Limit::Max;
        let low = sim.cgs["critical/db"].current.low;
        (throttled, low)
    };
    assert_eq!(run(true), (true, Limit::Bytes(560 * MB)), "a live protected task keeps its claim");
    assert_eq!(run(false), (false, Limit::Bytes(0)), "an empty one reserves nothing, low back to 0");
}

#[test]
fn reconfigure_keeps_the_history_of_cgroups_whose_tier_carries_over_and_drops_the_rest() {
    let mut sim = contention();
    // Batch goes to the floor first, then low/a (see the flapping test): 25 s reach both.
    sim.run(25_000, |s| s.set_stall("critical/db", 20.0));
    assert!(sim.high("low/a") < Limit::Max && sim.high("batch/a") < Limit::Max, "both throttled");
    // New config: `batch` loses throttle (its cgroups start afresh), `low` is the same tier
    // with another pattern list, reordered after a new tier.
    let next = config(
        r#"
[[tier]]
name = "critical"
match = ["critical/*"]
protect = "low"
[[tier]]
name = "new"
match = ["nothing/*"]
[[tier]]
name = "low"
match = ["low/*", "other/*"]
throttle = true
[[tier]]
name = "batch"
match = ["batch/*"]
"#,
        "",
    );
    let classify = |id: &str| next.tiers.classify(id);
    let mut dropped = sim.engine.reconfigure(next.clone(), classify);
    dropped.sort();
    assert_eq!(dropped, ["batch/a", "batch/b"]);
    assert_eq!(sim.engine.config().tiers.len(), 4);
    // low/a kept its state: still tracked and still counted throttled.
    let status = sim.engine.status();
    assert!(status.throttled.contains(&"low/a".to_string()), "{status:?}");
    assert!(!status.throttled.iter().any(|c| c.starts_with("batch/")), "{status:?}");
}
