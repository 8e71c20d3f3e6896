//! The priority controller against real kernels (no swap): a protected cgroup and two
//! low-tier cgroups under a parent memory.max that forces contention.
//!
//! The protected workload bursts like an agent running tests (64 -> 256 MiB, three times);
//! each low-tier workload ramps to 200 MiB. Together they need more than the 512 MiB parent
//! limit, so without memqos the kernel OOM-kills a task. With memqos the low tier is
//! throttled through memory.high while the protected cgroup may grow back into its working
//! set, nobody is killed, and the low tier finishes later.

mod common;

use common::*;
use memqos_cgroupfs::{Cgroup, Limit};
use memqos_vmtest::guest_test;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const HIGH_PROFILE: &str = "64:1500,256:2500,64:2500,256:2500,64:2500,256:2500,0:0";
const LOW_PROFILE: &str = "200:10000,200:4000,0:0";
const PARENT_MAX: u64 = 512 * MIB;

const CONFIG: &str = r#"
cgroup_root = "/sys/fs/cgroup/qos"
state_dir = "/run/memqos-test"
[signals]
sampling_interval_ms = 200
[[tier]]
name = "critical"
match = ["high*"]
protect = "low"
[[tier]]
name = "batch"
match = ["low*"]
throttle = true
[policy]
headroom_guard = "64M"
min_write_interval_ms = 500
hold_ms = 3000
"#;

struct Outcome {
    name: &'static str,
    secs: f64,
    status: std::process::ExitStatus,
}

fn setup_parent() -> (Cgroup, [Cgroup; 3]) {
    let parent = make_cgroup("qos");
    enable_memory(&parent);
    set(&parent, "memory.max", PARENT_MAX);
    let kids = [parent.child("high"), parent.child("low1"), parent.child("low2")];
    for k in &kids {
        k.create().unwrap();
    }
    (parent, kids)
}

fn teardown(parent: &Cgroup) {
    for k in parent.children().unwrap() {
        let _ = k.remove();
    }
    let _ = parent.remove();
}

fn start(cg: &Cgroup, profile: &str) -> Child {
    spawn_workload(cg, "phases", &["--phases", profile])
}

/// Runs the given workloads to completion; removes the high cgroup as soon as its task is
/// done (a finished sandbox goes away, and with it its protection).
fn run_all(mut tasks: Vec<(&'static str, Cgroup, Child)>) -> Vec<Outcome> {
    let t0 = Instant::now();
    let mut out = Vec::new();
    while !tasks.is_empty() {
        let mut i = 0;
        while i < tasks.len() {
            if let Some(status) = tasks[i].2.try_wait().unwrap() {
                let (name, cg, _) = tasks.remove(i);
                if name == "high" {
                    let _ = cg.remove();
                }
                out.push(Outcome { name, secs: t0.elapsed().as_secs_f64(), status });
            } else {
                i += 1;
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(600), "workloads still running after 600 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    out
}

fn find<'a>(o: &'a [Outcome], name: &str) -> &'a Outcome {
    o.iter().find(|x| x.name == name).unwrap()
}

fn start_daemon(extra: &[&str]) -> Child {
    std::fs::create_dir_all("/run/memqos-test").unwrap();
    std::fs::write("/run/memqos-test.toml", CONFIG).unwrap();
    let log = std::fs::File::create("/run/memqos-test.log").unwrap();
    let child = Command::new(memqos_bin())
        .args(["daemon", "--config", "/run/memqos-test.toml"])
        .args(extra)
        .stdout(log)
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    // Started = first status file written.
    let t0 = Instant::now();
    while !std::path::Path::new("/run/memqos-test/status.json").exists() {
        assert!(t0.elapsed() < Duration::from_secs(30), "daemon did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

fn stop(mut daemon: Child) {
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    let st = wait_timeout(&mut daemon, Duration::from_secs(30)).expect("daemon did not stop on SIGTERM");
    assert!(st.success(), "daemon exit {st:?}");
}

fn knob(cg: &Cgroup, file: &'static str) -> Limit {
    cg.limit(file).unwrap_or_else(|e| panic!("{e}"))
}

guest_test!(controller_prevents_oom_and_keeps_protected_task_fast, |g| g.memory_mb(2048), {
    // 1. The protected task alone: its baseline completion time.
    let (parent, [high, ..]) = setup_parent();
    let solo = run_all(vec![("high", high.clone(), start(&high, HIGH_PROFILE))]);
    let solo_secs = find(&solo, "high").secs;
    teardown(&parent);

    // 2. Unmanaged contention: the kernel OOM-kills.
    let (parent, [high, low1, low2]) = setup_parent();
    let unmanaged = run_all(vec![
        ("high", high.clone(), start(&high, HIGH_PROFILE)),
        ("low1", low1.clone(), start(&low1, LOW_PROFILE)),
        ("low2", low2.clone(), start(&low2, LOW_PROFILE)),
    ]);
    let unmanaged_kills = events(&parent).oom_kill;
    teardown(&parent);

    // 3. Managed: same contention with the daemon running.
    let (parent, [high, low1, low2]) = setup_parent();
    let daemon = start_daemon(&[]);
    let managed = run_all(vec![
        ("high", high.clone(), start(&high, HIGH_PROFILE)),
        ("low1", low1.clone(), start(&low1, LOW_PROFILE)),
        ("low2", low2.clone(), start(&low2, LOW_PROFILE)),
    ]);
    let managed_kills = events(&parent).oom_kill;
    let throttled = (events(&low1).high, events(&low2).high);
    stop(daemon);
    let restored = (knob(&low1, "memory.high"), knob(&low2, "memory.high"));
    teardown(&parent);

    let show = |label: &str, o: &[Outcome]| {
        for x in o {
            println!("{label:<10} {:<5} {:>6.1} s  {:?}", x.name, x.secs, x.status);
        }
    };
    println!("solo high: {solo_secs:.1} s");
    show("unmanaged", &unmanaged);
    println!("unmanaged: parent oom_kill {unmanaged_kills}");
    show("managed", &managed);
    println!("managed: parent oom_kill {managed_kills}; low memory.events high {throttled:?}");
    let writes = std::fs::read_to_string("/run/memqos-test/events.jsonl").unwrap_or_default();
    println!("daemon writes: {}", writes.lines().filter(|l| l.contains("\"write\"")).count());
    let ratio = find(&managed, "high").secs / solo_secs;
    let later = |n| find(&managed, n).secs;
    // What a low task needs when nothing holds it back: its profile's length.
    let low_nominal = 14.0;
    println!(
        "RESULT high managed/solo = {ratio:.3} ({:.1}/{solo_secs:.1} s); low finish {:.1}/{:.1} s vs {low_nominal:.1} s nominal; unmanaged OOM kills {unmanaged_kills}",
        find(&managed, "high").secs, later("low1"), later("low2")
    );

    assert!(unmanaged_kills >= 1, "the scenario must force an OOM kill without memqos");
    assert_eq!(managed_kills, 0, "memqos must prevent the OOM kill");
    for o in &managed {
        assert!(o.status.success(), "{} did not finish under memqos: {:?}", o.name, o.status);
    }
    assert!(throttled.0 > 0 && throttled.1 > 0, "the low tier was never throttled: {throttled:?}");
    assert!(later("low1") > low_nominal && later("low2") > low_nominal, "the low tier was throttled, so it must finish later than its nominal {low_nominal} s");
    assert!(ratio <= 1.10, "protected task took {ratio:.3}x its solo time (limit 1.10)");
    assert_eq!(restored, (Limit::Max, Limit::Max), "SIGTERM must restore memory.high");
});

guest_test!(sigkill_mid_throttle_then_restart_restores_every_knob, |g| g.memory_mb(2048), {
    for guardian in [false, true] {
        let (parent, [high, low1, low2]) = setup_parent();
        let daemon = start_daemon(if guardian { &[] } else { &["--no-guardian"] });
        let mut tasks = vec![start(&high, HIGH_PROFILE), start(&low1, LOW_PROFILE), start(&low2, LOW_PROFILE)];
        // Wait until memqos has throttled the low tier.
        let t0 = Instant::now();
        while knob(&low1, "memory.high") == Limit::Max && knob(&low2, "memory.high") == Limit::Max {
            assert!(t0.elapsed() < Duration::from_secs(120), "low tier never throttled");
            std::thread::sleep(Duration::from_millis(100));
        }
        let throttled = (knob(&low1, "memory.high"), knob(&low2, "memory.high"), knob(&high, "memory.low"));
        let mut daemon = daemon;
        daemon.kill().unwrap(); // SIGKILL: no chance to clean up
        daemon.wait().unwrap();
        std::thread::sleep(Duration::from_millis(1000));
        let after_kill = (knob(&low1, "memory.high"), knob(&low2, "memory.high"), knob(&high, "memory.low"));
        if !guardian {
            assert!(after_kill.0 != Limit::Max || after_kill.1 != Limit::Max, "knobs should still be throttled after SIGKILL");
            // The restart restores from the journal before anything else.
            let out = Command::new(memqos_bin()).args(["restore", "--state-dir", "/run/memqos-test"]).output().unwrap();
            println!("{}", String::from_utf8_lossy(&out.stdout));
            assert!(out.status.success());
        }
        let restored = (knob(&low1, "memory.high"), knob(&low2, "memory.high"), knob(&high, "memory.low"));
        println!("RESULT guardian={guardian}: throttled {throttled:?} -> after SIGKILL {after_kill:?} -> restored {restored:?}");
        assert_eq!(restored, (Limit::Max, Limit::Max, Limit::Bytes(0)), "every knob back to its original");
        assert!(!std::path::Path::new("/run/memqos-test/journal.json").exists(), "journal removed after restore");
        for t in &mut tasks {
            let _ = t.kill();
            let _ = t.wait();
        }
        teardown(&parent);
    }
});
