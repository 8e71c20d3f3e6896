//! The memory.high livelock on a real kernel, and memqos bounding it.
//!
//! Swapless guest; parent `stall` with memory.max 450 MiB; `prot` (protected tier) holds
//! 150 MiB; `low` (throttle tier) ramps an anonymous working set to 240 MiB over 20 s. The
//! daemon's headroom guard cuts low's memory.high to about 210 MiB (450 - 64 guard - prot's
//! 176 MiB of protection), below the working set: with nothing reclaimable, low sleeps in the
//! kernel's over-high penalty and never gets further, and memory.max is never reached.
//!
//! 1. With the stall bound out of reach (`after_ms` = one day) the livelock holds: low stays
//!    pinned at its high, its `high` events keep rising, its PSI full is high, it never
//!    finishes; only stopping the daemon (which restores memory.high) lets it finish.
//! 2. With `stall = { after_ms = 10000 }` (relieve), the daemon logs a `stall_bound` write
//!    and low finishes, with no OOM kill.

mod common;

use common::*;
use memqos_cgroupfs::{Cgroup, Limit};
use memqos_daemon::process::DaemonProcess;
use memqos_vmtest::guest_test;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const CONFIG: &str = r#"
cgroup_root = "/sys/fs/cgroup/stall"
[[tier]]
name = "prot"
match = ["prot"]
protect = "low"
[[tier]]
name = "low"
match = ["low"]
throttle = true
stall = { after_ms = AFTER_MS }
"#;

struct Setup {
    daemon: DaemonProcess,
    prot: Child,
    low: Child,
    low_cg: Cgroup,
}

fn start(after_ms: u64, tag: &str) -> Setup {
    let root = make_cgroup("stall");
    enable_memory(&root);
    set(&root, "memory.max", 450 * MIB);
    let (prot_cg, low_cg) = (root.child("prot"), root.child("low"));
    prot_cg.create().unwrap();
    low_cg.create().unwrap();
    let dir = Path::new("/run").join(format!("stall-{tag}"));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("memqos.toml");
    std::fs::write(&cfg, CONFIG.replace("AFTER_MS", &after_ms.to_string())).unwrap();
    let daemon = DaemonProcess::start(Path::new(memqos_bin()), &cfg, &dir.join("state"), &[], Stdio::null()).unwrap();
    let prot = spawn_workload(&prot_cg, "alloc", &["--mb", "150", "--hold-ms", "600000"]);
    let deadline = Instant::now() + Duration::from_secs(120);
    while prot_cg.memory_current().unwrap() < 150 * MIB {
        assert!(Instant::now() < deadline, "prot never reached 150 MiB");
        std::thread::sleep(Duration::from_millis(50));
    }
    let low = Command::new(memqos_bin())
        .args(["workload", "phases", "--phases", "240:20000", "--cgroup"])
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

/// Waits until low is pinned at a memory.high the daemon lowered, and returns that high.
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

guest_test!(throttling_livelock_is_bounded_by_the_stall_bound, |g| g, {
    // 1. The livelock, bound out of reach.
    let mut s = start(86_400_000, "unbounded");
    let high = wait_pinned(&s);
    let ev0 = events(&s.low_cg);
    let t0 = Instant::now();
    let mut full_max: f64 = 0.0;
    // Watch 40 s: low must neither finish nor grow past its high.
    while t0.elapsed() < Duration::from_secs(40) {
        assert!(s.low.try_wait().unwrap().is_none(), "low finished although pinned at {high}");
        let u = s.low_cg.memory_current().unwrap();
        assert!(u <= high + high / 32, "low grew to {} MiB past its high {} MiB", mib(u), mib(high));
        if let Ok(p) = s.low_cg.memory_pressure() {
            full_max = full_max.max(p.full.map_or(0.0, |f| f.avg10));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let ev1 = events(&s.low_cg);
    println!(
        "RESULT unbounded: low pinned at memory.high {:.0} MiB for 40 s, usage {:.0} MiB, high events +{}, psi full avg10 up to {full_max:.0}%, oom_kill {}",
        mib(high),
        mib(s.low_cg.memory_current().unwrap()),
        ev1.high - ev0.high,
        ev1.oom_kill
    );
    assert!(ev1.high > ev0.high, "no high events while pinned: {ev0:?} -> {ev1:?}");
    assert!(full_max >= 40.0, "psi full avg10 of the stalled cgroup only reached {full_max}");
    assert_eq!(ev1.oom_kill + ev1.max, 0, "memory.max was reached: {ev1:?}");
    // Stopping the daemon restores memory.high: then low finishes.
    let (events_log, mut low) = stop(s);
    assert!(!events_log.contains("stall_bound"), "{events_log}");
    let st = wait_timeout(&mut low, Duration::from_secs(120))
        .expect("low did not finish after the daemon restored memory.high");
    assert!(st.success(), "{st:?}");
    remove_tree();

    // 2. The same with a 10 s bound.
    let mut s = start(10_000, "bounded");
    let high = wait_pinned(&s);
    let t0 = Instant::now();
    let st = wait_timeout(&mut s.low, Duration::from_secs(240)).expect("low still stalled 240 s after being pinned");
    let took = t0.elapsed();
    let ev = events(&s.low_cg);
    let log = s.daemon.events();
    let bound: Vec<&str> = log.lines().filter(|l| l.contains("stall_bound") && l.contains("\"low\"")).collect();
    println!(
        "RESULT bounded (10 s): pinned at {:.0} MiB, finished {:.1} s later, {} stall_bound action(s), oom_kill {}; first: {}",
        mib(high),
        took.as_secs_f64(),
        bound.len(),
        ev.oom_kill,
        bound.first().unwrap_or(&"none")
    );
    assert!(st.success(), "low: {st:?}");
    assert!(!bound.is_empty(), "no stall_bound write in the event log:\n{log}");
    assert_eq!(ev.oom_kill, 0, "{ev:?}");
    let (_, mut low) = stop(s);
    let _ = low.wait();
    remove_tree();
});
