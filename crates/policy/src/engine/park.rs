//! Parking: while a reservation is in force (`engine::reserve`), the lower cgroups that fit
//! run and the others wait at what they hold, instead of all sharing the room equally.
//!
//! Equal shares hold every lower cgroup back at once while the budget is tight: each crawls
//! at its memory.high, none finishes sooner, and all of them keep their memory the whole
//! time (issue 30 measured the lows at 1.44-1.60x of none's time). When the room left
//! beside the protected tier's expected regrowth is small, letting the oldest run with all
//! of it and parking the rest finishes the same work sooner and frees memory sooner.
//!
//! Per periodic tick with a reservation, over the members that have a process in them,
//! oldest first (first seen by the engine, then id):
//!
//!   free = budget - (what every member holds)
//!   fit  = max(1, free / park_room)
//!
//! The first `fit` members are admitted, but at most one more than were admitted last tick
//! (one at a time, oldest first, as room frees: a finished one leaves, the next comes in).
//! Admitted members share what the budget leaves beside the parked ones, as
//! `reserve::shares` gives (usage plus an equal part of what is free). A parked member's
//! memory.high is capped at what it holds (page aligned, never below `min_high`): it keeps
//! its memory and sleeps in the kernel's over-high penalty when it allocates. No freeze is
//! needed: a task at memory.high still serves signals and reclaim, and is never killed for
//! it. Only a tier that opts into `freeze` has its parked members frozen as well (they then
//! take no CPU either); they are thawed when admitted or when the reservation ends.
//!
//! The stall bound (`engine::stall`) applies to a parked member as to any throttled one:
//! one that makes no progress for its tier's `stall.after_ms` is relieved (or killed, if its
//! tier opted in), and its cap is not cut again for another bound. A member parked by
//! freezing is thawed once it has been frozen for `stall.after_ms`, and not frozen again
//! for another bound. `park_room = 0` turns parking off: every member is admitted (equal
//! shares).
//!
//! Parking is off where the host is known to have swap (`ParentObs::swap_active`) unless
//! `park_with_swap`; a swapless host, or one whose swap nobody could read, parks. With swap, a member capped at its share pushes its own cold pages out and goes on, so
//! the shares do not stall it; holding whole tasks back there costs them time (issue 30, the
//! declared tight sweep with zswap: parked lows took 1.09-1.40x of none's time on 7.2, equal
//! shares 1.02-1.03x) and buys the protected cgroup its tail latency (its P95 near solo when
//! the lows are parked, 1.3-2.1x of solo when they share and swap beside it). The default
//! spares the lows' time: every member is admitted, as with `park_room = 0`.

use std::collections::BTreeSet;

use super::freezer::Freezer;
use super::reserve::{cap_at_shares, Reservation};
use super::{Ctx, Plan, States};
use crate::decision::{Decision, Reason};
use crate::obs::{CgroupId, CgroupObs};
use crate::size::PAGE;

/// Who was admitted and who parked, kept between ticks.
#[derive(Debug, Default)]
pub(crate) struct Parking {
    admitted: BTreeSet<CgroupId>,
    /// Paths, oldest first, for status.
    parked: Vec<String>,
    /// Members of `freeze` tiers that parking froze.
    freezer: Freezer,
}

/// How many of `running` members (oldest first) run this tick: as many as get `room` each
/// of `free`, at least one, at most one more than `before` (admitted last tick and still
/// here). `room == 0`: all.
pub(crate) fn admit_count(running: usize, free: u64, room: u64, before: usize) -> usize {
    if room == 0 {
        return running;
    }
    let fit = usize::try_from(free / room).unwrap_or(usize::MAX).max(1);
    fit.min(before.saturating_add(1)).min(running)
}

impl Parking {
    /// Cgroups parked at the last periodic tick, oldest first.
    pub(crate) fn parked(&self) -> &[String] {
        &self.parked
    }

    /// No reservation this tick: nobody is parked (the caps are released as usual); what
    /// parking froze is thawed.
    pub(crate) fn clear(&mut self, ctx: &Ctx, plan: &mut Plan) {
        self.admitted.clear();
        self.parked.clear();
        self.freezer.thaw_all(ctx, plan);
    }

    /// Records the freezes and thaws that were written.
    pub(crate) fn committed(&mut self, decisions: &[Decision], ctx: &Ctx) {
        self.freezer.committed(decisions, ctx, |r| match r {
            Reason::Parked { by, .. } => Some(by.as_str()),
            _ => None,
        });
    }

    /// Plans the members' caps for reservation `r` (see the module doc).
    pub(crate) fn plan(&mut self, ctx: &Ctx, r: &Reservation, states: &States, pressed: bool, plan: &mut Plan) {
        // With swap the shares do not stall a member (the module doc): nobody is parked.
        let p = &ctx.cfg.policy;
        let room = if ctx.parent.swap_active && !p.park_with_swap { 0 } else { p.park_room };
        let (mut running, idle): (Vec<&CgroupObs>, Vec<&CgroupObs>) =
            r.members.iter().copied().partition(|c| c.is_populated());
        let age = |c: &CgroupObs| states.get(&c.id).map_or(ctx.now, |s| s.first_seen_ms);
        running.sort_by(|a, b| (age(a), &a.path).cmp(&(age(b), &b.path)));
        let held: u64 = r.members.iter().map(|c| c.usage_bytes).fold(0, u64::saturating_add);
        let free = r.budget.saturating_sub(held);
        let before = running.iter().filter(|c| self.admitted.contains(&c.id)).count();
        let k = admit_count(running.len(), free, room, before);
        let (admitted, parked) = running.split_at(k);

        let floor = ctx.floor();
        let cap_of = |c: &CgroupObs| c.usage_bytes.div_ceil(PAGE).saturating_mul(PAGE).max(floor);
        let parked_caps: u64 = parked.iter().map(|c| cap_of(c)).fold(0, u64::saturating_add);
        let mut why_parked = Vec::new();
        for (i, c) in parked.iter().enumerate() {
            let reason = Reason::Parked {
                by: r.by.path.clone(),
                expected_bytes: r.by_expected,
                source: r.by_source,
                place: i + 1,
                admitted: admitted.len(),
                budget_bytes: r.budget,
                free_bytes: free,
            };
            plan.lower_high(c, cap_of(c), reason.clone());
            why_parked.push((*c, reason));
        }
        let admitted_why = Reason::Reservation {
            by: r.by.path.clone(),
            declared_bytes: r.declared,
            budget_bytes: r.budget,
            members: admitted.len(),
            learned: r.by.learned_peak.clone(),
            source: r.by_source,
        };
        let not_parked: Vec<&CgroupObs> = admitted.iter().chain(idle.iter()).copied().collect();
        // Only a tier that opts into `freeze` has its parked members frozen as well.
        why_parked.retain(|(c, _)| ctx.tier(c).freeze);
        self.freezer.hold(ctx, &why_parked, &not_parked, Some(&admitted_why), plan);
        // Idle members (nothing runs in them) hold what they hold; they share with the
        // admitted ones, as before parking, so their caps do not change for nothing.
        let sharing: Vec<&CgroupObs> = admitted.iter().chain(idle.iter()).copied().collect();
        cap_at_shares(ctx, r, &sharing, r.budget.saturating_sub(parked_caps), pressed, plan);

        self.admitted = admitted.iter().map(|c| c.id).collect();
        self.parked = parked.iter().map(|c| c.path.clone()).collect();
    }
}

#[cfg(test)]
mod tests {
    use super::admit_count;

    const M: u64 = 1 << 20;

    #[test]
    fn admission_is_what_fits_at_least_one_and_one_more_per_tick() {
        // 300M free at 128M each: two fit; from none admitted, one comes in per tick.
        assert_eq!(admit_count(4, 300 * M, 128 * M, 0), 1);
        assert_eq!(admit_count(4, 300 * M, 128 * M, 1), 2);
        assert_eq!(admit_count(4, 300 * M, 128 * M, 2), 2);
        // Room shrinks: back to what fits at once, never below one.
        assert_eq!(admit_count(4, 100 * M, 128 * M, 3), 1);
        assert_eq!(admit_count(4, 0, 128 * M, 3), 1);
        // Never more than run.
        assert_eq!(admit_count(2, 10_000 * M, 128 * M, 2), 2);
        assert_eq!(admit_count(0, 10_000 * M, 128 * M, 0), 0);
        // park_room = 0: everyone, at once (equal shares).
        assert_eq!(admit_count(5, 0, 0, 0), 5);
    }
}
