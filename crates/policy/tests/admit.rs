//! Model tests of admission allowances (`engine::admit`) and of a cgroup armed at one before
//! the engine saw it: the daemon hands the engine such a cgroup with its memory.high armed
//! and its original `max` (the daemon journals it so), and the engine treats it as a cgroup
//! it throttled itself: raised as room frees, bounded by its tier's stall bound.

mod common;

use common::*;
use memqos_policy::{Action, Allowance, Knob, Limit, Reason};

const ON: &str = "admission = true\n";

fn sim(tiers: &str, policy: &str) -> Sim {
    let mut sim = Sim::new(config(tiers, policy));
    sim.parent.max = Limit::Bytes(1024 * MB);
    sim
}

fn bytes(a: &[Allowance]) -> Vec<(usize, u64)> {
    a.iter().map(|a| (a.tier.0, a.bytes / MB)).collect()
}

#[test]
fn the_allowance_is_a_share_of_the_room_under_the_guard_line_for_each_throttle_tier() {
    let mut sim = sim(THREE_TIERS, ON);
    sim.add("low/a", 200 * MB);
    sim.add("batch/b", 100 * MB);
    sim.tick();
    // (1024 - 64 guard) - 300 used = 660 free; half of it per new cgroup; the protected
    // tier (not a throttle tier) gets none.
    assert_eq!(bytes(&sim.engine.admission(&sim.parent)), vec![(1, 330), (2, 330)]);
    // The whole room is published beside the share, for calls that declare their peak.
    assert!(sim.engine.admission(&sim.parent).iter().all(|a| a.room == 660 * MB));
    // A fresher parent read (the calm path) moves it without a tick.
    let mut parent = sim.parent.clone();
    parent.usage_bytes = 860 * MB;
    assert_eq!(bytes(&sim.engine.admission(&parent)), vec![(1, 64), (2, 64)], "the floor: 100 free, half is 50");
    parent.usage_bytes = 2048 * MB;
    assert_eq!(bytes(&sim.engine.admission(&parent)), vec![(1, 64), (2, 64)], "over the line: the floor");
    assert!(sim.engine.admission(&parent).iter().all(|a| a.room == 0 && a.wait), "and no room for a declaration");
}

#[test]
fn the_share_and_the_floor_are_the_configs() {
    let mut sim = sim(THREE_TIERS, "admission = true\nadmission_share = 1.0\nadmission_floor = \"16M\"\n");
    sim.add("low/a", 900 * MB);
    sim.tick();
    assert_eq!(bytes(&sim.engine.admission(&sim.parent)), vec![(1, 60), (2, 60)]);
    sim.cg("low/a").usage_bytes = 950 * MB;
    sim.tick();
    assert_eq!(bytes(&sim.engine.admission(&sim.parent)), vec![(1, 16), (2, 16)]);
}

#[test]
fn off_or_without_a_finite_parent_limit_there_is_no_allowance() {
    let mut off = sim(THREE_TIERS, "");
    off.add("low/a", 0);
    off.tick();
    assert!(off.engine.admission(&off.parent).is_empty(), "admission is opt-in");
    let mut unlimited = Sim::new(config(THREE_TIERS, ON));
    unlimited.add("low/a", 0);
    unlimited.tick();
    assert!(unlimited.engine.admission(&unlimited.parent).is_empty());
    // memory.high of the parent bounds as memory.max does.
    unlimited.parent.high = Limit::Bytes(564 * MB);
    assert_eq!(bytes(&unlimited.engine.admission(&unlimited.parent)), vec![(1, 250), (2, 250)]);
}

#[test]
fn the_protected_tiers_expected_regrowth_is_not_offered() {
    let mut sim = sim(THREE_TIERS, ON);
    sim.add("critical/agent", 100 * MB);
    sim.cg("critical/agent").expected_peak_bytes = Some(400 * MB);
    sim.add("low/a", 60 * MB);
    sim.tick();
    // (1024 - 64) - 160 used - (400 reserved - 100 used) = 500 free: 250 each.
    assert_eq!(bytes(&sim.engine.admission(&sim.parent)), vec![(1, 250), (2, 250)]);
    // Without the declaration the room is larger by the regrowth, once protection has caught
    // up with the working set (memory.low 112M = 100M * 1.1 rounded up to 16M): 12M regrowth.
    let mut plain = self::sim(THREE_TIERS, ON);
    plain.add("critical/agent", 100 * MB);
    plain.add("low/a", 60 * MB);
    plain.tick();
    plain.tick();
    assert_eq!(plain.cgs["critical/agent"].current.low, Limit::Bytes(112 * MB));
    assert_eq!(bytes(&plain.engine.admission(&plain.parent)), vec![(1, 394), (2, 394)]);
}

/// An agent expecting 330M beside two 250M batch cgroups, all of the room shared: batch/b
/// is parked for the agent's reservation, leaving 124M free.
fn batch_parked_for_an_agent() -> Sim {
    let mut sim = sim(THREE_TIERS, "admission = true\nadmission_share = 1.0\n");
    sim.add("critical/agent", 12 * MB);
    sim.cg("critical/agent").expected_peak_bytes = Some(330 * MB);
    sim.add("batch/a", 250 * MB);
    sim.add("batch/b", 250 * MB);
    sim.tick();
    assert_eq!(sim.engine.status().parked, vec!["batch/b".to_owned()]);
    sim
}

#[test]
fn a_new_cgroup_does_not_jump_the_parking_queue() {
    let sim = batch_parked_for_an_agent();
    // (1024 - 64) - 512 used - (336 reserved - 12 used) = 124 free. batch is queued: its new
    // cgroups (and those of any tier below) get the floor; low, above it, gets the room.
    assert_eq!(bytes(&sim.engine.admission(&sim.parent)), vec![(1, 124), (2, 64)]);
}

/// A cgroup as the daemon hands it to the engine after `memqos run` armed it: memory.high
/// at the allowance, original `max` (journaled so by the daemon).
fn armed(sim: &mut Sim, id: &str, usage: u64, high: u64) {
    sim.add(id, usage);
    let c = sim.cg(id);
    c.current.high = Limit::Bytes(high);
    c.original.high = Limit::Max;
}

#[test]
fn an_armed_ceiling_is_throttled_state_the_engine_raises_back_to_max_as_room_frees() {
    let mut sim = sim(THREE_TIERS, ON);
    armed(&mut sim, "low/call", 60 * MB, 64 * MB);
    let first = sim.tick();
    assert!(sim.engine.status().throttled.contains(&"low/call".to_owned()), "armed counts as throttled");
    assert!(!sim.engine.is_calm(0), "an armed cgroup keeps the tree watched");
    assert!(first.iter().all(|d| d.knob() != Knob::High), "not released before hold_ms: {first:?}");
    sim.run(20_000, |_| {});
    let raises = sim.writes("low/call", Knob::High);
    assert!(!raises.is_empty(), "never raised");
    assert!(raises.iter().all(|(_, a)| matches!(a, Action::High(_))));
    assert_eq!(sim.high("low/call"), Limit::Max, "back at its original: {:?}", sim.high_trail_mb("low/call"));
    assert!(sim.log.iter().filter(|(_, d)| d.cgroup == "low/call").all(|(_, d)| is_release(&d.reason)));
}

#[test]
fn under_respect_an_armed_ceiling_is_managed_only_once_its_original_is_max() {
    // Not adopted (the daemon took the armed value as found): a foreign memory.high, left alone.
    let mut foreign = sim(THREE_TIERS, ON);
    foreign.add("low/call", 60 * MB);
    foreign.cg("low/call").current.high = Limit::Bytes(64 * MB);
    foreign.cg("low/call").original.high = Limit::Bytes(64 * MB);
    foreign.run(20_000, |_| {});
    assert!(foreign.writes("low/call", Knob::High).is_empty());
    // Adopted: released like any cut.
    let mut adopted = sim(THREE_TIERS, ON);
    armed(&mut adopted, "low/call", 60 * MB, 64 * MB);
    adopted.run(20_000, |_| {});
    assert!(!adopted.writes("low/call", Knob::High).is_empty());
}

#[test]
fn a_call_held_at_its_armed_ceiling_meets_its_tiers_stall_bound() {
    let tiers = edit_tier(THREE_TIERS, "batch", |t| {
        let mut stall = toml::Table::new();
        stall.insert("after_ms".into(), 20_000.into());
        stall.insert("action".into(), "kill".into());
        t.insert("stall".into(), stall.into());
    });
    let mut sim = sim(&tiers, ON);
    sim.add("critical/agent", 800 * MB);
    sim.set_stall("critical/agent", 20.0);
    armed(&mut sim, "batch/call", 64 * MB, 64 * MB);
    let mut killed_at = None;
    sim.run(30_000, |s| {
        // Protected pressure throughout: nothing is released; the call wants more than its
        // ceiling and is pinned there (swapless: high events, PSI full).
        s.set_stall("critical/agent", 20.0);
        let c = s.cg("batch/call");
        if c.usage_bytes > 0 {
            c.usage_bytes = c.current.high.bytes().unwrap_or(u64::MAX).min(64 * MB);
            c.events_delta.high = 5;
            set_full(c, 90.0);
        }
    });
    for (t, d) in &sim.log {
        if d.cgroup == "batch/call" && d.action == Action::Kill {
            assert!(matches!(d.reason, Reason::StallBound { bound_ms: 20_000, .. }), "{d}");
            killed_at.get_or_insert(*t);
        }
    }
    let t = killed_at.expect("the stall bound killed the held call");
    assert!((20_000..=21_000).contains(&t), "killed at {t} ms, bound 20 s from the first tick");
}

fn waits(a: &[Allowance]) -> Vec<(usize, bool)> {
    a.iter().map(|a| (a.tier.0, a.wait)).collect()
}

#[test]
fn a_new_call_waits_when_the_rooms_share_is_below_the_floor_or_its_tier_is_queued() {
    let mut sim = sim(THREE_TIERS, ON);
    sim.add("low/a", 200 * MB);
    sim.add("batch/b", 100 * MB);
    sim.tick();
    // 660 free, half is 330: room for a new call.
    assert_eq!(waits(&sim.engine.admission(&sim.parent)), vec![(1, false), (2, false)]);
    let mut parent = sim.parent.clone();
    // 128 free, half is exactly the floor: still room.
    parent.usage_bytes = 832 * MB;
    assert_eq!(waits(&sim.engine.admission(&parent)), vec![(1, false), (2, false)]);
    // 100 free, half is 50: below the floor, so the floor would be offered on a full host.
    parent.usage_bytes = 860 * MB;
    let full = sim.engine.admission(&parent);
    assert_eq!((bytes(&full), waits(&full)), (vec![(1, 64), (2, 64)], vec![(1, true), (2, true)]));
    parent.usage_bytes = 2048 * MB;
    assert_eq!(waits(&sim.engine.admission(&parent)), vec![(1, true), (2, true)], "over the line");
    // No finite limit: no allowance, so nothing to wait on.
    parent.max = Limit::Max;
    assert!(sim.engine.admission(&parent).is_empty());
}

#[test]
fn a_new_call_of_a_queued_tier_waits_however_much_room_is_left() {
    let sim = batch_parked_for_an_agent();
    // 124 free (as in the parking test above): low, above the queue, starts; batch waits.
    let a = sim.engine.admission(&sim.parent);
    assert_eq!((bytes(&a), waits(&a)), (vec![(1, 124), (2, 64)], vec![(1, false), (2, true)]));
}

#[test]
fn a_ceiling_of_ours_above_usage_is_room_already_promised() {
    let mut first = sim(THREE_TIERS, ON);
    first.add("low/a", 200 * MB);
    // Armed a tick ago at 200M, holding 20M so far: 180M of the room is promised to it.
    armed(&mut first, "low/call", 20 * MB, 200 * MB);
    first.tick();
    // (1024 - 64 guard) - 220 used - 180 promised = 560; half of it.
    assert_eq!(bytes(&first.engine.admission(&first.parent)), vec![(1, 280), (2, 280)]);
    // A ceiling below what the cgroup holds (a cut) promises nothing, nor does an
    // operator's memory.high (its original is not max).
    let mut cut = sim(THREE_TIERS, ON);
    cut.add("low/a", 200 * MB);
    armed(&mut cut, "low/call", 220 * MB, 200 * MB);
    cut.add("batch/own", 20 * MB);
    cut.cg("batch/own").current.high = Limit::Bytes(500 * MB);
    cut.cg("batch/own").original.high = Limit::Bytes(500 * MB);
    cut.tick();
    // (1024 - 64) - 440 used = 520; half of it.
    assert_eq!(bytes(&cut.engine.admission(&cut.parent)), vec![(1, 260), (2, 260)]);
}

#[test]
fn on_a_busy_host_an_armed_ceiling_rises_with_the_room_instead_of_being_lifted_before_the_burst() {
    // 700M of the 960M guard line held by others: more than half of it.
    let mut busy = sim(THREE_TIERS, ON);
    busy.add("low/a", 700 * MB);
    armed(&mut busy, "low/call", 10 * MB, 64 * MB);
    busy.run(20_000, |_| {});
    let high = busy.high("low/call");
    assert_ne!(high, Limit::Max, "lifted before its burst: {:?}", busy.high_trail_mb("low/call"));
    // Raised, but never past what the room under the guard line allows it: 960 - 710 = 250M.
    assert!(high > Limit::Bytes(64 * MB) && high <= Limit::Bytes(260 * MB), "{:?}", busy.high_trail_mb("low/call"));
    // With admission off the same ceiling is lifted as before (an ordinary throttled cgroup
    // that no longer presses on its limit).
    let mut off = sim(THREE_TIERS, "");
    off.add("low/a", 700 * MB);
    armed(&mut off, "low/call", 10 * MB, 64 * MB);
    off.run(20_000, |_| {});
    assert_eq!(off.high("low/call"), Limit::Max, "{:?}", off.high_trail_mb("low/call"));
}

/// Two protected cgroups using 100M each, declaring 300M and 200M: about 200M and 100M to
/// grow back into. The room for a new call keeps back both (`all`) or the larger (`largest`).
fn room_beside_two_protected(policy: &str) -> Vec<u64> {
    let mut sim = sim(THREE_TIERS, policy);
    for (id, peak) in [("critical/a", 300), ("critical/b", 200)] {
        sim.add(id, 100 * MB);
        sim.cg(id).expected_peak_bytes = Some(peak * MB);
    }
    sim.tick();
    sim.engine.admission(&sim.parent).iter().map(|a| a.room / MB).collect()
}

#[test]
fn admission_regrowth_largest_keeps_back_only_the_largest_protected_regrowth() {
    // (1024 - 64) - 200 used = 760 under the line; the protections follow the declarations
    // in 16M steps (304M, 208M): less 204 + 108, or less 204.
    assert_eq!(room_beside_two_protected(ON), vec![448, 448]);
    assert_eq!(room_beside_two_protected("admission = true\nadmission_regrowth = \"all\"\n"), vec![448, 448]);
    assert_eq!(room_beside_two_protected("admission = true\nadmission_regrowth = \"largest\"\n"), vec![556, 556]);
}

#[test]
fn an_unknown_admission_regrowth_is_an_error_naming_it() {
    let e = memqos_policy::Config::from_str(
        "cgroup_root = \"/a\"\n[[tier]]\nname = \"t\"\nmatch = [\"**\"]\n[policy]\nadmission_regrowth = \"some\"\n",
        "memqos.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("memqos.toml") && e.contains("admission_regrowth") && e.contains("some"), "{e}");
}

#[test]
fn an_armed_calls_promise_outlives_a_cut_of_its_ceiling() {
    let room = |armed_at: Option<u64>| {
        let mut sim = sim(THREE_TIERS, "admission = true\nadmission_share = 1.0\n");
        // Armed at 500M (its declaration), since cut to 100M, holding 90M.
        armed(&mut sim, "low/call", 90 * MB, 100 * MB);
        sim.cg("low/call").armed_bytes = armed_at;
        sim.tick();
        sim.engine.admission(&sim.parent)[0].room / MB
    };
    // (1024 - 64) - 90 used = 870 under the line; the call may still grow 410M to what it was
    // armed at: another call started on that room would outgrow it with it once the cut is
    // released. Without knowing the armed value only the 10M under the cut count.
    assert_eq!(room(Some(500 * MB)), 460);
    assert_eq!(room(None), 860);
}

#[test]
fn an_armed_calls_promise_outlives_a_release_to_max() {
    let room = |armed_at: Option<u64>| {
        let mut sim = sim(THREE_TIERS, "admission = true\nadmission_share = 1.0\n");
        // Armed at 500M, lifted to max by a release before it grew (the root less than half
        // full), holding 90M: it still grows to what it was admitted at.
        armed(&mut sim, "low/call", 90 * MB, 500 * MB);
        sim.cg("low/call").current.high = Limit::Max;
        sim.cg("low/call").armed_bytes = armed_at;
        sim.tick();
        sim.engine.admission(&sim.parent)[0].room / MB
    };
    // (1024 - 64) - 90 used = 870 under the line, less the 410M it may still grow.
    assert_eq!(room(Some(500 * MB)), 460);
    // An unarmed cgroup at max promises nothing (it was never admitted on a room).
    assert_eq!(room(None), 870);
}
