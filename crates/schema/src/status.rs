//! `<state_dir>/status.json`: what the daemon manages, replaced atomically about once a second
//! and read by `memqos status` and the lab. Per cgroup: its tier, its knobs beside the
//! originals memqos will put back, and its last decisions with their reasons.

use crate::knob::{KnobFile, Knobs};
use crate::reason::Reason;
use memqos_cgroupfs::{Limit, MemoryEvents};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub pid: u32,
    pub config: String,
    pub cgroup_root: String,
    /// `memqos daemon --dry-run`: decides, logs, writes nothing.
    #[serde(default)]
    pub dry_run: bool,
    pub parent_usage_bytes: u64,
    pub parent_max: Limit,
    pub cgroups: Vec<CgroupStatus>,
    pub throttled: Vec<String>,
    pub frozen: Vec<String>,
    /// Lower cgroups parked at what they hold while room is kept for a protected cgroup's
    /// expected peak, next to be admitted first (`engine::park`).
    #[serde(default)]
    pub parked: Vec<String>,
    /// Cgroups held at their ceilings, frozen while an older held one grows first, next to
    /// run first (`engine::queue`).
    #[serde(default)]
    pub queued: Vec<String>,
    /// Lower cgroups frozen while they thrash beside a running protected cgroup
    /// (`engine::thrash`).
    #[serde(default)]
    pub thrashing: Vec<String>,
    pub last_pressure_ms: Option<u64>,
    pub now_ms: u64,
    pub recent_decisions: Vec<DecisionRecord>,
    /// Processes whose oom_score_adj memqos changed (tiers with `oom_score_adj`).
    #[serde(default)]
    pub oom_score_adj_processes: usize,
    /// OOM kills under the root since the daemon started, by tier ("unmanaged": no tier).
    #[serde(default)]
    pub oom_kills_by_tier: std::collections::BTreeMap<String, u64>,
    /// The last few, newest last.
    #[serde(default)]
    pub recent_oom_kills: Vec<crate::oom::OomKill>,
    /// Restarts of the loop in this process (an error put every knob back and the loop
    /// started afresh): more than a few means the host has a fault the log names.
    #[serde(default)]
    pub loop_restarts: u64,
    /// Cgroups `memqos run` left behind that the daemon removed since it started, by kind
    /// (`call`, `session`; `policy.remove_leftovers_after_ms`).
    #[serde(default)]
    pub leftovers_removed: std::collections::BTreeMap<String, u64>,
    /// Such cgroups seen empty and unlocked, waiting out the grace period.
    #[serde(default)]
    pub leftovers_waiting: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CgroupStatus {
    /// Path relative to cgroup_root.
    pub cgroup: String,
    /// The kernel's cgroup id (directory inode).
    pub cgroup_id: u64,
    pub tier: String,
    pub usage_bytes: u64,
    /// As read in the last sample.
    pub knobs: Knobs,
    /// What memqos puts back when it stops.
    pub original: Knobs,
    pub psi_some_avg10: f64,
    /// memory.events totals.
    pub events: MemoryEvents,
    /// This cgroup's latest decisions, newest last.
    #[serde(default)]
    pub last_decisions: Vec<DecisionRecord>,
}

/// One write the daemon made (or, dry, would have made).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecisionRecord {
    pub cgroup: String,
    pub file: String,
    pub value: String,
    /// The engine's structured reason (None for tier settings such as cpu_weight).
    pub reason: Option<Reason>,
    pub why: String,
    /// Daemon time (ms since start) of the decision.
    pub at_ms: u64,
}

impl DecisionRecord {
    /// The knob decided; None for a file memqos does not know as a knob.
    pub fn knob(&self) -> Option<KnobFile> {
        KnobFile::from_name(&self.file)
    }
}
