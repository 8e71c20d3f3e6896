//! What the campaign records: one `KernelResult` per kernel in docs/reliability.json.

use serde::{Deserialize, Serialize};

/// Distribution of a duration, ms.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    pub n: usize,
    pub p50_ms: Option<f64>,
    pub max_ms: Option<f64>,
}

impl Spread {
    pub fn of(mut v: Vec<f64>) -> Spread {
        v.sort_by(f64::total_cmp);
        Spread { n: v.len(), p50_ms: memqos_replay::report::percentile(&v, 50.0), max_ms: v.last().copied() }
    }
}

/// What one check of the low cgroups found after a restore.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Check {
    /// Live cgroups whose knobs were compared with what they held before the daemon.
    pub checked: usize,
    /// Still at a value memqos wrote (its original was not put back).
    pub lost: usize,
    /// Holding another cgroup's original: restored into the wrong cgroup.
    pub wrong: usize,
    /// Lost, but the daemon had read the cgroup before its tenant's own write (it journaled
    /// the value from mkdir): the tenant's write raced the adoption, not the kill. Counted in
    /// `lost` too.
    pub raced: usize,
    /// Up to 20 lost or wrong knobs, named.
    pub examples: Vec<String>,
}

impl Check {
    pub fn add(&mut self, o: &Check) {
        self.checked += o.checked;
        self.lost += o.lost;
        self.wrong += o.wrong;
        self.raced += o.raced;
        for e in &o.examples {
            if self.examples.len() < 20 {
                self.examples.push(e.clone());
            }
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SigkillResult {
    pub seed: u64,
    pub kills_asked: usize,
    /// SIGKILLs delivered to a running daemon.
    pub kills: usize,
    /// Of those, before the daemon's first status.json (during its start-up).
    pub killed_in_startup: usize,
    /// Seconds from launch to the kill, in order.
    pub kill_after_s: Vec<f64>,
    /// Daemon exits the campaign did not cause (exit status, at which life).
    pub unexpected_exits: Vec<String>,
    /// Low cgroups holding a memqos cap at the instants of the kills, summed.
    pub capped_at_kill: usize,
    /// Kills after which at least one low cgroup held a cap (the restore had work to do).
    pub kills_with_caps: usize,
    /// The checks after every kill (and after the final orderly stop), summed.
    pub check: Check,
    /// Kill to the guardian's restore done (state lock free, journal gone or empty).
    pub restore: Spread,
    /// Kills after which the guardian had not restored within 30 s.
    pub restore_timeouts: usize,
    /// From a kill to the next daemon's first cap: protection was off meanwhile.
    pub unprotected: Spread,
    /// The churn: cgroups made, and per second.
    pub churn_made: usize,
    pub churn_rate: f64,
    pub churn_errors: Vec<String>,
    pub duration_s: f64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HostileResult {
    /// What the tenant made, one line each (names escaped), and what the kernel refused.
    pub made: Vec<String>,
    /// The deepest path made: its depth and its length in bytes (PATH_MAX is 4096).
    pub deep_levels: usize,
    pub deep_path_bytes: usize,
    /// The daemon exited on its own.
    pub unexpected_exits: Vec<String>,
    /// The trickling control client: how long the daemon let it go on, ms (None: never cut).
    pub trickle_cut_after_ms: Option<f64>,
    /// A `memqos explain` asked while the trickler was connected: answered, and how soon.
    pub explain_ok: bool,
    pub explain_ms: Option<f64>,
    /// From a normal low cgroup's mkdir (after all of the above) to its cap, ms.
    pub normal_capped_ms: Option<f64>,
    /// From the first low cgroup's mkdir, made while the daemon was calm (before the
    /// tenant's tree), to its cap, ms.
    #[serde(default)]
    pub calm_low_capped_ms: Option<f64>,
    /// From the root-owned declaring cgroup's mkdir (xattr set, process started at once) to
    /// the daemon's first write on it, ms: how soon a new declaration is acted on.
    #[serde(default)]
    pub declared_seen_ms: Option<f64>,
    /// Degraded lines the daemon wrote (escaped as it wrote them).
    pub degraded: Vec<String>,
    /// After SIGTERM: the knobs checked against their originals.
    pub check: Check,
    pub stop_status: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Phase {
    /// "full" or "read-only".
    pub fault: String,
    /// How the fault was made (e.g. "tmpfs filled to ENOSPC", "remount ro").
    pub method: String,
    pub held_s: f64,
    /// Writes the daemon refused because their original could not be journaled.
    pub refused: usize,
    /// Knobs memqos held at some sample during the phase with no journaled original.
    pub unjournaled: usize,
    pub samples: usize,
    /// From the fault's end to the first newly journaled knob (a first cap on a cgroup), ms.
    pub recovery_ms: Option<f64>,
    pub unexpected_exits: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StateDirResult {
    pub tmpfs_size: String,
    pub phases: Vec<Phase>,
    /// After a SIGKILL at the end and the guardian's restore.
    pub check: Check,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DescriptorsResult {
    pub cgroups: usize,
    /// "Max open files" of the running daemon (/proc/PID/limits), soft and hard.
    pub nofile_soft: Option<u64>,
    pub nofile_hard: Option<u64>,
    pub make_s: f64,
    /// Launch to the first status.json.
    pub startup_s: Option<f64>,
    /// Launch to the first cap of a low cgroup, and how many were capped.
    pub first_cap_s: Option<f64>,
    pub capped: usize,
    /// The most descriptors the daemon held at a sample.
    pub peak_fds: usize,
    pub asked_s: f64,
    pub ran_s: f64,
    pub exit_status: String,
    pub status_json_seen: bool,
    pub emfile_lines: usize,
    pub unexpected_exits: Vec<String>,
    pub check: Check,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KernelResult {
    pub kernel: String,
    #[serde(default)]
    pub sigkill: Option<SigkillResult>,
    #[serde(default)]
    pub hostile: Option<HostileResult>,
    #[serde(default)]
    pub state_dir: Option<StateDirResult>,
    #[serde(default)]
    pub descriptors: Option<DescriptorsResult>,
    /// Scenarios that stopped before their end, with why.
    #[serde(default)]
    pub errors: Vec<String>,
    /// The build, host load and guest time of the invocation that measured this kernel
    /// (filled in on the host).
    #[serde(default)]
    pub provenance: Option<crate::provenance::Provenance>,
}

impl crate::bench::PerKernel for KernelResult {
    fn kernel(&self) -> &str {
        &self.kernel
    }
}

/// docs/reliability.json.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Doc {
    pub benchmark: String,
    pub host_note: String,
    pub kernels: Vec<KernelResult>,
    pub provenance: Option<crate::provenance::Provenance>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_takes_the_median_and_max() {
        assert_eq!(Spread::of(vec![3.0, 1.0, 2.0]).max_ms, Some(3.0));
        assert_eq!(Spread::of(vec![]), Spread { n: 0, p50_ms: None, max_ms: None });
    }
}
