//! The priority controller against real kernels (no swap): a protected cgroup and two
//! low-tier cgroups under a parent memory.max that forces contention (the scenario is in
//! crates/lab/src/controller.rs). Without memqos the kernel OOM-kills a task; with memqos
//! the low tier is throttled through memory.high while the protected cgroup may grow back
//! into its working set, nobody is killed, and the low tier finishes later.

mod common;

use common::*;
use memqos_cgroupfs::{Cgroup, Limit};
use memqos_lab::configs::DaemonConfig;
use memqos_lab::controller::{self, HIGH_PROFILE, LOW_PROFILE};
use memqos_lab::daemon_process::DaemonProcess;
use memqos_vmtest::guest_test;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How much later than in its solo run (just before, same guest) the protected workload may
/// fall behind its schedule under memqos. The two low tasks share the guest's 2 vCPUs with it,
/// so even with no memory stall at all it falls up to ~2 s behind on a loaded host (measured:
/// 1.8 s with PSI some 0.0 %); a protected task throttled at memory.high or reclaiming for its
/// bursts falls behind by tens of seconds. The bound sits between the two.
const MAX_PROTECTED_EXTRA_LATE_MS: u64 = 5000;
/// Share of its run time the protected cgroup may spend stalled on memory (PSI some) under
/// memqos.
const MAX_PROTECTED_STALL: f64 = 0.05;

fn start(cg: &Cgroup, profile: &str) -> Child {
    controller::start(Path::new(lab_bin()), cg, profile).unwrap()
}

/// The controller config written where the daemon reads it; `state_dir` is the config's.
fn write_config(config: &DaemonConfig) -> (PathBuf, PathBuf) {
    let state = config.state_dir();
    std::fs::create_dir_all(&state).unwrap();
    let path = PathBuf::from("/run/memqos-test.toml");
    config.write(&path).unwrap();
    (path, state)
}

fn start_daemon(config: &DaemonConfig, extra: &[&str]) -> DaemonProcess {
    let (path, state) = write_config(config);
    let log = std::fs::File::create("/run/memqos-test.log").unwrap();
    DaemonProcess::start(Path::new(memqos_bin()), &path, &state, extra, Stdio::from(log)).unwrap()
}

/// (seconds, max lateness ms, % of its time stalled, memory.events high) of a task.
fn figures(t: &controller::Task) -> (f64, Option<u64>, f64, u64) {
    let stalled = t.pressure.some.total_us as f64 / 1e4 / t.secs;
    (t.secs, t.workload.as_ref().map(|w| w.max_late_ms), (stalled * 10.0).round() / 10.0, t.events.high)
}

fn knob(cg: &Cgroup, file: &'static str) -> Limit {
    cg.limit(file).unwrap_or_else(|e| panic!("{e}"))
}

/// Polls `f` every 50 ms until it holds; panics with `what` after `limit`.
fn wait_until(limit: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < limit, "{what} (waited {} s)", limit.as_secs());
        std::thread::sleep(Duration::from_millis(50));
    }
}

// The scenario is the demo's (memqos_lab::controller): the test runs it and asserts the
// mechanism: the unmanaged run OOM-kills, the managed one does not; memqos throttles the low
// tier (their memory.events high) and never the protected cgroup, which keeps to its
// schedule (the workload's own lateness) and barely stalls (its PSI). Its time against the
// solo run is printed, not asserted: two sequential TCG runs on a shared host differ by more
// than what that ratio would test.
// Alone on the host (exclusive): it compares the protected task's lateness with its solo run.
guest_test!(controller_prevents_oom_and_keeps_protected_task_on_schedule, |g| g.memory_mb(2048).exclusive(true), {
    let out = Command::new(lab_bin()).args(["demo", "--in-guest", "--json"]).output().unwrap();
    assert!(out.status.success(), "scenario failed: {}", String::from_utf8_lossy(&out.stderr));
    let r: controller::Report = serde_json::from_slice(&out.stdout).expect("scenario JSON");
    let high = |run: &controller::Run| figures(run.task("high").expect("a high task"));
    let (solo, unmanaged, managed) = (high(&r.solo), high(&r.unmanaged), high(&r.managed));
    println!(
        "RESULT {}: protected task (secs, max late ms, stalled %, throttled): solo {solo:?}, unmanaged {unmanaged:?}, managed {managed:?}; managed/solo time {:.3}",
        r.kernel,
        managed.0 / solo.0
    );
    println!(
        "RESULT OOM kills unmanaged {} managed {}; low tasks finished in {:?} s under memqos; daemon writes {}",
        r.unmanaged.oom_kills,
        r.managed.oom_kills,
        r.managed.tasks.iter().filter(|t| t.name != "high").map(|t| t.secs).collect::<Vec<_>>(),
        r.managed.daemon_writes
    );
    // The daemon's writes, so that a failure below is explained in the test's output.
    for line in &r.managed.daemon_timeline {
        println!("daemon write: {line}");
    }
    assert!(r.unmanaged.oom_kills >= 1, "the scenario must force an OOM kill without memqos: {r:?}");
    assert_eq!(r.managed.oom_kills, 0, "memqos must prevent the OOM kill: {r:?}");
    for t in &r.managed.tasks {
        assert_eq!(t.outcome, "finished", "every task finishes under memqos: {t:?}");
        assert_eq!(t.events.oom_kill, 0, "{t:?}");
        if t.name == "high" {
            assert_eq!(t.events.high, 0, "memqos must never throttle the protected cgroup: {t:?}");
            let late =
                |t: &controller::Task| t.workload.as_ref().expect("the workload reports its schedule").max_late_ms;
            let solo_late = late(r.solo.task("high").expect("a solo run"));
            assert!(
                late(t) <= solo_late + MAX_PROTECTED_EXTRA_LATE_MS,
                "the protected task fell {} ms behind its schedule under memqos, {solo_late} ms alone (limit: {MAX_PROTECTED_EXTRA_LATE_MS} ms more): {t:?}",
                late(t)
            );
            let stalled = t.pressure.some.total_us as f64 / 1e6 / t.secs;
            assert!(
                stalled <= MAX_PROTECTED_STALL,
                "the protected cgroup stalled on memory {:.1} % of its run under memqos (limit {:.0} %): {t:?}",
                stalled * 100.0,
                MAX_PROTECTED_STALL * 100.0
            );
        } else {
            assert!(t.events.high > 0, "memqos throttles the low tier through memory.high: {t:?}");
        }
    }
    assert_eq!(r.low_high_after_stop, ["max", "max"], "SIGTERM must restore memory.high");
});

guest_test!(sigkill_mid_throttle_then_restart_restores_every_knob, |g| g.memory_mb(2048), {
    for guardian in [false, true] {
        let (parent, [high, low1, low2]) = controller::setup().unwrap();
        let config = DaemonConfig::named(controller::CONFIG);
        let state = config.state_dir();
        let daemon = start_daemon(&config, if guardian { &[] } else { &["--no-guardian"] });
        let mut tasks = vec![start(&high, HIGH_PROFILE), start(&low1, LOW_PROFILE), start(&low2, LOW_PROFILE)];
        // Wait until memqos has throttled the low tier.
        wait_until(Duration::from_secs(120), "low tier never throttled", || {
            knob(&low1, "memory.high") != Limit::Max || knob(&low2, "memory.high") != Limit::Max
        });
        let knobs = || (knob(&low1, "memory.high"), knob(&low2, "memory.high"), knob(&high, "memory.low"));
        let throttled = knobs();
        // A manual restore beside a live daemon is refused (the state directory's lock) and
        // leaves its knobs alone.
        let out = Command::new(memqos_bin()).arg("restore").arg("--state-dir").arg(&state).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains("stop it first"), "restore beside a live daemon: {stderr}");
        // The live daemon goes on adjusting, so the values may move; a restore would have
        // put both low cgroups back to max.
        let (l1, l2, _) = knobs();
        assert!(l1 != Limit::Max || l2 != Limit::Max, "a refused restore leaves the low tier throttled");
        daemon.kill(); // SIGKILL: no chance to clean up
        let after_kill = knobs();
        let originals = (Limit::Max, Limit::Max, Limit::Bytes(0));
        if guardian {
            // The guardian sees the pipe close and restores on its own.
            wait_until(Duration::from_secs(10), "the guardian did not restore the knobs", || knobs() == originals);
        } else {
            assert!(
                after_kill.0 != Limit::Max || after_kill.1 != Limit::Max,
                "knobs should still be throttled after SIGKILL"
            );
            // The restart restores from the journal before anything else.
            let out = Command::new(memqos_bin()).arg("restore").arg("--state-dir").arg(&state).output().unwrap();
            println!("{}", String::from_utf8_lossy(&out.stdout));
            assert!(out.status.success(), "memqos restore after SIGKILL: {}", String::from_utf8_lossy(&out.stderr));
        }
        let restored = knobs();
        println!("RESULT guardian={guardian}: throttled {throttled:?} -> after SIGKILL {after_kill:?} -> restored {restored:?}");
        assert_eq!(restored, originals, "every knob back to its original");
        wait_until(Duration::from_secs(5), "journal not removed after restore", || {
            !state.join(memqos_schema::state::JOURNAL_FILE).exists()
        });
        for t in &mut tasks {
            let _ = t.kill();
            let _ = t.wait();
        }
        controller::teardown(&parent);
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
    let config = DaemonConfig::named(controller::CONFIG).set_tier(0, "oom_score_adj", -900);
    let original = 0; // what a process spawned by this test starts with
    for managed in [false, true] {
        let parent = make_cgroup("qos");
        enable_memory(&parent);
        set(&parent, "memory.max", 256 * MIB);
        let (high, low) = (parent.child("high"), parent.child("low1"));
        high.create().unwrap();
        low.create().unwrap();
        let daemon = managed.then(|| start_daemon(&config, &[]));
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
            let pid = high_task.id();
            wait_until(Duration::from_millis(1500), "protected task not adjusted", || oom_score_adj(pid) == -900);
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
            assert!(
                !config.state_dir().join(memqos_schema::state::JOURNAL_FILE).exists(),
                "journal removed after restore"
            );
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
        controller::teardown(&parent);
    }
});

// cpu_weight: set per tier while the daemon runs, put back on SIGTERM; with the cpu
// controller off for the children the daemon says so once and keeps managing memory.
guest_test!(cpu_weight_is_applied_and_restored, |g| g.memory_mb(1024), {
    let config = DaemonConfig::named(controller::CONFIG).set_tier(0, "cpu_weight", 10000).set_tier(1, "cpu_weight", 1);
    for cpu_on in [true, false] {
        let parent = make_cgroup("qos");
        parent.enable_controllers(if cpu_on { &["memory", "cpu"] } else { &["memory"] }).unwrap();
        let (high, low) = (parent.child("high"), parent.child("low1"));
        high.create().unwrap();
        low.create().unwrap();
        let weight = |cg: &Cgroup| cg.read_string("cpu.weight").ok().map(|v| v.trim().to_string());
        let before = (weight(&high), weight(&low));
        let daemon = start_daemon(&config, &[]);
        // Applied on the first ticks (200 ms each); without the controller, one message per
        // cgroup once both were seen.
        if cpu_on {
            wait_until(Duration::from_secs(5), "cpu.weight not applied", || {
                (weight(&high), weight(&low)) == (Some("10000".into()), Some("1".into()))
            });
        } else {
            wait_until(Duration::from_secs(5), "no cpu_weight message", || {
                daemon.events().lines().filter(|l| l.contains("cpu_weight not applied")).count() >= 2
            });
            std::thread::sleep(Duration::from_millis(600)); // more ticks: the message must not repeat
        }
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
        controller::teardown(&parent);
    }
});
