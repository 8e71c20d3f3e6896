//! `memqos restore --watch`, the guardian that outlives the daemon's container (the
//! Kubernetes DaemonSet's second container): it restores a journal a dead daemon left, and
//! never one a live daemon holds. On a fake tree: the mechanism, not the kernel.

use memqos_daemon::lock::StateLock;
use std::os::unix::fs::MetadataExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn poll(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_watching_guardian_restores_a_dead_daemons_journal_and_leaves_a_live_ones_alone() {
    let base = tempfile::tempdir().unwrap();
    let root = base.path().join("qos");
    let cg = root.join("low1");
    std::fs::create_dir_all(&cg).unwrap();
    std::fs::write(cg.join("memory.high"), "33554432").unwrap(); // memqos's throttle
    let state = base.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    // What a daemon that wrote memory.high and then died leaves behind.
    let id = std::fs::metadata(&cg).unwrap().ino();
    let journal = format!(
        "{}\n{}\n",
        serde_json::json!({"op": "root", "cgroup_root": root}),
        serde_json::json!({"op": "set", "cgroup": "low1", "cgroup_id": id, "file": "memory.high", "original": "max"})
    );
    std::fs::write(state.join("journal.json"), journal).unwrap();
    // A live daemon holds the state lock: its journal is its own business.
    let live = StateLock::try_acquire(&state, "a live daemon").unwrap();
    let mut guardian = Command::new(env!("CARGO_BIN_EXE_memqos"))
        .args(["restore", "--watch", "--interval-ms", "50", "--state-dir"])
        .arg(&state)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(
        std::fs::read_to_string(cg.join("memory.high")).unwrap(),
        "33554432",
        "not while a daemon holds the lock"
    );
    // The daemon dies (its lock goes with it): restored within a few looks.
    drop(live);
    poll("the journal restored", Duration::from_secs(5), || {
        std::fs::read_to_string(cg.join("memory.high")).unwrap() == "max"
    });
    assert!(!state.join("journal.json").exists(), "a fully restored journal is removed");
    assert!(guardian.try_wait().unwrap().is_none(), "it keeps watching");
    guardian.kill().unwrap();
    guardian.wait().unwrap();
}
