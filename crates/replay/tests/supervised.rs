//! The worker/supervisor split, for real: this test binary re-executes itself as the worker
//! (test `worker_entry`, which runs `worker_main` when the supervisor's variable is set). The
//! host has no cgroup v2 memory controller, so cgroups here are fake directories with a
//! regular `cgroup.procs` and a `memory.events` the test edits; the kernel's OOM killer is
//! exercised in QEMU guests by the memqos binary's tests.

mod common;

use memqos_replay::worker::{self, supervise, Event, RECORD_FD_ENV};
use memqos_replay::{prepare, EngineOptions, Outcome, Prepared, ScheduleOptions, ToolCallsSource};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::AtomicBool;

#[test]
fn worker_entry() {
    if std::env::var_os(RECORD_FD_ENV).is_some() {
        std::process::exit(i32::from(worker::worker_main()));
    }
}

fn worker_command() -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["worker_entry", "--exact", "--nocapture", "--test-threads=1"]);
    c
}

/// `steps` samples 0.2 s apart at 20x (10 ms per step), growing by 2 MB each.
fn prepared(dir: &Path, steps: usize) -> Prepared {
    let points: Vec<(f64, f64)> = (0..steps).map(|i| (i as f64 * 0.2, 2.0 * i as f64 + 1.0)).collect();
    let path = common::write_trace(dir, "synthetic", &points);
    prepare(&path, ToolCallsSource::None, &ScheduleOptions { speed: 20.0, baseline_bytes: 1 << 20 }).unwrap()
}

fn fake_cgroup(dir: &Path) -> std::path::PathBuf {
    let cg = dir.join("cg");
    std::fs::create_dir(&cg).unwrap();
    std::fs::write(cg.join("cgroup.procs"), "").unwrap();
    std::fs::write(cg.join("memory.events"), "low 0\nhigh 4\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n").unwrap();
    cg
}

const ENGINE: EngineOptions = EngineOptions { chunk_bytes: 1 << 20, read_rss: true, pause_file: None, fill: None };

#[test]
fn finishes_and_reports_every_step() {
    let dir = tempfile::tempdir().unwrap();
    let p = prepared(dir.path(), 12);
    let cg = fake_cgroup(dir.path());
    let mut seen = 0;
    let mut pid = 0;
    let run = supervise(worker_command(), &p.worker_config(&ENGINE, Some(&cg)), None, |ev| match ev {
        Event::Spawned { pid: p } => pid = p,
        Event::Step(_) => seen += 1,
        Event::Baseline { bytes, .. } => assert_eq!(bytes, 1 << 20),
    })
    .unwrap();
    assert_eq!(run.outcome, Outcome::Finished, "{run:?}");
    assert_eq!((run.steps.len(), seen), (12, 12));
    assert!(run.completion.is_some() && run.wall.unwrap() >= run.completion.unwrap());
    assert!(run.vm_hwm_bytes.unwrap() > 23_000_000);
    assert_eq!(run.oom_kill_delta, Some(0));
    // The worker, not the supervisor, joined the cgroup.
    assert_eq!(std::fs::read_to_string(cg.join("cgroup.procs")).unwrap(), pid.to_string());
    assert_ne!(pid, std::process::id());
}

#[test]
fn sigkill_with_an_oom_kill_counted_is_an_oom_kill() {
    let dir = tempfile::tempdir().unwrap();
    let p = prepared(dir.path(), 40);
    let cg = fake_cgroup(dir.path());
    let mut pid = 0;
    let run = supervise(worker_command(), &p.worker_config(&ENGINE, Some(&cg)), None, |ev| match ev {
        Event::Spawned { pid: p } => pid = p,
        Event::Step(rec) if rec.step == 3 => {
            // What the kernel does: count the kill in memory.events, SIGKILL the victim.
            std::fs::write(cg.join("memory.events"), "low 0\nhigh 9\nmax 2\noom 1\noom_kill 1\noom_group_kill 0\n")
                .unwrap();
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
        _ => {}
    })
    .unwrap();
    assert_eq!(run.outcome, Outcome::OomKilled { signal: libc::SIGKILL });
    assert_eq!(run.oom_kill_delta, Some(1));
    assert_eq!(run.memory_events_delta.unwrap().high, 5);
    assert!(run.steps.len() >= 4 && run.steps.len() < 40, "{}", run.steps.len());
    assert_eq!(run.completion, None);
}

#[test]
fn sigkill_without_an_oom_kill_is_just_killed() {
    let dir = tempfile::tempdir().unwrap();
    let p = prepared(dir.path(), 40);
    let mut pid = 0;
    let run = supervise(worker_command(), &p.worker_config(&ENGINE, None), None, |ev| match ev {
        Event::Spawned { pid: p } => pid = p,
        Event::Step(rec) if rec.step == 2 => unsafe {
            libc::kill(pid as i32, libc::SIGKILL);
        },
        _ => {}
    })
    .unwrap();
    assert_eq!(run.outcome, Outcome::Killed { signal: libc::SIGKILL });
    assert_eq!(run.oom_kill_delta, None);
}

#[test]
fn a_worker_that_cannot_join_its_cgroup_fails_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let p = prepared(dir.path(), 5);
    let cg = fake_cgroup(dir.path());
    std::fs::remove_file(cg.join("cgroup.procs")).unwrap();
    let run = supervise(worker_command(), &p.worker_config(&ENGINE, Some(&cg)), None, |_| {}).unwrap();
    match &run.outcome {
        Outcome::Failed { exit_code: Some(1), message } => {
            assert!(message.starts_with("joining the cgroup: cgroup "), "{message}");
            assert!(message.contains("cgroup.procs"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert!(run.steps.is_empty());
}

#[test]
fn an_unreadable_cgroup_is_a_startup_error() {
    let dir = tempfile::tempdir().unwrap();
    let p = prepared(dir.path(), 5);
    let missing = dir.path().join("no-such-cgroup");
    let e = supervise(worker_command(), &p.worker_config(&ENGINE, Some(&missing)), None, |_| {}).unwrap_err();
    assert!(e.to_string().contains("memory.events"), "{e}");
}

#[test]
fn the_stop_flag_ends_the_worker_and_keeps_the_records() {
    let dir = tempfile::tempdir().unwrap();
    let p = prepared(dir.path(), 100);
    let stop = AtomicBool::new(false);
    let run = supervise(worker_command(), &p.worker_config(&ENGINE, None), Some(&stop), |ev| {
        if let Event::Step(rec) = ev {
            if rec.step == 5 {
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
    })
    .unwrap();
    assert_eq!(run.outcome, Outcome::Killed { signal: libc::SIGTERM });
    assert!(run.steps.len() >= 6 && run.steps.len() < 100);
}

#[test]
fn a_missing_worker_program_is_a_spawn_error() {
    let dir = tempfile::tempdir().unwrap();
    let p = prepared(dir.path(), 2);
    let e = supervise(Command::new("/nonexistent/memqos"), &p.worker_config(&ENGINE, None), None, |_| {}).unwrap_err();
    assert!(e.to_string().starts_with("starting the worker /nonexistent/memqos: "), "{e}");
}
