//! Engine property tests at the extremes (issue 28, item 8): observations generated from
//! sizes near u64::MAX, zero limits, declared peaks near u64::MAX, clocks near the end of
//! time, random tiers, and up to 10,000 cgroups, driven through `Engine::tick`,
//! `tick_fast` and `restore_all`. Invariants, for every decision of every tick:
//! - it names a cgroup of that observation (never one missing from it, never one twice);
//! - its knob is one the cgroup's tier owns: memory.high only on throttle tiers,
//!   memory.low/min only on `protect = "low"`/`"min"` tiers, freeze and kill only where
//!   the tier opts in;
//! - memory.high is never lowered below `min_high` (page-rounded), unless the cgroup's own
//!   original was already lower;
//! - nothing panics. Overflow panics only in debug builds, so CI's release run checks the
//!   invariants and `cargo test -p memqos-policy --test properties` (debug) the arithmetic.
//!
//! The long run: `scripts/fuzz-long.sh --only memqos-policy::properties`.

use std::collections::HashSet;

use memqos_policy::{
    Action, CgroupObs, Config, Decision, Engine, Knobs, Limit, MemoryEvents, Observation, ParentObs, Pressure,
    PressureLine, Protect, SignalEvent, TierIndex,
};
use proptest::prelude::*;

/// One tier per knob owner, and one that owns nothing. Ids are `<prefix>/<n>`.
const TIERS: &str = r#"
[[tier]]
name = "low"
match = ["l/*"]
protect = "low"
[[tier]]
name = "min"
match = ["m/*"]
protect = "min"
expected_peak = "1G"
[[tier]]
name = "throttle"
match = ["t/*"]
throttle = true
[[tier]]
name = "escalate"
match = ["e/*"]
throttle = true
freeze = true
kill = true
[[tier]]
name = "plain"
match = ["p/*"]
"#;
const PREFIXES: [&str; 5] = ["l", "m", "t", "e", "p"];

/// Bytes, weighted towards the edges where arithmetic breaks.
fn bytes() -> impl Strategy<Value = u64> {
    prop_oneof![
        2 => 0u64..(1 << 34),
        1 => Just(0u64),
        1 => (u64::MAX - (1 << 20))..=u64::MAX,
        1 => any::<u64>(),
        1 => prop::sample::select(vec![4096u64, 32 << 20, 64 << 20, i64::MAX as u64, u64::MAX / 2 + 1]),
    ]
}

fn limit() -> impl Strategy<Value = Limit> {
    prop_oneof![2 => Just(Limit::Max), 1 => Just(Limit::Bytes(0)), 3 => bytes().prop_map(Limit::Bytes)]
}

fn knobs() -> impl Strategy<Value = Knobs> {
    (limit(), limit(), limit(), limit(), any::<bool>()).prop_map(|(high, max, low, min, frozen)| Knobs {
        high,
        max,
        low,
        min,
        frozen,
    })
}

fn events() -> impl Strategy<Value = MemoryEvents> {
    prop_oneof![
        3 => Just(MemoryEvents::default()),
        1 => (0u64..5, 0u64..5, 0u64..5, 0u64..3).prop_map(|(low, high, max, oom)| MemoryEvents { low, high, max, oom, ..Default::default() }),
        1 => any::<[u64; 6]>().prop_map(|v| MemoryEvents { low: v[0], high: v[1], max: v[2], oom: v[3], oom_kill: v[4], oom_group_kill: v[5] }),
    ]
}

fn avg() -> impl Strategy<Value = f64> {
    prop_oneof![3 => 0.0f64..100.0, 1 => Just(0.0), 1 => prop::sample::select(vec![100.0, f64::NAN, f64::INFINITY, -1.0, 1e300])]
}

fn pressure() -> impl Strategy<Value = Pressure> {
    (avg(), avg(), any::<u64>(), prop::option::of(avg())).prop_map(|(a10, a60, total_us, full)| Pressure {
        some: PressureLine { avg10: a10, avg60: a60, avg300: 0.0, total_us },
        full: full.map(|f| PressureLine { avg10: f, ..Default::default() }),
    })
}

fn signal() -> impl Strategy<Value = SignalEvent> {
    prop_oneof![
        Just(SignalEvent::PsiTrigger),
        Just(SignalEvent::EventsChanged),
        any::<u64>().prop_map(|value| SignalEvent::BpfThreshold { value, counter: None })
    ]
}

/// One cgroup: its slot (the same slot is the same cgroup across ticks) and its readings.
fn cgroup(slots: usize) -> impl Strategy<Value = (usize, CgroupObs)> {
    (
        0..slots,
        bytes(),
        prop::option::of(bytes()),
        knobs(),
        knobs(),
        events(),
        pressure(),
        prop_oneof![3 => 0u64..2_000_000, 1 => any::<u64>()],
        prop::collection::vec(signal(), 0..3),
        prop::option::of(any::<bool>()),
        prop::option::of(bytes()),
    )
        .prop_map(move |(slot, usage, ws, original, current, ev, psi, delta, signals, populated, peak)| {
            let mut c = CgroupObs::new(String::new(), TierIndex(0), usage);
            c.working_set_bytes = ws;
            c.original = original;
            c.current = current;
            c.events_delta = ev;
            c.psi = psi;
            c.psi_some_delta_us = delta;
            c.signals = signals;
            c.populated = populated;
            c.expected_peak_bytes = peak;
            (slot, c)
        })
}

fn parent() -> impl Strategy<Value = ParentObs> {
    // Swap: none, active, or unknown (both false).
    (bytes(), limit(), limit(), events(), 0..3u8).prop_map(|(usage_bytes, max, high, events_delta, swap)| ParentObs {
        usage_bytes,
        max,
        high,
        events_delta,
        swapless: swap == 1,
        swap_active: swap == 2,
    })
}

/// `[policy]` lines within what the config accepts, edges included.
fn policy() -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec!["4K", "32M", "1G", "16383T", "18446744073709547520", "18446744073709551615"]),
        prop::sample::select(vec!["0", "64M", "1T", "18446744073709551615"]),
        prop::sample::select(vec![0u64, 1, 5_000, 3_600_000]),
        prop::sample::select(vec![0u64, 1_000, 3_600_000]),
        prop::sample::select(vec!["0.01", "0.1", "0.9"]),
        prop::sample::select(vec!["respect", "override"]),
    )
        .prop_map(|(min_high, guard, hold, interval, step, foreign)| {
            format!(
                "min_high = \"{min_high}\"\nheadroom_guard = \"{guard}\"\nhold_ms = {hold}\n\
                 min_write_interval_ms = {interval}\nstep_ratio = {step}\nforeign_knobs = \"{foreign}\"\n"
            )
        })
}

/// The cgroup of `slot`: its tier follows from its slot, so it keeps its tier across ticks;
/// a few slots carry a tier index the config does not have (the engine must ignore them).
fn place(slot: usize, mut c: CgroupObs, tiers: usize) -> CgroupObs {
    let t = slot % (PREFIXES.len() + 1);
    if t == PREFIXES.len() {
        c.tier = TierIndex(tiers + slot);
        c.path = format!("x/{slot}");
    } else {
        c.tier = TierIndex(t);
        c.path = format!("{}/{slot}", PREFIXES[t]);
    }
    c.id = memqos_policy::CgroupId(slot as u64 + 1);
    c
}

/// One generated tick: clock step, parent, cgroups by slot, fast path or periodic.
type Tick = (u64, ParentObs, Vec<(usize, CgroupObs)>, bool);

/// Checks one tick's decisions against the observation it answered.
fn check(cfg: &Config, obs: &Observation, decisions: &[Decision], fast: bool) -> Result<(), TestCaseError> {
    let floor = cfg.policy.min_high.div_ceil(memqos_policy::size::PAGE).saturating_mul(memqos_policy::size::PAGE);
    let mut knobs_written = HashSet::new();
    for d in decisions {
        // The first cgroup of an id is the one the engine reads.
        let c = obs.cgroups.iter().find(|c| c.path == d.cgroup);
        prop_assert!(c.is_some(), "decision for a cgroup not in the observation: {}", d);
        let c = c.unwrap();
        let tier = cfg.tiers.get(c.tier);
        prop_assert!(tier.is_some(), "decision for a cgroup with no tier: {}", d);
        let tier = tier.unwrap();
        prop_assert!(knobs_written.insert((d.cgroup.clone(), d.knob())), "two writes of one knob in a tick: {}", d);
        match d.action {
            Action::High(l) => {
                prop_assert!(tier.throttle, "memory.high of a {} cgroup: {}", tier.name, d);
                if l < c.current.high {
                    prop_assert!(
                        l >= Limit::Bytes(floor).min(c.original.high),
                        "memory.high below min_high ({} B) and below the original {}: {}",
                        floor,
                        c.original.high,
                        d
                    );
                }
            }
            Action::Low(_) => prop_assert!(tier.protect == Protect::Low, "memory.low of a {} cgroup: {}", tier.name, d),
            Action::Min(_) => prop_assert!(tier.protect == Protect::Min, "memory.min of a {} cgroup: {}", tier.name, d),
            Action::Freeze(_) => prop_assert!(tier.freeze, "cgroup.freeze of a {} cgroup: {}", tier.name, d),
            Action::Kill => prop_assert!(tier.kill && !fast, "cgroup.kill of a {} cgroup: {}", tier.name, d),
        }
    }
    Ok(())
}

/// Runs `ticks` (each: clock step, parent, cgroups, fast or periodic) through one engine,
/// applying each tick's writes to the next tick's current knobs as a kernel would.
/// Returns the decisions made, for [`the_generated_ticks_reach_every_kind_of_decision`].
fn drive(policy: &str, start_ms: u64, ticks: Vec<Tick>) -> Result<Vec<Decision>, TestCaseError> {
    let mut all = Vec::new();
    let cfg = Config::from_str(&format!("cgroup_root = \"/sys/fs/cgroup/p\"\n{TIERS}\n[policy]\n{policy}"), "p.toml")
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let mut engine = Engine::new(cfg.clone());
    let mut now = start_ms;
    let mut written: std::collections::HashMap<(String, memqos_policy::Knob), Action> = Default::default();
    for (step, parent, cgs, fast) in ticks {
        now = now.saturating_add(step);
        let cgroups: Vec<CgroupObs> = cgs
            .into_iter()
            .map(|(slot, c)| {
                let mut c = place(slot, c, cfg.tiers.len());
                for ((id, _), a) in &written {
                    if *id == c.path {
                        match *a {
                            Action::High(l) => c.current.high = l,
                            Action::Low(l) => c.current.low = l,
                            Action::Min(l) => c.current.min = l,
                            Action::Freeze(f) => c.current.frozen = f,
                            Action::Kill => {}
                        }
                    }
                }
                c
            })
            .collect();
        let obs = Observation { now_ms: now, parent, cgroups };
        let decisions = if fast { engine.tick_fast(&obs) } else { engine.tick(&obs) };
        check(&cfg, &obs, &decisions, fast)?;
        for d in decisions {
            written.insert((d.cgroup.clone(), d.knob()), d.action);
            all.push(d);
        }
        let _ = engine.status();
        let _ = engine.is_calm(now);
    }
    Ok(all)
}

fn ticks(slots: usize, cgroups: usize, n: usize) -> impl Strategy<Value = Vec<Tick>> {
    prop::collection::vec(
        (
            prop_oneof![3 => 0u64..2_000, 1 => any::<u64>()],
            parent(),
            prop::collection::vec(cgroup(slots), 0..=cgroups),
            prop::bool::weighted(0.2),
        ),
        1..=n,
    )
}

/// Few cases unless a long run asks for more (each case is many ticks of many cgroups).
fn cases(default: u32) -> ProptestConfig {
    let set = std::env::var_os("PROPTEST_CASES").is_some();
    ProptestConfig { cases: if set { ProptestConfig::default().cases } else { default }, ..Default::default() }
}

proptest! {
    #![proptest_config(cases(128))]

    #[test]
    fn proptest_engine_invariants_at_extremes(
        policy in policy(),
        start in prop_oneof![Just(0u64), 0u64..1 << 40, (u64::MAX - 100_000)..=u64::MAX],
        ticks in ticks(24, 24, 12),
    ) {
        drive(&policy, start, ticks)?;
    }
}

/// The invariants above are only worth something if the generated observations make the
/// engine decide: every kind of write shows up within a few hundred generated runs.
#[test]
fn the_generated_ticks_reach_every_kind_of_decision() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = (policy(), Just(0u64), ticks(24, 24, 12));
    let mut seen = HashSet::new();
    let mut cuts = 0;
    for _ in 0..400 {
        let (policy, start, ticks) = strategy.new_tree(&mut runner).unwrap().current();
        for d in drive(&policy, start, ticks).unwrap() {
            seen.insert(std::mem::discriminant(&d.action));
            cuts += usize::from(matches!(d.action, Action::High(Limit::Bytes(_))));
        }
    }
    for a in
        [Action::High(Limit::Max), Action::Low(Limit::Max), Action::Min(Limit::Max), Action::Freeze(true), Action::Kill]
    {
        assert!(seen.contains(&std::mem::discriminant(&a)), "no {a:?} decision in 400 generated runs");
    }
    assert!(cuts > 0, "no memory.high cut in 400 generated runs");
}

proptest! {
    #![proptest_config(cases(2))]

    /// Up to 10,000 cgroups of every tier, a few ticks. The cgroups repeat up to 64 generated
    /// readings (each slot its own cgroup): generating 10,000 independent ones per tick would
    /// cost more than the engine does.
    #[test]
    fn proptest_engine_invariants_with_10000_cgroups(
        policy in policy(),
        start in prop_oneof![Just(0u64), (u64::MAX - 100_000)..=u64::MAX],
        ticks in prop::collection::vec(
            (prop_oneof![0u64..2_000, Just(u64::MAX)], parent(), prop::collection::vec(cgroup(1), 1..64), 9_000usize..=10_000, prop::bool::weighted(0.2)),
            1..=3,
        ),
    ) {
        let ticks = ticks
            .into_iter()
            .map(|(step, parent, readings, n, fast)| {
                let cgs = (0..n).map(|slot| (slot, readings[slot % readings.len()].1.clone())).collect();
                (step, parent, cgs, fast)
            })
            .collect();
        drive(&policy, start, ticks)?;
    }
}
