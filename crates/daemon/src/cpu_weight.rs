//! cpu.weight of a tier's cgroups (the tier's `cpu_weight` field).
//!
//! A task that grows spends its allocation latency faulting in and zeroing pages: CPU time.
//! When tenants compete for CPU, a memory policy alone cannot keep the protected one fast
//! (the experiments' cpu-weight arm measures how much of its slowdown this is). The weight is
//! static per tier; like every knob it is journaled before the first write and restored.

use crate::actuator::Actuator;
use crate::tier_static::{Missing, StaticKnob, TierStatics};
use memqos_policy::knobs::TierStatic;
use memqos_policy::{CgroupObs, Config};
use memqos_schema::KnobFile;

pub const FILE: &str = KnobFile::CpuWeight.name();

/// cpu.weight on every cgroup of a tier that sets `cpu_weight`.
pub type CpuWeights = TierStatics<CpuWeight>;

#[derive(Default)]
pub struct CpuWeight;

impl StaticKnob for CpuWeight {
    const KNOB: TierStatic = TierStatic::CpuWeight;

    fn missing(&mut self, cfg: &Config, c: &CgroupObs, reported: bool, _: &mut Actuator) -> Missing {
        // Removed since it was sampled (short-lived tool-call cgroups are): nothing to
        // report. Only a cgroup whose cgroup.controllers lacks cpu lacks the controller.
        if reported || !lacks_cpu_controller(cfg, &c.path) {
            return Missing::Gone;
        }
        Missing::Unreadable
    }

    fn unreadable(path: &std::path::Path, why: &str) -> String {
        format!(
            "cpu_weight not applied to {}: cannot read {FILE} ({why}); enable the cpu controller in its parent's cgroup.subtree_control",
            path.display()
        )
    }
}

/// The cgroup at `rel` is there and the cpu controller is not enabled for it. A cgroup being
/// removed loses its files before its directory, so a missing cpu.weight alone says nothing.
fn lacks_cpu_controller(cfg: &Config, rel: &str) -> bool {
    std::fs::read_to_string(memqos_cgroupfs::name::fs_path(&cfg.cgroup_root, rel).join("cgroup.controllers"))
        .is_ok_and(|text| !memqos_cgroupfs::parse::parse_controllers(&text).contains(&"cpu"))
}
