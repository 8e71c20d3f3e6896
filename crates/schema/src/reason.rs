//! Why the engine decided a write ([`Reason`], logged with every write event and kept in
//! `status.json`), what showed the pressure ([`Trigger`]), and where a learned peak came from
//! ([`LearnedPeak`]). The `Display` forms are the `why` sentences of the log.

use memqos_cgroupfs::units::human;
use serde::{Deserialize, Serialize};
use std::fmt;

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
            Trigger::Bpf { value } => write!(f, "bpf threshold crossed ({value})"),
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
            Reason::Restore => "restore",
            Reason::DirtyCeiling { .. } => "dirty_ceiling",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::ProtectedPressure { by, trigger } => write!(f, "pressure in {by}: {trigger}"),
            Reason::HeadroomGuard { parent_usage_bytes, limit_bytes, headroom_bytes, guard_bytes } => write!(
                f,
                "parent at {} of {}: headroom {} below guard {}",
                human(*parent_usage_bytes),
                human(*limit_bytes),
                human(*headroom_bytes),
                human(*guard_bytes)
            ),
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
            Reason::Reservation { by, declared_bytes, budget_bytes, members, learned } => {
                let source = match learned {
                    Some(l) => format!(
                        ", learned from {} lifetime(s) of workload {:?}, max peak {}",
                        l.lifetimes,
                        l.workload,
                        human(l.peak_bytes)
                    ),
                    None => String::new(),
                };
                write!(
                    f,
                    "room reserved for {by} (expected peak {}{source}): {members} lower cgroup(s) share {}",
                    human(*declared_bytes),
                    human(*budget_bytes)
                )
            }
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

/// Where a learned expected peak came from (the daemon's history of a workload key).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LearnedPeak {
    /// The workload key (the cgroup's `user.memqos.workload` xattr).
    pub workload: String,
    /// How many recorded lifetimes the expectation is the maximum of.
    pub lifetimes: usize,
    /// The largest recorded peak (the expectation is this plus a margin).
    pub peak_bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_is_the_serde_tag_of_every_reason() {
        let by = || "a".to_string();
        let every = [
            Reason::ProtectedPressure { by: by(), trigger: Trigger::PsiTrigger },
            Reason::HeadroomGuard { parent_usage_bytes: 1, limit_bytes: 2, headroom_bytes: 1, guard_bytes: 2 },
            Reason::ParentLimitEvents { max: 1, oom: 0 },
            Reason::Release { calm_for_ms: 1 },
            Reason::NothingToProtect { calm_for_ms: 1 },
            Reason::WorkingSet { peak_bytes: 1, window_ms: 1 },
            Reason::Stalled { by: by(), stalled_for_ms: 1 },
            Reason::Relieved { by: by() },
            Reason::CauseGone { by: by() },
            Reason::StallBound { stalled_for_ms: 1, bound_ms: 1, usage_bytes: 1, high_bytes: 1, psi_full_avg10: 1.0 },
            Reason::Reservation { by: by(), declared_bytes: 1, budget_bytes: 1, members: 1, learned: None },
            Reason::Restore,
            Reason::DirtyCeiling { cap_bytes: 1, dirty_bytes: 1, budget_bytes: 1 },
        ];
        for r in every {
            let json = serde_json::to_value(&r).unwrap();
            assert_eq!(json["kind"], r.kind(), "{r:?}");
        }
    }
}
