//! Bounded stalls (engine::stall): a cgroup that memqos's memory.high keeps from making
//! progress gets its tier's action after its tier's bound, every bound, never an indefinite
//! silent stall.

mod common;

use common::*;
use memqos_policy::{Action, Decision, Reason};

/// critical/db stalls on memory throughout (so lower tiers are cut on every occasion);
/// low/a is a swapless anonymous workload that wants `want` bytes: it grows 10 MiB a tick up
/// to its memory.high, never gives memory back, and while it wants more than high allows it makes no
/// progress (high events, usage pinned, PSI full 90 %).
fn livelock(tiers: &str, want: u64, ms: u64) -> (Sim, Vec<bool>) {
    let mut sim = Sim::new(config(tiers, ""));
    sim.add("critical/db", 500 * MB);
    sim.add("low/a", 300 * MB);
    let mut stuck_per_tick = Vec::new();
    sim.run(ms, |s| {
        s.set_stall("critical/db", 20.0);
        let c = s.cg("low/a");
        let high = c.current.high.bytes().unwrap_or(u64::MAX);
        c.usage_bytes = c.usage_bytes.max(want.min(high).min(c.usage_bytes + 10 * MB));
        let stuck = c.usage_bytes < want && c.usage_bytes >= high;
        c.events_delta.high = if stuck { 10 } else { 0 };
        set_full(c, if stuck { 90.0 } else { 0.0 });
        stuck_per_tick.push(stuck);
    });
    (sim, stuck_per_tick)
}

fn stall_actions(sim: &Sim) -> Vec<&(u64, Decision)> {
    sim.log.iter().filter(|(_, d)| matches!(d.reason, Reason::StallBound { .. })).collect()
}

/// Longest run of consecutive stuck ticks, in ms.
fn longest_stall_ms(stuck: &[bool], tick_ms: u64) -> u64 {
    let mut best = 0;
    let mut run = 0;
    for &s in stuck {
        run = if s { run + 1 } else { 0 };
        best = best.max(run);
    }
    best * tick_ms
}

#[test]
fn a_livelocked_cgroup_is_relieved_after_its_bound_and_every_bound_after() {
    let (sim, stuck) = livelock(THREE_TIERS, 400 * MB, 120_000);
    let first_cut = sim.log.iter().find(|(_, d)| d.cgroup == "low/a").expect("low/a was throttled").0;
    let actions = stall_actions(&sim);
    assert!(!actions.is_empty(), "never relieved: {:?}", sim.high_trail_mb("low/a"));

    // The stall is first seen on the tick after the cut took effect; 30 s (the default
    // bound) later, exactly, memory.high goes up one step above where it was stuck.
    let (t, d) = actions[0];
    assert_eq!(*t, first_cut + sim.tick_ms + 30_000, "{d}");
    let Reason::StallBound { stalled_for_ms, bound_ms, usage_bytes, high_bytes, psi_full_avg10 } = d.reason else {
        unreachable!()
    };
    assert_eq!((stalled_for_ms, bound_ms, usage_bytes, psi_full_avg10), (30_000, 30_000, 310 * MB, 90.0));
    let Action::High(to) = d.action else { panic!("not a memory.high write: {d}") };
    assert_eq!(to.bytes(), Some(465 * MB), "one release step (x1.5) above usage 310M; high was {high_bytes}");
    assert!(d.to_string().contains("no progress for 30000 ms (bound 30000 ms)"), "{d}");

    // For the next bound, the continuing pressure does not cut low/a again.
    let cuts_in_grace = sim
        .log
        .iter()
        .filter(|(at, d)| {
            d.cgroup == "low/a" && *at > *t && *at < t + 30_000 && matches!(d.action, Action::High(l) if l < to)
        })
        .count();
    assert_eq!(cuts_in_grace, 0);

    // With that room the workload got all it wanted and finished its growth.
    assert_eq!(sim.cgs["low/a"].usage_bytes, 400 * MB);
    assert!(!stuck.last().unwrap() && actions.len() == 1, "{actions:?}");
}

#[test]
fn a_workload_that_keeps_growing_stalls_at_most_one_bound_at_a_time() {
    // It wants 2 GiB: each relief is used up and it gets stuck again, but never for longer
    // than the bound, until its high is back at the original (max).
    let (sim, stuck) = livelock(THREE_TIERS, 2048 * MB, 240_000);
    let longest = longest_stall_ms(&stuck, sim.tick_ms);
    assert!(longest <= 30_000 + sim.tick_ms, "stalled {longest} ms in a row");
    let actions = stall_actions(&sim);
    assert!(actions.len() >= 3, "one relief per cycle: {actions:?}");
    let reliefs: Vec<u64> = actions
        .iter()
        .map(|(_, d)| match d.action {
            Action::High(l) => l.bytes().unwrap_or(u64::MAX) / MB,
            a => panic!("{a:?}"),
        })
        .collect();
    assert!(reliefs.windows(2).all(|w| w[1] > w[0]), "{reliefs:?}");
}

#[test]
fn progress_restarts_the_bound() {
    // Same livelock, but every 20 s the workload gets through for a moment (its PSI full
    // drops): it never stalls 30 s in a row, so memqos never acts.
    let mut sim = Sim::new(config(THREE_TIERS, ""));
    sim.add("critical/db", 500 * MB);
    sim.add("low/a", 300 * MB);
    let mut n = 0;
    sim.run(90_000, |s| {
        n += 1;
        s.set_stall("critical/db", 20.0);
        let c = s.cg("low/a");
        let progress = n % 40 == 0;
        c.events_delta.high = 10;
        set_full(c, if progress { 5.0 } else { 90.0 });
    });
    assert!(stall_actions(&sim).is_empty(), "{:?}", stall_actions(&sim));
}

#[test]
fn high_events_every_few_seconds_are_enough_but_none_for_long_is_progress() {
    // A task far over high sleeps up to 2 s between charges: events in one sample of four
    // still count as stalling; none for over 5 s means it no longer hits high.
    let run = |every: u64| {
        let mut sim = Sim::new(config(THREE_TIERS, ""));
        sim.add("critical/db", 500 * MB);
        sim.add("low/a", 300 * MB);
        let mut n = 0;
        sim.run(60_000, |s| {
            n += 1;
            s.set_stall("critical/db", 20.0);
            let c = s.cg("low/a");
            c.events_delta.high = if n % every == 0 { 3 } else { 0 };
            set_full(c, 90.0);
        });
        stall_actions(&sim).len()
    };
    assert!(run(4) >= 1, "events every 2 s: a stall");
    assert_eq!(run(12), 0, "events every 6 s: not a stall");
}

#[test]
fn a_tier_that_opts_into_kill_gets_cgroup_kill_at_its_bound() {
    let tiers = edit_tier(THREE_TIERS, "low", |t| {
        t.insert("stall".into(), toml::toml! { after_ms = 5000 action = "kill" }.into());
    });
    let (sim, _) = livelock(&tiers, 400 * MB, 20_000);
    let first_cut = sim.log.iter().find(|(_, d)| d.cgroup == "low/a").unwrap().0;
    let actions = stall_actions(&sim);
    let (t, d) = actions.first().expect("no stall action");
    assert_eq!((*t, d.action), (first_cut + sim.tick_ms + 5_000, Action::Kill), "{d}");
    // The harness models a kill as usage 0: the workload regrows under the cut high, and
    // stalls (and is killed) again only after another full bound.
    assert!(actions.iter().skip(1).all(|(at, _)| *at >= t + 5_000), "{actions:?}");
}

#[test]
fn a_cgroup_stalled_at_its_own_high_is_not_ours_to_relieve() {
    // low/a's memory.high was set by someone else (original = current): no action.
    let mut sim = Sim::new(config(THREE_TIERS, "step_ratio = 0.01\nmin_high = \"299M\""));
    sim.add("low/a", 300 * MB);
    sim.cg("low/a").original.high = memqos_policy::Limit::Bytes(300 * MB);
    sim.cg("low/a").current.high = memqos_policy::Limit::Bytes(300 * MB);
    sim.run(60_000, |s| {
        let c = s.cg("low/a");
        c.events_delta.high = 10;
        set_full(c, 90.0);
    });
    assert!(stall_actions(&sim).is_empty());
}

#[test]
fn a_cgroup_recreated_under_a_relieved_ones_path_does_not_inherit_its_grace() {
    // low/a was relieved: it is not cut for a bound. It is removed and made again under its
    // path (another kernel id) while critical/db still stalls: the new one is another
    // cgroup, cut at once like any newcomer.
    let (mut sim, _) = livelock(THREE_TIERS, 400 * MB, 40_000);
    let (relieved_at, _) = *stall_actions(&sim).first().expect("relieved");
    assert!(sim.now < relieved_at + 30_000, "the old low/a's grace still runs");
    sim.remove("low/a");
    sim.add("low/a", 300 * MB);
    sim.cg("low/a").id = memqos_policy::CgroupId(1);
    sim.set_stall("critical/db", 20.0);
    let d = sim.tick();
    assert!(d.iter().any(|d| d.cgroup == "low/a" && matches!(d.action, Action::High(_))), "{d:?}");
}
