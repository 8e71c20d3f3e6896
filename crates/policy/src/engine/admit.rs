//! Admission allowances: what a new cgroup of each throttle tier may charge before the daemon
//! has seen it (`policy.admission`).
//!
//! A tool call's burst can last less than one sampling interval (40-80 ms in the agent-host
//! replays at 25x): by the time the next tick sees its cgroup, the subtree has hit its limit
//! and the kernel has OOM-killed. Only a memory.high already on the cgroup when the call
//! starts throttles such a burst at kernel speed. The daemon publishes, per throttle tier,
//! a memory.high for the next new cgroup; `memqos run` writes it before the call starts.
//!
//!   room      = (limit - headroom_guard) - parent usage - protected regrowth - promised
//!   allowance = max(page_down(room * admission_share), admission_floor)
//!
//! with `limit` the parent's (the tighter of memory.max and memory.high) and the protected
//! regrowth the room the guard already keeps for protected cgroups (their protection or
//! expected peak above what they use: `pressure::protected_regrowth`; with
//! `admission_regrowth = "largest"` only the largest single one: twelve agent runtimes,
//! each protected at 1.1x its peak, reserve more than a 2.5 GiB budget together, though
//! they do not all grow back at once) and `promised` what
//! throttle-tier cgroups under a ceiling of ours may still grow to (memory.high above usage,
//! original `max`; an armed call: what it was armed at, while it lives, whatever its
//! memory.high is now): a call armed a tick ago holds almost nothing yet, but its allowance is
//! promised, and without counting it every waiting call would start on the same room one
//! tick after another. `admission_share`
//! leaves room for other calls starting within the same interval, which all see the same
//! allowance. While lower cgroups are parked for a reservation (`engine::park`), a new
//! cgroup of a parked tier, or of a tier below it, gets the floor only: it must not jump
//! the queue. No finite parent limit: nothing to keep under, no allowances.
//!
//! An allowance also says whether a new call should wait before it starts: when the room's
//! share is below the floor, or its tier is queued behind a parked one. A call started then
//! is armed at the floor on a host with no room for it, held there, and still OOM-killed
//! once the protected tiers grow (docs/agent-host-admission); one that has not started yet
//! holds no memory, so it cannot be killed. `memqos run` waits while `wait` is set.
//!
//! A call that declares its peak (`memqos run --expect`) passes the door on the whole room
//! (published beside the allowance) against its declaration instead of on `wait`: it waits
//! while the room is smaller, starts when it covers it even where the share is below the
//! floor, and is armed at its declaration: a call known to need 1.5 GiB gains nothing from
//! starting into 300 MiB, where it is held, then killed once the protected tiers grow, and a
//! 50 MiB call loses 12 s waiting beside 200 MiB free. `memqos run` keeps the ledger of what
//! calls took from a tick's room until this engine counts them as promised.
//!
//! The floor keeps small calls from ever being held. A call larger than its allowance waits
//! at it (the kernel's over-high penalty) until the daemon raises it as room frees
//! (`throttle::release`), or its tier's stall bound acts (`engine::stall`): the daemon takes
//! the armed value as its own cut, original `max`.

use std::collections::BTreeSet;

use super::Ctx;
use crate::config::{AdmissionRegrowth, Config, TierIndex};
use crate::obs::ParentObs;
use crate::size::{page_down, Limit, PAGE};

/// One throttle tier's allowance for its next new cgroup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allowance {
    pub tier: TierIndex,
    pub bytes: u64,
    /// The whole room (not its share), page-aligned; the floor while the tier is queued. A
    /// call that declares its peak (`memqos run --expect`) starts when this, less what calls
    /// took from it since (`memqos run`'s ledger), covers it, and waits until then.
    pub room: u64,
    /// No room for a new cgroup of this tier now: a call should not start yet.
    pub wait: bool,
}

/// What the allowances depend on besides the parent, as of the last periodic tick: the
/// daemon recomputes them from a fresher parent read on its calm path.
#[derive(Debug, Default)]
pub(crate) struct Basis {
    /// `pressure::protected_regrowth` of the last periodic tick (the largest single one
    /// with `admission_regrowth = "largest"`).
    pub regrowth: u64,
    /// Tiers with a parked cgroup.
    pub parked_tiers: BTreeSet<TierIndex>,
    /// [`promised`] of the last periodic tick.
    pub promised: u64,
}

impl Basis {
    pub fn of(ctx: &Ctx, parked: &[String]) -> Basis {
        let parked_tiers = parked.iter().filter_map(|p| ctx.get(p)).map(|c| c.tier).collect();
        let regrowth = match ctx.cfg.policy.admission_regrowth {
            AdmissionRegrowth::All => super::pressure::protected_regrowth(ctx),
            AdmissionRegrowth::Largest => super::pressure::regrowths(ctx).max().unwrap_or(0),
        };
        Basis { regrowth, parked_tiers, promised: promised(ctx) }
    }
}

/// What throttle-tier cgroups may still charge under a memory.high of ours (original `max`:
/// an armed call, or a cut raised as room freed), or up to what an armed call was armed at,
/// whatever its memory.high is now: the room already given away. A cut lowers the ceiling
/// for a while and a release lifts it (to `max` once the root is less than half full), but
/// the call still grows to what it was admitted at; counting only the ceiling of the moment
/// let a second large call in on the room a first one was about to take, and both were
/// killed when they grew (docs/agent-host-admission-declared-promise, 7.2 run 2).
fn promised(ctx: &Ctx) -> u64 {
    ctx.cgs
        .iter()
        .filter(|c| ctx.tier(c).throttle && c.original.high == Limit::Max)
        .filter_map(|c| {
            let promise = match (c.current.high.bytes(), c.armed_bytes) {
                (Some(high), armed) => high.max(armed.unwrap_or(0)),
                (None, Some(armed)) => armed,
                (None, None) => return None,
            };
            Some(promise.saturating_sub(c.usage_bytes))
        })
        .fold(0, u64::saturating_add)
}

/// The allowances for `parent` (see the module doc); empty when `admission` is off or the
/// parent has no finite limit.
pub(crate) fn allowances(cfg: &Config, basis: &Basis, parent: &ParentObs) -> Vec<Allowance> {
    let policy = &cfg.policy;
    let Limit::Bytes(limit) = parent.max.min(parent.high) else {
        return Vec::new();
    };
    if !policy.admission {
        return Vec::new();
    }
    let floor = policy.admission_floor.div_ceil(PAGE).saturating_mul(PAGE);
    let line = limit.saturating_sub(policy.headroom_guard);
    let room = line.saturating_sub(parent.usage_bytes).saturating_sub(basis.regrowth).saturating_sub(basis.promised);
    let share = page_down((room as f64 * policy.admission_share) as u64);
    let queue = basis.parked_tiers.first().copied();
    cfg.tiers
        .iter()
        .filter(|(_, t)| t.throttle)
        .map(|(tier, _)| {
            if queue.is_some_and(|q| tier >= q) {
                Allowance { tier, bytes: floor, room: floor, wait: true }
            } else {
                Allowance { tier, bytes: share.max(floor), room: page_down(room), wait: share < floor }
            }
        })
        .collect()
}
