//! Refaults as pressure (`policy.pressure_refault_rate`): a protected cgroup thrashing through
//! swap or the page cache with memory PSI near zero still throttles the lower tiers.

mod common;

use common::*;
use memqos_policy::{Knob, Limit, Reason, Trigger};

const MB: u64 = 1 << 20;

fn sim(policy: &str) -> Sim {
    let mut sim = Sim::new(config(THREE_TIERS, policy));
    sim.add("critical/db", 500 * MB);
    sim.add("batch/a", 400 * MB);
    sim
}

/// `critical/db` refaults `bytes` over the last `window_ms`, PSI quiet.
fn refault(sim: &mut Sim, cg: &str, bytes: u64, window_ms: u64) {
    let c = sim.cg(cg);
    c.refault_delta_bytes = bytes;
    c.refault_window_ms = window_ms;
}

#[test]
fn refaulting_at_the_threshold_is_pressure_below_it_is_not() {
    // Default threshold 8 MiB/s: 3.9 MiB over 500 ms is 7.8 MiB/s.
    let mut s = sim("");
    s.tick();
    refault(&mut s, "critical/db", 4 * MB - 100 * 1024, 500);
    assert!(s.tick().is_empty(), "below the threshold");
    refault(&mut s, "critical/db", 8 * MB, 1000);
    let d = s.tick();
    let cut = d.iter().find(|d| d.knob() == Knob::High).unwrap_or_else(|| panic!("no cut: {d:?}"));
    assert_eq!(cut.cgroup, "batch/a");
    let Reason::ProtectedPressure { trigger: Trigger::Refault { bytes_per_s }, .. } = &cut.reason else {
        panic!("{:?}", cut.reason)
    };
    assert_eq!(*bytes_per_s, 8 * MB);
}

#[test]
fn the_rate_uses_the_window_the_delta_covers() {
    // 8 MiB over 2 s is 4 MiB/s, whatever the time since the last (fast) tick.
    let mut s = sim("");
    s.tick();
    refault(&mut s, "critical/db", 8 * MB, 2000);
    assert!(s.tick().is_empty());
    // No window (not read this tick): no rate at all.
    refault(&mut s, "critical/db", 800 * MB, 0);
    assert!(s.tick().is_empty());
}

#[test]
fn zero_turns_it_off_and_the_threshold_is_configurable() {
    let mut s = sim("pressure_refault_rate = 0");
    s.tick();
    refault(&mut s, "critical/db", 800 * MB, 1000);
    assert!(s.tick().is_empty(), "off");

    let mut s = sim("pressure_refault_rate = \"1M\"");
    s.tick();
    refault(&mut s, "critical/db", 2 * MB, 1000);
    assert!(s.tick().iter().any(|d| d.knob() == Knob::High && d.cgroup == "batch/a"));
}

#[test]
fn only_protected_cgroups_refaults_count() {
    let mut s = sim("");
    s.tick();
    refault(&mut s, "batch/a", 800 * MB, 1000);
    assert!(s.tick().is_empty(), "a throttle tier's own thrashing is not a reason to cut anyone");
}

#[test]
fn refaulting_at_its_own_limit_is_not_ours_to_fix() {
    let mut s = sim("");
    s.cg("critical/db").current.max = Limit::Bytes(520 * MB); // 500 MB used: within the guard
    s.tick();
    refault(&mut s, "critical/db", 800 * MB, 1000);
    assert!(s.tick().iter().all(|d| d.knob() != Knob::High));
}
