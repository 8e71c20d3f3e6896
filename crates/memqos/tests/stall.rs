//! The memory.high livelock on a real kernel, and memqos bounding it (issue 14 item 4).
//!
//! Swapless guest; parent `stall` with memory.max 450 MiB; `prot` (protected tier) holds
//! 150 MiB; `low` (throttle tier) ramps an anonymous working set to 270 MiB over 20 s. The
//! daemon's headroom guard cuts low's memory.high to about 210 MiB (450 - 64 guard - prot's
//! protection), below the working set: with nothing reclaimable, low sleeps in the kernel's
//! over-high penalty on every return to user mode, and memory.max is never reached, so no OOM
//! kill ends it either.
//!
//! 1. Stall bound out of reach (one day): the livelock. Low does not finish, its `high` events
//!    keep rising, its PSI `full` is high, and it all but stops growing. The over-high penalty
//!    slows a task rather than stopping it (on 7.2.13 low grew past its high at 0.6 MiB/s,
//!    a twentieth of its own pace), so the test measures progress as a rate and asserts it is
//!    under a tenth of the workload's own: the longer the working set's excess over high, the
//!    longer the stall (a GiB over would take half an hour at that rate).
//!    Stopping the daemon restores memory.high and low finishes.
//! 2. Bound 10 s, action `relieve` (the default action): the daemon logs a `stall_bound`
//!    write and low finishes, with no OOM kill.

mod common;

use common::*;
use memqos_cgroupfs::{Cgroup, Limit};
use memqos_lab::configs::DaemonConfig;
use memqos_lab::daemon_process::DaemonProcess;
use memqos_policy::Reason;
use memqos_schema::events::{self, WriteEvent};
use memqos_vmtest::guest_test;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The writes for `Reason::StallBound` in a daemon's log (whatever their outcome), on `cgroup`
/// or on any.
fn stall_bound_writes(log: &str, cgroup: Option<&str>) -> Vec<WriteEvent> {
    events::writes(&events::parse(log))
        .filter(|(_, w)| matches!(w.reason, Some(Reason::StallBound { .. })))
        .filter(|(_, w)| cgroup.is_none_or(|c| w.cgroup == c))
        .map(|(_, w)| w.clone())
        .collect()
}

/// low's workload: to 270 MiB over 20 s, 13.5 MiB/s when unthrottled; with prot's 150 MiB it
/// stays under the parent's 450 MiB memory.max.
const LOW_MB: u64 = 270;
const LOW_RAMP_MS: u64 = 20_000;
/// How long the livelock is watched.
const WATCH: Duration = Duration::from_secs(30);

struct Setup {
    daemon: DaemonProcess,
    prot: Child,
    low: Child,
    low_cg: Cgroup,
}

fn start(stall_after_ms: i64, tag: &str) -> Setup {
    let root = make_cgroup("stall");
    enable_memory(&root);
    set(&root, "memory.max", 450 * MIB);
    let (prot_cg, low_cg) = (root.child("prot"), root.child("low"));
    prot_cg.create().unwrap();
    low_cg.create().unwrap();
    let dir = Path::new("/run").join(format!("stall-{tag}"));
    std::fs::create_dir_all(&dir).unwrap();
    let mut stall = toml::Table::new();
    stall.insert("after_ms".into(), stall_after_ms.into());
    let config = DaemonConfig::named("stall.toml").set_tier(1, "stall", stall);
    let path = dir.join("memqos.toml");
    config.write(&path).unwrap();
    let daemon = DaemonProcess::start(Path::new(memqos_bin()), &path, &dir.join("state"), &[], Stdio::null()).unwrap();
    let prot = spawn_workload(&prot_cg, "alloc", &["--mb", "150", "--hold-ms", "600000"]);
    let deadline = Instant::now() + Duration::from_secs(120);
    while prot_cg.memory_current().unwrap() < 150 * MIB {
        assert!(Instant::now() < deadline, "prot never reached 150 MiB");
        std::thread::sleep(Duration::from_millis(50));
    }
    let low = Command::new(lab_bin())
        .args(["workload", "phases", "--phases", &format!("{LOW_MB}:{LOW_RAMP_MS}"), "--cgroup"])
        .arg(low_cg.path())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    Setup { daemon, prot, low, low_cg }
}

/// Stops the daemon (restoring every knob) and prot; returns the event log and low, still
/// running.
fn stop(mut s: Setup) -> (String, Child) {
    let (st, events) = s.daemon.stop().unwrap();
    assert!(st.success(), "daemon: {st:?}");
    let _ = s.prot.kill();
    let _ = s.prot.wait();
    (events, s.low)
}

fn remove_tree() {
    let root = Cgroup::new("/sys/fs/cgroup/stall");
    for c in root.children().unwrap() {
        c.remove().unwrap();
    }
    root.remove().unwrap();
}

/// Waits until low is at or over a memory.high the daemon lowered, with `high` events, and
/// returns that high.
fn wait_pinned(s: &Setup) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        if let (Ok(Limit::Bytes(h)), Ok(u)) = (s.low_cg.limit("memory.high"), s.low_cg.memory_current()) {
            if u + h / 32 >= h && events(&s.low_cg).high > 0 {
                return h;
            }
        }
        assert!(Instant::now() < deadline, "low never got throttled: high {:?}", s.low_cg.limit("memory.high"));
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn full_avg10(cg: &Cgroup) -> f64 {
    cg.memory_pressure().ok().and_then(|p| p.full).map_or(0.0, |f| f.avg10)
}

// Alone on the host (exclusive): it asserts PSI levels and a stall bound in seconds.
guest_test!(throttling_livelock_is_bounded_by_the_stall_bound, |g| g.memory_mb(1024).exclusive(true), {
    // 1. The livelock, with the bound out of reach.
    let mut s = start(86_400_000, "unbounded");
    let high = wait_pinned(&s);
    let (ev0, u0, t0) = (events(&s.low_cg), s.low_cg.memory_current().unwrap(), Instant::now());
    let mut full_max: f64 = 0.0;
    while t0.elapsed() < WATCH {
        assert!(s.low.try_wait().unwrap().is_none(), "low finished although pinned at {:.0} MiB", mib(high));
        full_max = full_max.max(full_avg10(&s.low_cg));
        std::thread::sleep(Duration::from_millis(500));
    }
    let (ev1, u1) = (events(&s.low_cg), s.low_cg.memory_current().unwrap());
    let rate_mib_s = mib(u1.saturating_sub(u0)) / WATCH.as_secs_f64();
    let own_rate_mib_s = LOW_MB as f64 / (LOW_RAMP_MS as f64 / 1000.0);
    let left_mib = LOW_MB as f64 - mib(u1);
    println!(
        "RESULT unbounded: low at memory.high {:.1} MiB; over {} s usage {:.1} -> {:.1} MiB ({rate_mib_s:.2} MiB/s, \
         its own pace {own_rate_mib_s:.0} MiB/s: the {left_mib:.0} MiB left would take {:.0} s), \
         high events +{}, psi full avg10 up to {full_max:.0}%, max/oom_kill events {}/{}",
        mib(high),
        WATCH.as_secs(),
        mib(u0),
        mib(u1),
        left_mib / rate_mib_s.max(1e-3),
        ev1.high - ev0.high,
        ev1.max,
        ev1.oom_kill
    );
    assert!(ev1.high > ev0.high, "no high events while pinned: {ev0:?} -> {ev1:?}");
    assert!(full_max >= 40.0, "psi full avg10 of the stalled cgroup only reached {full_max:.1}%");
    assert!(
        rate_mib_s < own_rate_mib_s / 10.0,
        "low progressed at {rate_mib_s:.2} MiB/s, not stalled (its own pace is {own_rate_mib_s:.0} MiB/s)"
    );
    assert_eq!(ev1.oom_kill + ev1.max, 0, "memory.max was reached: {ev1:?}");
    // Stopping the daemon restores memory.high: then low finishes.
    let (events_log, mut low) = stop(s);
    assert!(
        stall_bound_writes(&events_log, None).is_empty(),
        "a stall_bound action with the bound out of reach:\n{events_log}"
    );
    let t_stop = Instant::now();
    let st = wait_timeout(&mut low, Duration::from_secs(120))
        .expect("low did not finish after the daemon restored memory.high");
    assert!(st.success(), "{st:?}");
    println!("RESULT unbounded: after the daemon stopped, low finished {:.1} s later", t_stop.elapsed().as_secs_f64());
    remove_tree();

    // 2. The same with a 10 s bound.
    let mut s = start(10_000, "bounded");
    let high = wait_pinned(&s);
    let t0 = Instant::now();
    let st = wait_timeout(&mut s.low, Duration::from_secs(240)).expect("low still stalled 240 s after being pinned");
    let took = t0.elapsed();
    let ev = events(&s.low_cg);
    let log = s.daemon.events();
    let bound = stall_bound_writes(&log, Some("low"));
    println!(
        "RESULT bounded (10 s): pinned at {:.1} MiB, finished {:.1} s later, {} stall_bound action(s), oom_kill {}",
        mib(high),
        took.as_secs_f64(),
        bound.len(),
        ev.oom_kill
    );
    for w in &bound {
        println!("RESULT stall_bound: {}", serde_json::to_string(w).unwrap());
    }
    assert!(st.success(), "low: {st:?}");
    assert!(!bound.is_empty(), "no stall_bound write in the event log:\n{log}");
    assert_eq!(ev.oom_kill, 0, "{ev:?}");
    let (_, mut low) = stop(s);
    let _ = low.wait();
    remove_tree();
});
