//! The priority controller against real kernels (no swap): a protected cgroup and two
//! low-tier cgroups under a parent memory.max that forces contention (the scenario is in
//! crates/memqos/src/scenario.rs). Without memqos the kernel OOM-kills a task; with memqos
//! the low tier is throttled through memory.high while the protected cgroup may grow back
//! into its working set, nobody is killed, and the low tier finishes later.

mod common;

use common::*;
use memqos_cgroupfs::{Cgroup, Limit};
use memqos_daemon::process::DaemonProcess;
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

fn knob(cg: &Cgroup, file: &'static str) -> Limit {
    cg.limit(file).unwrap_or_else(|e| panic!("{e}"))
}

// The scenario is the demo's (crates/memqos/src/scenario.rs): the test runs it and asserts.
guest_test!(controller_prevents_oom_and_keeps_protected_task_fast, |g| g.memory_mb(2048), {
    let out = Command::new(memqos_bin()).args(["demo", "--in-guest", "--json"]).output().unwrap();
    assert!(out.status.success(), "scenario failed: {}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("scenario JSON");
    let secs = |run: &str, task: &str| {
        r[run]["tasks"].as_array().unwrap().iter().find(|t| t["name"] == task).unwrap()["secs"].as_f64().unwrap()
    };
    let ratio = secs("managed", "high") / secs("solo", "high");
    println!(
        "RESULT unmanaged OOM kills {}; managed OOM kills {}; high managed/solo {ratio:.3} ({:.1}/{:.1} s); low finish {:.1}/{:.1} s (nominal 14 s); daemon writes {}",
        r["unmanaged"]["oom_kills"], r["managed"]["oom_kills"], secs("managed", "high"), secs("solo", "high"),
        secs("managed", "low1"), secs("managed", "low2"), r["managed"]["daemon_writes"]
    );
    assert!(
        r["unmanaged"]["oom_kills"].as_u64().unwrap() >= 1,
        "the scenario must force an OOM kill without memqos: {r}"
    );
    assert_eq!(r["managed"]["oom_kills"].as_u64().unwrap(), 0, "memqos must prevent the OOM kill: {r}");
    for t in r["managed"]["tasks"].as_array().unwrap() {
        assert_eq!(t["outcome"], "finished", "every task finishes under memqos: {t}");
        if t["name"] != "high" {
            assert!(t["throttled"].as_u64().unwrap() > 0, "the low tier was throttled: {t}");
            assert!(
                t["secs"].as_f64().unwrap() > 14.0,
                "a throttled low task finishes later than its nominal 14 s: {t}"
            );
        }
    }
    assert!(ratio <= 1.10, "protected task took {ratio:.3}x its solo time (limit 1.10)");
    assert_eq!(r["low_high_after_stop"], serde_json::json!(["max", "max"]), "SIGTERM must restore memory.high");
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
        // A manual restore beside a live daemon is refused (the state directory's lock) and
        // leaves its knobs alone.
        let out = Command::new(memqos_bin()).args(["restore", "--state-dir", "/run/memqos-test"]).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains("stop it first"), "restore beside a live daemon: {stderr}");
        assert!(
            knob(&low1, "memory.high") != Limit::Max || knob(&low2, "memory.high") != Limit::Max,
            "still throttled"
        );
        let mut daemon = daemon;
        daemon.kill().unwrap(); // SIGKILL: no chance to clean up
        daemon.wait().unwrap();
        std::thread::sleep(Duration::from_millis(1000));
        let after_kill = (knob(&low1, "memory.high"), knob(&low2, "memory.high"), knob(&high, "memory.low"));
        if !guardian {
            assert!(
                after_kill.0 != Limit::Max || after_kill.1 != Limit::Max,
                "knobs should still be throttled after SIGKILL"
            );
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

fn oom_score_adj(pid: u32) -> i32 {
    std::fs::read_to_string(format!("/proc/{pid}/oom_score_adj")).unwrap().trim().parse().unwrap()
}

fn signal_of(st: std::process::ExitStatus) -> Option<i32> {
    std::os::unix::process::ExitStatusExt::signal(&st)
}

/// Pids the kernel's OOM killer killed, in order, from the kernel log ("Killed process PID").
fn oom_victims() -> Vec<u32> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut kmsg = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open("/dev/kmsg").unwrap();
    let mut victims = Vec::new();
    let mut buf = vec![0u8; 8192];
    // One record per read; EAGAIN at the end of the buffer.
    while let Ok(n) = kmsg.read(&mut buf) {
        let rec = String::from_utf8_lossy(&buf[..n]);
        if let Some(rest) = rec.split("Killed process ").nth(1) {
            if let Some(pid) = rest.split_whitespace().next().and_then(|p| p.parse().ok()) {
                victims.push(pid);
            }
        }
    }
    victims
}

// An OOM no throttling can avoid: the low task holds 100 MiB of anon memory (no swap, so
// memory.high cannot take it back) and the protected one then wants 200 MiB under a 256 MiB
// parent. The memcg OOM killer ignores memory.low and kills the largest task: the protected
// one. With the protected tier's oom_score_adj = -900 the kernel's choice is the low task.
// Whether the protected task then survives is up to the kernel: 7.2 runs a second OOM a few
// ms later, before the victim's pages are uncharged, and kills it too (reproduced without
// memqos: scripts/repro/double-memcg-oom.sh). That is printed, not asserted.
guest_test!(oom_score_adj_steers_an_unavoidable_kill_to_the_low_tier, |g| g.memory_mb(1024), {
    const HIGH: &str = "8:1500,200:1500,200:6000,0:0";
    const LOW: &str = "100:500,100:30000,0:0";
    let config = CONFIG.replace("protect = \"low\"", "protect = \"low\"\noom_score_adj = -900");
    let original = 0; // what a process spawned by this test starts with
    for managed in [false, true] {
        let parent = make_cgroup("qos");
        enable_memory(&parent);
        set(&parent, "memory.max", 256 * MIB);
        let (high, low) = (parent.child("high"), parent.child("low1"));
        high.create().unwrap();
        low.create().unwrap();
        let daemon = managed.then(|| {
            std::fs::write("/run/memqos-test.toml", &config).unwrap();
            let (cfg, state) =
                (std::path::Path::new("/run/memqos-test.toml"), std::path::Path::new("/run/memqos-test"));
            DaemonProcess::start(std::path::Path::new(memqos_bin()), cfg, state, &[], Stdio::null()).unwrap()
        });
        let mut low_task = start(&low, LOW);
        let t0 = Instant::now();
        while low.memory_current().unwrap() < 95 * MIB {
            assert!(t0.elapsed() < Duration::from_secs(30), "low task never reached 95 MiB");
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = oom_victims(); // drain older kernel messages
        let mut high_task = start(&high, HIGH);
        if managed {
            // The daemon adjusts new processes on its next tick (200 ms), well inside the
            // 1.5 s the protected task spends at 8 MiB.
            std::thread::sleep(Duration::from_millis(1000));
            assert_eq!(oom_score_adj(high_task.id()), -900, "protected task adjusted");
            assert_eq!(oom_score_adj(low_task.id()), original, "low tier untouched");
        }
        let mut ended = Vec::new();
        while ended.len() < 2 && !(ended.len() == 1 && t0.elapsed() > Duration::from_secs(25)) {
            for (name, t) in [("low", &mut low_task), ("high", &mut high_task)] {
                if !ended.iter().any(|(n, _)| *n == name) {
                    if let Some(st) = t.try_wait().unwrap() {
                        ended.push((name, st));
                    }
                }
            }
            assert!(t0.elapsed() < Duration::from_secs(60), "no task ended: the OOM never happened");
            std::thread::sleep(Duration::from_millis(20));
        }
        let victims: Vec<&str> = oom_victims()
            .into_iter()
            .filter_map(|pid| {
                if pid == low_task.id() {
                    Some("low")
                } else if pid == high_task.id() {
                    Some("high")
                } else {
                    None
                }
            })
            .collect();
        let high_survived = ended.iter().any(|(n, st)| *n == "high" && st.success());
        println!("RESULT managed={managed}: OOM victims in order {victims:?}; protected task survived: {high_survived}; exits {ended:?}");
        if managed {
            assert_eq!(victims.first(), Some(&"low"), "the OOM killer's first choice must be the low tier");
            let low_end = ended.iter().find(|(n, _)| *n == "low").expect("low task ended");
            assert_eq!(signal_of(low_end.1), Some(9));
            // Restore: a protected process alive at the stop gets its original value back.
            let mut probe = start(&high, "1:60000");
            let t1 = Instant::now();
            while oom_score_adj(probe.id()) != -900 {
                assert!(t1.elapsed() < Duration::from_secs(5), "probe never adjusted");
                std::thread::sleep(Duration::from_millis(50));
            }
            let (status, log) = daemon.unwrap().stop().unwrap();
            assert!(status.success(), "daemon exit: {status:?}");
            assert_eq!(oom_score_adj(probe.id()), original, "SIGTERM restores oom_score_adj");
            assert!(log.contains("\"file\":\"oom_score_adj\""), "writes are logged");
            assert!(!std::path::Path::new("/run/memqos-test/journal.json").exists(), "journal removed after restore");
            let _ = probe.kill();
            let _ = probe.wait();
        } else {
            // Without memqos the scenario must kill the protected task, or it proves nothing.
            assert_eq!(
                victims.first(),
                Some(&"high"),
                "baseline: the largest task, the protected one, is killed first"
            );
        }
        for t in [&mut low_task, &mut high_task] {
            let _ = t.kill();
            let _ = t.wait();
        }
        teardown(&parent);
    }
});

// cpu_weight: set per tier while the daemon runs, put back on SIGTERM; with the cpu
// controller off for the children the daemon says so once and keeps managing memory.
guest_test!(cpu_weight_is_applied_and_restored, |g| g.memory_mb(1024), {
    let config = CONFIG
        .replace("protect = \"low\"", "protect = \"low\"\ncpu_weight = 10000")
        .replace("throttle = true", "throttle = true\ncpu_weight = 1");
    std::fs::write("/run/memqos-test.toml", &config).unwrap();
    let (cfg, state) = (std::path::Path::new("/run/memqos-test.toml"), std::path::Path::new("/run/memqos-test"));
    for cpu_on in [true, false] {
        let parent = make_cgroup("qos");
        parent.enable_controllers(if cpu_on { &["memory", "cpu"] } else { &["memory"] }).unwrap();
        let (high, low) = (parent.child("high"), parent.child("low1"));
        high.create().unwrap();
        low.create().unwrap();
        let weight = |cg: &Cgroup| cg.read_string("cpu.weight").ok().map(|v| v.trim().to_string());
        let before = (weight(&high), weight(&low));
        let daemon = DaemonProcess::start(std::path::Path::new(memqos_bin()), cfg, state, &[], Stdio::null()).unwrap();
        std::thread::sleep(Duration::from_millis(600)); // a few 200 ms ticks
        let during = (weight(&high), weight(&low));
        let (status, log) = daemon.stop().unwrap();
        let after = (weight(&high), weight(&low));
        println!("RESULT cpu controller {cpu_on}: cpu.weight before {before:?}, while running {during:?}, after SIGTERM {after:?}");
        assert!(status.success());
        if cpu_on {
            assert_eq!(before, (Some("100".into()), Some("100".into())));
            assert_eq!(during, (Some("10000".into()), Some("1".into())));
            assert_eq!(after, before, "SIGTERM restores cpu.weight");
        } else {
            assert_eq!(during, (None, None), "no cpu.weight without the controller");
            let notes = log.lines().filter(|l| l.contains("cpu_weight not applied")).count();
            assert_eq!(notes, 2, "one message per cgroup, not one per tick:\n{log}");
        }
        teardown(&parent);
    }
});
