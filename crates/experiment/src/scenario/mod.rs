//! Scenario files (`experiments/*.toml`): which traces run in which tier, under which parent
//! limit, at which speed, and which policies are compared. Adding a scenario is adding a file.
//!
//! ```toml
//! description = "OOM pressure: ..."
//! parent_max = "1100M"          # or "90%": that share of the variant's total peak demand
//! speed = 50
//! baseline_mb = 100
//! policies = ["none", "static-max", "static-high", "memqos"]
//! static_high = "400M"          # memory.high of low-tier cgroups under static-high
//! memqos_config = "memqos-experiment.toml"   # daemon config, relative to this file
//! solo = true                   # also run each distinct trace alone
//! [[variant]]
//! name = "dask+github3"
//! high = "dask__dask-11628"
//! low = ["sigmavirus24__github3.py-673", "sigmavirus24__github3.py-673"]
//! ```

mod parse;
mod timing;

use serde::Deserialize;
use std::fmt;
use std::path::{Path, PathBuf};

/// How the cgroups are set up for one arm of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// Children unlimited; only the parent's memory.max.
    None,
    /// Each child's memory.max = parent memory.max / number of children.
    StaticMax,
    /// The seed's static memory.high on the low tier, no daemon.
    StaticHigh,
    /// The memqos daemon manages the children (nothing set up front).
    Memqos,
    /// Diagnostic, not a memory policy: no memory knobs, the protected tier gets cpu.weight
    /// 10000 and the others 1. Shows how much of the protected task's slowdown is CPU (the
    /// replays fault in and zero every page they grow by) rather than memory.
    CpuWeight,
    /// The knobs a v1.37 kubelet writes with MemoryQoS, throttling factor 0.9 and tiered
    /// reservation: protected = Guaranteed, lows = Burstable (see kube.rs).
    KubeMemoryqos,
    /// Meta's oomd (the Debian package) with the scenario's ruleset: a userspace killer that
    /// kills from the low tier when the protected tier's memory pressure rises (see oomd.rs).
    Oomd,
    /// systemd's systemd-oomd (the Debian package) on a systemd host: the tiers are slices,
    /// the low slice has `ManagedOOMMemoryPressure=kill` (see systemd_oomd.rs). Its scenarios
    /// boot their guests with systemd as PID 1, every arm alike.
    SystemdOomd,
    /// Each task's `oom_score_adj` as memqos's config gives its tier, no daemon, no memory
    /// knob (see static_arms.rs).
    StaticAdj,
    /// The protected task's memory.min at its declared size (peak + 10%), the lows sharing the
    /// rest of the parent as memory.max (see static_arms.rs).
    StaticReserve,
}

impl Policy {
    /// The policies a scenario without a `policies` list runs (the diagnostic is opt-in).
    pub const ALL: [Policy; 4] = [Policy::None, Policy::StaticMax, Policy::StaticHigh, Policy::Memqos];

    pub fn name(self) -> &'static str {
        match self {
            Policy::None => "none",
            Policy::StaticMax => "static-max",
            Policy::StaticHigh => "static-high",
            Policy::Memqos => "memqos",
            Policy::CpuWeight => "cpu-weight",
            Policy::KubeMemoryqos => "kube-memoryqos",
            Policy::Oomd => "oomd",
            Policy::SystemdOomd => "systemd-oomd",
            Policy::StaticAdj => "static-adj",
            Policy::StaticReserve => "static-reserve",
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The parent's memory.max: fixed, a share of what the variant's tasks need at peak, or none
/// (`"max"`: the tasks share the whole guest, as in the RFC cover letter's demo).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, Deserialize)]
pub enum ParentMax {
    Bytes(u64),
    ShareOfDemand(f64),
    Unlimited,
}

/// What each task runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// `memqos-lab replay` of the task's agent trace.
    #[default]
    Replay,
    /// `stress-ng` with the scenario's `stress_args` (the task's trace name is only a label):
    /// the RFC cover letter's demo. Its throughput is stress-ng's bogo-ops/s.
    StressNg,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, Deserialize)]
pub struct Variant {
    pub name: String,
    pub high: String,
    pub low: Vec<String>,
}

impl Variant {
    /// (cgroup name, tier, trace) of each task: `high`, `low1`, `low2`, ...
    pub fn tasks(&self) -> Vec<(String, Tier, String)> {
        let mut v = vec![("high".to_string(), Tier::High, self.high.clone())];
        for (i, t) in self.low.iter().enumerate() {
            v.push((format!("low{}", i + 1), Tier::Low, t.clone()));
        }
        v
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    High,
    Low,
}

/// Serializable so the host can hand a parsed scenario to a guest (whose /tmp is its own).
#[derive(Clone, Debug, serde::Serialize, Deserialize)]
pub struct Scenario {
    /// File stem: `experiments/oom.toml` is scenario `oom`.
    pub name: String,
    pub file: PathBuf,
    pub description: String,
    pub parent_max: ParentMax,
    pub speed: f64,
    pub baseline_mb: u64,
    pub policies: Vec<Policy>,
    pub static_high: Option<u64>,
    /// Daemon config text; `cgroup_root` and `state_dir` are set by the runner.
    pub memqos_config: Option<String>,
    /// oomd ruleset (JSON) text for the oomd arm; its placeholders are filled by the runner.
    #[serde(default)]
    pub oomd_config: Option<String>,
    /// oomd's `--interval` (seconds; `oomd_interval_s`, default 1: what the Debian package's
    /// /etc/default/oomd passes to it, and the least oomd takes; its binary's
    /// default is 5).
    pub oomd_interval_s: u64,
    /// The systemd-oomd arm's settings (`[systemd_oomd]`).
    #[serde(default)]
    pub systemd_oomd: Option<crate::systemd_oomd::Settings>,
    /// Enable the cpu controller for the task cgroups in every arm (so arms differ only in
    /// what they set), for scenarios whose memqos config sets `cpu_weight`. Otherwise only the
    /// cpu-weight arm enables it.
    #[serde(default)]
    pub cpu_controller: bool,
    pub solo: bool,
    /// Guest RAM; default: the largest parent limit plus 1 GiB for the kernel and tools.
    pub guest_memory_mb: Option<u64>,
    #[serde(default)]
    pub workload: Workload,
    /// stress-ng's arguments for every task (`workload = "stress-ng"`).
    #[serde(default)]
    pub stress_args: Vec<String>,
    /// The low tier's own stress-ng arguments, if it runs something else than the high side
    /// (a neighbour that only takes CPU, to tell what sharing the guest costs apart from what
    /// sharing memory costs); empty: `stress_args`.
    #[serde(default)]
    pub stress_args_low: Vec<String>,
    /// A swap disk of this size in the guest (none by default), and zswap in front of it.
    #[serde(default)]
    pub swap_mb: Option<u64>,
    #[serde(default)]
    pub zswap: bool,
    /// How compressible the replayed pages are (`memqos-lab replay --compression-ratio`): page
    /// size over what zswap stores. Default 3, the middle of the 2–4:1 zram reports for
    /// runtime heaps; results from before this field replayed a stamp and zeros (~100:1).
    #[serde(default = "default_compression_ratio")]
    pub compression_ratio: f64,
    /// In the memqos arm, the protected task's cgroup declares its expected peak
    /// (`user.memqos.expected_peak`): its replayed peak plus 10%, the request the
    /// kube-memoryqos arm gives its Guaranteed pod. Off: memqos learns from the working set.
    #[serde(default)]
    pub memqos_declares_peak: bool,
    /// In the memqos arm, every task's cgroup names its workload (`user.memqos.workload` =
    /// its trace), and the daemon config (which must set `learn_peak` on a tier and
    /// `history_file` to the runner's [`crate::runner::HISTORY_FILE`]) learns the protected
    /// task's peak: run 1 learns, later runs of the same guest boot reserve what it learned.
    #[serde(default)]
    pub memqos_learns_peak: bool,
    /// In the memqos arm no cgroup names a workload, and the tier's recent peaks
    /// (`<state_dir>/tier-peaks.json`, which the config's `learn_peak` tier keeps) are carried
    /// from each memqos arm's daemon to the next, through [`crate::runner::TIER_PEAKS_KEPT`]:
    /// the guest's first memqos arm sees nothing, every later one the largest of the tier's
    /// last five lifetimes + 10%, whichever variant's protected task they were.
    #[serde(default)]
    pub memqos_learns_tier_peak: bool,
    pub variants: Vec<Variant>,
}

pub(crate) fn default_compression_ratio() -> f64 {
    memqos_replay::memory::PageFill::DEFAULT_RATIO
}

#[derive(Debug, thiserror::Error)]
#[error("{file}: {message}")]
pub struct ScenarioError {
    pub file: String,
    pub message: String,
}

impl Scenario {
    /// The guests of this scenario boot systemd as PID 1 (the systemd-oomd arm needs it).
    pub fn boots_systemd(&self) -> bool {
        self.policies.contains(&Policy::SystemdOomd)
    }

    /// stress-ng's arguments for a task of `tier`.
    pub fn stress_args_for(&self, tier: Tier) -> &[String] {
        match tier {
            Tier::Low if !self.stress_args_low.is_empty() => &self.stress_args_low,
            _ => &self.stress_args,
        }
    }

    pub fn load(file: &Path) -> Result<Scenario, ScenarioError> {
        let err = |message: String| ScenarioError { file: file.display().to_string(), message };
        let text = std::fs::read_to_string(file).map_err(|e| err(format!("cannot read: {e}")))?;
        let name = file
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".toml"))
            .ok_or_else(|| err("a scenario file must be named NAME.toml".into()))?
            .to_string();
        let config_text = |rel: &Path| {
            let path = file.parent().unwrap_or(Path::new(".")).join(rel);
            std::fs::read_to_string(&path).map_err(|e| err(format!("{}: {e}", path.display())))
        };
        Scenario::parse(&name, file, &text, &config_text)
    }
}

/// The memqos daemon config of an arm: the template with its placeholders filled in.
pub fn render_memqos_config(template: &str, cgroup_root: &str, state_dir: &str) -> String {
    template.replace("@CGROUP_ROOT@", cgroup_root).replace("@STATE_DIR@", state_dir)
}
