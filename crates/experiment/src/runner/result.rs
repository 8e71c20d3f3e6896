//! What an arm's run writes: its result file, one per arm and run.

use crate::scenario::{Tier, Workload};
use memqos_cgroupfs::{Cgroup, MemoryEvents};
use memqos_replay::report::LatencyStats;
use memqos_replay::Outcome;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One arm of one run: what it set up and what every task did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ArmResult {
    pub scenario: String,
    pub variant: String,
    pub kernel: String,
    /// 1-based run number.
    pub run: usize,
    /// `solo:<task>` or a policy name.
    pub arm: String,
    /// What the tasks ran (trace replays unless said otherwise).
    #[serde(default)]
    pub workload: Workload,
    /// Position of this arm within its run (the order rotates from run to run).
    pub order: usize,
    pub speed: f64,
    pub baseline_mb: u64,
    pub parent_max_bytes: u64,
    /// Unix time the tasks were started (the guest clock, as the daemon's event `ts`).
    pub started_epoch: f64,
    pub tasks: Vec<TaskResult>,
    /// memory.events oom_kill of the parent at the end.
    pub parent_oom_kills: u64,
    pub timeline: Timeline,
    /// Knob writes the daemon made (memqos arm), the knobs a static arm set (kube-memoryqos),
    /// or the kills oomd logged (oomd arm: file "kill").
    pub decisions: Vec<DecisionMark>,
    /// After the daemon stopped: did it exit cleanly with no unrestored journal, and were the
    /// knobs of any cgroup still present back to their defaults?
    pub knobs_restored: Option<bool>,
    /// memqos arm: CPU time the daemon used (user + system, s) from its start to just before
    /// it was stopped.
    #[serde(default)]
    pub daemon_cpu_s: Option<f64>,
    /// The guest's swap disk (MiB) and whether zswap was in front of it; `None`: swapless.
    #[serde(default)]
    pub swap_mb: Option<u64>,
    #[serde(default)]
    pub zswap: bool,
    /// The commit, config digests, speed, kernel and host load of the series (runs made
    /// before it was recorded have none; docs/experiments/builds.toml says their build).
    #[serde(default)]
    pub provenance: Option<crate::provenance::Provenance>,
    /// How often the arm looked and how long it waited before acting, as run
    /// ([`Scenario::timing`]). `None` in results from before it was recorded.
    #[serde(default)]
    pub timing: Option<String>,
    /// A learned-peak scenario's first run in its guest: the memqos arm starts with an empty
    /// history and learns, so the run is first sight, not history; the summary keeps it apart
    /// (its variant is named "<variant> (learning run)").
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub learning_run: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskResult {
    pub name: String,
    pub tier: Tier,
    pub trace: String,
    pub outcome: Outcome,
    /// Spawn to exit of `memqos-lab replay` (includes the baseline allocation).
    pub wall_s: f64,
    /// The replay's own clock, t=0 to the last step (finished runs only).
    pub completion_s: Option<f64>,
    pub schedule_s: Option<f64>,
    /// Latency of every growth step, in order.
    pub latencies_ms: Vec<f64>,
    pub latency: Option<LatencyStats>,
    pub peak_rss_bytes: Option<u64>,
    /// memory.events of the task's cgroup at the end (the cgroup is fresh, so totals = this arm).
    pub events: MemoryEvents,
    /// stress-ng tasks: total bogo ops and bogo ops per second of wall time, from its YAML.
    #[serde(default)]
    pub bogo_ops: Option<f64>,
    #[serde(default)]
    pub bogo_ops_per_s: Option<f64>,
    /// What the task's cgroup swapped, read when it ended (absent in results from before it
    /// was recorded).
    #[serde(default)]
    pub swap: Option<SwapFigures>,
    /// stress-ng tasks: the most transparent-huge-page anon memory (memory.stat `anon_thp`)
    /// its cgroup held in samples every 5 s while it ran: whether a run got huge pages, one
    /// candidate for why the same stressor's solo speed varies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anon_thp_peak_bytes: Option<u64>,
}

/// A cgroup's swap at its end: memory.swap.peak (pages in swap, zswap's included, at the
/// most), and pages swapped out to a disk (memory.stat `pswpout`, Linux 6.15+) and into
/// zswap (`zswpout`). Each `None` where the kernel has no such file or key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct SwapFigures {
    pub peak_bytes: Option<u64>,
    pub pswpout: Option<u64>,
    pub zswpout: Option<u64>,
}

impl SwapFigures {
    pub fn read(cg: &Cgroup) -> SwapFigures {
        let stat = cg.memory_stat().unwrap_or_default();
        let peak = cg.read_string("memory.swap.peak").ok().and_then(|t| t.trim().parse().ok());
        SwapFigures { peak_bytes: peak, pswpout: stat_value(&stat, "pswpout"), zswpout: stat_value(&stat, "zswpout") }
    }

    /// Pages swapped out to disk and to zswap, in bytes (4 KiB pages); `None` if neither is
    /// counted.
    pub fn swapped_out_bytes(&self) -> Option<u64> {
        match (self.pswpout, self.zswpout) {
            (None, None) => None,
            (a, b) => Some((a.unwrap_or(0) + b.unwrap_or(0)) * 4096),
        }
    }
}

/// One key of a memory.stat read (`Cgroup::memory_stat`); `None` where the kernel has no such key.
pub(crate) fn stat_value(stat: &[(String, u64)], key: &str) -> Option<u64> {
    stat.iter().find(|(name, _)| name == key).map(|(_, v)| *v)
}

/// Memory over time, sampled every 50 ms from the start of the tasks.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Timeline {
    pub t_s: Vec<f64>,
    pub parent_current: Vec<u64>,
    /// memory.current per task cgroup; a series ends when its task ends (the cgroup is removed
    /// then), so it may be shorter than `t_s`.
    pub current: BTreeMap<String, Vec<u64>>,
    /// memory.high per task cgroup; `None` = max.
    pub high: BTreeMap<String, Vec<Option<u64>>>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DecisionMark {
    /// Seconds since the tasks were started.
    pub t_s: f64,
    pub cgroup: String,
    pub file: String,
    pub value: String,
    pub reason: String,
}
