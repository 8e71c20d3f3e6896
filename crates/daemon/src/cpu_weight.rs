//! cpu.weight of a tier's cgroups (the tier's `cpu_weight` field).
//!
//! A task that grows spends its allocation latency faulting in and zeroing pages: CPU time.
//! When tenants compete for CPU, a memory policy alone cannot keep the protected one fast
//! (the experiments' cpu-weight arm measures how much of its slowdown this is). The weight is
//! static per tier; like every knob it is journaled before the first write and restored.

use crate::journal::Journal;
use memqos_cgroupfs::Cgroup;
use memqos_policy::{Config, Observation};
use std::collections::HashSet;

pub const FILE: &str = "cpu.weight";

pub struct CpuWeights {
    /// Cgroups already reported as lacking cpu.weight: one message each, not one per tick.
    reported: HashSet<String>,
    pub notes: Vec<String>,
}

/// One write made by `sync`, for the daemon's event log.
pub struct WeightWrite {
    pub cgroup: String,
    pub previous: String,
    pub value: u32,
    pub outcome: String,
}

impl CpuWeights {
    /// None when no tier sets `cpu_weight`.
    pub fn new(cfg: &Config) -> Option<CpuWeights> {
        cfg.tiers
            .iter()
            .any(|(_, t)| t.cpu_weight.is_some())
            .then(|| CpuWeights { reported: HashSet::new(), notes: Vec::new() })
    }

    /// Brings each observed cgroup's cpu.weight to its tier's value. Read every tick (one
    /// small file per cgroup), so a cgroup recreated under the same name is caught too.
    pub fn sync(
        &mut self,
        cfg: &Config,
        root: &Cgroup,
        obs: &Observation,
        journal: &mut Journal,
    ) -> anyhow::Result<Vec<WeightWrite>> {
        let mut writes = Vec::new();
        for c in &obs.cgroups {
            let Some(weight) = cfg.tiers.get(c.tier).and_then(|t| t.cpu_weight) else { continue };
            let cg = root.child(&c.id);
            let previous = match cg.read_string(FILE) {
                Ok(v) => v.trim().to_owned(),
                Err(_) if !cg.exists() => continue, // vanished since the snapshot
                Err(e) => {
                    if self.reported.insert(c.id.clone()) {
                        self.notes.push(format!(
                            "cpu_weight not applied to {}: cannot read {FILE} ({e}); enable the cpu controller in its parent's cgroup.subtree_control",
                            cg.path().display()
                        ));
                    }
                    continue;
                }
            };
            if previous == weight.to_string() {
                continue;
            }
            journal.record(&c.id, FILE, &previous)?;
            let outcome = crate::write_knob(&cg, FILE, &weight.to_string());
            writes.push(WeightWrite { cgroup: c.id.clone(), previous, value: weight, outcome });
        }
        Ok(writes)
    }
}
