//! [`CgroupId`]: which cgroup, as the kernel knows it.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The kernel's id of a cgroup: the inode number of its directory in cgroup v2 (what BPF's
/// `cgroup_id` and the event log's `cgroup_id` hold). A path names a place; this names one
/// cgroup: one removed and made again under the same path has a new id, and is a new cgroup.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CgroupId(pub u64);

impl CgroupId {
    pub fn get(self) -> u64 {
        self.0
    }
}

impl From<u64> for CgroupId {
    fn from(id: u64) -> Self {
        CgroupId(id)
    }
}

impl fmt::Display for CgroupId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
