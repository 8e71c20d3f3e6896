//! The seed experiment's "real agent trace replay" scenarios
//! (memcg-struct-ops-experiment-report.zh.md), driven through the engine with simulated time.

mod common;

use common::*;
use memqos_policy::{Action, Knob, Limit, Reason};

/// HIGH = dask__dask-11628 (peak 421 MB), LOW1/LOW2 = sigmavirus24__github3.py-673 (peak 406
/// MB, mean 311 MB), 100 MB baseline each, shapes compressed to 500 ms ticks.
fn agent_traces() -> Vec<Workload> {
    let high = [ramp(100, 421, 20), hold(421, 10), ramp(421, 298, 4), hold(298, 6)].concat();
    let low = [ramp(100, 406, 20), ramp(406, 250, 4), ramp(250, 406, 8), hold(311, 6)].concat();
    let low2 = [hold(100, 2), low.clone()].concat();
    vec![Workload::new("high", high), Workload::new("low1", low), Workload::new("low2", low2)]
}

const AGENT_TIERS: &str = r#"
[[tier]]
name = "high"
match = ["high"]
protect = "low"
[[tier]]
name = "low"
match = ["low*"]
throttle = true
"#;

const PARENT_MAX: u64 = 1100 * MB;
/// The experiment ran with 4 GB of swap: memory over memory.high is reclaimed.
const RECLAIM_PER_TICK: u64 = 16 * MB;

fn agent_sim() -> (Sim, Vec<Workload>) {
    let mut sim = Sim::new(config(AGENT_TIERS, ""));
    sim.parent.max = Limit::Bytes(PARENT_MAX);
    for id in ["high", "low1", "low2"] {
        sim.add(id, 100 * MB);
    }
    (sim, agent_traces())
}

fn total(sim: &Sim) -> u64 {
    sim.cgs.values().map(|c| c.usage_bytes).sum()
}

/// Without memqos the three traces need ~1233 MB under an 1100 MB limit: the kernel would
/// OOM-kill (the experiment lost LOW1). This guards the scenario against being too easy.
#[test]
fn a_baseline_without_policy_runs_out_of_memory() {
    let (mut sim, mut work) = agent_sim();
    let mut peak = 0;
    for _ in 0..200 {
        for w in &mut work {
            w.step(&mut sim, RECLAIM_PER_TICK);
        }
        peak = peak.max(total(&sim));
        sim.now += sim.tick_ms;
    }
    assert!(peak > PARENT_MAX, "peak {} MB", peak / MB);
}

/// Scenario 1 (防止 OOM): the low tier is throttled before the parent reaches its limit, the
/// high tier is never throttled, nobody is OOM-killed, every workload completes (the low ones
/// later, delayed not killed), and once it is over every memory.high is back to `max`.
#[test]
fn a_oom_pressure_low_tier_throttled_before_the_limit() {
    let (mut sim, mut work) = agent_sim();
    let line = PARENT_MAX - sim.cfg.policy.headroom_guard;
    let mut first_throttle_usage = None;
    for _ in 0..400 {
        for w in &mut work {
            w.step(&mut sim, RECLAIM_PER_TICK);
        }
        let used = total(&sim);
        assert!(used <= PARENT_MAX, "t={} OOM: {} MB > 1100 MB", sim.now, used / MB);
        // Beyond the guard line only by what the high tier grows in one write interval
        // (2 ticks of 16 MB): releases never walk back into the guard.
        assert!(used <= line + 32 * MB, "t={} {} MB: headroom lost", sim.now, used / MB);
        // The guard counts the high tier's protection (its recent working-set peak) as used,
        // so the line it watches is `usage + regrowth`, not raw usage.
        let high = &sim.cgs["high"];
        let regrowth = high.current.low.max(high.current.min).bytes().unwrap_or(0).saturating_sub(high.usage_bytes);
        let decisions = sim.tick();
        if first_throttle_usage.is_none() && decisions.iter().any(|d| matches!(d.action, Action::High(_))) {
            first_throttle_usage = Some(used + regrowth);
        }
        if work.iter().all(Workload::done) && sim.high("low1") == Limit::Max && sim.high("low2") == Limit::Max {
            break;
        }
    }
    let first = first_throttle_usage.expect("the low tier was never throttled");
    assert!(first > line && first < PARENT_MAX, "first throttle at {} MB (usage + protected regrowth)", first / MB);
    assert!(sim.writes("high", Knob::High).is_empty(), "the high tier was throttled");
    for w in &work {
        assert!(w.done(), "{} did not complete", w.id);
    }
    assert_eq!(work[0].stalled_ticks, 0, "the high tier was slowed down");
    assert!(work[1].stalled_ticks > 0 && work[2].stalled_ticks > 0, "the low tier was not delayed");
    let finished = |i: usize| work[i].finished_at.unwrap();
    assert!(finished(0) < finished(1).min(finished(2)), "high should finish first");
    assert_eq!((sim.high("low1"), sim.high("low2")), (Limit::Max, Limit::Max), "not released");
    // Every cut came from the guard (no PSI in this scenario), proportional within the tier.
    for (_, d) in &sim.log {
        if let Action::High(l) = d.action {
            if l != Limit::Max && !is_release(&d.reason) {
                assert!(matches!(d.reason, Reason::HeadroomGuard { .. }), "{d}");
            }
        }
    }
}

/// Scenario 2 (contention): the critical tier's PSI rises; the lowest tier (batch) is cut
/// first, each cgroup by 10% of its usage per step down to the 32 MB floor, then the next tier
/// (low); the critical tier is never cut. Then calm: after 5 s, release in geometric steps,
/// the highest throttled tier first, back to the original `max`.
#[test]
fn b_contention_lowest_tier_first_proportional_then_gradual_release() {
    let mut sim = Sim::new(config(THREE_TIERS, ""));
    sim.add("critical/db", 500 * MB);
    sim.add("low/a", 300 * MB);
    sim.add("batch/a", 400 * MB);
    sim.add("batch/b", 200 * MB);

    // Calm: only the critical tier's protection is written: 500 MB * 1.1 rounded up to 16 MB.
    sim.run(2000, |_| {});
    let writes: Vec<_> = sim.log.iter().map(|(t, d)| (*t, d.cgroup.as_str(), d.action)).collect();
    assert_eq!(writes, vec![(0, "critical/db", Action::Low(Limit::Bytes(560 * MB)))]);

    sim.run(12_000, |s| s.set_stall("critical/db", 20.0)); // t = 2000 .. 13500
    assert_eq!(sim.high_trail_mb("batch/a"), vec![360, 320, 280, 240, 200, 160, 120, 80, 40, 32]);
    assert_eq!(sim.high_times("batch/a"), (2..=11).map(|s| s * 1000).collect::<Vec<_>>());
    assert_eq!(sim.high_trail_mb("batch/b"), vec![180, 160, 140, 120, 100, 80, 60, 40, 32]);
    // low is touched only once batch is at its floor everywhere (after t=11000).
    assert_eq!(sim.high_trail_mb("low/a"), vec![270, 240, 210]);
    assert_eq!(sim.high_times("low/a"), vec![11_500, 12_500, 13_500]);
    assert!(sim.writes("critical/db", Knob::High).is_empty());

    sim.run(12_000, |s| s.set_stall("critical/db", 0.0)); // t = 14000 .. 25500
    let max = u64::MAX;
    // 210 * 1.5 = 315, * 1.5 = 472.5, then 708 >= 2 * usage (300): back to the original.
    assert_eq!(sim.high_trail_mb("low/a")[3..], [315, 472, max]);
    assert_eq!(sim.high_times("low/a")[3..], [18_500, 19_500, 20_500]); // last pressure 13500 + 5000
                                                                        // batch starts only after low is fully released; the first step lifts it to its usage.
    assert_eq!(sim.high_trail_mb("batch/a")[10..], [400, 600, max]);
    assert_eq!(sim.high_trail_mb("batch/b")[9..], [200, 300, max]);
    assert_eq!(sim.high_times("batch/a")[10..], [21_000, 22_000, 23_000]);
}

/// Scenario 3 (idle high tier): the low tiers use most of the parent, the critical tier is
/// idle and nobody stalls: nothing is throttled (work-conserving); the only writes are the
/// critical tier's protection.
#[test]
fn c_idle_high_tier_no_throttling() {
    let mut sim = Sim::new(config(THREE_TIERS, ""));
    sim.parent.max = Limit::Bytes(2560 * MB);
    sim.add("critical/idle", 40 * MB);
    sim.add("low/a", 900 * MB);
    sim.add("batch/a", 1200 * MB);
    let mut tick = 0u64;
    sim.run(120_000, |s| {
        // 2140..2433 MB in total: under the 2496 MB guard line (2560 MB - 64 MB).
        let swing = (tick % 40) * 5 * MB;
        s.cg("low/a").usage_bytes = 900 * MB + swing / 2;
        s.cg("batch/a").usage_bytes = 1200 * MB + swing;
        tick += 1;
    });
    let kinds: Vec<_> = sim.log.iter().map(|(_, d)| (d.cgroup.as_str(), d.action)).collect();
    assert_eq!(kinds, vec![("critical/idle", Action::Low(Limit::Bytes(48 * MB)))]);
}
