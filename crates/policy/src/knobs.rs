//! The knobs a tier sets outside the engine's tick, decided as pure functions of the config,
//! the value the daemon read and what memqos journaled (passed in as data): cpu.weight and
//! memory.swap.max (one rule, [`tier_static`]) and a process's oom_score_adj
//! ([`oom_score_adj`], [`settle`]). Dirty ceilings are engine actions in [`crate::dirty`]
//! ([`crate::dirty::Ceilings`]). The daemon reads, calls these and writes what they return.

use crate::config::{ForeignKnobs, Tier};
use crate::size::{Limit, PAGE};
use memqos_schema::knob::KnobFile;
use std::fmt;

/// A knob a tier sets to one value on each of its cgroups while memqos runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TierStatic {
    /// cpu.weight (the tier's `cpu_weight`).
    CpuWeight,
    /// memory.swap.max (the tier's `swap_max`).
    SwapMax,
}

/// A tier-static knob's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StaticValue {
    /// A number the kernel shows as written (cpu.weight).
    Number(u64),
    /// A byte limit the kernel shows rounded down to pages ("max" as is).
    Bytes(Limit),
}

impl fmt::Display for StaticValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StaticValue::Number(n) => write!(f, "{n}"),
            StaticValue::Bytes(l) => write!(f, "{l}"),
        }
    }
}

impl StaticValue {
    /// Whether the file's (trimmed) text already shows this value.
    pub fn shown_by(self, current: &str) -> bool {
        match self {
            StaticValue::Number(n) => current == n.to_string(),
            StaticValue::Bytes(target) => {
                let page = |l: Limit| match l {
                    Limit::Bytes(b) => Limit::Bytes(b - b % PAGE),
                    Limit::Max => Limit::Max,
                };
                matches!(memqos_cgroupfs::parse::parse_limit(current), Ok(now) if page(now) == page(target))
            }
        }
    }
}

/// What a tier-static knob's file should become.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StaticDecision {
    /// Write `value` (the tier's), for `reason`.
    Write { value: String, reason: &'static str },
    /// The file already shows the tier's value.
    AlreadySet,
    /// Someone else set it (policy.foreign_knobs = "respect"): left alone.
    Foreign,
}

impl TierStatic {
    pub const ALL: [TierStatic; 2] = [TierStatic::CpuWeight, TierStatic::SwapMax];

    pub fn file(self) -> KnobFile {
        match self {
            TierStatic::CpuWeight => KnobFile::CpuWeight,
            TierStatic::SwapMax => KnobFile::SwapMax,
        }
    }

    /// The reason its writes carry in the event log.
    pub fn reason(self) -> &'static str {
        match self {
            TierStatic::CpuWeight => "tier cpu_weight",
            TierStatic::SwapMax => "tier swap_max",
        }
    }

    /// The tier's value, None when the tier leaves the file as found.
    pub fn target(self, tier: &Tier) -> Option<StaticValue> {
        match self {
            TierStatic::CpuWeight => tier.cpu_weight.map(|w| StaticValue::Number(w.into())),
            TierStatic::SwapMax => tier.swap_max.target().map(StaticValue::Bytes),
        }
    }

    /// The kernel's value in a new cgroup, when another value that memqos did not write is
    /// someone else's (a unit's MemorySwapMax=, kubelet's swap behaviour). None: the tier's
    /// value always wins (cpu.weight: systemd sets it on every unit, so a non-default value
    /// says nothing about intent).
    fn kernel_default(self) -> Option<&'static str> {
        match self {
            TierStatic::CpuWeight => None,
            TierStatic::SwapMax => Some("max"),
        }
    }
}

/// The one rule for a tier-static knob: write the tier's `target` unless the file already
/// shows it, or it holds someone else's value (not the kernel's default, not journaled by
/// memqos: `ours` false) and the config respects foreign knobs.
pub fn tier_static(
    knob: TierStatic,
    target: StaticValue,
    current: &str,
    ours: bool,
    foreign_knobs: ForeignKnobs,
) -> StaticDecision {
    let foreign = knob.kernel_default().is_some_and(|default| current.trim() != default);
    if !ours && foreign && foreign_knobs == ForeignKnobs::Respect {
        return StaticDecision::Foreign;
    }
    if target.shown_by(current.trim()) {
        return StaticDecision::AlreadySet;
    }
    StaticDecision::Write { value: target.to_string(), reason: knob.reason() }
}

/// cpu.weight of a cgroup of `tier` that reads `current`; None when the tier has no
/// `cpu_weight`.
pub fn cpu_weight(tier: &Tier, current: &str) -> Option<StaticDecision> {
    let target = TierStatic::CpuWeight.target(tier)?;
    Some(tier_static(TierStatic::CpuWeight, target, current, false, ForeignKnobs::Respect))
}

/// memory.swap.max of a cgroup of `tier` that reads `current` (`ours`: memqos journaled its
/// original); None when the tier keeps it.
pub fn swap_max(tier: &Tier, current: &str, ours: bool, foreign_knobs: ForeignKnobs) -> Option<StaticDecision> {
    let target = TierStatic::SwapMax.target(tier)?;
    Some(tier_static(TierStatic::SwapMax, target, current, ours, foreign_knobs))
}

/// Whether oom_score_adj `current` should move to `target`: only towards the target's side
/// of 0, and never back from a more extreme value someone else set.
pub fn oom_wants(current: i32, target: i32) -> bool {
    if target <= 0 {
        current > target
    } else {
        current < target
    }
}

/// What memqos knows of a process it has looked at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdjState {
    /// False when its value was already at or beyond the target: nothing to put back.
    pub wrote: bool,
    /// The value to put back.
    pub original: i32,
}

/// Why a process's oom_score_adj is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdjReason {
    /// Its tier's value.
    Tier,
    /// It inherited memqos's value from its parent `ppid`, whose `original` is journaled for
    /// it too (so it is restored).
    Inherited { ppid: u32, original: i32 },
}

impl fmt::Display for AdjReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AdjReason::Tier => f.write_str("tier oom_score_adj"),
            AdjReason::Inherited { ppid, original } => {
                write!(f, "inherited from pid {ppid}: its original {original} journaled")
            }
        }
    }
}

/// A process's oom_score_adj write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdjWrite {
    pub value: i32,
    pub reason: AdjReason,
    /// The original to journal instead of the value read (an inherited one).
    pub journal_original: Option<i32>,
}

/// A process memqos meets for the first time in a cgroup of a tier whose `oom_score_adj` is
/// `target`: its value now, the original memqos journaled for it before a reload (if any),
/// and its parent as memqos knows it (if it does: `(ppid, state)`). Returns the write, if
/// any, and what to remember of the process.
pub fn oom_score_adj(
    target: i32,
    current: i32,
    journaled: Option<i32>,
    parent: Option<(u32, AdjState)>,
) -> (Option<AdjWrite>, AdjState) {
    let tier = AdjWrite { value: target, reason: AdjReason::Tier, journal_original: None };
    // Journaled by this daemon before a reload rebuilt its state: ours, with its true
    // original (the value now is the one memqos wrote).
    if let Some(original) = journaled {
        return (oom_wants(current, target).then_some(tier), AdjState { wrote: true, original });
    }
    // A child of a process memqos wrote holds memqos's value, not its own.
    if let Some((ppid, p)) = parent.filter(|(_, p)| p.wrote && current == target) {
        let reason = AdjReason::Inherited { ppid, original: p.original };
        let write = AdjWrite { value: target, reason, journal_original: Some(p.original) };
        return (Some(write), AdjState { wrote: true, original: p.original });
    }
    if oom_wants(current, target) {
        (Some(tier), AdjState { wrote: true, original: current })
    } else {
        (None, AdjState { wrote: false, original: current })
    }
}

/// A process that left its tier's cgroups: the original to put back, None when there is
/// nothing to (memqos did not write it, or it exited).
pub fn settle(state: AdjState, alive: bool) -> Option<i32> {
    (state.wrote && alive).then_some(state.original)
}
