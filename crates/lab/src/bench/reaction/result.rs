//! What the bench records per kernel in docs/bpf/reaction.json.

use memqos_daemon::events::BpfHooks;
use serde::Serialize;

/// One source on one kernel.
#[derive(Debug, Serialize, serde::Deserialize, Clone)]
pub struct SourceResult {
    pub source: String,
    /// Idle managed cgroups beside the pair.
    #[serde(default)]
    pub cgroups: usize,
    /// Median read + write system calls of the daemon from the probe's start to its write.
    #[serde(default)]
    pub syscalls_p50: Option<f64>,
    /// Same, per reacting run.
    #[serde(default)]
    pub syscalls: Vec<u64>,
    pub runs: usize,
    /// Delays (ms) of the runs that reacted, in run order.
    pub delays_ms: Vec<f64>,
    /// Runs with no write within the timeout.
    pub misses: usize,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub max_ms: Option<f64>,
    pub min_ms: Option<f64>,
    /// Median duration of the chunk that crossed (the instant's uncertainty), ms.
    pub chunk_p50_ms: Option<f64>,
    /// Median time the write syscall took (memory.high write reclaims synchronously), ms.
    pub write_p50_ms: Option<f64>,
    /// The engine's reason for the first write, per reacting run (deduplicated).
    pub reasons: Vec<String>,
    /// BPF source only, medians (ms): instant -> the kernel's threshold crossing (bpf
    /// ktime), crossing -> the daemon drained it from the ring, drained -> write started
    /// (sample the tree, tick the engine, journal).
    pub bpf_split_p50_ms: Option<[f64; 3]>,
    /// Same, per run.
    #[serde(default)]
    pub bpf_split_ms: Vec<[f64; 3]>,
    /// The daemon's own account of its reaction (its `reaction` event), medians in µs:
    /// reading the parent, the signalled cgroup and the candidates; deciding.
    #[serde(default)]
    pub fast_read_p50_us: Option<f64>,
    #[serde(default)]
    pub fast_decide_p50_us: Option<f64>,
    /// Cgroups the fast path read (parent included), median.
    #[serde(default)]
    pub fast_read_cgroups_p50: Option<f64>,
}

#[derive(Debug, Serialize, serde::Deserialize, Clone)]
pub struct KernelResult {
    pub kernel: String,
    pub sources: Vec<SourceResult>,
    /// BPF hooks the daemon attached (from its log).
    pub bpf_hooks: Option<BpfHooks>,
    /// Daemon CPU cost with 100 managed cgroups.
    #[serde(default)]
    pub cpu_cost: Vec<CpuCost>,
    /// Sizes whose CPU-cost windows failed, with the error.
    #[serde(default)]
    pub cpu_cost_errors: Vec<String>,
}

/// The daemon's CPU use over one window.
#[derive(Debug, Serialize, serde::Deserialize, Clone)]
pub struct CpuCost {
    pub bpf: bool,
    /// The daemon's periodic sampling interval (every tick reads ~8 files per cgroup).
    #[serde(default)]
    pub sampling_interval_ms: u64,
    pub load: String,
    pub cgroups: usize,
    pub window_s: f64,
    /// utime + stime of the daemon over the window, in percent of one core.
    pub cpu_pct: f64,
    /// Page faults per second in the whole guest over the window (/proc/vmstat pgfault).
    pub faults_per_s: f64,
    /// Daemon wakeups: events it logged over the window (writes, BPF crossings).
    pub logged_events: usize,
    /// From launch to the daemon's first status.json (its first full sample), seconds.
    #[serde(default)]
    pub startup_s: f64,
}

impl crate::bench::PerKernel for KernelResult {
    fn kernel(&self) -> &str {
        &self.kernel
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_committed_results_still_load() {
        // `keep_earlier_kernels` merges a new run into this file: its kernels must parse, BPF
        // hooks included (typed since they were free-form JSON).
        let text = include_str!("../../../../../docs/bpf/reaction.json");
        let doc: serde_json::Value = serde_json::from_str(text).unwrap();
        let kernels: Vec<KernelResult> = serde_json::from_value(doc["kernels"].clone()).unwrap();
        assert!(!kernels.is_empty());
        let hooks = kernels.iter().find_map(|k| k.bpf_hooks.as_ref()).expect("a kernel with BPF hooks");
        assert!(hooks.attached.iter().any(|h| h.starts_with("memcg_reclaim_begin")), "{hooks:?}");
    }
}
