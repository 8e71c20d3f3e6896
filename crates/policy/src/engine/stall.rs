//! Bounded stalls: a cgroup that memqos throttled must not stall indefinitely.
//!
//! memory.high never fails a charge; on a swapless host, a high below an anonymous working
//! set frees nothing, so the task sleeps in `mem_cgroup_handle_over_high()` on every return
//! to user mode, reclaims nothing, and tries again: a livelock that memory.max never ends,
//! because usage stays at high. One public incident had a service stalled this way for 90
//! minutes. memqos lowers memory.high by design, so it bounds what that can cost.
//!
//! A throttle-tier cgroup *makes no progress* in a tick when all of these hold:
//! - memqos lowered its memory.high (below the original) and it is not frozen;
//! - memory.events `high` rose within the last 5 s (it keeps hitting high; a task far over
//!   high sleeps up to 2 s per return to user mode between charges, so a single sample
//!   interval may see none);
//! - its usage is pinned at high (within 1/32 of it);
//! - its own memory.pressure `full avg10` is at or above `policy.stall_psi_full_avg10`
//!   (all of its tasks stalled on memory at once, most of the time).
//!
//! When that lasts the tier's `stall.after_ms` without a break, the tier's `stall.action`
//! is planned with [`Reason::StallBound`] (the daemon logs it): `relieve` raises memory.high
//! one release step and keeps further cuts off that cgroup for another bound; `kill` writes
//! cgroup.kill. The bound then starts again, so a cgroup that stays stuck after a relief is
//! relieved again one bound later, until its high is back at the original.

use std::collections::BTreeMap;

use super::{Ctx, Plan};
use crate::config::StallAction;
use crate::decision::{Action, Decision, Reason};
use crate::obs::{CgroupId, CgroupObs};
use crate::size::page_down;
use crate::Limit;

/// Per-cgroup stall tracking, dropped with the cgroup.
#[derive(Debug, Default)]
pub(crate) struct Stalls {
    by_id: BTreeMap<CgroupId, Track>,
}

/// How recent the last memory.events `high` increment must be for a stall to go on: over
/// twice the kernel's longest over-high sleep (MEMCG_MAX_HIGH_DELAY_JIFFIES, 2 s).
pub(crate) const HIGH_EVENT_WINDOW_MS: u64 = 5_000;

#[derive(Debug, Default)]
struct Track {
    /// Start of the current uninterrupted stall (or of the bound after the last action).
    since_ms: Option<u64>,
    /// Last sample whose memory.events `high` had risen.
    last_high_event_ms: Option<u64>,
    /// Cuts of memory.high are dropped until then: the last relief's grace.
    no_cuts_until_ms: Option<u64>,
}

/// True when `c` sits at a memory.high memqos lowered and stalls on memory (see the module
/// doc); with recent `high` events, it makes no progress.
pub(crate) fn pinned(c: &CgroupObs, psi_full_threshold: f64) -> bool {
    let Limit::Bytes(high) = c.current.high else {
        return false;
    };
    c.current.high < c.original.high
        && !c.current.frozen
        && c.usage_bytes.saturating_add(high / 32) >= high
        && full_avg10(c) >= psi_full_threshold
}

impl Stalls {
    /// Drops the tracking of cgroups that start afresh (a reload moved them).
    pub(crate) fn forget(&mut self, ids: &[CgroupId]) {
        self.by_id.retain(|id, _| !ids.contains(id));
    }

    /// The fast path's share: cuts of cgroups in a relief's grace are dropped (the tracking
    /// itself moves only on periodic ticks).
    pub(crate) fn drop_cuts_in_grace(&self, ctx: &Ctx, plan: &mut Plan) {
        for &c in &ctx.cgs {
            let in_grace = self.by_id.get(&c.id).and_then(|t| t.no_cuts_until_ms).is_some_and(|u| ctx.now < u);
            if in_grace {
                plan.drop_cuts(c);
            }
        }
    }

    /// Updates the tracking from this tick's observation and adjusts `plan`: cuts of cgroups
    /// in a relief's grace are dropped, and cgroups stalled for their tier's bound get the
    /// tier's action. Call after every other part of the tick has planned.
    pub(crate) fn plan(&mut self, ctx: &Ctx, plan: &mut Plan) {
        self.by_id.retain(|id, _| ctx.get_id(*id).is_some());
        let policy = &ctx.cfg.policy;
        for &c in &ctx.cgs {
            let tier = ctx.tier(c);
            if !tier.throttle {
                continue;
            }
            let t = self.by_id.entry(c.id).or_default();
            if t.no_cuts_until_ms.is_some_and(|u| ctx.now < u) {
                plan.drop_cuts(c);
            }
            if c.events_delta.high > 0 {
                t.last_high_event_ms = Some(ctx.now);
            }
            let hitting_high = t.last_high_event_ms.is_some_and(|e| ctx.now - e <= HIGH_EVENT_WINDOW_MS);
            if !(hitting_high && pinned(c, policy.stall_psi_full_avg10)) {
                t.since_ms = None;
                continue;
            }
            let since = *t.since_ms.get_or_insert(ctx.now);
            let stalled_for_ms = ctx.now - since;
            if stalled_for_ms < tier.stall.after_ms {
                continue;
            }
            let reason = Reason::StallBound {
                stalled_for_ms,
                bound_ms: tier.stall.after_ms,
                usage_bytes: c.usage_bytes,
                high_bytes: c.current.high.bytes().unwrap_or(u64::MAX),
                psi_full_avg10: full_avg10(c),
            };
            match tier.stall.action {
                StallAction::Relieve => {
                    plan.drop_highs(c);
                    plan.raise_high(c, relief(c, policy.release_ratio), reason);
                }
                StallAction::Kill => plan.push(c, Action::Kill, reason),
            }
        }
    }

    /// Records the stall actions that were committed (the rate limit may have held one back
    /// for a tick, in which case it is planned again next tick).
    pub(crate) fn committed(&mut self, decisions: &[Decision], ctx: &Ctx) {
        for d in decisions {
            let Reason::StallBound { bound_ms, .. } = d.reason else {
                continue;
            };
            let Some(id) = ctx.get_id(d.id).map(|c| c.id) else { continue };
            if let Some(t) = self.by_id.get_mut(&id) {
                t.since_ms = Some(ctx.now);
                if matches!(d.action, Action::High(_)) {
                    t.no_cuts_until_ms = Some(ctx.now.saturating_add(bound_ms));
                }
            }
        }
    }
}

/// memory.pressure `full avg10`; 0 where the kernel has no `full` line.
fn full_avg10(c: &CgroupObs) -> f64 {
    c.psi.full.map_or(0.0, |f| f.avg10)
}

/// One release step above where the cgroup is stuck (its high, or its usage when that is
/// above), at most the original: room to allocate, not just the memory it already holds.
fn relief(c: &CgroupObs, release_ratio: f64) -> Limit {
    let stuck_at = c.current.high.bytes().unwrap_or(u64::MAX).max(c.usage_bytes);
    let stepped = (stuck_at as f64 * (1.0 + release_ratio)) as u64;
    Limit::Bytes(page_down(stepped)).min(c.original.high)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::obs::Knobs;
    use crate::TierIndex;

    fn stuck(high: u64) -> CgroupObs {
        let mut c = CgroupObs::new("low/a", TierIndex(1), high);
        c.current = Knobs { high: Limit::Bytes(high), ..Knobs::default() };
        c.events_delta.high = 12;
        c.psi.full = Some(crate::PressureLine { avg10: 85.0, ..Default::default() });
        c
    }

    #[test]
    fn pinned_needs_every_sign() {
        let m = 1 << 20;
        assert!(pinned(&stuck(100 * m), 40.0));
        type Variant = (&'static str, fn(&mut CgroupObs));
        let variants: [Variant; 5] = [
            ("usage well below high", |c| c.usage_bytes = 90 << 20),
            ("psi full low", |c| c.psi.full = Some(crate::PressureLine { avg10: 10.0, ..Default::default() })),
            ("frozen", |c| c.current.frozen = true),
            ("high not lowered by us", |c| c.original.high = c.current.high),
            ("no high", |c| c.current.high = Limit::Max),
        ];
        for (what, f) in variants {
            let mut c = stuck(100 * m);
            f(&mut c);
            assert!(!pinned(&c, 40.0), "{what}");
        }
    }

    #[test]
    fn relief_is_one_step_capped_at_the_original() {
        let mut c = stuck(100 << 20);
        assert_eq!(relief(&c, 0.5), Limit::Bytes(150 << 20));
        c.usage_bytes = 200 << 20; // anon memory it could not give back when high was cut
        assert_eq!(relief(&c, 0.5), Limit::Bytes(300 << 20));
        c.original.high = Limit::Bytes(120 << 20);
        assert_eq!(relief(&c, 0.5), Limit::Bytes(120 << 20));
    }
}
