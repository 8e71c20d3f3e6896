//! Fake cgroup trees for unit tests (never proof of kernel behaviour: guest tests are).

use crate::layout::Root;

/// A temporary directory that passes [`Root::open_unchecked_fs`]: memory available and
/// enabled for children, and a cgroup.controllers/subtree_control pair that new children get
/// when created through `Root::session`.
pub fn fake_root() -> (tempfile::TempDir, Root) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cgroup.controllers"), "cpu memory pids\n").unwrap();
    std::fs::write(dir.path().join("cgroup.subtree_control"), "memory\n").unwrap();
    let root = Root::open_unchecked_fs(dir.path()).unwrap();
    (dir, root)
}

/// A session directory with the files the kernel would put there, then `Root::session`.
pub fn fake_session(root: &Root, name: &str) -> memqos_cgroupfs::Cgroup {
    let p = root.path().join(name);
    std::fs::create_dir_all(&p).unwrap();
    std::fs::write(p.join("cgroup.controllers"), "cpu memory pids\n").unwrap();
    std::fs::write(p.join("cgroup.subtree_control"), "").unwrap();
    root.session(name).unwrap().cg
}

/// Writes `<dir>/admission.json` as a daemon with `pid` would have at `at` (ms since the
/// epoch) for `root`: one `(tier, allowance, wait)` per throttle tier, the tick `seq` and the
/// wait limit.
pub fn publish(
    dir: &std::path::Path,
    root: &str,
    at: u64,
    pid: u32,
    tiers: &[(&str, u64, bool)],
    seq: u64,
    wait_limit_ms: u64,
) {
    use memqos_schema::admission::TierAllowance;
    let tiers: Vec<_> = tiers
        .iter()
        .map(|&(t, b, wait)| TierAllowance { tier: t.into(), allowance_bytes: b, wait, room_bytes: None })
        .collect();
    publish_tiers(dir, root, at, pid, tiers, seq, wait_limit_ms);
}

/// [`publish`] with whole [`TierAllowance`]s (the room too).
pub fn publish_tiers(
    dir: &std::path::Path,
    root: &str,
    at: u64,
    pid: u32,
    tiers: Vec<memqos_schema::admission::TierAllowance>,
    seq: u64,
    wait_limit_ms: u64,
) {
    use memqos_schema::admission::{Admission, ADMISSION_VERSION};
    let a = Admission {
        version: ADMISSION_VERSION,
        pid,
        cgroup_root: root.into(),
        computed_unix_ms: at,
        interval_ms: 100,
        tiers,
        seq,
        wait_limit_ms,
    };
    // Atomically, as the daemon does: a waiter polling it never reads half a file.
    let tmp = dir.join("admission.json.test-tmp");
    std::fs::write(&tmp, serde_json::to_vec(&a).unwrap()).unwrap();
    std::fs::rename(&tmp, dir.join(memqos_schema::state::ADMISSION_FILE)).unwrap();
}
