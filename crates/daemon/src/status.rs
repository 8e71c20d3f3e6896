//! `<state_dir>/status.json`: what the daemon manages, written atomically each tick and read
//! by `memqos status`.

use crate::observe::Seen;
use anyhow::Result;
use memqos_policy::{Config, Decision, Engine, Observation};
use serde::{Deserialize, Serialize};
use std::path::Path;

pub const STATUS_FILE: &str = "status.json";

#[derive(Debug, Serialize, Deserialize)]
pub struct Snapshot {
    pub pid: u32,
    pub config: String,
    pub cgroup_root: String,
    pub parent_usage_bytes: u64,
    pub parent_max: String,
    pub cgroups: Vec<serde_json::Value>,
    pub throttled: Vec<String>,
    pub frozen: Vec<String>,
    pub last_pressure_ms: Option<u64>,
    pub now_ms: u64,
    pub recent_decisions: Vec<serde_json::Value>,
    /// Processes whose oom_score_adj memqos changed (tiers with `oom_score_adj`).
    #[serde(default)]
    pub oom_score_adj_processes: usize,
}

impl Snapshot {
    pub(crate) fn new(
        cfg: &Config,
        config_path: &Path,
        obs: &Observation,
        seen: &[Seen],
        engine: &Engine,
        recent: &std::collections::VecDeque<Decision>,
        oom_score_adj_processes: usize,
    ) -> Snapshot {
        let st = engine.status();
        Snapshot {
            pid: std::process::id(),
            config: config_path.display().to_string(),
            cgroup_root: cfg.cgroup_root.display().to_string(),
            parent_usage_bytes: obs.parent.usage_bytes,
            parent_max: obs.parent.max.to_string(),
            cgroups: seen.iter().map(|s| serde_json::to_value(s).unwrap_or_default()).collect(),
            throttled: st.throttled,
            frozen: st.frozen,
            last_pressure_ms: st.last_pressure_ms,
            now_ms: obs.now_ms,
            recent_decisions: recent
                .iter()
                .map(|d| serde_json::json!({"cgroup": d.cgroup, "file": d.action.file(), "value": d.action.value(), "why": d.reason.to_string()}))
                .collect(),
            oom_score_adj_processes,
        }
    }
}

pub(crate) fn write(state_dir: &Path, snap: &Snapshot) -> Result<()> {
    let tmp = state_dir.join("status.json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(snap)?)?;
    std::fs::rename(tmp, state_dir.join(STATUS_FILE))?;
    Ok(())
}

pub(crate) fn remove(state_dir: &Path) {
    let _ = std::fs::remove_file(state_dir.join(STATUS_FILE));
}

pub fn read(state_dir: &Path) -> Result<Option<Snapshot>> {
    match std::fs::read(state_dir.join(STATUS_FILE)) {
        Ok(b) => Ok(Some(serde_json::from_slice(&b)?)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}
