//! A protected cgroup whose memory.low/min an ancestor caps (the daemon's
//! `protection_check`), logged as a `protection_void` event.

use serde::{Deserialize, Serialize};

/// One ancestor without protection and the protected cgroups below it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// The ancestor without protection (absolute path).
    pub ancestor: String,
    /// Protected managed cgroups below it (relative to cgroup_root), at most a few.
    pub protected: Vec<String>,
    /// Whether the cgroup2 mount has memory_recursiveprot.
    pub recursiveprot: bool,
    pub message: String,
}
