//! Why the engine decided a write ([`Reason`], logged with every write event and kept in
//! `status.json`), what showed the pressure ([`Trigger`]), and where a learned peak came from
//! ([`LearnedPeak`]). The `Display` forms are the `why` sentences of the log.

use memqos_cgroupfs::units::human;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Which BPF counter of a cgroup crossed its threshold (the BPF source's `pressure_kind`;
/// the same names as the `bpf` event's `kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BpfKind {
    /// A task of the cgroup entered direct reclaim.
    Reclaim,
    /// A task returned to user mode over memory.high.
    OverHigh,
    /// Pages scanned by reclaim.
    Scan,
    /// Page faults.
    Fault,
    /// Major page faults.
    MajFault,
}

impl BpfKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BpfKind::Reclaim => "reclaim",
            BpfKind::OverHigh => "over_high",
            BpfKind::Scan => "scan",
            BpfKind::Fault => "fault",
            BpfKind::MajFault => "maj_fault",
        }
    }
}

/// What made a protected cgroup count as under pressure.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Trigger {
    /// memory.pressure `some avg10` at or above the threshold.
    PsiSomeAvg10 {
        /// Percent.
        value: f64,
    },
    /// Stall time since the previous tick, in percent of wall time, at or above the threshold.
    StallRate {
        /// Percent.
        pct: f64,
    },
    /// A PSI trigger fired.
    PsiTrigger,
    /// The BPF source reported a threshold crossing.
    Bpf {
        /// The value it reported.
        value: u64,
        /// Which of its counters crossed (absent where the source did not say: replays,
        /// logs of earlier versions).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        counter: Option<BpfKind>,
    },
    /// memory.events `low` grew: reclaimed although under its protection.
    LowEvents {
        /// Increment since the previous sample.
        count: u64,
    },
    /// Pages evicted and needed again (memory.stat `workingset_refault_anon` +
    /// `workingset_refault_file`) at or above the threshold: thrashing that PSI may not show,
    /// such as swap-ins from zswap of pages that were not active when they went out.
    Refault {
        /// Bytes refaulted per second since the previous sample.
        bytes_per_s: u64,
    },
}

impl fmt::Display for Trigger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Trigger::PsiSomeAvg10 { value } => write!(f, "psi some avg10 {value:.2}%"),
            Trigger::StallRate { pct } => write!(f, "stalled {pct:.1}% of the last interval"),
            Trigger::PsiTrigger => f.write_str("psi trigger fired"),
            Trigger::Bpf { value, counter: None } => write!(f, "bpf threshold crossed ({value})"),
            Trigger::Bpf { value, counter: Some(k) } => write!(f, "bpf {} threshold crossed ({value})", k.as_str()),
            Trigger::LowEvents { count } => {
                write!(f, "{count} memory.events low (reclaimed under protection)")
            }
            Trigger::Refault { bytes_per_s } => {
                write!(f, "refaulting {}/s (evicted pages needed again)", memqos_cgroupfs::units::human(*bytes_per_s))
            }
        }
    }
}

/// Why a decision was made. Serialized with a `kind` tag for the daemon's JSON log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Reason {
    /// A protected cgroup is under pressure; lower tiers give up memory.high.
    ProtectedPressure {
        /// The pressured cgroup (highest priority one if several).
        by: String,
        /// What showed the pressure.
        trigger: Trigger,
    },
    /// The parent is within `headroom_guard` of its limit; lower tiers are cut to fit.
    HeadroomGuard {
        /// Parent memory.current.
        parent_usage_bytes: u64,
        /// Parent limit (min of memory.max and memory.high).
        limit_bytes: u64,
        /// `limit - usage`, 0 if over.
        headroom_bytes: u64,
        /// The configured guard.
        guard_bytes: u64,
        /// The host had no active swap: each cgroup cut was capped at what it held, not
        /// below (a lower high cannot reclaim anonymous memory, only freeze it).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        swapless: bool,
    },
    /// The parent's memory.events show `max`/`oom` hits since the previous sample.
    ParentLimitEvents {
        /// `max` increment.
        max: u64,
        /// `oom` increment.
        oom: u64,
    },
    /// Pressure has been gone long enough; memory.high goes back up one step.
    Release {
        /// Time since the last pressure.
        calm_for_ms: u64,
    },
    /// Every protected cgroup the last pressure was for has emptied or gone: memory.high goes
    /// back up one step without waiting `hold_ms`, as no burst is left to hold room for.
    NothingToProtect {
        /// Time since the last pressure.
        calm_for_ms: u64,
    },
    /// Protection follows the working set.
    WorkingSet {
        /// Peak usage (or working set) over the window.
        peak_bytes: u64,
        /// The window.
        window_ms: u64,
    },
    /// Escalation (freeze, kill): a protected cgroup keeps stalling despite throttling.
    Stalled {
        /// The stalling cgroup.
        by: String,
        /// How long it has stalled without a calm tick.
        stalled_for_ms: u64,
    },
    /// Thaw: the stall that caused the freeze is over.
    Relieved {
        /// The cgroup whose stall caused the freeze.
        by: String,
    },
    /// Thaw: the stalling cgroup that caused the freeze is gone.
    CauseGone {
        /// The cgroup that disappeared.
        by: String,
    },
    /// A throttled cgroup made no progress (high events rising, usage pinned at memory.high,
    /// its own PSI full high) for its tier's `stall.after_ms`: the tier's stall action ends
    /// it (`engine::stall`).
    StallBound {
        /// How long it made no progress.
        stalled_for_ms: u64,
        /// The tier's bound.
        bound_ms: u64,
        /// Its memory.current.
        usage_bytes: u64,
        /// Its memory.high when decided.
        high_bytes: u64,
        /// Its memory.pressure `full avg10`, percent.
        psi_full_avg10: f64,
    },
    /// Room is reserved for a protected cgroup's declared expected peak: the throttle-tier
    /// cgroups below it share what is left (`engine::reserve`).
    Reservation {
        /// The declaring cgroup (the largest declaration if several).
        by: String,
        /// Sum of the declarations in force.
        declared_bytes: u64,
        /// What the capped cgroups may hold together.
        budget_bytes: u64,
        /// How many cgroups share it.
        members: usize,
        /// Set when `by`'s expected peak was learned from its workload's history rather
        /// than declared.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        learned: Option<LearnedPeak>,
        /// Which source gave `by` its expected peak (older logs: `declared` or, with
        /// `learned`, `workload`).
        #[serde(default)]
        source: PeakSource,
    },
    /// memory.high capped at what the cgroup holds: the room left beside the protected
    /// tier's expected regrowth is given to the lower cgroups that came first, one at a time
    /// as room frees; this one waits its turn (`engine::park`).
    Parked {
        /// The protected cgroup the room is kept for (the largest expectation if several).
        by: String,
        /// Its expected peak and where that came from.
        expected_bytes: u64,
        #[serde(default)]
        source: PeakSource,
        /// Its place in the line (1: admitted next).
        place: usize,
        /// Lower cgroups running meanwhile (admitted, oldest first).
        admitted: usize,
        /// What the lower cgroups may hold together, and what is free of it.
        budget_bytes: u64,
        free_bytes: u64,
    },
    /// Frozen while an older cgroup, also held at a memory.high of ours, grows first:
    /// cgroups held at their ceilings take turns instead of pushing each other out
    /// together (`engine::queue`, tiers with `queue_held`).
    Queued {
        /// The held cgroup that runs meanwhile.
        behind: String,
        /// Its place in line (1: next to run).
        place: usize,
    },
    /// Frozen while it thrashes beside a running protected cgroup: its tasks were stalled
    /// on memory most of the time (it made almost no progress), and its reclaim and swap
    /// traffic take CPU and disk from the protected cgroup (`engine::thrash`, tiers with
    /// `freeze_thrashing`).
    Thrashing {
        /// The protected cgroup that runs meanwhile (the highest tier's largest).
        beside: String,
        /// Its memory.pressure `full avg10` when frozen, percent.
        psi_full_avg10: f64,
        /// What it refaulted per second, averaged over about ten seconds, when frozen.
        #[serde(default)]
        refault_bytes_per_s: u64,
    },
    /// Back to the original value (the daemon's journal restore, a tier change on reload).
    Restore,
    /// memory.high sized so the kernel's per-memcg dirty limit is the tier's dirty ceiling
    /// (see `dirty::plan`).
    DirtyCeiling {
        /// The ceiling this tick.
        cap_bytes: u64,
        /// The cgroup's dirty + writeback bytes when decided.
        dirty_bytes: u64,
        /// What all capped cgroups share (freerun ceiling - floors - unbounded writers).
        budget_bytes: u64,
    },
}

impl Reason {
    /// The serde tag (`"kind"` in the log): the reason's name in metrics and tables.
    pub fn kind(&self) -> &'static str {
        match self {
            Reason::ProtectedPressure { .. } => "protected_pressure",
            Reason::HeadroomGuard { .. } => "headroom_guard",
            Reason::ParentLimitEvents { .. } => "parent_limit_events",
            Reason::Release { .. } => "release",
            Reason::NothingToProtect { .. } => "nothing_to_protect",
            Reason::WorkingSet { .. } => "working_set",
            Reason::Stalled { .. } => "stalled",
            Reason::Relieved { .. } => "relieved",
            Reason::CauseGone { .. } => "cause_gone",
            Reason::StallBound { .. } => "stall_bound",
            Reason::Reservation { .. } => "reservation",
            Reason::Parked { .. } => "parked",
            Reason::Queued { .. } => "queued",
            Reason::Thrashing { .. } => "thrashing",
            Reason::Restore => "restore",
            Reason::DirtyCeiling { .. } => "dirty_ceiling",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::ProtectedPressure { by, trigger } => write!(f, "pressure in {by}: {trigger}"),
            Reason::HeadroomGuard { parent_usage_bytes, limit_bytes, headroom_bytes, guard_bytes, swapless } => {
                write!(
                    f,
                    "parent at {} of {}: headroom {} below guard {}",
                    human(*parent_usage_bytes),
                    human(*limit_bytes),
                    human(*headroom_bytes),
                    human(*guard_bytes)
                )?;
                if *swapless {
                    write!(f, " (no swap: capped at what it holds)")?;
                }
                Ok(())
            }
            Reason::ParentLimitEvents { max, oom } => {
                write!(f, "parent hit its limit ({max} max, {oom} oom events)")
            }
            Reason::Release { calm_for_ms } => {
                write!(f, "no pressure for {calm_for_ms} ms, releasing")
            }
            Reason::NothingToProtect { calm_for_ms } => {
                write!(f, "no protected cgroup left to make room for ({calm_for_ms} ms after the last pressure), releasing")
            }
            Reason::WorkingSet { peak_bytes, window_ms } => {
                write!(f, "working set peak {} over {} s", human(*peak_bytes), window_ms / 1000)
            }
            Reason::Stalled { by, stalled_for_ms } => {
                write!(f, "{by} stalled for {stalled_for_ms} ms despite throttling")
            }
            Reason::Relieved { by } => write!(f, "{by} no longer stalls"),
            Reason::CauseGone { by } => write!(f, "{by} is gone"),
            Reason::StallBound {
                stalled_for_ms,
                bound_ms,
                usage_bytes,
                high_bytes,
                psi_full_avg10,
            } => write!(
                f,
                "no progress for {stalled_for_ms} ms (bound {bound_ms} ms): usage {} pinned at memory.high {}, psi full avg10 {psi_full_avg10:.0}%",
                human(*usage_bytes),
                human(*high_bytes)
            ),
            Reason::Reservation { by, declared_bytes, budget_bytes, members, learned, source } => {
                let source = match (learned, source) {
                    (Some(l), PeakSource::TierRecent) => format!(
                        ", learned from {} recent lifetime(s) of tier {:?}, max peak {}",
                        l.lifetimes,
                        l.workload,
                        human(l.peak_bytes)
                    ),
                    (Some(l), _) => format!(
                        ", learned from {} lifetime(s) of workload {:?}, max peak {}",
                        l.lifetimes,
                        l.workload,
                        human(l.peak_bytes)
                    ),
                    (None, PeakSource::TierDefault) => ", the tier's default_peak".into(),
                    (None, PeakSource::FirstSight) => ", first sight: growing, its peak so far times first_sight_growth".into(),
                    (None, _) => String::new(),
                };
                write!(
                    f,
                    "room reserved for {by} (expected peak {}{source}): {members} lower cgroup(s) share {}",
                    human(*declared_bytes),
                    human(*budget_bytes)
                )
            }
            Reason::Parked { by, expected_bytes, source, place, admitted, budget_bytes, free_bytes } => write!(
                f,
                "parked at what it holds: room kept for {by} (expected peak {}, {}); {admitted} lower cgroup(s) run, this one is {place} in line to be admitted (budget {}, {} free)",
                human(*expected_bytes),
                source.label(),
                human(*budget_bytes),
                human(*free_bytes)
            ),
            Reason::Queued { behind, place } => write!(
                f,
                "frozen in line: {behind} is held at its memory ceiling too and grows first; this one is {place} in line"
            ),
            Reason::Thrashing { beside, psi_full_avg10, refault_bytes_per_s } => write!(
                f,
                "thrashing (memory.pressure full avg10 {psi_full_avg10:.0}%, refaulting {}/s: its pages go out and come back, it gets almost nowhere) while {beside} runs: frozen so its reclaim and swap traffic stop taking CPU and disk from it",
                human(*refault_bytes_per_s)
            ),
            Reason::Restore => f.write_str("restoring the original value"),
            Reason::DirtyCeiling { cap_bytes, dirty_bytes, budget_bytes } => write!(
                f,
                "dirty ceiling {} (holds {} dirty+writeback; capped cgroups share {})",
                human(*cap_bytes),
                human(*dirty_bytes),
                human(*budget_bytes)
            ),
        }
    }
}

/// Where a protected cgroup's expected peak came from, strongest first: the first that
/// has one applies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PeakSource {
    /// Its `user.memqos.expected_peak` xattr, or its tier's `expected_peak`.
    #[default]
    Declared,
    /// The history of its workload key (`learn_peak`, `user.memqos.workload`).
    Workload,
    /// Its tier's own recent lifetimes on this host (`learn_peak`, any member).
    TierRecent,
    /// Its tier's configured `default_peak`.
    TierDefault,
    /// Nothing known: while it grows, its tier's `first_sight_growth` times its peak so far.
    FirstSight,
}

impl PeakSource {
    /// Words for logs and `explain`.
    pub fn label(self) -> &'static str {
        match self {
            PeakSource::Declared => "declared (user.memqos.expected_peak or the tier's expected_peak)",
            PeakSource::Workload => "learned from its workload key's history (learn_peak)",
            PeakSource::TierRecent => "learned from its tier's recent peaks (learn_peak)",
            PeakSource::TierDefault => "the tier's default_peak",
            PeakSource::FirstSight => {
                "first sight: its peak so far times the tier's first_sight_growth, while it grows"
            }
        }
    }
}

/// Where a learned expected peak came from (the daemon's history of a workload key, or of
/// the tier's recent lifetimes: then `workload` is the tier's name and `tier` is true).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LearnedPeak {
    /// The workload key (the cgroup's `user.memqos.workload` xattr).
    pub workload: String,
    /// How many recorded lifetimes the expectation is the maximum of.
    pub lifetimes: usize,
    /// The largest recorded peak (the expectation is this plus a margin).
    pub peak_bytes: u64,
    /// Learned from the tier's recent lifetimes rather than a workload key.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tier: bool,
}

impl LearnedPeak {
    /// The source this learned peak stands for.
    pub fn source(&self) -> PeakSource {
        if self.tier {
            PeakSource::TierRecent
        } else {
            PeakSource::Workload
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_is_the_serde_tag_of_every_reason() {
        let by = || "a".to_string();
        let every = [
            Reason::ProtectedPressure { by: by(), trigger: Trigger::PsiTrigger },
            Reason::HeadroomGuard {
                parent_usage_bytes: 1,
                limit_bytes: 2,
                headroom_bytes: 1,
                guard_bytes: 2,
                swapless: false,
            },
            Reason::HeadroomGuard {
                parent_usage_bytes: 1,
                limit_bytes: 2,
                headroom_bytes: 1,
                guard_bytes: 2,
                swapless: true,
            },
            Reason::ParentLimitEvents { max: 1, oom: 0 },
            Reason::Release { calm_for_ms: 1 },
            Reason::NothingToProtect { calm_for_ms: 1 },
            Reason::WorkingSet { peak_bytes: 1, window_ms: 1 },
            Reason::Stalled { by: by(), stalled_for_ms: 1 },
            Reason::Relieved { by: by() },
            Reason::CauseGone { by: by() },
            Reason::StallBound { stalled_for_ms: 1, bound_ms: 1, usage_bytes: 1, high_bytes: 1, psi_full_avg10: 1.0 },
            Reason::Reservation {
                by: by(),
                declared_bytes: 1,
                budget_bytes: 1,
                members: 1,
                learned: None,
                source: PeakSource::Declared,
            },
            Reason::Parked {
                by: by(),
                expected_bytes: 1,
                source: PeakSource::TierDefault,
                place: 1,
                admitted: 1,
                budget_bytes: 1,
                free_bytes: 0,
            },
            Reason::Queued { behind: by(), place: 1 },
            Reason::Thrashing { beside: by(), psi_full_avg10: 87.5, refault_bytes_per_s: 1 },
            Reason::Restore,
            Reason::DirtyCeiling { cap_bytes: 1, dirty_bytes: 1, budget_bytes: 1 },
        ];
        for r in every {
            let json = serde_json::to_value(&r).unwrap();
            assert_eq!(json["kind"], r.kind(), "{r:?}");
        }
    }
}
