//! CI's short versions of the agent-host measurements (issue 14): tool-call churn against the
//! daemon (`memqos-lab bench churn`, 20 s instead of 10 min) and the agent-host experiment's
//! smoke scenario (two sessions, one level, every arm), through the real commands in guests.
//! They assert mechanisms, not timings: every tool-call cgroup got its tier's knobs, nothing
//! failed or was left changed, every session ran its runtime and its tool calls each in a
//! cgroup of its own, and memqos lost no agent runtime. With two kernels under test
//! (MEMQOS_TEST_KERNELS, default 6.12 and 7) each smoke runs on one of them (churn on the
//! newer, the agent host on the older), as experiment_smoke does: both kernels and both
//! commands in half the guest time (506 s became 196 s locally); the committed campaigns
//! (docs/agent, docs/agent-host-closed) ran on each kernel.

use memqos_experiment::agent_host::{runner::HostArmResult, summary};
use memqos_replay::Outcome;
use std::path::Path;
use std::process::Command;

/// The kernel series this smoke runs on: the newest under test for churn, the oldest for the
/// agent host (the same one when a single series is under test).
fn kernel(newest: bool) -> String {
    let series = memqos_vmtest::test_series();
    let pick = if newest { series.iter().max() } else { series.iter().min() };
    pick.expect("MEMQOS_TEST_KERNELS names at least one series").to_string()
}

#[test]
fn churn_twenty_seconds_per_kernel() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = tempfile::tempdir().unwrap();
    let file = out.path().join("churn.json");
    let status = Command::new(env!("CARGO_BIN_EXE_memqos-lab"))
        .current_dir(&repo)
        // Calls live 2 s, not the bench's 500 ms: a call removed before the daemon's next look
        // is a miss, and under TCG on a loaded host that look took up to 0.86 s (a fresh CI
        // clone's run with builds beside it: 1 miss of 993). The mechanism asserted is that
        // every call the daemon could see got its knobs; the 500 ms figures are the bench's.
        .args(["bench", "churn", "--rate", "50", "--duration", "20", "--lifetime-ms", "2000"])
        .args(["--kernel", &kernel(true), "--out"])
        .arg(&file)
        .status()
        .expect("run memqos-lab bench churn");
    assert!(status.success(), "memqos-lab bench churn failed: {status}");
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let results = doc["kernels"].as_array().expect("kernels");
    assert_eq!(results.len(), 1, "one result, for the kernel it ran on: {doc}");
    for r in results {
        let k = r["kernel"].as_str().unwrap_or("?");
        let created = r["created"].as_u64().unwrap();
        assert!(created >= 500, "{k}: only {created} cgroups made in 20 s at 50/s");
        for knob in ["cpu_weight", "oom_score_adj"] {
            assert_eq!(r[knob]["misses"], 0, "{k}: tool-call cgroups that never got their {knob}: {r}");
            assert_eq!(r[knob]["n"].as_u64(), Some(created), "{k}: {knob} seen on every cgroup");
        }
        assert_eq!(r["write_errors"], 0, "{k}: {r}");
        assert!(r["daemon_error"].is_null(), "{k}: {}", r["daemon_error"]);
        assert_eq!(r["restore_failed"].as_array().map(Vec::len), Some(0), "{k}: {}", r["restore_failed"]);
        assert_eq!(r["not_restored"].as_array().map(Vec::len), Some(0), "{k}: {}", r["not_restored"]);
        eprintln!(
            "RESULT churn smoke {k}: {created} cgroups, cpu.weight p99 {} ms, oom_score_adj p99 {} ms",
            r["cpu_weight"]["p99_ms"], r["oom_score_adj"]["p99_ms"]
        );
    }
}

#[test]
fn agent_host_smoke_one_run_per_kernel() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = tempfile::tempdir().unwrap();
    let status = Command::new(env!("CARGO_BIN_EXE_memqos-lab"))
        .current_dir(&repo)
        .args(["experiment", "agent-host", "--scenario", "experiments/agent-host/smoke.toml", "--runs", "1"])
        .args(["--no-plots", "--kernel", &kernel(false), "--out"])
        .arg(out.path())
        .status()
        .expect("run memqos-lab experiment agent-host");
    assert!(status.success(), "memqos-lab experiment agent-host failed: {status}");
    let dirs: Vec<_> = std::fs::read_dir(out.path().join("runs")).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(dirs.len(), 1, "one result directory, for the kernel it ran on");
    for dir in dirs {
        let results: Vec<HostArmResult> = summary::load(&dir).unwrap();
        let mut arms: Vec<(&str, usize)> = results.iter().map(|r| (r.arm.as_str(), r.level)).collect();
        arms.sort();
        assert_eq!(
            arms,
            [("memqos", 2), ("none", 2), ("solo", 1), ("solo", 1), ("static-peak", 2)],
            "{}",
            dir.display()
        );
        for r in &results {
            assert!(r.recursiveprot, "{}: cgroup2 without memory_recursiveprot", dir.display());
            assert!(!r.parent_current.is_empty(), "{} {}: no memory samples", dir.display(), r.arm);
            for s in &r.sessions {
                // The runtime ran under `memqos run --runtime`: its cgroup's peak came back.
                assert!(s.runtime.peak_bytes.unwrap_or(0) > 0, "{} {} {}: runtime peak", dir.display(), r.arm, s.name);
                assert_eq!(s.memory_max.is_some(), r.arm == "static-peak", "{} {}", dir.display(), r.arm);
                assert!(!s.calls.is_empty(), "{}: {} has no tool call to replay", dir.display(), s.trace);
                for c in s.calls.iter().filter_map(|c| c.result.as_ref()) {
                    // Each call in its own cgroup: `memqos run --json` read that cgroup's peak.
                    assert!(
                        c.peak_bytes.unwrap_or(0) > 0,
                        "{} {} {}: call without its cgroup",
                        dir.display(),
                        r.arm,
                        s.name
                    );
                }
            }
        }
        for solo in results.iter().filter(|r| r.arm == "solo") {
            let s = &solo.sessions[0];
            assert_eq!(s.runtime.outcome, Outcome::Finished, "{}: {} alone", dir.display(), s.trace);
            assert!(s.calls.iter().all(|c| c.result.as_ref().is_some_and(|p| p.outcome == Outcome::Finished)));
        }
        let memqos = results.iter().find(|r| r.arm == "memqos").unwrap();
        for s in &memqos.sessions {
            assert!(!s.runtime.oom_killed(), "{}: memqos lost {}'s runtime: {:?}", dir.display(), s.name, s.runtime);
        }
        assert_eq!(memqos.knobs_restored, Some(true), "{}: the daemon left knobs changed", dir.display());
        assert!(memqos.daemon_writes.unwrap_or(0) > 0, "{}: the daemon wrote no knob", dir.display());
    }
    assert!(out.path().join("summary.json").is_file() && out.path().join("report.md").is_file());
}
