//! Enforcement of the tiers' `dirty.max` / `dirty.min`: each tick, read the host's dirty
//! thresholds and every managed cgroup's memory.stat; the policy (`dirty::Ceilings`) decides
//! the memory.high that caps each writer, merged with the engine's own decisions (the lower
//! value wins). The writes go through the daemon's journal like every other knob, so stop,
//! crash and restart restore them.
//!
//! Reading memory.stat also flushes the memcg's statistics (`mem_cgroup_flush_stats()`),
//! which the kernel's per-memcg dirty limit reads only ratelimited (`mem_cgroup_wb_stats()`
//! uses `mem_cgroup_flush_stats_ratelimited()`, up to ~2-4 s stale): sampling every 100 ms
//! keeps a fast writer from overshooting its ceiling by seconds' worth of dirtying.

use memqos_cgroupfs::Cgroup;
use memqos_policy::dirty::{host_from, Ceilings, DirtyObs, HostDirty};
use memqos_policy::{Config, Decision, Observation};
use std::collections::HashSet;

/// Per-daemon state: the policy's ceilings, warnings given.
#[derive(Default)]
pub struct DirtyEnforcer {
    ceilings: Ceilings,
    warned: HashSet<String>,
    /// Warnings for the daemon's log (each once), drained by the loop.
    pub notes: Vec<String>,
}

impl DirtyEnforcer {
    /// `None` when no tier has a `dirty` bound: the daemon then behaves exactly as before.
    pub fn new(cfg: &Config) -> Option<DirtyEnforcer> {
        cfg.tiers.iter().any(|(_, t)| t.dirty.is_set()).then(DirtyEnforcer::default)
    }

    /// Reads what the dirty ceilings need and has the policy merge them into the engine's
    /// decisions.
    pub fn adjust(
        &mut self,
        cfg: &Config,
        root: &Cgroup,
        obs: &Observation,
        decisions: Vec<Decision>,
    ) -> Vec<Decision> {
        let host = match read_host() {
            Ok(h) => h,
            Err(e) => {
                self.warn("host", &format!("dirty bounds not enforced: {e}"));
                return decisions;
            }
        };
        let mut observed = Vec::new();
        for c in &obs.cgroups {
            if cfg.tiers.get(c.tier).is_none() {
                continue;
            }
            // Vanished or unreadable: left out this tick (the sampler reports real errors).
            let Ok(stat) = root.child(&c.path).memory_stat() else {
                continue;
            };
            let get = |k: &str| stat.iter().find(|(n, _)| n == k).map(|(_, v)| *v).unwrap_or(0);
            observed.push(DirtyObs {
                path: c.path.clone(),
                tier: c.tier,
                usage_bytes: c.usage_bytes,
                file_bytes: get("file"),
                dirty_bytes: get("file_dirty") + get("file_writeback"),
                max: c.current.max,
            });
        }
        let (decisions, warnings) = self.ceilings.decide(cfg, &host, &observed, obs, decisions);
        for w in &warnings {
            let key = w.split(':').next().unwrap_or(w).to_string();
            self.warn(&key, w);
        }
        decisions
    }

    fn warn(&mut self, key: &str, message: &str) {
        if self.warned.insert(key.to_string()) {
            self.notes.push(message.to_string());
        }
    }
}

fn read_host() -> Result<HostDirty, String> {
    let vmstat = std::fs::read_to_string("/proc/vmstat").map_err(|e| format!("reading /proc/vmstat: {e}"))?;
    let zoneinfo = std::fs::read_to_string("/proc/zoneinfo").unwrap_or_default();
    host_from(&vmstat, &zoneinfo)
}
