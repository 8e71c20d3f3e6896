//! Lowering and raising memory.high of throttle tiers.
//!
//! Kernel semantics this relies on (mm/memcontrol.c):
//! - memory.high never fails a charge. A task that pushes its cgroup over high is sent into
//!   `mem_cgroup_handle_over_high()` on return to user mode: it reclaims from the cgroup and,
//!   if that does not bring usage under high, sleeps. The sleep (`calculate_high_delay`) grows
//!   with the square of the overage `(usage - high) / high`: for a nominal 64-page charge
//!   batch about 6 ms at 1 % (under 10 ms the kernel does not sleep at all), 0.16 s at 5 %,
//!   0.64 s at 10 %, capped at 2 s per return to user mode from about 18 %. Hence
//!   `step_ratio = 0.1`: one step (high = 90 % of usage, 11 % over) already costs ~0.8 s per
//!   return to user mode to a task that keeps allocating, without being a cliff.
//! - With no swap, anonymous memory cannot be reclaimed: a high far below usage frees
//!   nothing, it only makes the tasks sleep. Setting high at or a little below usage thus
//!   stops a low-priority cgroup's *growth* instead of OOM-killing it, which is the outcome
//!   the memcg_bpf_ops RFC gets from its `get_high_delay_ms` hook. With swap or page cache,
//!   the same write does reclaim (and the writer of memory.high does part of that reclaim
//!   synchronously, so the daemon's write can take a while).
//! - Lowering high further than ~15 % below usage adds no sleep for anon-only workloads (the
//!   2 s cap); it only matters for reclaimable memory, so `min_high` bounds how deep we go.
//!   It also means throttling alone cannot make room for a protected cgroup that keeps
//!   growing when the rest is unreclaimable: `headroom_guard` must cover that growth, or a
//!   tier must opt into `kill`.

use super::pressure::{Guard, Pressure};
use super::{Ctx, Plan, States};
use crate::config::TierIndex;
use crate::decision::{Knob, Reason};
use crate::obs::CgroupObs;
use crate::size::{page_down, Limit};

/// Throttle tiers strictly below `below` (all of them for `None`), lowest priority first,
/// each with its cgroups (in id order).
fn victim_tiers<'a>(ctx: &Ctx<'a>, below: Option<TierIndex>) -> Vec<Vec<&'a CgroupObs>> {
    let mut tiers: Vec<(TierIndex, Vec<&'a CgroupObs>)> = Vec::new();
    for (index, tier) in ctx.cfg.tiers.iter() {
        if tier.throttle && below.is_none_or(|b| index > b) {
            let cgs = ctx.cgs.iter().copied().filter(|c| c.tier == index).collect();
            tiers.push((index, cgs));
        }
    }
    tiers.into_iter().rev().map(|(_, cgs)| cgs).collect()
}

/// What a cut starts from: the current high, or usage when that is lower (lowering a high
/// the cgroup does not reach would not throttle anything).
fn base(c: &CgroupObs) -> u64 {
    c.current.high.bytes().map_or(c.usage_bytes, |h| h.min(c.usage_bytes))
}

/// Under pressure: the headroom guard's target and/or one proportional step.
pub(crate) fn cut(ctx: &Ctx, p: &Pressure, plan: &mut Plan) {
    let tiers = victim_tiers(ctx, p.victims_below());
    if let Some(g) = &p.guard {
        guard_cut(ctx, g, &tiers, plan);
    }
    let reason = match (p.top(), &p.parent_events) {
        (Some(top), _) => Reason::ProtectedPressure { by: top.cg.path.clone(), trigger: top.trigger },
        (None, Some(ev)) => Reason::ParentLimitEvents { max: ev.max, oom: ev.oom },
        (None, None) => return, // the guard alone computes an exact target, no extra step
    };
    step(ctx, &tiers, reason, plan);
}

/// One step on the lowest tier that still has room above the floor: each of its cgroups
/// gives up `step_ratio` of its usage (so in proportion to what it holds), down to
/// `min_high`. Higher tiers are only touched once every cgroup below is at its floor.
/// Rate-limited cgroups are proposed anyway and dropped at commit: the step then waits
/// rather than moving on to a higher tier.
fn step(ctx: &Ctx, tiers: &[Vec<&CgroupObs>], reason: Reason, plan: &mut Plan) {
    let floor = ctx.floor();
    let Some(tier) = tiers.iter().find(|cgs| cgs.iter().any(|c| base(c) > floor)) else {
        return;
    };
    for c in tier.iter().filter(|c| base(c) > floor) {
        let cut = (c.usage_bytes as f64 * ctx.cfg.policy.step_ratio).round() as u64;
        let high = page_down(base(c).saturating_sub(cut)).max(floor);
        plan.lower_high(c, high, reason.clone());
    }
}

/// Sets the highs so that the throttle tiers' usage fits under `limit - guard`: the excess is
/// taken from the lowest tier first, within a tier in proportion to usage, never below the
/// floor. Targets are computed from usage, not from the current high, so an unchanged
/// situation yields the same targets (no ratcheting while anon memory cannot shrink).
///
/// On a swapless host a cgroup the excess reaches is capped at what it holds instead
/// (`ParentObs::swapless`): a high below that frees no anonymous memory, it only puts the
/// tasks to sleep in the over-high penalty holding whatever they had, a short burst
/// included, for the protected tier's next burst to run into (measured: docs/experiments.md,
/// "Why memqos killed where none did not"). Capped, a task can still free its burst and run
/// on, and cannot grow; its page cache is still reclaimed first when it allocates. Which
/// tiers are capped is decided as before, lowest first.
fn guard_cut(ctx: &Ctx, g: &Guard, tiers: &[Vec<&CgroupObs>], plan: &mut Plan) {
    let floor = ctx.floor();
    let mut excess = g.excess();
    for tier in tiers {
        if excess == 0 {
            break;
        }
        let usage: Vec<u64> = tier.iter().map(|c| c.usage_bytes).collect();
        let room: Vec<u64> = usage.iter().map(|u| u.saturating_sub(floor)).collect();
        let take = excess.min(room.iter().fold(0, |a, &r| a.saturating_add(r)));
        for (c, cut) in tier.iter().zip(water_fill(take, &usage, &room)) {
            if cut > 0 {
                let target = if g.swapless { c.usage_bytes } else { c.usage_bytes - cut };
                plan.lower_high(c, page_down(target).max(floor), g.reason());
            }
        }
        excess -= take;
    }
}

/// Splits `total` in proportion to `weight`, no share above its `cap`; what a capped share
/// cannot take is split again among the others. Needs `total <= sum(cap)`.
pub(crate) fn water_fill(total: u64, weight: &[u64], cap: &[u64]) -> Vec<u64> {
    let mut out = vec![0u64; weight.len()];
    let mut open: Vec<usize> = (0..weight.len()).filter(|&i| cap[i] > 0).collect();
    let mut left = total;
    while left > 0 && !open.is_empty() {
        let sum: u128 = open.iter().map(|&i| u128::from(weight[i].max(1))).sum();
        let share = |i: usize| (u128::from(left) * u128::from(weight[i].max(1)) / sum) as u64;
        let full: Vec<usize> = open.iter().copied().filter(|&i| share(i) >= cap[i] - out[i]).collect();
        if full.is_empty() {
            let shares: Vec<u64> = open.iter().map(|&i| share(i)).collect();
            for (&i, s) in open.iter().zip(&shares) {
                out[i] += s;
            }
            left -= shares.iter().sum::<u64>();
            // Integer division leaves a few bytes; the first open share has room for them
            // (its share was below its cap), so every round makes progress.
            let first = open[0];
            let extra = left.min(cap[first] - out[first]);
            out[first] += extra;
            left -= extra;
            open.retain(|&i| out[i] < cap[i]);
        } else {
            for i in full {
                left -= cap[i] - out[i];
                out[i] = cap[i];
            }
            open.retain(|&i| out[i] < cap[i]);
        }
    }
    out
}

/// Calm for `hold_ms`, or nothing left to protect (`why` says which): raise memory.high of
/// the highest-priority throttled tier one step.
///
/// A step multiplies the high by `1 + release_ratio` but never leaves it below usage (a high
/// far below usage only makes tasks sleep). With a finite parent limit a step also stays
/// within the room left under the guard line (shared among the cgroups released together):
/// releasing must not itself walk the subtree back into the guard while the protected tier
/// still holds its memory. A cgroup goes back to its original value when the step reaches it,
/// or as soon as it clearly no longer presses on its limit (usage at most half the uncapped
/// step): from then on it is an ordinary cgroup that the guard watches like any other.
/// With `policy.admission` on, that shortcut waits until the parent holds at most half its
/// guard line: an armed call's ceiling is meant not to press until the call bursts, and
/// lifting it on a busy host because the call has not burst yet let the burst run the
/// budget into an OOM kill (docs/agent-host-admission-wait); meanwhile it rises only with
/// the room, step by step.
pub(crate) fn release(ctx: &Ctx, why: Reason, states: &States, plan: &mut Plan) {
    // Only what memqos may have lowered: a tighter high on another tier is someone else's.
    let ours = |c: &CgroupObs| ctx.tier(c).throttle || states[&c.id].ever_wrote(Knob::High);
    // A frozen cgroup (parked or queued) allocates nothing: raising it would only take a
    // part of the room the others are released into.
    let throttled: Vec<&CgroupObs> =
        ctx.cgs.iter().copied().filter(|c| c.current.high < c.original.high && ours(c) && !c.current.frozen).collect();
    let Some(top) = throttled.iter().map(|c| c.tier).min() else {
        return;
    };
    let released: Vec<&CgroupObs> = throttled.into_iter().filter(|c| c.tier == top).collect();
    let (room, busy) = match ctx.parent_limit() {
        Limit::Bytes(limit) => {
            let line = limit.saturating_sub(ctx.cfg.policy.headroom_guard);
            (line.saturating_sub(ctx.parent.usage_bytes) / released.len() as u64, ctx.parent.usage_bytes > line / 2)
        }
        Limit::Max => (u64::MAX, false),
    };
    let may_lift = !(ctx.cfg.policy.admission && busy);
    let grow = 1.0 + ctx.cfg.policy.release_ratio;
    for c in released {
        let Limit::Bytes(cur) = c.current.high else {
            continue;
        };
        let usage = c.usage_bytes;
        let stepped = ((cur as f64 * grow) as u64).max(usage);
        let target = if may_lift && usage.saturating_mul(2) <= stepped {
            c.original.high
        } else {
            let cap = page_down(usage.saturating_add(room));
            Limit::Bytes(page_down(stepped).min(cap)).min(c.original.high)
        };
        if target > c.current.high {
            plan.raise_high(c, target, why.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::water_fill;

    #[test]
    fn water_fill_is_proportional_and_capped() {
        assert_eq!(water_fill(60, &[400, 200], &[1000, 1000]), vec![40, 20]);
        // The small one can give only 5; the rest comes from the big one.
        assert_eq!(water_fill(100, &[400, 100], &[1000, 5]), vec![95, 5]);
        assert_eq!(water_fill(0, &[1, 2], &[5, 5]), vec![0, 0]);
        assert_eq!(water_fill(10, &[1, 1, 1], &[5, 5, 5]), vec![4, 3, 3]);
        let out = water_fill(15, &[3, 0, 9], &[5, 5, 5]);
        assert_eq!(out.iter().sum::<u64>(), 15);
        assert!(out.iter().all(|&x| x <= 5));
    }
}
