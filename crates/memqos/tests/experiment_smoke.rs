//! CI's short version of the experiment suite: the OOM scenario, one run, on each kernel of
//! MEMQOS_TEST_KERNELS (default 6.12 and 7), through the real `memqos-lab experiment` command
//! (guests, replays, the daemon). It asserts what must hold in every run, not timings: every
//! arm produced a result, a static partition too small for the protected trace OOM-kills it
//! (and the replay reports it), memqos let no task be OOM-killed and every low task finish,
//! the daemon left nothing throttled, and oomd and systemd-oomd (issue 16's peer arms) killed
//! only low tasks. The OOM scenario runs twice: as `oom` (the harness's own init) and as
//! `oom-systemd` (systemd as PID 1, with the systemd-oomd arm). With two kernels, each variant
//! runs on one of them (`oom` on the newer, `oom-systemd` on the older): both paths and both
//! kernels are covered in half the guest time, which keeps CI within its budget. The full
//! suite with N = 5 is scripts/experiments.sh.

use memqos_experiment::runner::ArmResult;
use memqos_replay::Outcome;
use std::path::Path;
use std::process::Command;

#[test]
fn oom_scenario_one_run_per_kernel() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = tempfile::tempdir().unwrap();
    let kernels = memqos_vmtest::test_series();
    let (oldest, newest) = (kernels.iter().min().unwrap(), kernels.iter().max().unwrap());
    for (scenario, kernel) in [("oom", newest), ("oom-systemd", oldest)] {
        let kernel = kernel.to_string();
        let status = Command::new(env!("CARGO_BIN_EXE_memqos-lab"))
            .current_dir(&repo)
            .args(["experiment", scenario, "--runs", "1", "--no-plots", "--kernel", &kernel, "--out"])
            .arg(out.path())
            .status()
            .expect("run memqos-lab experiment");
        assert!(status.success(), "memqos-lab experiment {scenario} on {kernel} failed: {status}");
    }

    let kernel_dirs: Vec<_> = ["oom", "oom-systemd"]
        .iter()
        .flat_map(|scenario| {
            let runs = out.path().join("runs").join(scenario);
            let dirs: Vec<_> = std::fs::read_dir(&runs).unwrap().map(|e| e.unwrap().path()).collect();
            assert_eq!(dirs.len(), 1, "{scenario}: one result directory, for the kernel it ran on");
            dirs.into_iter().map(move |d| (*scenario, d))
        })
        .collect();
    for (scenario, dir) in kernel_dirs {
        let results = memqos_experiment::summary::load_results(&dir).unwrap();
        let mut arms: Vec<&str> = results.iter().map(|r| r.arm.as_str()).collect();
        arms.sort();
        let mut expected = vec![
            "kube-memoryqos",
            "memqos",
            "none",
            "oomd",
            "solo:high",
            "solo:low1",
            "static-adj",
            "static-high",
            "static-max",
            "static-reserve",
        ];
        if scenario == "oom-systemd" {
            expected.push("systemd-oomd");
        }
        assert_eq!(arms, expected, "{}", dir.display());
        let memqos: &ArmResult = results.iter().find(|r| r.arm == "memqos").unwrap();
        for t in &memqos.tasks {
            assert_eq!(t.outcome, Outcome::Finished, "{}: memqos arm, task {}: {}", dir.display(), t.name, t.outcome);
            assert_eq!(t.events.oom_kill, 0, "{}: task {}", dir.display(), t.name);
        }
        assert_eq!(memqos.parent_oom_kills, 0, "{}", dir.display());
        // oomd ran (the runner fails the arm if it exited early) and its ruleset kills from
        // the low tier only: every kill it logged names a low cgroup, and every task it
        // SIGKILLed is a low one.
        // The same for systemd-oomd (oom-systemd, whose guests boot systemd), which watches
        // only the low tier's slice: its slices were set up as written (the parent's
        // MemoryMax, the low slice's ManagedOOM settings).
        for peer in ["oomd", "systemd-oomd"] {
            let Some(r) = results.iter().find(|r| r.arm == peer) else { continue };
            for d in r.decisions.iter().filter(|d| d.file == "kill") {
                assert!(d.cgroup.starts_with("low"), "{}: {peer} killed {}: {}", dir.display(), d.cgroup, d.reason);
            }
            for t in r.tasks.iter().filter(|t| matches!(t.outcome, Outcome::Killed { signal: 9 })) {
                assert!(t.name.starts_with("low"), "{}: {peer} arm: {} was SIGKILLed", dir.display(), t.name);
            }
        }
        if let Some(sd) = results.iter().find(|r| r.arm == "systemd-oomd") {
            let unit = |file: &str| {
                sd.decisions.iter().find(|d| d.file == file).map(|d| (d.cgroup.as_str(), d.value.as_str()))
            };
            assert_eq!(unit("MemoryMax"), Some(("memqosexp.slice", "1153433600")), "{}", dir.display());
            assert_eq!(unit("ManagedOOMMemoryPressure"), Some(("memqosexp-low.slice", "kill")), "{}", dir.display());
        }
        assert_eq!(memqos.knobs_restored, Some(true), "{}: the daemon left knobs changed", dir.display());
        // Every result says where it came from (issue 29): the commit and the scenario's digest.
        let p = memqos.provenance.as_ref().unwrap_or_else(|| panic!("{}: no provenance", dir.display()));
        assert!(p.commit.is_some() && p.scenario_sha256.as_deref().is_some_and(|h| h.len() == 64), "{p:?}");
        assert!(dir.join("provenance.txt").is_file(), "{}", dir.display());
        // The static baselines wrote what static_arms computes: memqos's -900 on the protected
        // task only; memory.min on the protected task and memory.max on each low.
        let knobs = |arm: &str| -> Vec<(String, String, String)> {
            let r = results.iter().find(|r| r.arm == arm).unwrap();
            r.decisions.iter().map(|d| (d.cgroup.clone(), d.file.clone(), d.value.clone())).collect()
        };
        assert_eq!(
            knobs("static-adj"),
            vec![("high".into(), "oom_score_adj".into(), "-900".into())],
            "{}",
            dir.display()
        );
        let reserve = knobs("static-reserve");
        let files: Vec<(&str, &str)> = reserve.iter().map(|k| (k.0.as_str(), k.1.as_str())).collect();
        assert_eq!(
            files,
            vec![("high", "memory.min"), ("low1", "memory.max"), ("low2", "memory.max")],
            "{}",
            dir.display()
        );
        // The replay's OOM path on a real kernel: under static-max each child gets 1100/3 =
        // 366 MiB, below the protected trace's peak (321 MB + 100 MiB baseline), so the kernel
        // must kill it, and the replay must say so from SIGKILL plus memory.events.
        let partitioned = results.iter().find(|r| r.arm == "static-max").unwrap();
        let high = partitioned.tasks.iter().find(|t| t.name == "high").unwrap();
        assert!(
            matches!(high.outcome, Outcome::OomKilled { signal: 9 }) && high.events.oom_kill >= 1,
            "{}: static-max high: {} with oom_kill {}",
            dir.display(),
            high.outcome,
            high.events.oom_kill
        );
        for r in &results {
            assert!(!r.timeline.t_s.is_empty(), "{} {}: no memory samples", dir.display(), r.arm);
            let h = r.tasks.iter().find(|t| t.name == "high");
            if let Some(h) = h.filter(|h| h.outcome == Outcome::Finished) {
                assert!(!h.latencies_ms.is_empty(), "{} {}: no latencies", dir.display(), r.arm);
            }
        }
        eprintln!("RESULT experiment smoke {}: {}", dir.display(), memqos_summary(memqos));
    }
    assert!(out.path().join("summary.json").is_file() && out.path().join("report.md").is_file());
}

fn memqos_summary(r: &ArmResult) -> String {
    r.tasks.iter().map(|t| format!("{} {:.2}s", t.name, t.wall_s)).collect::<Vec<_>>().join(", ")
        + &format!(", {} daemon writes", r.decisions.len())
}
