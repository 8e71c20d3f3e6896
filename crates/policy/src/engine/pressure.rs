//! Who is under pressure this tick: protected cgroups, and the parent as a whole.

use super::Ctx;
use crate::config::TierIndex;
use crate::decision::{Reason, Trigger};
use crate::obs::{CgroupObs, SignalEvent};
use crate::size::Limit;
use memqos_cgroupfs::MemoryEvents;

/// A protected cgroup under pressure.
pub(crate) struct Pressured<'a> {
    pub cg: &'a CgroupObs,
    pub trigger: Trigger,
}

/// The parent is within `headroom_guard` of its limit.
pub(crate) struct Guard {
    pub usage: u64,
    pub limit: u64,
    pub guard: u64,
    /// `ParentObs::swapless`: cuts are capped at usage (`throttle::guard_cut`).
    pub swapless: bool,
}

impl Guard {
    /// How far the subtree is above the guard line: what the lower tiers must give up.
    pub fn excess(&self) -> u64 {
        self.usage.saturating_sub(self.limit.saturating_sub(self.guard))
    }

    pub fn reason(&self) -> Reason {
        Reason::HeadroomGuard {
            parent_usage_bytes: self.usage,
            limit_bytes: self.limit,
            headroom_bytes: self.limit.saturating_sub(self.usage),
            guard_bytes: self.guard,
            swapless: self.swapless,
        }
    }
}

pub(crate) struct Pressure<'a> {
    /// Highest priority first (tier, then id).
    pub protected: Vec<Pressured<'a>>,
    pub guard: Option<Guard>,
    /// Parent memory.events with `max` or `oom` hits.
    pub parent_events: Option<MemoryEvents>,
}

impl Pressure<'_> {
    /// Any pressure at all: holds off release and restarts the hold timer.
    pub fn any(&self) -> bool {
        !self.protected.is_empty() || self.guard.is_some() || self.parent_events.is_some()
    }

    /// The highest-priority pressured protected cgroup.
    pub fn top(&self) -> Option<&Pressured<'_>> {
        self.protected.first()
    }

    /// Only tiers strictly below this one may be throttled; `None` (parent-level pressure
    /// only) means every throttle tier. The pressured tier and those above it are never cut.
    pub fn victims_below(&self) -> Option<TierIndex> {
        self.top().map(|p| p.cg.tier)
    }
}

pub(crate) fn detect<'a>(ctx: &Ctx<'a>, elapsed_ms: Option<u64>) -> Pressure<'a> {
    let mut protected: Vec<Pressured<'a>> = ctx
        .cgs
        .iter()
        .filter(|c| ctx.tier(c).is_protected())
        .filter_map(|&c| trigger(ctx, c, elapsed_ms).map(|trigger| Pressured { cg: c, trigger }))
        .collect();
    protected.sort_by(|a, b| (a.cg.tier, &a.cg.path).cmp(&(b.cg.tier, &b.cg.path)));

    let guard = match (ctx.parent_limit(), ctx.cfg.policy.headroom_guard) {
        (Limit::Bytes(limit), guard) if guard > 0 => {
            let usage = ctx.parent.usage_bytes.saturating_add(protected_regrowth(ctx));
            let g = Guard { usage, limit, guard, swapless: ctx.parent.swapless };
            (g.excess() > 0).then_some(g)
        }
        _ => None,
    };
    let ev = ctx.parent.events_delta;
    let parent_events = (ctx.cfg.signals.events && (ev.max > 0 || ev.oom > 0)).then_some(ev);
    Pressure { protected, guard, parent_events }
}

/// Room protected cgroups are entitled to grow back into: their protection (memory.low/min,
/// which follows their recent working-set peak) minus what they use now. The guard counts it
/// as used, so lower tiers are stopped while a protected cgroup is between bursts, not when
/// its next burst is already running into the limit: with no swap, the anonymous memory a
/// lower tier has grabbed cannot be taken back, and the burst would end in an OOM kill.
/// A cgroup with no process left cannot grow back and reserves nothing. A declared
/// `expected_peak` reserves at least that much, from the tick it is seen (`engine::reserve`).
pub(crate) fn protected_regrowth(ctx: &Ctx) -> u64 {
    regrowths(ctx).fold(0, u64::saturating_add)
}

/// Each protected cgroup's room to grow back into (see [`protected_regrowth`]).
pub(crate) fn regrowths<'a>(ctx: &'a Ctx) -> impl Iterator<Item = u64> + 'a {
    ctx.cgs.iter().filter(|c| ctx.tier(c).is_protected() && ctx.reserving(c)).map(|c| {
        let protection = if c.is_populated() { c.current.low.max(c.current.min).bytes().unwrap_or(0) } else { 0 };
        let reserved = protection.max(super::reserve::reserved(ctx, c));
        reserved.saturating_sub(c.usage_bytes)
    })
}

/// Why `c` (a protected cgroup) counts as under pressure, if it does.
fn trigger(ctx: &Ctx, c: &CgroupObs, elapsed_ms: Option<u64>) -> Option<Trigger> {
    let (signals, policy) = (&ctx.cfg.signals, &ctx.cfg.policy);
    if self_limited(c, policy.headroom_guard) {
        return None;
    }
    if signals.psi {
        // avg10 is a 10 s average: after we relieve the pressure it stays high for seconds.
        // Requiring some stall since the previous tick keeps us from cutting on its tail.
        if c.psi.some.avg10 >= policy.pressure_psi_some_avg10 && c.psi_some_delta_us > 0 {
            return Some(Trigger::PsiSomeAvg10 { value: c.psi.some.avg10 });
        }
        if let Some(e) = elapsed_ms {
            let pct = c.psi_some_delta_us as f64 / (e as f64 * 10.0);
            if pct >= policy.pressure_stall_pct {
                return Some(Trigger::StallRate { pct });
            }
        }
        if c.signals.contains(&SignalEvent::PsiTrigger) {
            return Some(Trigger::PsiTrigger);
        }
    }
    // Not behind signals.psi: this is what PSI can miss (see Policy::pressure_refault_rate).
    let (rate, window) = (policy.pressure_refault_rate, c.refault_window_ms);
    if rate > 0 && window > 0 {
        let bytes_per_s = c.refault_delta_bytes.saturating_mul(1000) / window;
        if bytes_per_s >= rate {
            return Some(Trigger::Refault { bytes_per_s });
        }
    }
    if signals.bpf {
        let bpf = c.signals.iter().find_map(|s| match s {
            SignalEvent::BpfThreshold { value, counter } => Some((*value, *counter)),
            _ => None,
        });
        if let Some((value, counter)) = bpf {
            return Some(Trigger::Bpf { value, counter });
        }
    }
    if signals.events && c.events_delta.low > 0 {
        return Some(Trigger::LowEvents { count: c.events_delta.low });
    }
    None
}

/// A cgroup within `guard` bytes of its own memory.high/max stalls on its own limit;
/// throttling its siblings cannot help it (this includes a protected middle tier that we
/// throttled on behalf of a higher one), so its pressure is not acted on.
fn self_limited(c: &CgroupObs, guard: u64) -> bool {
    match c.current.high.min(c.current.max) {
        Limit::Bytes(own) => c.usage_bytes.saturating_add(guard) >= own,
        Limit::Max => false,
    }
}
