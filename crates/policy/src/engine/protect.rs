//! memory.low / memory.min of protected tiers follow the recent working set.
//!
//! The RFC's `below_low`/`below_min` hooks let BPF declare a high-priority cgroup protected so
//! reclaim skips it. Stock kernels decide the same thing from numbers: a cgroup whose usage
//! is under its effective memory.low is skipped by reclaim while anything unprotected is
//! left (`mem_cgroup_below_low`), and under memory.min it is never reclaimed
//! (`mem_cgroup_below_min`). So we keep low/min just above what the cgroup recently used:
//! its working set is protected, anything beyond is fair game, and a cgroup that shrinks
//! gives its protection back (work-conserving, as memory.low was designed to be).
//!
//! Effective protection is also bounded by the ancestors' (`memory_recursiveprot`, or the
//! parent's own memory.low): that is the daemon's business, the engine writes only leaves.

use super::{Ctx, Plan, States};
use crate::config::Protect;
use crate::decision::{Action, Reason};
use crate::obs::CgroupObs;
use crate::size::Limit;

pub(crate) fn plan(ctx: &Ctx, states: &States, plan: &mut Plan) {
    for &c in &ctx.cgs {
        let protect = ctx.tier(c).protect;
        if protect == Protect::None {
            continue;
        }
        let peak = states[&c.id].ws.max();
        let target = target(ctx, c, peak, protect);
        let (current, action) = match protect {
            Protect::Low => (c.current.low, Action::Low(target)),
            _ => (c.current.min, Action::Min(target)),
        };
        if target != current {
            let window_ms = ctx.cfg.policy.ws_window_ms;
            plan.push(c, action, Reason::WorkingSet { peak_bytes: peak, window_ms });
        }
    }
}

/// Nothing running in it: the original (a lingering cgroup of a finished task keeps no claim on
/// memory its task will never use again). Otherwise `peak * ws_margin` (at least the declared
/// `expected_peak`), rounded up to `ws_granularity` (so it moves in steps, not on every
/// page; the window's peak only drops when a whole window passes lower, which is the
/// hysteresis on the way down), clamped to the parent's limit and the cgroup's own
/// memory.max/high (protection above what it may use is meaningless), and never below what
/// the administrator had set.
fn target(ctx: &Ctx, c: &CgroupObs, peak: u64, protect: Protect) -> Limit {
    let original = match protect {
        Protect::Low => c.original.low,
        _ => c.original.min,
    };
    if !c.is_populated() {
        return original;
    }
    let p = &ctx.cfg.policy;
    let declared = super::reserve::declared(ctx, c).unwrap_or(0);
    let want = ((peak as f64 * p.ws_margin).ceil() as u64).max(declared);
    let rounded = want.div_ceil(p.ws_granularity).saturating_mul(p.ws_granularity);
    let bound = ctx.parent_limit().min(c.current.max).min(c.current.high);
    Limit::Bytes(rounded).min(bound).max(original)
}
