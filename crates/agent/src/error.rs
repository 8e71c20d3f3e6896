//! Why a call could not be set up. Each message names the path and says what to do, because
//! the reader is often an agent that only sees stderr.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(
        "cgroup root {root} does not exist: create it (mkdir {root}; echo +memory > {root}/cgroup.subtree_control), or name another with --root, --config or $MEMQOS_ROOT",
        root = root.display()
    )]
    RootMissing { root: PathBuf },
    #[error(
        "{root} is not a cgroup v2 directory (filesystem magic {magic:#x}): memqos needs the unified hierarchy (mount -t cgroup2); `memqos doctor` shows what this host has",
        root = root.display()
    )]
    NotCgroup2 { root: PathBuf, magic: i64 },
    #[error(
        "the memory controller is not available in {root}: enable it in the parent (echo +memory > {parent}/cgroup.subtree_control); on a host whose memory controller is bound to cgroup v1 it cannot be",
        root = root.display(),
        parent = root.parent().unwrap_or(root).display()
    )]
    MemoryUnavailable { root: PathBuf },
    #[error(
        "the memory controller is not enabled for the children of {root}: echo +memory > {root}/cgroup.subtree_control (the root must hold no process itself)",
        root = root.display()
    )]
    MemoryNotDelegated { root: PathBuf },
    #[error("invalid {what} name {name:?}: use 1-64 letters, digits, '-', '_' ('.' only in session names, not first; no tier is called \"runtime\")")]
    BadName { what: &'static str, name: String },
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
    #[error(transparent)]
    Cgroup(#[from] memqos_cgroupfs::Error),
    #[error("{0}")]
    Usage(String),
}
