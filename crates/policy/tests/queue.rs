//! Model tests of the held queue (`engine::queue`): cgroups of a `queue_held` tier held at
//! their ceilings take turns, the oldest first, the others frozen, each at most its tier's
//! stall bound.

mod common;

use common::*;
use memqos_policy::{Decision, Limit, Reason};

const TOOLS: &str = r#"
[[tier]]
name = "runtime"
match = ["*/runtime"]
protect = "low"
[[tier]]
name = "tool"
match = ["*/tool.*"]
throttle = true
queue_held = true
stall = { after_ms = 5000 }
"#;

/// A sim whose releases wait long (a ceiling stays where it was armed) and whose parent has
/// no limit (no guard cut moves the ceilings): only the queue acts on the calls.
fn sim(tiers: &str) -> Sim {
    let mut sim = Sim::new(config(tiers, "hold_ms = 600000\nmin_write_interval_ms = 0"));
    sim.tick_ms = 100;
    sim
}

/// A call armed at 300 MiB by `memqos run` (original high max) and pressing on it.
fn held_call(sim: &mut Sim, id: &str) {
    sim.add(id, 295 * MB);
    let c = sim.cg(id);
    c.current.high = Limit::Bytes(300 * MB);
    c.original.high = Limit::Max;
}

fn press(sim: &mut Sim, ids: &[&str]) {
    for id in ids {
        sim.cg(id).events_delta.high = 3;
    }
}

/// Three calls held at their ceilings, made a tick apart: a, then b, then c.
fn three_held(tiers: &str) -> (Sim, Vec<Decision>) {
    let mut sim = sim(tiers);
    held_call(&mut sim, "s0/tool.1");
    press(&mut sim, &["s0/tool.1"]);
    sim.tick();
    held_call(&mut sim, "s1/tool.2");
    press(&mut sim, &["s0/tool.1", "s1/tool.2"]);
    sim.tick();
    held_call(&mut sim, "s2/tool.3");
    press(&mut sim, &["s0/tool.1", "s1/tool.2", "s2/tool.3"]);
    let d = sim.tick();
    (sim, d)
}

#[test]
fn the_oldest_held_call_runs_and_the_younger_ones_are_frozen_in_line() {
    let mut sim = sim(TOOLS);
    held_call(&mut sim, "s0/tool.1");
    press(&mut sim, &["s0/tool.1"]);
    assert!(freezes(&sim.tick()).is_empty(), "one held call alone is not queued");
    held_call(&mut sim, "s1/tool.2");
    press(&mut sim, &["s0/tool.1", "s1/tool.2"]);
    let d = freezes(&sim.tick());
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].0, "s1/tool.2");
    assert!(d[0].1, "frozen");
    assert!(matches!(&d[0].2, Reason::Queued { behind, place: 1 } if behind == "s0/tool.1"), "{:?}", d[0].2);
    held_call(&mut sim, "s2/tool.3");
    press(&mut sim, &["s0/tool.1", "s2/tool.3"]);
    let d = freezes(&sim.tick());
    assert!(matches!(&d[..], [(c, true, Reason::Queued { place: 2, .. })] if c == "s2/tool.3"), "{d:?}");
    assert_eq!(sim.engine.status().queued, ["s1/tool.2", "s2/tool.3"]);
    assert!(!sim.cgs["s0/tool.1"].current.frozen, "the oldest is never frozen");
}

#[test]
fn when_the_first_ends_the_next_is_thawed_and_the_rest_wait() {
    let (mut sim, _) = three_held(TOOLS);
    sim.remove("s0/tool.1");
    let d = freezes(&sim.tick());
    assert!(matches!(&d[..], [(c, false, Reason::CauseGone { by })] if c == "s1/tool.2" && by == "s0/tool.1"), "{d:?}");
    assert!(sim.cgs["s2/tool.3"].current.frozen, "the third still waits");
    assert_eq!(sim.engine.status().queued, ["s2/tool.3"]);
    // The second grows, then leaves its ceiling (the daemon lifted it): the third's turn.
    // It was frozen behind the first, which is gone: the reason says so.
    press(&mut sim, &["s1/tool.2"]);
    sim.tick();
    sim.cg("s1/tool.2").current.high = Limit::Max;
    let d = freezes(&sim.tick());
    assert!(matches!(&d[..], [(c, false, Reason::CauseGone { by })] if c == "s2/tool.3" && by == "s0/tool.1"), "{d:?}");
    assert!(sim.engine.status().queued.is_empty());
}

#[test]
fn a_queued_call_is_frozen_at_most_its_tiers_stall_bound_and_not_again_for_another() {
    let (mut sim, _) = three_held(TOOLS);
    let frozen_at = sim.writes("s1/tool.2", memqos_policy::Knob::Freeze)[0].0;
    let mut thawed = None;
    for _ in 0..80 {
        press(&mut sim, &["s0/tool.1"]);
        let d = freezes(&sim.tick());
        if let Some((_, _, r)) = d.iter().find(|(c, f, _)| c == "s1/tool.2" && !f) {
            assert!(matches!(r, Reason::StallBound { bound_ms: 5000, .. }), "{r:?}");
            thawed = Some(sim.now - sim.tick_ms);
            break;
        }
    }
    let thawed = thawed.expect("thawed within the bound");
    assert!(thawed - frozen_at >= 5000 && thawed - frozen_at <= 5100, "frozen {} ms", thawed - frozen_at);
    // Still held, still behind the first: not frozen again for another bound.
    for _ in 0..40 {
        press(&mut sim, &["s0/tool.1", "s1/tool.2"]);
        let d = freezes(&sim.tick());
        assert!(!d.iter().any(|(c, f, _)| c == "s1/tool.2" && *f), "{d:?}");
    }
}

#[test]
fn nothing_is_queued_without_queue_held_or_without_pressing() {
    let plain = edit_tier(TOOLS, "tool", |t| {
        t.remove("queue_held");
    });
    let (_, d) = three_held(&plain);
    assert!(freezes(&d).is_empty(), "{d:?}");
    // At their ceilings but no memory.events high for 5 s: they hold, they do not press.
    let (mut sim, _) = three_held(TOOLS);
    let mut last = Vec::new();
    for _ in 0..60 {
        last = freezes(&sim.tick());
    }
    assert!(sim.cgs.values().all(|c| !c.current.frozen), "thawed once nobody presses: {last:?}");
    assert!(sim.engine.status().queued.is_empty());
}

#[test]
fn a_held_call_below_the_admission_floor_is_not_queued() {
    let mut sim = sim(TOOLS);
    held_call(&mut sim, "s0/tool.1");
    press(&mut sim, &["s0/tool.1"]);
    sim.tick();
    held_call(&mut sim, "s1/tool.2");
    sim.cg("s1/tool.2").usage_bytes = 60 * MB;
    sim.cg("s1/tool.2").current.high = Limit::Bytes(61 * MB);
    for _ in 0..10 {
        press(&mut sim, &["s0/tool.1", "s1/tool.2"]);
        assert!(freezes(&sim.tick()).is_empty());
    }
    // Grown past the floor (64 MiB by default), it takes its place in line.
    sim.cg("s1/tool.2").usage_bytes = 70 * MB;
    sim.cg("s1/tool.2").current.high = Limit::Bytes(72 * MB);
    press(&mut sim, &["s0/tool.1", "s1/tool.2"]);
    let d = freezes(&sim.tick());
    assert!(matches!(&d[..], [(c, true, Reason::Queued { .. })] if c == "s1/tool.2"), "{d:?}");
}

#[test]
fn a_queued_cgroup_that_empties_or_leaves_the_queue_by_a_reload_is_thawed() {
    let (mut sim, _) = three_held(TOOLS);
    // The third empties (its task was killed) while the first two still press.
    sim.cg("s2/tool.3").populated = Some(false);
    press(&mut sim, &["s0/tool.1", "s1/tool.2"]);
    let d = freezes(&sim.tick());
    assert!(matches!(&d[..], [(c, false, _)] if c == "s2/tool.3"), "{d:?}");
    assert!(sim.cgs["s1/tool.2"].current.frozen, "the second still waits");
}

#[test]
fn queue_held_needs_throttle() {
    let bad = "cgroup_root = \"/sys/fs/cgroup/test\"\n[[tier]]\nname = \"t\"\nmatch = [\"**\"]\nqueue_held = true\n";
    let e = memqos_policy::Config::from_str(bad, "test.toml").unwrap_err().to_string();
    assert!(e.contains("queue_held") && e.contains("needs throttle"), "{e}");
}

#[test]
fn release_raises_the_running_call_and_leaves_the_frozen_ones_where_they_are() {
    let mut sim = Sim::new(config(TOOLS, "hold_ms = 500\nmin_write_interval_ms = 0"));
    sim.tick_ms = 100;
    sim.parent.max = Limit::Bytes(4096 * MB);
    let (mut sim, _) = {
        held_call(&mut sim, "s0/tool.1");
        press(&mut sim, &["s0/tool.1"]);
        sim.tick();
        held_call(&mut sim, "s1/tool.2");
        press(&mut sim, &["s0/tool.1", "s1/tool.2"]);
        let d = sim.tick();
        (sim, d)
    };
    assert!(sim.cgs["s1/tool.2"].current.frozen);
    // The first grows into each ceiling it is given, pressing on it.
    for _ in 0..20 {
        let high = sim.high("s0/tool.1").bytes().expect("a ceiling");
        sim.cg("s0/tool.1").usage_bytes = high - 2 * MB;
        press(&mut sim, &["s0/tool.1"]);
        sim.tick();
    }
    assert!(sim.cgs["s1/tool.2"].current.frozen, "still in line");
    let raised = |id: &str| sim.writes(id, memqos_policy::Knob::High).len();
    assert!(raised("s0/tool.1") > 0, "the running call's ceiling rises once calm");
    assert_eq!(raised("s1/tool.2"), 0, "a frozen call takes no part of the room");
}
