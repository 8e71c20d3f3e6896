//! Model tests of `Engine::tick_fast`, the daemon's reaction to a pressure signal between
//! periodic ticks: it sees only the parent, the cgroup that signalled and the throttle
//! candidates, and must neither forget the cgroups it was not shown nor adopt new ones.

mod common;

use common::{config, MB, THREE_TIERS};
use memqos_policy::{Action, CgroupId, CgroupObs, Config, Engine, Limit, Observation, ParentObs, Reason, SignalEvent};

fn cfg() -> Config {
    config(&format!("[signals]\nbpf = true\n{THREE_TIERS}"), "")
}

fn cg(cfg: &Config, path: &str, id: u64, usage_mb: u64) -> CgroupObs {
    let mut c = CgroupObs::new(path, cfg.tiers.classify(path).unwrap(), usage_mb * MB);
    c.id = CgroupId(id);
    c
}

/// Three low cgroups and one protected, all calm: the periodic tick that adopts them.
fn adopted() -> (Config, Engine, Vec<CgroupObs>) {
    let cfg = cfg();
    let mut engine = Engine::new(cfg.clone());
    let all = vec![
        cg(&cfg, "critical/db", 1, 300),
        cg(&cfg, "low/a", 2, 200),
        cg(&cfg, "low/b", 3, 100),
        cg(&cfg, "low/c", 4, 50),
    ];
    let mut all = all;
    let obs = Observation { now_ms: 0, parent: ParentObs::default(), cgroups: all.clone() };
    // While calm, the only writes are the protected cgroup's memory.low.
    for d in engine.tick_periodic(&obs) {
        match d.action {
            Action::Low(l) if d.cgroup == "critical/db" => all[0].current.low = l,
            _ => panic!("unexpected write while calm: {d:?}"),
        }
    }
    (cfg, engine, all)
}

fn signalled(mut c: CgroupObs) -> CgroupObs {
    c.signals.push(SignalEvent::BpfThreshold { value: 9, counter: None });
    c
}

#[test]
fn a_signal_cuts_the_candidates_shown_and_nothing_else() {
    let (_, mut engine, all) = adopted();
    // The reaction reads the protected cgroup and the two largest lows only.
    let fast = Observation {
        now_ms: 100,
        parent: ParentObs::default(),
        cgroups: vec![signalled(all[0].clone()), all[1].clone(), all[2].clone()],
    };
    let decisions = engine.tick_fast(&fast);
    let cut: Vec<&str> = decisions.iter().map(|d| d.cgroup.as_str()).collect();
    assert_eq!(cut, ["low/a", "low/b"]);
    for d in &decisions {
        assert!(matches!(d.action, Action::High(Limit::Bytes(_))), "{d:?}");
        assert!(matches!(&d.reason, Reason::ProtectedPressure { by, .. } if by == "critical/db"), "{d:?}");
    }
    // low/c was not shown: still tracked, not forgotten.
    assert_eq!(engine.status().tracked, 4);
    assert_eq!(engine.status().last_pressure_ms, Some(100));
}

#[test]
fn cgroups_not_adopted_by_a_periodic_tick_are_ignored() {
    let (cfg, mut engine, all) = adopted();
    let newcomer = cg(&cfg, "low/new", 9, 400);
    let fast =
        Observation { now_ms: 100, parent: ParentObs::default(), cgroups: vec![signalled(all[0].clone()), newcomer] };
    assert!(engine.tick_fast(&fast).is_empty());
    assert_eq!(engine.status().tracked, 4);
}

#[test]
fn a_recreated_cgroup_is_not_the_tracked_one() {
    let (cfg, mut engine, all) = adopted();
    // Same name, another kernel id: removed and re-created since the periodic tick.
    let recreated = cg(&cfg, "low/a", 77, 200);
    let fast =
        Observation { now_ms: 100, parent: ParentObs::default(), cgroups: vec![signalled(all[0].clone()), recreated] };
    assert!(engine.tick_fast(&fast).is_empty());
}

#[test]
fn no_signal_no_write_and_no_pressure_recorded() {
    let (_, mut engine, all) = adopted();
    let fast = Observation { now_ms: 100, parent: ParentObs::default(), cgroups: all.clone() };
    assert!(engine.tick_fast(&fast).is_empty());
    assert_eq!(engine.status().last_pressure_ms, None);
}

#[test]
fn a_storm_of_signals_is_rate_limited_per_knob() {
    let (_, mut engine, all) = adopted();
    let fast = |now_ms| Observation {
        now_ms,
        parent: ParentObs::default(),
        cgroups: vec![signalled(all[0].clone()), all[1].clone()],
    };
    assert_eq!(engine.tick_fast(&fast(100)).len(), 1);
    // Within min_write_interval_ms (default 1 s) of the cut: nothing more.
    assert!(engine.tick_fast(&fast(300)).is_empty());
}

#[test]
fn the_periodic_tick_after_a_fast_cut_sees_the_whole_tree_again() {
    let (_, mut engine, all) = adopted();
    let fast = Observation {
        now_ms: 100,
        parent: ParentObs::default(),
        cgroups: vec![signalled(all[0].clone()), all[1].clone()],
    };
    let cut = engine.tick_fast(&fast);
    assert_eq!(cut.len(), 1);
    // The periodic tick without low/c: now it is gone.
    let mut rest = all[..3].to_vec();
    if let Action::High(l) = cut[0].action {
        rest[1].current.high = l;
    }
    let obs = Observation { now_ms: 600, parent: ParentObs::default(), cgroups: rest };
    engine.tick_periodic(&obs);
    assert_eq!(engine.status().tracked, 3);
    assert_eq!(engine.status().throttled, ["low/a"]);
}

#[test]
fn calm_until_pressure_and_again_only_once_released_and_held() {
    let (_, mut engine, all) = adopted();
    assert!(engine.is_calm(50));
    let fast = Observation {
        now_ms: 100,
        parent: ParentObs::default(),
        cgroups: vec![signalled(all[0].clone()), all[1].clone()],
    };
    let cut = engine.tick_fast(&fast);
    assert_eq!(cut.len(), 1);
    // Pressure just now, and low/a throttled: not calm.
    assert!(!engine.is_calm(200));
    // Long after (hold_ms passed) but still throttled: not calm either.
    let hold = engine.config().policy.hold_ms;
    let mut now = all.clone();
    if let Action::High(l) = cut[0].action {
        now[1].current.high = l;
    }
    engine.tick_periodic(&Observation { now_ms: 100 + hold / 2, parent: ParentObs::default(), cgroups: now.clone() });
    assert!(!engine.is_calm(100 + hold * 2));
    // Back at its original: calm once hold_ms has passed since the pressure.
    now[1].current.high = Limit::Max;
    engine.tick_periodic(&Observation { now_ms: 100 + hold * 2, parent: ParentObs::default(), cgroups: now });
    assert!(engine.is_calm(100 + hold * 2));
}
