//! cpu.weight of a tier's cgroups (the tier's `cpu_weight` field).
//!
//! A task that grows spends its allocation latency faulting in and zeroing pages: CPU time.
//! When tenants compete for CPU, a memory policy alone cannot keep the protected one fast
//! (the experiments' cpu-weight arm measures how much of its slowdown this is). The weight is
//! static per tier; like every knob it is journaled before the first write and restored.

use crate::actuator::{Actuator, Request, Target};
use crate::beneath::FileError;
use memqos_policy::knobs::{cpu_weight, StaticDecision, TierStatic};
use memqos_policy::{Config, Observation};
use memqos_schema::KnobFile;
use std::collections::HashSet;

pub const FILE: &str = KnobFile::CpuWeight.name();

pub struct CpuWeights {
    /// Cgroups already reported as lacking cpu.weight: one message each, not one per tick.
    reported: HashSet<u64>,
    pub notes: Vec<String>,
}

impl CpuWeights {
    /// None when no tier sets `cpu_weight`.
    pub fn new(cfg: &Config) -> Option<CpuWeights> {
        cfg.tiers
            .iter()
            .any(|(_, t)| t.cpu_weight.is_some())
            .then(|| CpuWeights { reported: HashSet::new(), notes: Vec::new() })
    }

    /// The writes that bring each observed cgroup's cpu.weight to its tier's value. Read on
    /// the periodic path through the actuator's cached directory fd (one small file each).
    pub fn plan(&mut self, cfg: &Config, obs: &Observation, act: &mut Actuator) -> Vec<Request> {
        let mut writes = Vec::new();
        for c in &obs.cgroups {
            let Some(tier) = cfg.tiers.get(c.tier).filter(|t| TierStatic::CpuWeight.target(t).is_some()) else {
                continue;
            };
            let current = match act.read(&c.path, c.id.get(), FILE) {
                Ok(v) => v,
                Err(FileError::Vanished) if self.reported.contains(&c.id.get()) => continue,
                // Removed since it was sampled (short-lived tool-call cgroups are): nothing to
                // report. Only a cgroup whose cgroup.controllers lacks cpu lacks the controller.
                Err(FileError::Vanished) if !lacks_cpu_controller(cfg, &c.path) => continue,
                Err(e) => {
                    let why = match e {
                        FileError::Vanished => "no such file".to_string(),
                        FileError::Io(e) => e.to_string(),
                    };
                    if self.reported.insert(c.id.get()) {
                        self.notes.push(format!(
                            "cpu_weight not applied to {}: cannot read {FILE} ({why}); enable the cpu controller in its parent's cgroup.subtree_control",
                            memqos_cgroupfs::name::fs_path(&cfg.cgroup_root, &c.path).display()
                        ));
                    }
                    continue;
                }
            };
            if let Some(StaticDecision::Write { value, reason }) = cpu_weight(tier, &current) {
                let target = Target::Cgroup { path: c.path.clone(), id: c.id.get() };
                writes.push(Request::new(target, FILE, value, reason));
            }
        }
        writes
    }
}

/// The cgroup at `rel` is there and the cpu controller is not enabled for it. A cgroup being
/// removed loses its files before its directory, so a missing cpu.weight alone says nothing.
fn lacks_cpu_controller(cfg: &Config, rel: &str) -> bool {
    std::fs::read_to_string(memqos_cgroupfs::name::fs_path(&cfg.cgroup_root, rel).join("cgroup.controllers"))
        .is_ok_and(|text| !memqos_cgroupfs::parse::parse_controllers(&text).contains(&"cpu"))
}
