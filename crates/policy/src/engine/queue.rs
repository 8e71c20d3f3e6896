//! The held queue: cgroups held at their ceilings take turns (tiers with `queue_held`).
//!
//! A cgroup held at a memory.high of ours (an armed admission ceiling, a guard cut) wants
//! more than the room it was given. Two or more of them at once want more than the room
//! together: on a swapless host each sits at its ceiling holding what it has; with swap each
//! pushes its own pages out and goes on, and together they run the swap out too (the
//! agent-host experiment with zswap: three tool calls of 1.2-1.8 GiB held at once on a
//! 2.5 GiB host with 1 GiB of swap, and the kernel killed one). Letting the oldest grow
//! alone and freezing the others until it is done finishes the same calls one after
//! another instead of killing one of them.
//!
//! Per periodic tick, over the populated cgroups of `queue_held` tiers that are *held*
//! (memory.high below its original, memory.events `high` risen in the last 5 s: a ceiling
//! raised a step above usage does not end the first's turn while it keeps growing into it)
//! and hold more than `policy.admission_floor` (a guard cut presses every call at once, and
//! freezing the small ones would only delay them: the first probe froze ten 35-64 MiB calls
//! for a bound each), plus those the queue froze: ordered by tier (the higher first), then age
//! (first seen), then path. With two or more, the first runs and the others are frozen,
//! reason `queued` (the one they wait behind, their place). When the first is no longer
//! held (it stopped growing, its ceiling was lifted, it ended), the next is thawed. A
//! queued cgroup stays frozen at most its tier's `stall.after_ms`, then is thawed (stall
//! bound) and not frozen again for another bound. Fewer than two held: nothing is queued
//! and what the queue froze is thawed.
//!
//! Failure modes: a queued call that holds something another task waits for waits as long
//! (bounded by the stall bound); a first call that stays at its ceiling without finishing
//! (a long build at a small ceiling) keeps the others frozen for a bound each time; a
//! queued call's memory stays where it is (frozen, not freed), so the queue helps only
//! where the first call can still grow: by pushing its own pages to swap, or into room
//! that frees as others end.

use std::collections::BTreeMap;

use super::freezer::Freezer;
use super::stall::HIGH_EVENT_WINDOW_MS;
use super::{Ctx, Plan, States};
use crate::decision::{Decision, Reason};
use crate::obs::{CgroupId, CgroupObs};
use crate::size::Limit;

#[derive(Debug, Default)]
pub(crate) struct Queue {
    freezer: Freezer,
    /// Last tick whose memory.events `high` had risen, per cgroup.
    last_high_event_ms: BTreeMap<CgroupId, u64>,
    /// In line at the last periodic tick, next first (for status): frozen, unless the stall
    /// bound thawed one that still waits.
    queued: Vec<String>,
}

/// Under a memory.high of ours (below its original).
fn under_our_ceiling(c: &CgroupObs) -> bool {
    matches!(c.current.high, Limit::Bytes(_)) && c.current.high < c.original.high
}

impl Queue {
    pub(crate) fn queued(&self) -> &[String] {
        &self.queued
    }

    /// Plans the queue's freezes and thaws (see the module doc).
    pub(crate) fn plan(&mut self, ctx: &Ctx, states: &States, plan: &mut Plan) {
        let now = ctx.now;
        self.last_high_event_ms.retain(|id, _| ctx.get_id(*id).is_some());
        for c in &ctx.cgs {
            if c.events_delta.high > 0 {
                self.last_high_event_ms.insert(c.id, now);
            }
        }
        let pressing = |c: &CgroupObs| {
            self.last_high_event_ms.get(&c.id).is_some_and(|&t| now - t <= HIGH_EVENT_WINDOW_MS) && under_our_ceiling(c)
        };
        // Small cgroups are not what runs the room out: freezing them would only delay them.
        let small = ctx.cfg.policy.admission_floor;
        let age = |c: &CgroupObs| states.get(&c.id).map_or(now, |s| s.first_seen_ms);
        let mut held: Vec<&CgroupObs> = ctx
            .cgs
            .iter()
            .copied()
            .filter(|c| {
                let tier = ctx.tier(c);
                tier.throttle
                    && tier.queue_held
                    && c.is_populated()
                    && (self.freezer.froze(c.id) || (pressing(c) && c.usage_bytes > small))
            })
            .collect();
        held.sort_by(|a, b| (a.tier, age(a), &a.path).cmp(&(b.tier, age(b), &b.path)));
        if held.len() < 2 {
            self.queued.clear();
            self.freezer.thaw_all(ctx, plan);
            return;
        }
        let (first, rest) = held.split_at(1);
        let waiting: Vec<(&CgroupObs, Reason)> = rest
            .iter()
            .enumerate()
            .map(|(i, c)| (*c, Reason::Queued { behind: first[0].path.clone(), place: i + 1 }))
            .collect();
        // Thawed: the first, and whatever the queue froze that is no longer in line (emptied,
        // or moved to a tier without `queue_held` by a reload).
        let going: Vec<&CgroupObs> = ctx
            .cgs
            .iter()
            .copied()
            .filter(|c| self.freezer.froze(c.id) && !rest.iter().any(|r| r.id == c.id))
            .chain(first.iter().copied())
            .collect();
        self.freezer.hold(ctx, &waiting, &going, None, plan);
        self.queued = rest.iter().map(|c| c.path.clone()).collect();
    }

    /// Records the freezes and thaws that were written.
    pub(crate) fn committed(&mut self, decisions: &[Decision], ctx: &Ctx) {
        self.freezer.committed(decisions, ctx, |r| match r {
            Reason::Queued { behind, .. } => Some(behind.as_str()),
            _ => None,
        });
    }
}
