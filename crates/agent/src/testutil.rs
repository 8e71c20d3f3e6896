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
    root.session(name).unwrap()
}
