//! Enforcement of the tiers' `dirty.max` / `dirty.min` (policy `dirty::plan`): each tick,
//! read the host's dirty thresholds and every managed cgroup's memory.stat, plan, and turn
//! the plan into memory.high writes merged with the engine's own memory.high decisions (the
//! lower value wins). The writes go through the daemon's journal like every other knob, so
//! stop, crash and restart restore them.
//!
//! Reading memory.stat also flushes the memcg's statistics (`mem_cgroup_flush_stats()`),
//! which the kernel's per-memcg dirty limit reads only ratelimited (`mem_cgroup_wb_stats()`
//! uses `mem_cgroup_flush_stats_ratelimited()`, up to ~2-4 s stale): sampling every 100 ms
//! keeps a fast writer from overshooting its ceiling by seconds' worth of dirtying.

use memqos_cgroupfs::Cgroup;
use memqos_policy::dirty::{plan, DirtyObs, HostDirty};
use memqos_policy::{Action, Config, Decision, Limit, Observation, Reason};
use std::collections::{HashMap, HashSet};

/// Per-daemon state: the engine's last memory.high per capped cgroup, warnings given.
#[derive(Default)]
pub struct DirtyEnforcer {
    engine_high: HashMap<String, Limit>,
    warned: HashSet<String>,
    /// Warnings for the daemon's log (each once), drained by the loop.
    pub notes: Vec<String>,
}

/// A change smaller than this is not written (the target moves with non-file usage).
const HYSTERESIS: u64 = 1 << 20;

impl DirtyEnforcer {
    /// `None` when no tier has a `dirty` bound: the daemon then behaves exactly as before.
    pub fn new(cfg: &Config) -> Option<DirtyEnforcer> {
        cfg.tiers.iter().any(|(_, t)| t.dirty.is_set()).then(DirtyEnforcer::default)
    }

    /// Merges the dirty ceilings into the engine's decisions.
    pub fn adjust(
        &mut self,
        cfg: &Config,
        root: &Cgroup,
        obs: &Observation,
        mut decisions: Vec<Decision>,
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
            let Ok(stat) = root.child(&c.id).memory_stat() else {
                continue;
            };
            let get = |k: &str| stat.iter().find(|(n, _)| n == k).map(|(_, v)| *v).unwrap_or(0);
            observed.push(DirtyObs {
                id: c.id.clone(),
                tier: c.tier,
                usage_bytes: c.usage_bytes,
                file_bytes: get("file"),
                dirty_bytes: get("file_dirty") + get("file_writeback"),
                max: c.current.max,
            });
        }
        let p = plan(cfg, &host, &observed);
        for w in &p.warnings {
            let key = w.split(':').next().unwrap_or(w).to_string();
            self.warn(&key, w);
        }
        let capped: HashSet<&str> = p.caps.iter().map(|c| c.id.as_str()).collect();
        self.engine_high.retain(|id, _| capped.contains(id.as_str()));
        for cap in &p.caps {
            let Some(c) = obs.cgroups.iter().find(|c| c.id == cap.id) else {
                continue;
            };
            // The engine's wish for this cgroup: this tick's decision, else its last one,
            // else the original value.
            let engine_decision =
                decisions.iter().position(|d| d.cgroup == cap.id && matches!(d.action, Action::High(_)));
            let engine_reason = engine_decision.map(|i| {
                let d = decisions.remove(i);
                if let Action::High(l) = d.action {
                    self.engine_high.insert(cap.id.clone(), l);
                }
                d.reason
            });
            let engine = *self.engine_high.entry(cap.id.clone()).or_insert(c.original.high);
            let (target, reason) = match (cap.high, engine) {
                (Some(h), Limit::Bytes(e)) if e <= h => (Limit::Bytes(e), engine_reason.unwrap_or(Reason::Restore)),
                (Some(h), _) => (
                    Limit::Bytes(h),
                    Reason::DirtyCeiling {
                        cap_bytes: cap.cap_bytes,
                        dirty_bytes: observed.iter().find(|o| o.id == cap.id).map(|o| o.dirty_bytes).unwrap_or(0),
                        budget_bytes: p.budget_bytes,
                    },
                ),
                // memory.max already bounds it: leave memory.high to the engine.
                (None, e) => (e, engine_reason.unwrap_or(Reason::Restore)),
            };
            if differs(c.current.high, target) {
                decisions.push(Decision { cgroup: cap.id.clone(), action: Action::High(target), reason });
            }
        }
        decisions
    }

    fn warn(&mut self, key: &str, message: &str) {
        if self.warned.insert(key.to_string()) {
            self.notes.push(message.to_string());
        }
    }
}

fn differs(current: Limit, target: Limit) -> bool {
    match (current, target) {
        (Limit::Bytes(a), Limit::Bytes(b)) => a.abs_diff(b) >= HYSTERESIS.min(b / 32).max(4096),
        (a, b) => a != b,
    }
}

fn read_host() -> anyhow::Result<HostDirty> {
    let vmstat = std::fs::read_to_string("/proc/vmstat").map_err(|e| anyhow::anyhow!("reading /proc/vmstat: {e}"))?;
    let zoneinfo = std::fs::read_to_string("/proc/zoneinfo").unwrap_or_default();
    host_from(&vmstat, &zoneinfo)
}

/// The host's thresholds from /proc/vmstat, and its dirtyable memory as the kernel's
/// `global_dirtyable_memory()` computes it: free + file pages less `totalreserve_pages`
/// (per zone: the high watermark plus the largest lowmem reserve, from /proc/zoneinfo).
pub fn host_from(vmstat: &str, zoneinfo: &str) -> anyhow::Result<HostDirty> {
    let get = |k: &str| -> anyhow::Result<u64> {
        vmstat
            .lines()
            .find_map(|l| l.strip_prefix(k).and_then(|r| r.strip_prefix(' ')).and_then(|v| v.trim().parse().ok()))
            .ok_or_else(|| anyhow::anyhow!("/proc/vmstat has no {k}"))
    };
    let mut reserve = 0u64;
    for zone in zoneinfo.split("Node ").skip(1) {
        let high = zone
            .lines()
            .find_map(|l| l.trim().strip_prefix("high").and_then(|v| v.trim().parse::<u64>().ok()))
            .unwrap_or(0);
        let protection = zone
            .lines()
            .find_map(|l| l.trim().strip_prefix("protection:"))
            .map(|p| p.split(|c: char| !c.is_ascii_digit()).filter_map(|n| n.parse::<u64>().ok()).max().unwrap_or(0))
            .unwrap_or(0);
        reserve += high + protection;
    }
    let free_and_file = get("nr_free_pages")? + get("nr_inactive_file")? + get("nr_active_file")?;
    Ok(HostDirty {
        thresh_pages: get("nr_dirty_threshold")?,
        bg_thresh_pages: get("nr_dirty_background_threshold")?,
        dirtyable_pages: free_and_file.saturating_sub(reserve).max(1),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_thresholds_and_reserves() {
        let vmstat = "nr_free_pages 487637\nnr_free_pages_blocks 1\nnr_inactive_file 1190\nnr_active_file 10\nnr_dirty_threshold 8192\nnr_dirty_background_threshold 4096\n";
        let zoneinfo = "Node 0, zone      DMA\n  pages free     3840\n        min      13\n        low      16\n        high     19\n        protection: (0, 1910, 1910, 1910, 1910)\nNode 0, zone    DMA32\n  pages free     480000\n        high     900\n        protection: (0, 0, 0, 0, 0)\n";
        let h = host_from(vmstat, zoneinfo).unwrap();
        assert_eq!((h.thresh_pages, h.bg_thresh_pages), (8192, 4096));
        assert_eq!(h.dirtyable_pages, 487637 + 1200 - (19 + 1910) - 900);
        assert!(host_from("nr_free_pages 1\n", "").is_err());
    }

    #[test]
    fn hysteresis() {
        assert!(!differs(Limit::Bytes(100 << 20), Limit::Bytes((100 << 20) + 4096)));
        assert!(differs(Limit::Bytes(100 << 20), Limit::Bytes(102 << 20)));
        assert!(differs(Limit::Max, Limit::Bytes(100 << 20)));
    }
}
