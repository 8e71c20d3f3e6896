//! One OOM kill under the managed root, as the daemon logs it (`oom_kill` events) and
//! `status.json` lists it. The daemon's `oom_report` module joins memory.events and the kernel
//! log into these.

use memqos_cgroupfs::units::mib;
use memqos_cgroupfs::Limit;
use serde::{Deserialize, Serialize};

/// The tier label of kills in cgroups no tier manages.
pub const UNMANAGED: &str = "unmanaged";

/// One OOM kill, as logged and as `memqos status` shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OomKill {
    /// The victim's cgroup relative to cgroup_root ("" if unknown).
    pub cgroup: String,
    pub cgroup_id: u64,
    /// Its tier (None: no tier manages it).
    pub tier: Option<String>,
    /// The victim (None: the kernel log was not readable or had no line for it).
    pub pid: Option<u32>,
    pub command: Option<String>,
    /// The kernel's constraint: CONSTRAINT_MEMCG (a cgroup's memory.max) or CONSTRAINT_NONE
    /// (the whole machine).
    pub constraint: Option<String>,
    /// The cgroup whose limit was hit, as the kernel names it (hierarchy path).
    pub oom_cgroup: Option<String>,
    /// The victim's anonymous RSS when killed.
    pub victim_anon_rss_bytes: Option<u64>,
    /// memory.peak of the victim's cgroup (None if gone or the kernel lacks it).
    pub peak_bytes: Option<u64>,
    pub usage_bytes: Option<u64>,
    /// Limits in force: the cgroup's memory.max/high and cgroup_root's.
    pub limits: Limits,
    /// The managed cgroups holding the most memory at that moment, largest first.
    pub holders: Vec<Holder>,
    /// "memory.events", "kmsg" or "memory.events+kmsg".
    pub source: String,
    /// When the kernel logged the kill (printk time: local_clock(), close to but not exactly
    /// CLOCK_MONOTONIC) and CLOCK_MONOTONIC of this report.
    pub kill_mono_ns: Option<u64>,
    pub reported_mono_ns: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    pub max: Option<Limit>,
    pub high: Option<Limit>,
    pub root_max: Option<Limit>,
    pub root_high: Option<Limit>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Holder {
    pub cgroup: String,
    pub tier: String,
    pub usage_bytes: u64,
}

impl OomKill {
    /// One line for people: who, where, which limit.
    pub fn describe(&self) -> String {
        let who = match (&self.pid, &self.command) {
            (Some(p), Some(c)) => format!("pid {p} ({c})"),
            _ => "a process (victim unknown)".into(),
        };
        let where_ = if self.cgroup.is_empty() { "an unmanaged cgroup".into() } else { self.cgroup.clone() };
        let tier = self.tier.as_deref().unwrap_or(UNMANAGED);
        let lim = |l: Option<Limit>| l.map_or("?".into(), |l| l.to_string());
        format!(
            "OOM kill of {who} in {where_} (tier {tier}): memory.max {}, peak {}, limit hit in {}",
            lim(self.limits.max),
            self.peak_bytes.map_or("?".into(), mib),
            self.oom_cgroup.as_deref().unwrap_or("?")
        )
    }
}
