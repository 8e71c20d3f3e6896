//! Thrashing lower cgroups wait while a protected cgroup runs (tiers with `freeze_thrashing`).
//!
//! memory.low keeps a protected cgroup's pages in memory, so a lower cgroup that does not
//! fit beside it reclaims from itself: on a host with swap it pushes out and faults back
//! its own pages, over and over. It then makes almost no progress (the RFC demo's low side
//! did 0.00x of its solo bogo-ops/s under memqos), and its reclaim, its swap I/O and the
//! kernel threads that serve them take CPU and disk the protected cgroup shares, which no
//! memory knob reaches. Freezing it stops that and costs it little, since it was not getting
//! anywhere. Measured in the RFC demo (docs/experiments.md, "Freezing the thrashing low
//! side"): the low side was frozen for most of each run, and the high side ran about as fast
//! as without the rule; what held it back there was not the low side's activity.
//!
//! Per periodic tick, while a protected cgroup of a higher tier is populated: a populated
//! cgroup of a `freeze_thrashing` tier *thrashes* when its own memory.pressure `full avg10`
//! is at or above `policy.stall_psi_full_avg10` (the line the stall bound uses for "makes
//! no progress"), or when it refaults (memory.stat `workingset_refault_*`: pages reclaimed or
//! swapped out and needed again) at least `policy.thrash_refault_rate` per second averaged
//! as PSI averages avg10 (about ten seconds). The refaults are needed: a swap-in counts as a
//! memory stall only for a page that was active when it went out, and on 7.2 the demo's low
//! side refaulted about 18 MiB/s at a memory PSI full avg10 of 2% (a first probe, on PSI
//! alone, froze nothing). A thrashing cgroup is frozen, reason `thrashing` (beside the
//! highest tier's largest protected cgroup). It is thawed when no protected cgroup above it
//! runs any more, or after its tier's `stall.after_ms` frozen (stall bound); then it runs at
//! least [`REST_MS`] (one PSI avg10 window, so the next decision rests on what it did since
//! the thaw) and is frozen again only if it thrashes again.
//!
//! Failure modes: a cgroup that thrashes but still gets somewhere (a large sequential
//! scan through swap) is frozen too, and waits up to a bound each time; a frozen cgroup
//! keeps its pages, so on a swapless host the rule frees no memory (there the lower cgroup
//! stalls in reclaim of its page cache, and freezing it only stops that); a thrashing
//! cgroup that holds a lock the protected cgroup needs stalls it for up to a bound.

use std::collections::BTreeMap;

use super::freezer::Freezer;
use super::{Ctx, Plan};
use crate::decision::{Decision, Reason};
use crate::obs::{CgroupId, CgroupObs};

/// How long a cgroup thawed at its stall bound runs before it may be frozen again for
/// thrashing: PSI's avg10 window, so its pressure then is its own since the thaw.
pub const REST_MS: u64 = 10_000;

/// The refault average's time constant: PSI's avg10 window.
const AVERAGE_MS: f64 = 10_000.0;

#[derive(Debug)]
pub(crate) struct Thrash {
    freezer: Freezer,
    /// Frozen for thrashing at the last periodic tick, by path (for status).
    frozen: Vec<String>,
    /// Refaulted bytes per second, averaged with an exponential decay of [`AVERAGE_MS`], per
    /// cgroup of a `freeze_thrashing` tier.
    refaults: BTreeMap<CgroupId, f64>,
}

impl Default for Thrash {
    fn default() -> Thrash {
        Thrash { freezer: Freezer::resting(REST_MS), frozen: Vec::new(), refaults: BTreeMap::new() }
    }
}

impl Thrash {
    pub(crate) fn frozen(&self) -> &[String] {
        &self.frozen
    }

    /// Folds this tick's refaults of the `freeze_thrashing` cgroups into their averages.
    fn average_refaults(&mut self, ctx: &Ctx) {
        self.refaults.retain(|id, _| ctx.get_id(*id).is_some());
        for &c in &ctx.cgs {
            if !ctx.tier(c).freeze_thrashing || c.refault_window_ms == 0 {
                continue;
            }
            let window = c.refault_window_ms as f64;
            let rate = c.refault_delta_bytes as f64 * 1000.0 / window;
            let keep = (-window / AVERAGE_MS).exp();
            let avg = self.refaults.entry(c.id).or_insert(0.0);
            *avg = *avg * keep + rate * (1.0 - keep);
        }
    }

    /// Plans the freezes and thaws (see the module doc).
    pub(crate) fn plan(&mut self, ctx: &Ctx, plan: &mut Plan) {
        self.average_refaults(ctx);
        let line = ctx.cfg.policy.stall_psi_full_avg10;
        let refault_line = ctx.cfg.policy.thrash_refault_rate;
        let refaulting = |c: &CgroupObs| self.refaults.get(&c.id).map_or(0, |&r| r as u64);
        // The protected cgroup a thrashing one at `tier` would run beside: the highest
        // tier's largest populated one above it. That is the highest tier's largest of all,
        // if its tier is above `tier` (found once: not a pass over the tree per cgroup).
        let first = ctx
            .cgs
            .iter()
            .copied()
            .filter(|p| ctx.tier(p).is_protected() && p.is_populated())
            .min_by(|a, b| (a.tier, b.usage_bytes, &a.path).cmp(&(b.tier, a.usage_bytes, &b.path)));
        let beside = |tier| first.filter(|p| p.tier < tier);
        let thrashing = |c: &CgroupObs| {
            c.psi.full.is_some_and(|f| f.avg10 >= line) || (refault_line > 0 && refaulting(c) >= refault_line)
        };
        let mut waiting: Vec<(&CgroupObs, Reason)> = Vec::new();
        let mut going: Vec<&CgroupObs> = Vec::new();
        for &c in &ctx.cgs {
            let tier = ctx.tier(c);
            let ours = self.freezer.froze(c.id);
            if !(tier.throttle && tier.freeze_thrashing) {
                // Moved to a tier without the option by a reload.
                if ours {
                    going.push(c);
                }
                continue;
            }
            match beside(c.tier) {
                Some(p) if c.is_populated() && (ours || thrashing(c)) => {
                    let psi_full_avg10 = c.psi.full.map_or(0.0, |f| f.avg10);
                    let refault_bytes_per_s = refaulting(c);
                    waiting
                        .push((c, Reason::Thrashing { beside: p.path.clone(), psi_full_avg10, refault_bytes_per_s }));
                }
                _ if ours => going.push(c),
                _ => {}
            }
        }
        // A frozen cgroup's pressure decays (its tasks neither run nor stall): once frozen,
        // it stays in `waiting` until its bound or its protected neighbour ends.
        self.freezer.hold(ctx, &waiting, &going, None, plan);
    }

    /// Records the freezes and thaws that were written.
    pub(crate) fn committed(&mut self, decisions: &[Decision], ctx: &Ctx) {
        self.freezer.committed(decisions, ctx, |r| match r {
            Reason::Thrashing { beside, .. } => Some(beside.as_str()),
            _ => None,
        });
        self.frozen = ctx.cgs.iter().filter(|c| self.freezer.froze(c.id)).map(|c| c.path.clone()).collect();
    }
}
