//! Model tests of `expected_peak` reservations (`engine::reserve`): a fake subtree and the
//! replay model of `common`, no kernel.

mod common;

use common::*;
use memqos_policy::{Action, Knob, Limit, Reason};

fn sim(tiers: &str) -> Sim {
    sim_with(tiers, "")
}

fn sim_with(tiers: &str, policy: &str) -> Sim {
    let mut sim = Sim::new(config(tiers, &format!("min_write_interval_ms = 200\nhold_ms = 2000\n{policy}")));
    sim.tick_ms = 100;
    sim
}

/// A 711 MiB parent, critical/agent at 12 MiB declaring 450 MiB, and empty `lows`.
fn declared(tiers: &str, lows: &[&str]) -> Sim {
    declared_with(tiers, lows, "")
}

/// `declared` with equal shares (no parking: tests/park.rs tests that), so every member's
/// cap is the reservation's.
fn declared_shares(tiers: &str, lows: &[&str]) -> Sim {
    declared_with(tiers, lows, "park_room = \"0\"")
}

fn declared_with(tiers: &str, lows: &[&str], policy: &str) -> Sim {
    let mut sim = sim_with(tiers, policy);
    sim.parent.max = Limit::Bytes(711 * MB);
    sim.add("critical/agent", 12 * MB);
    sim.cg("critical/agent").expected_peak_bytes = Some(450 * MB);
    for id in lows {
        sim.add(id, 0);
    }
    sim
}

/// The tight sweep's shape (docs/experiments.md): a 711 MiB parent, a protected task that
/// starts small and grows to 406 MiB, two low tasks that jump to 185 MiB in their first
/// second and later grow to 290 MiB. Without swap nothing is given back, so the first tick at
/// which the three hold more than the limit is an OOM kill. Returns (the first tick over the
/// limit, when each task finished).
fn tight(declared: Option<u64>) -> (Option<u64>, Vec<Option<u64>>) {
    let mut sim = sim(TWO_TIERS);
    sim.parent.max = Limit::Bytes(711 * MB);
    let mut high = Workload::new("critical/agent", [hold(12, 3), ramp(12, 406, 30), hold(406, 20)].concat());
    let lows: Vec<Workload> = ["batch/a", "batch/b"]
        .iter()
        .map(|id| Workload::new(id, [hold(12, 1), hold(185, 40), ramp(185, 290, 20), hold(290, 10)].concat()))
        .collect();
    sim.add("critical/agent", 0);
    sim.cg("critical/agent").expected_peak_bytes = declared;
    for w in &lows {
        sim.add(&w.id, 0);
    }
    let mut tasks = vec![high];
    tasks.extend(lows);
    let over = run_swapless(&mut sim, &mut tasks, 600, 711 * MB, |_, _| {});
    high = tasks.remove(0);
    let mut finished = vec![high.finished_at];
    finished.extend(tasks.iter().map(|w| w.finished_at));
    (over, finished)
}

#[test]
fn a_declared_peak_holds_the_low_tasks_back_before_they_jump_and_nobody_is_killed() {
    let (over, _) = tight(None);
    assert!(over.is_some(), "the model must show the kill a reactive guard cannot prevent");

    let (over, finished) = tight(Some(450 * MB));
    assert_eq!(over, None, "with the reservation the three never hold more than the limit");
    let high = finished[0].expect("the protected task finishes");
    for (i, f) in finished[1..].iter().enumerate() {
        let f = f.unwrap_or_else(|| panic!("low task {i} finishes once the reservation ends"));
        assert!(f > high, "the low tasks were delayed, not run beside the protected peak");
    }
}

#[test]
fn caps_are_the_reservation_and_name_it() {
    let mut sim = declared_shares(TWO_TIERS, &["batch/a", "batch/b"]);
    let d = sim.tick();
    // The reservation is the declaration rounded up as protection is (450 -> 464 MiB):
    // budget = (711 - 64) - 12 - (464 - 12) = 183 MiB, split equally over two empty cgroups.
    let caps: Vec<(String, Action)> =
        d.iter().filter(|d| d.knob() == Knob::High).map(|d| (d.cgroup.clone(), d.action)).collect();
    let share = Action::High(Limit::Bytes((183 * MB / 2) / 4096 * 4096));
    assert_eq!(caps, vec![("batch/a".to_string(), share), ("batch/b".to_string(), share)]);
    assert!(d.iter().filter(|d| d.knob() == Knob::High).all(|d| matches!(
        &d.reason,
        Reason::Reservation { by, declared_bytes, budget_bytes, members: 2, learned: None, .. }
            if by == "critical/agent" && *declared_bytes == 450 * MB && *budget_bytes == 183 * MB
    )));
    // Protection covers the declared peak (rounded up to ws_granularity).
    assert_eq!(sim.cgs["critical/agent"].current.low, Limit::Bytes(464 * MB));
    let capped = d.iter().filter(|d| d.knob() == Knob::High);
    assert!(
        capped.clone().count() == 2
            && capped
                .map(|d| d.to_string())
                .all(|s| s
                    .contains("room reserved for critical/agent (expected peak 450M): 2 lower cgroup(s) share 183M")),
        "{d:?}"
    );
}

#[test]
fn without_a_declaration_nothing_is_reserved() {
    let mut sim = sim(TWO_TIERS);
    sim.parent.max = Limit::Bytes(711 * MB);
    sim.add("critical/agent", 12 * MB);
    sim.add("batch/a", 100 * MB);
    sim.add("batch/b", 100 * MB);
    sim.run(3_000, |_| {});
    assert!(sim.writes("batch/a", Knob::High).is_empty() && sim.writes("batch/b", Knob::High).is_empty());
}

#[test]
fn the_tier_declares_for_its_cgroups_and_a_cgroups_own_declaration_wins() {
    let tiers = edit_tier(TWO_TIERS, "critical", |t| {
        t.insert("expected_peak".into(), "300M".into());
    });
    let mut sim = sim(&tiers);
    sim.add("critical/a", 10 * MB);
    sim.add("critical/b", 10 * MB);
    sim.cg("critical/b").expected_peak_bytes = Some(500 * MB);
    sim.tick();
    assert_eq!(sim.cgs["critical/a"].current.low, Limit::Bytes(304 * MB), "300M rounded up to 16M");
    assert_eq!(sim.cgs["critical/b"].current.low, Limit::Bytes(512 * MB));
}

#[test]
fn a_cap_rises_when_a_member_leaves_and_everything_is_released_when_the_declarer_ends() {
    let mut sim = declared_shares(TWO_TIERS, &["batch/a", "batch/b"]);
    sim.run(500, |_| {});
    let half = sim.high("batch/a");
    sim.cg("batch/a").usage_bytes = 90 * MB;
    sim.remove("batch/b");
    sim.run(500, |_| {});
    assert!(sim.high("batch/a") > half, "{:?} should exceed {half:?}", sim.high("batch/a"));
    assert_eq!(sim.high("batch/a"), Limit::Bytes(183 * MB), "the whole budget");

    sim.cg("critical/agent").populated = Some(false);
    sim.run(1_000, |_| {});
    assert_eq!(sim.high("batch/a"), Limit::Max, "released at once: the declarer is empty, no one else to protect");
}

#[test]
fn the_stall_bound_still_relieves_a_member_pinned_at_its_cap() {
    let tiers = edit_tier(TWO_TIERS, "batch", |t| {
        let mut stall = toml::Table::new();
        stall.insert("after_ms".into(), 1000.into());
        t.insert("stall".into(), stall.into());
    });
    let mut sim = declared(&tiers, &["batch/a"]);
    sim.tick();
    let cap = sim.high("batch/a").bytes().expect("capped");
    sim.run(2_000, |s| {
        let c = s.cg("batch/a");
        c.usage_bytes = c.current.high.bytes().unwrap_or(cap);
        c.events_delta.high = 5;
        set_full(c, 90.0);
    });
    let reliefs: Vec<_> = sim
        .log
        .iter()
        .filter(|(_, d)| d.cgroup == "batch/a" && matches!(d.reason, Reason::StallBound { .. }))
        .collect();
    assert!(!reliefs.is_empty(), "the stall bound acts on a reservation cap like on any throttle");
    assert!(sim.high("batch/a").bytes().unwrap_or(u64::MAX) > cap);
}

#[test]
fn a_declared_cgroup_reserves_before_its_task_starts_but_not_after_it_ended() {
    // Made and declared, nothing in it yet: the lows starting beside it are capped at once.
    let mut sim = declared(TWO_TIERS, &["batch/a"]);
    sim.cg("critical/agent").usage_bytes = 0;
    sim.cg("critical/agent").populated = Some(false);
    sim.tick();
    assert!(sim.high("batch/a") < Limit::Max, "capped before the protected task runs");
    // It runs, then ends: the reservation is gone and, with no protected cgroup left, the
    // cap is released without waiting hold_ms.
    sim.cg("critical/agent").populated = Some(true);
    sim.run(500, |_| {});
    sim.cg("critical/agent").populated = Some(false);
    sim.run(4_000, |_| {});
    assert_eq!(sim.high("batch/a"), Limit::Max);
}

#[test]
fn a_declaration_past_the_parents_limit_counts_as_the_limit_and_overflows_nothing() {
    let mut sim = declared_shares(TWO_TIERS, &["batch/a", "batch/b"]);
    // Two declarations near u64::MAX: their sum must saturate, not wrap to a small number
    // that would let the lower tiers grow into the protected task's room.
    sim.add("critical/other", 12 * MB);
    sim.cg("critical/agent").expected_peak_bytes = Some(u64::MAX);
    sim.cg("critical/other").expected_peak_bytes = Some(u64::MAX - 1);
    sim.cg("batch/a").usage_bytes = u64::MAX / 2;
    let decisions = sim.tick();
    let declared = decisions
        .iter()
        .find_map(|d| match &d.reason {
            Reason::Reservation { declared_bytes, .. } => Some(*declared_bytes),
            _ => None,
        })
        .unwrap_or_else(|| panic!("a reservation: {decisions:#?}"));
    assert_eq!(declared, 2 * 711 * MB, "each declaration is at most the parent's 711 MiB");
    for low in ["batch/a", "batch/b"] {
        assert!(sim.high(low) < Limit::Bytes(711 * MB), "{low} capped: {:?}", sim.high(low));
    }
}

#[test]
fn a_protected_cgroup_that_never_runs_stops_reserving_after_a_minute() {
    let mut sim = declared(TWO_TIERS, &["batch/a"]);
    sim.cg("critical/agent").populated = Some(false); // made and declared, never run
    sim.cg("batch/a").usage_bytes = 300 * MB;
    sim.tick();
    let capped = sim.high("batch/a");
    assert!(capped < Limit::Bytes(400 * MB), "reserved before it runs: {capped:?}");
    sim.run(memqos_policy::UNSTARTED_RESERVATION_MS + 5_000, |_| {});
    assert_eq!(sim.high("batch/a"), Limit::Max, "released once the reservation lapsed");
}
