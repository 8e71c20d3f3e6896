//! Freezing to make a cgroup wait its turn (parking's `freeze` tiers, the held queue), with
//! the bound on how long: what a rule froze, since when and for whom, thawed when its turn
//! comes, when the one it waited for is gone, or after its tier's `stall.after_ms` frozen
//! (and not frozen again for another bound, or the rule's own rest).

use std::collections::BTreeMap;

use super::{Ctx, Plan};
use crate::decision::{Action, Decision, Reason};
use crate::obs::{CgroupId, CgroupObs};

#[derive(Debug, Default)]
pub(crate) struct Freezer {
    /// Frozen by this rule: since when, and for whom (a path).
    frozen: BTreeMap<CgroupId, (u64, String)>,
    /// Thawed by the stall bound: not frozen again before then.
    no_freeze_until: BTreeMap<CgroupId, u64>,
    /// How long a cgroup thawed at the bound runs before it may be frozen again; `None`:
    /// another bound.
    rest_ms: Option<u64>,
}

impl Freezer {
    /// A freezer whose cgroups, thawed at the bound, run `rest_ms` before the rule may
    /// freeze them again (instead of another bound).
    pub(crate) fn resting(rest_ms: u64) -> Freezer {
        Freezer { rest_ms: Some(rest_ms), ..Freezer::default() }
    }

    pub(crate) fn froze(&self, id: CgroupId) -> bool {
        self.frozen.contains_key(&id)
    }

    /// Thaws `c` if this rule froze it: relieved when the one it waited for is still there,
    /// its cause gone when not.
    fn thaw(&self, ctx: &Ctx, c: &CgroupObs, plan: &mut Plan) {
        let Some((_, by)) = self.frozen.get(&c.id) else { return };
        if plan.has_freeze(c) {
            return;
        }
        let reason = if ctx.get(by).is_some() {
            Reason::Relieved { by: by.clone() }
        } else {
            Reason::CauseGone { by: by.clone() }
        };
        plan.push(c, Action::Freeze(false), reason);
    }

    /// Nobody waits any more: everything this rule froze is thawed.
    pub(crate) fn thaw_all(&mut self, ctx: &Ctx, plan: &mut Plan) {
        self.frozen.retain(|id, _| ctx.get_id(*id).is_some());
        for id in self.frozen.keys() {
            if let Some(c) = ctx.get_id(*id) {
                self.thaw(ctx, c, plan);
            }
        }
    }

    /// Freezes `waiting` (each with the reason it waits) and thaws `going` if this rule froze
    /// them (`going_reason`, or relieved/cause gone when `None`). A cgroup frozen for its
    /// tier's `stall.after_ms` is thawed with a stall-bound reason instead. Callers pass
    /// only cgroups whose tier consents to being frozen.
    pub(crate) fn hold(
        &mut self,
        ctx: &Ctx,
        waiting: &[(&CgroupObs, Reason)],
        going: &[&CgroupObs],
        going_reason: Option<&Reason>,
        plan: &mut Plan,
    ) {
        self.frozen.retain(|id, _| ctx.get_id(*id).is_some());
        self.no_freeze_until.retain(|id, until| ctx.get_id(*id).is_some() && ctx.now < *until);
        for (c, reason) in waiting {
            // Escalation (or its thaw) decides this tick's freeze of `c` if it has one.
            if plan.has_freeze(c) {
                continue;
            }
            let tier = ctx.tier(c);
            match self.frozen.get(&c.id) {
                Some(&(since, _)) if ctx.now.saturating_sub(since) >= tier.stall.after_ms => {
                    let bound = Reason::StallBound {
                        stalled_for_ms: ctx.now - since,
                        bound_ms: tier.stall.after_ms,
                        usage_bytes: c.usage_bytes,
                        high_bytes: c.current.high.bytes().unwrap_or(u64::MAX),
                        psi_full_avg10: c.psi.full.map_or(0.0, |f| f.avg10),
                    };
                    plan.push(c, Action::Freeze(false), bound);
                }
                Some(_) => {}
                None if !c.current.frozen && !self.no_freeze_until.contains_key(&c.id) => {
                    plan.push(c, Action::Freeze(true), reason.clone());
                }
                None => {}
            }
        }
        for c in going {
            match going_reason {
                Some(r) if self.froze(c.id) && !plan.has_freeze(c) => plan.push(c, Action::Freeze(false), r.clone()),
                Some(_) => {}
                None => self.thaw(ctx, c, plan),
            }
        }
    }

    /// Records the freezes (those whose reason `ours` recognises) and thaws that were
    /// written (the write interval may hold one back for a tick; it is planned again then).
    pub(crate) fn committed(&mut self, decisions: &[Decision], ctx: &Ctx, ours: impl Fn(&Reason) -> Option<&str>) {
        let now = ctx.now;
        for d in decisions {
            // Decisions come from this tick's cgroups (`commit`).
            let Some(id) = ctx.get_id(d.id).map(|c| c.id) else { continue };
            match &d.action {
                Action::Freeze(true) => {
                    if let Some(by) = ours(&d.reason) {
                        self.frozen.insert(id, (now, by.to_string()));
                    }
                }
                Action::Freeze(false) => {
                    let was_ours = self.frozen.remove(&id).is_some();
                    if let (Reason::StallBound { bound_ms, .. }, true) = (&d.reason, was_ours) {
                        self.no_freeze_until.insert(id, now.saturating_add(self.rest_ms.unwrap_or(*bound_ms)));
                    }
                }
                _ => {}
            }
        }
    }
}
