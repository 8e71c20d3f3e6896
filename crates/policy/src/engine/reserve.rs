//! Room reserved for a protected cgroup's expected peak (`expected_peak`).
//!
//! The headroom guard reacts to what the subtree holds now. On a swapless host that can be
//! too late: the lower tiers' anonymous memory cannot be taken back, and a best-effort task
//! can take hundreds of MiB between two samples (an agent's framework loading in its first
//! second). Once the protected cgroup's next burst no longer fits beside what they hold, an
//! OOM kill is certain, whatever memqos does next. The clairvoyant bound in
//! docs/experiments.md shows every kill measured so far was avoidable by holding lower tasks
//! back early enough, and at 70% of the summed peak "early enough" is the first second.
//!
//! A protected cgroup that declares how large it will grow (the tier's `expected_peak`, or
//! its `user.memqos.expected_peak` xattr) gets that room reserved from the start. So does one
//! of a `learn_peak` tier whose workload key, or failing that whose tier, the daemon has
//! seen peak before: the daemon fills in `expected_peak_bytes` from that history
//! (`CgroupObs::learned_peak` says which), one of a tier with a `default_peak`, and, while
//! it grows, one of a tier with a `first_sight_growth` ([`expectation`] gives the order).
//! The source is named in the reasons only. While it is populated and the parent's limit is
//! finite, the throttle-tier cgroups below its tier share the budget that is left:
//!
//!   budget = (limit - headroom_guard) - (usage outside those cgroups) - (reserved regrowth)
//!
//! where the reserved regrowth is, per protected cgroup, its reservation (protection or
//! declaration, the larger) minus what it uses now. The members that fit run (`engine::park`
//! parks the others at what they hold); each running member's memory.high is capped at its
//! share: its usage plus an equal part of what is free, or, when they already hold more than
//! the budget, its usage minus a part of the excess in proportion to usage (as the guard
//! does). Never below `min_high`. The caps are lowered at once and raised (when a member
//! leaves, say) only by at least `ws_granularity` and only while nothing else presses, so
//! they do not move on every page. While a reservation is in force it counts as pressure:
//! nothing is released until the declaring cgroup empties or goes, then release runs as
//! usual: after `hold_ms`, or at once if no protected cgroup is left running.
//!
//! The caps hold tasks back (a task over memory.high sleeps); they do not kill. A member that
//! stays pinned at its cap for its tier's stall bound is relieved like any throttled cgroup
//! (`engine::stall`), even into the reservation: a declared peak postpones the others, it
//! does not starve them forever.

use super::pressure::protected_regrowth;
use super::{Ctx, Plan};
use crate::config::TierIndex;
use crate::decision::Reason;
use crate::obs::{CgroupObs, LearnedPeak, PeakSource};
use crate::size::{page_down, Limit};

/// A reservation in force this tick.
pub(crate) struct Reservation<'a> {
    /// The declaring cgroup with the largest declaration (named in the log).
    pub by: &'a CgroupObs,
    /// Its expected peak and where that came from.
    pub by_expected: u64,
    pub by_source: PeakSource,
    /// Sum of the populated protected cgroups' declarations.
    pub declared: u64,
    /// What the members may hold together.
    pub budget: u64,
    /// Throttle-tier cgroups below the highest declaring tier.
    pub members: Vec<&'a CgroupObs>,
}

/// The declared expected peak of `c`, if it is a protected cgroup that declares one; never
/// more than the parent's limit (a larger one cannot be met anyway, and sums of them must
/// not overflow).
pub(crate) fn declared(ctx: &Ctx, c: &CgroupObs) -> Option<u64> {
    expectation(ctx, c).map(|(b, _)| b)
}

/// The expected peak of `c` and its source, strongest first: its declaration (xattr, then
/// the tier's `expected_peak`), what the daemon learned (its workload key's history, else
/// its tier's recent peaks: `CgroupObs::learned_peak` says which; the daemon fills these in
/// only where nothing is declared), then the tier's `default_peak`, and last, while it is
/// still growing, its tier's `first_sight_growth` times its peak so far.
pub(crate) fn expectation(ctx: &Ctx, c: &CgroupObs) -> Option<(u64, PeakSource)> {
    let tier = ctx.tier(c);
    if !tier.is_protected() {
        return None;
    }
    let ceiling = ctx.parent_limit().bytes().unwrap_or(u64::MAX);
    let learned = c.learned_peak.as_ref().map_or(PeakSource::Declared, LearnedPeak::source);
    let (bytes, source) = match (c.expected_peak_bytes, tier.expected_peak, tier.default_peak) {
        (Some(b), _, _) => (b, learned),
        (None, Some(b), _) => (b, PeakSource::Declared),
        (None, None, Some(b)) => (b, PeakSource::TierDefault),
        (None, None, None) => match ctx.first_sight.get(&c.id) {
            Some(&b) if c.is_populated() => (b, PeakSource::FirstSight),
            _ => return None,
        },
    };
    (bytes > 0).then_some((bytes.min(ceiling), source))
}

/// The room `c` reserves for its declaration: rounded up to `ws_granularity` as its
/// protection will be (`engine::protect`), so the budget is the same before and after that
/// write.
pub(crate) fn reserved(ctx: &Ctx, c: &CgroupObs) -> u64 {
    let g = ctx.cfg.policy.ws_granularity;
    declared(ctx, c).map_or(0, |d| d.div_ceil(g).saturating_mul(g))
}

/// The reservation of this tick: `None` without a finite parent limit, without a protected
/// cgroup that declares a peak and runs (or has not run yet: a cgroup made and declared
/// before its task starts reserves at once), or without a throttle-tier cgroup below it.
pub(crate) fn find<'a>(ctx: &Ctx<'a>) -> Option<Reservation<'a>> {
    let Limit::Bytes(limit) = ctx.parent_limit() else {
        return None;
    };
    let declaring: Vec<(&CgroupObs, (u64, PeakSource))> =
        ctx.cgs.iter().filter(|c| ctx.reserving(c)).filter_map(|&c| expectation(ctx, c).map(|d| (c, d))).collect();
    let top: TierIndex = declaring.iter().map(|(c, _)| c.tier).min()?;
    let (by, (by_expected, by_source)) =
        declaring.iter().max_by_key(|(c, (d, _))| (*d, std::cmp::Reverse(&c.path))).map(|(c, d)| (*c, *d))?;
    let members: Vec<&CgroupObs> = ctx.cgs.iter().copied().filter(|c| c.tier > top && ctx.tier(c).throttle).collect();
    if members.is_empty() {
        return None;
    }
    let held: u64 = members.iter().map(|c| c.usage_bytes).fold(0, u64::saturating_add);
    let others = ctx.parent.usage_bytes.saturating_sub(held);
    let line = limit.saturating_sub(ctx.cfg.policy.headroom_guard);
    let budget = line.saturating_sub(others.saturating_add(protected_regrowth(ctx)));
    let declared = declaring.iter().map(|(_, (d, _))| *d).fold(0, u64::saturating_add);
    Some(Reservation { by, by_expected, by_source, declared, budget, members })
}

/// Caps `members` (those of the reservation's that run: `engine::park`) at their shares of
/// `budget` (see the module doc). `pressed`: something else (protected pressure, the guard,
/// parent limit events) is acting this tick, so caps are only lowered.
pub(crate) fn cap_at_shares(
    ctx: &Ctx,
    r: &Reservation,
    members: &[&CgroupObs],
    budget: u64,
    pressed: bool,
    plan: &mut Plan,
) {
    let floor = ctx.floor();
    let usage: Vec<u64> = members.iter().map(|c| c.usage_bytes).collect();
    let reason = Reason::Reservation {
        by: r.by.path.clone(),
        declared_bytes: r.declared,
        budget_bytes: budget,
        members: members.len(),
        learned: r.by.learned_peak.clone(),
        source: r.by_source,
    };
    for (c, share) in members.iter().zip(shares(budget, &usage, floor)) {
        let cap = Limit::Bytes(share).min(c.original.high);
        if cap < c.current.high {
            plan.lower_high(c, share, reason.clone());
        } else if !pressed
            && c.current.high < c.original.high
            && !plan.has_high(c)
            && cap.bytes().unwrap_or(u64::MAX)
                >= c.current.high.bytes().unwrap_or(u64::MAX).saturating_add(ctx.cfg.policy.ws_granularity)
        {
            plan.raise_high(c, cap, reason.clone());
        }
    }
}

/// Each member's share of `budget`, page aligned, never below `floor`: its usage plus an
/// equal part of what is free, or its usage less a part of the excess in proportion to usage.
pub(crate) fn shares(budget: u64, usage: &[u64], floor: u64) -> Vec<u64> {
    let held: u64 = usage.iter().copied().fold(0, u64::saturating_add);
    if usage.is_empty() {
        return Vec::new();
    }
    if budget >= held {
        let each = (budget - held) / usage.len() as u64;
        return usage.iter().map(|u| page_down(u.saturating_add(each)).max(floor)).collect();
    }
    let room: Vec<u64> = usage.iter().map(|u| u.saturating_sub(floor)).collect();
    let take = (held - budget).min(room.iter().copied().fold(0, u64::saturating_add));
    let cuts = super::throttle::water_fill(take, usage, &room);
    usage.iter().zip(cuts).map(|(u, cut)| page_down(u - cut).max(floor)).collect()
}

#[cfg(test)]
mod tests {
    use super::shares;

    const M: u64 = 1 << 20;

    #[test]
    fn free_room_is_split_equally_on_top_of_usage() {
        assert_eq!(shares(200 * M, &[0, 0], 32 * M), vec![100 * M, 100 * M]);
        assert_eq!(shares(200 * M, &[100 * M, 20 * M], 32 * M), vec![140 * M, 60 * M]);
    }

    #[test]
    fn an_overdrawn_budget_is_taken_in_proportion_to_usage_down_to_the_floor() {
        assert_eq!(shares(150 * M, &[100 * M, 100 * M], 32 * M), vec![75 * M, 75 * M]);
        // Nothing can go below the floor, even when the budget asks for it.
        assert_eq!(shares(10 * M, &[40 * M, 10 * M], 32 * M), vec![32 * M, 32 * M]);
        assert_eq!(shares(0, &[0, 0, 0], 32 * M), vec![32 * M; 3]);
    }
}
