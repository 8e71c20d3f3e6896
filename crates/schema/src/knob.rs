//! The files memqos writes (or journals), by name ([`KnobFile`]; logs and the journal carry
//! the kernel's file name, so that is also its serde encoding), the subset the policy engine
//! decides ([`Knob`]), and one cgroup's values of them ([`Knobs`]).
//!
//! [`KnobFile`] is the one list of knobs: its methods say where each lives ([`Scope`]),
//! whether its original is journaled and put back ([`KnobFile::journaled`]), whether memqos
//! notices someone else changing it ([`KnobFile::watched`]) and the restore order; restore,
//! reload, explain and the actuator ask it instead of keeping lists of their own.

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
    pub const fn name(self) -> &'static str {
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

    /// Where the file is: in a cgroup's directory, or in a process's /proc directory.
    pub fn scope(self) -> Scope {
        match self {
            KnobFile::OomScoreAdj => Scope::Process,
            _ => Scope::Cgroup,
        }
    }

    /// memqos journals the original before its first write and puts it back (stop, crash
    /// restore, reload, a cgroup leaving its tier). cgroup.kill cannot be undone, so it is not;
    /// a journal naming it (or any file not here) is refused at restore.
    pub fn journaled(self) -> bool {
        self != KnobFile::CgroupKill
    }

    /// A value someone else writes after memqos did is noticed (`Actuator::taken_over`):
    /// memqos forgets its journaled original (never writing it back) and respects the value.
    /// Every knob memqos writes as its own: all that are journaled but memory.max, which is
    /// only ever written to put an original back. Looked at where memqos reads each: the
    /// engine's knobs in every sample (`note_takeovers`, through [`Knobs::text`]), cpu.weight
    /// and memory.swap.max where their tier's loop reads them, oom_score_adj where the
    /// process loop does, and all of them once more before a restore.
    pub fn watched(self) -> bool {
        self.journaled() && self != KnobFile::MemoryMax
    }

    /// Whether the file showing `found` still holds the value memqos `wrote`: byte limits are
    /// compared in pages, as the kernel stores them; anything else as trimmed text.
    pub fn shows(self, wrote: &str, found: &str) -> bool {
        let (wrote, found) = (wrote.trim(), found.trim());
        let pages = |v: &str| v.parse::<Limit>().ok().map(|l| l.bytes().map(|b| b / 4096));
        match self {
            KnobFile::MemoryHigh
            | KnobFile::MemoryLow
            | KnobFile::MemoryMin
            | KnobFile::MemoryMax
            | KnobFile::SwapMax => match (pages(wrote), pages(found)) {
                (Some(w), Some(f)) => w == f,
                _ => wrote == found,
            },
            _ => wrote == found,
        }
    }

    /// Put back before the others: a thaw first, so nothing stays frozen while its limits
    /// are restored.
    pub fn restored_first(self) -> bool {
        self == KnobFile::CgroupFreeze
    }

    /// The restore order of a journaled file by name (thaws first), as a sort key.
    pub fn restore_rank(file: &str) -> bool {
        !KnobFile::from_name(file).is_some_and(KnobFile::restored_first)
    }
}

/// Where a knob file lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// A cgroup's directory.
    Cgroup,
    /// `/proc/<pid>/` of one process.
    Process,
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
    /// cgroup.freeze (written by memqos only on tiers that consent: `freeze`, `queue_held`,
    /// `freeze_thrashing`).
    pub frozen: bool,
}

impl Knobs {
    /// Takes the value `value` written to `file` into these knobs; false for a file memqos
    /// does not decide here (memory.max is only read) or a value that does not parse.
    pub fn set(&mut self, file: KnobFile, value: &str) -> bool {
        let limit = || value.trim().parse::<Limit>().ok();
        match file {
            KnobFile::MemoryHigh => limit().map(|l| self.high = l).is_some(),
            KnobFile::MemoryLow => limit().map(|l| self.low = l).is_some(),
            KnobFile::MemoryMin => limit().map(|l| self.min = l).is_some(),
            KnobFile::CgroupFreeze => {
                self.frozen = value.trim() == "1";
                true
            }
            _ => false,
        }
    }

    /// The value of a limit-valued `file` in these knobs (the reader `set` pairs with); None
    /// for a file these knobs do not hold as a limit.
    pub fn limit(&self, file: KnobFile) -> Option<Limit> {
        match file {
            KnobFile::MemoryHigh => Some(self.high),
            KnobFile::MemoryLow => Some(self.low),
            KnobFile::MemoryMin => Some(self.min),
            KnobFile::MemoryMax => Some(self.max),
            _ => None,
        }
    }

    /// The value of `file` in these knobs as the file shows it (what `set` takes); None for
    /// a file these knobs do not hold.
    pub fn text(&self, file: KnobFile) -> Option<String> {
        match file {
            KnobFile::CgroupFreeze => Some(if self.frozen { "1" } else { "0" }.to_owned()),
            f => self.limit(f).map(|l| l.to_string()),
        }
    }

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
    fn every_watched_knob_reads_back_what_was_set() {
        // `note_takeovers` reads a watched engine knob with `text` and sets its original with
        // `set`; the daemon reads the others itself (cpu.weight, memory.swap.max in their
        // tier loop, oom_score_adj in the process loop).
        let mut held = Vec::new();
        for k in KnobFile::ALL.into_iter().filter(|k| k.watched()) {
            let value = if k == KnobFile::CgroupFreeze { "1" } else { "12288" };
            let mut knobs = Knobs::default();
            if knobs.set(k, value) {
                assert_eq!(knobs.text(k).as_deref(), Some(value), "{k:?}");
                held.push(k);
            }
        }
        use KnobFile::*;
        assert_eq!(held, [MemoryHigh, MemoryLow, MemoryMin, CgroupFreeze]);
        let watched: Vec<KnobFile> = KnobFile::ALL.into_iter().filter(|k| k.watched()).collect();
        assert_eq!(watched, [MemoryHigh, MemoryLow, MemoryMin, CgroupFreeze, CpuWeight, SwapMax, OomScoreAdj]);
    }

    #[test]
    fn a_knob_shows_what_was_written_as_the_kernel_stores_it() {
        // The kernel rounds byte limits down to pages.
        assert!(KnobFile::MemoryHigh.shows("1048577", "1048576\n"));
        assert!(KnobFile::SwapMax.shows("max", "max\n"));
        assert!(!KnobFile::SwapMax.shows("0", "max"));
        assert!(!KnobFile::MemoryHigh.shows("1048576", "2097152"));
        // Numbers that are not sizes compare as written.
        assert!(KnobFile::CpuWeight.shows("50", "50\n"));
        assert!(!KnobFile::CpuWeight.shows("50", "100"));
        assert!(KnobFile::OomScoreAdj.shows("-900", "-900\n"));
        assert!(!KnobFile::OomScoreAdj.shows("-900", "-1000"));
        assert!(!KnobFile::CgroupFreeze.shows("0", "1"));
    }

    #[test]
    fn all_lists_every_knob_once() {
        // A new variant fails to compile here until it has a place in ALL.
        let index = |k: KnobFile| match k {
            KnobFile::MemoryHigh => 0,
            KnobFile::MemoryLow => 1,
            KnobFile::MemoryMin => 2,
            KnobFile::MemoryMax => 3,
            KnobFile::CgroupFreeze => 4,
            KnobFile::CgroupKill => 5,
            KnobFile::CpuWeight => 6,
            KnobFile::SwapMax => 7,
            KnobFile::OomScoreAdj => 8,
        };
        for (i, k) in KnobFile::ALL.into_iter().enumerate() {
            assert_eq!(index(k), i, "{k}");
        }
    }

    #[test]
    fn journaled_cgroup_knobs_are_the_ones_restore_accepts() {
        let cgroup: Vec<&str> = KnobFile::ALL
            .into_iter()
            .filter(|k| k.journaled() && k.scope() == Scope::Cgroup)
            .map(KnobFile::name)
            .collect();
        assert_eq!(
            cgroup,
            ["memory.high", "memory.low", "memory.min", "memory.max", "cgroup.freeze", "cpu.weight", "memory.swap.max"]
        );
        assert!(KnobFile::OomScoreAdj.journaled() && KnobFile::OomScoreAdj.scope() == Scope::Process);
        let mut order = ["memory.high", "cgroup.freeze", "cpu.weight"];
        order.sort_by_key(|f| KnobFile::restore_rank(f));
        assert_eq!(order[0], "cgroup.freeze");
    }

    #[test]
    fn knobs_take_written_values() {
        let mut k = Knobs::default();
        assert!(k.set(KnobFile::MemoryHigh, "1048576"));
        assert!(k.set(KnobFile::CgroupFreeze, "1\n"));
        assert!(!k.set(KnobFile::CpuWeight, "100") && !k.set(KnobFile::MemoryLow, "lots"));
        assert_eq!((k.high, k.low, k.frozen), (Limit::Bytes(1 << 20), Limit::Bytes(0), true));
    }

    #[test]
    fn the_engines_knobs_name_the_same_files() {
        for k in [Knob::High, Knob::Low, Knob::Min, Knob::Freeze, Knob::Kill] {
            assert_eq!(KnobFile::from(k).name(), k.file());
        }
    }
}
