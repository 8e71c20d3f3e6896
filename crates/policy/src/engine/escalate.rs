//! Opt-in escalation beyond memory.high: freeze, then kill; and thawing.
//!
//! A frozen cgroup allocates nothing and competes for nothing, and its pages go cold (so with
//! swap or page cache they are reclaimed first). It still holds its memory; only a kill frees
//! anon memory without swap, which is why kill is a separate, explicit opt-in.

use super::pressure::{Pressure, Pressured};
use super::{Ctx, Plan, States};
use crate::decision::{Action, Knob, Reason};
use crate::obs::CgroupObs;

/// Thaw what we froze once its stall is over, or when the stalling cgroup is gone.
pub(crate) fn thaw(ctx: &Ctx, p: &Pressure, states: &States, plan: &mut Plan) {
    for &c in &ctx.cgs {
        let Some(by) = &states[&c.id].frozen_by else {
            continue;
        };
        let reason = if ctx.get(by).is_none() {
            Reason::CauseGone { by: by.clone() }
        } else if p.protected.is_empty() {
            Reason::Relieved { by: by.clone() }
        } else {
            continue;
        };
        plan.push(c, Action::Freeze(false), reason);
    }
}

/// When the engine last escalated, so each step waits a full period.
#[derive(Debug, Default)]
pub(crate) struct Ladder {
    pub last_freeze_ms: Option<u64>,
    pub last_kill_ms: Option<u64>,
}

/// `top` has stalled since `since_ms` without a calm tick. Every `freeze_after_ms` of that,
/// freeze one more cgroup of a `freeze = true` tier below it; every `kill_after_ms`, kill one
/// of a `kill = true` tier. Victims: lowest tier first, then the biggest.
pub(crate) fn escalate(ctx: &Ctx, top: &Pressured, since_ms: u64, ladder: &Ladder, states: &States, plan: &mut Plan) {
    let policy = &ctx.cfg.policy;
    let stalled_for_ms = ctx.now.saturating_sub(since_ms);
    let reason = Reason::Stalled { by: top.cg.path.clone(), stalled_for_ms };
    let due = |after: u64, last: Option<u64>| {
        stalled_for_ms >= after && last.is_none_or(|t| ctx.now.saturating_sub(t) >= after)
    };
    let interval = policy.min_write_interval_ms;
    let victims = |flag: fn(&crate::config::Tier) -> bool, knob: Knob| {
        let mut v: Vec<&CgroupObs> = ctx
            .cgs
            .iter()
            .copied()
            .filter(|c| c.tier > top.cg.tier && flag(ctx.tier(c)))
            .filter(|c| states[&c.id].may_write(knob, ctx.now, interval))
            .collect();
        v.sort_by(|a, b| (b.tier, b.usage_bytes, &a.path).cmp(&(a.tier, a.usage_bytes, &b.path)));
        v
    };
    if due(policy.freeze_after_ms, ladder.last_freeze_ms) {
        let pick = victims(|t| t.freeze, Knob::Freeze).into_iter().find(|c| !c.current.frozen);
        if let Some(c) = pick {
            plan.push(c, Action::Freeze(true), reason.clone());
        }
    }
    if due(policy.kill_after_ms, ladder.last_kill_ms) {
        // A cgroup already at the floor has little left to free.
        let floor = ctx.floor();
        let pick = victims(|t| t.kill, Knob::Kill).into_iter().find(|c| c.usage_bytes > floor);
        if let Some(c) = pick {
            plan.push(c, Action::Kill, reason);
        }
    }
}
