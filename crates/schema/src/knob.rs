//! The files memqos writes (or journals), by name ([`KnobFile`]; logs and the journal carry
//! the kernel's file name, so that is also its serde encoding), the subset the policy engine
//! decides ([`Knob`]), and one cgroup's values of them ([`Knobs`]).

use memqos_cgroupfs::Limit;
use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum KnobFile {
    #[serde(rename = "memory.high")]
    MemoryHigh,
    #[serde(rename = "memory.low")]
    MemoryLow,
    #[serde(rename = "memory.min")]
    MemoryMin,
    /// Written only to put back an original (a journal from a version that wrote it).
    #[serde(rename = "memory.max")]
    MemoryMax,
    #[serde(rename = "cgroup.freeze")]
    CgroupFreeze,
    #[serde(rename = "cgroup.kill")]
    CgroupKill,
    #[serde(rename = "cpu.weight")]
    CpuWeight,
    /// A tier's `swap_max`.
    #[serde(rename = "memory.swap.max")]
    SwapMax,
    /// A process's `/proc/<pid>/oom_score_adj`, not a cgroup file.
    #[serde(rename = "oom_score_adj")]
    OomScoreAdj,
}

impl KnobFile {
    pub const ALL: [KnobFile; 9] = [
        KnobFile::MemoryHigh,
        KnobFile::MemoryLow,
        KnobFile::MemoryMin,
        KnobFile::MemoryMax,
        KnobFile::CgroupFreeze,
        KnobFile::CgroupKill,
        KnobFile::CpuWeight,
        KnobFile::SwapMax,
        KnobFile::OomScoreAdj,
    ];

    /// The file's name, as the kernel spells it.
    pub fn name(self) -> &'static str {
        match self {
            KnobFile::MemoryHigh => "memory.high",
            KnobFile::MemoryLow => "memory.low",
            KnobFile::MemoryMin => "memory.min",
            KnobFile::MemoryMax => "memory.max",
            KnobFile::CgroupFreeze => "cgroup.freeze",
            KnobFile::CgroupKill => "cgroup.kill",
            KnobFile::CpuWeight => "cpu.weight",
            KnobFile::SwapMax => "memory.swap.max",
            KnobFile::OomScoreAdj => "oom_score_adj",
        }
    }

    /// The knob a file name names; None for any other file.
    pub fn from_name(name: &str) -> Option<KnobFile> {
        KnobFile::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl From<Knob> for KnobFile {
    fn from(k: Knob) -> KnobFile {
        match k {
            Knob::High => KnobFile::MemoryHigh,
            Knob::Low => KnobFile::MemoryLow,
            Knob::Min => KnobFile::MemoryMin,
            Knob::Freeze => KnobFile::CgroupFreeze,
            Knob::Kill => KnobFile::CgroupKill,
        }
    }
}

impl fmt::Display for KnobFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The knobs memqos writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Knob {
    /// memory.high
    High,
    /// memory.low
    Low,
    /// memory.min
    Min,
    /// cgroup.freeze
    Freeze,
    /// cgroup.kill
    Kill,
}

impl Knob {
    /// The cgroup file name.
    pub fn file(self) -> &'static str {
        KnobFile::from(self).name()
    }
}

/// The knobs memqos reads or writes in one cgroup.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Knobs {
    /// memory.high (written by memqos on throttle tiers).
    pub high: Limit,
    /// memory.max (read only: bounds protection; pressure at one's own max is not ours to fix).
    pub max: Limit,
    /// memory.low (written by memqos on `protect = "low"` tiers).
    pub low: Limit,
    /// memory.min (written by memqos on `protect = "min"` tiers).
    pub min: Limit,
    /// cgroup.freeze (written by memqos only on `freeze = true` tiers).
    pub frozen: bool,
}

impl Knobs {
    /// True when these (original) values show that someone other than memqos set `knob`:
    /// memory.high below max, or a nonzero memory.low/min (one protection: either being set
    /// makes both foreign, since memqos writing the other would change the effective floor).
    pub fn is_foreign(&self, knob: Knob) -> bool {
        let protection = self.low != Limit::Bytes(0) || self.min != Limit::Bytes(0);
        match knob {
            Knob::High => self.high != Limit::Max,
            Knob::Low | Knob::Min => protection,
            Knob::Freeze | Knob::Kill => false,
        }
    }
}

impl Default for Knobs {
    /// The kernel's defaults for a new cgroup.
    fn default() -> Self {
        Knobs { high: Limit::Max, max: Limit::Max, low: Limit::Bytes(0), min: Limit::Bytes(0), frozen: false }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serializes_as_the_file_name_and_parses_it_back() {
        for k in KnobFile::ALL {
            assert_eq!(serde_json::to_string(&k).unwrap(), format!("\"{}\"", k.name()));
            assert_eq!(serde_json::from_str::<KnobFile>(&format!("\"{}\"", k.name())).unwrap(), k);
            assert_eq!(KnobFile::from_name(k.name()), Some(k));
        }
        assert_eq!(KnobFile::from_name("memory.current"), None);
    }

    #[test]
    fn the_engines_knobs_name_the_same_files() {
        for k in [Knob::High, Knob::Low, Knob::Min, Knob::Freeze, Knob::Kill] {
            assert_eq!(KnobFile::from(k).name(), k.file());
        }
    }
}
