//! The engine: one `tick` per observation, knob decisions out, no I/O and no clock.
//!
//! Per-cgroup state is keyed by the kernel's cgroup id (`CgroupObs::id`); paths are
//! where a cgroup is, for decisions, reasons and status. Per tick, in this order:
//! 1. forget cgroups that vanished (or changed tier, or were re-created under their path:
//!    another id), start tracking new ones;
//! 2. detect pressure: protected cgroups (PSI, stall rate, triggers, BPF, `low` events) and
//!    the parent (headroom guard, `max`/`oom` events);
//! 3. thaw what we froze if its stall is over;
//! 4. under pressure, cut memory.high of lower tiers (`throttle::cut`); otherwise, once calm
//!    for `hold_ms` (or at once when every protected cgroup the last pressure was for has
//!    emptied or gone: nothing is left to hold room for) and nothing is frozen, release one
//!    step (`throttle::release`);
//! 5. escalate (opt-in freeze/kill) if a protected cgroup keeps stalling;
//! 6. cap lower tiers within what a protected cgroup's expected peak leaves (`reserve`;
//!    counts as pressure while in force): the oldest that fit run, the others are parked at
//!    what they hold and admitted one at a time as room frees (`park`); cgroups held at
//!    their ceilings take turns, the oldest first, the others frozen (`queue`, opt-in);
//!    lower cgroups that thrash beside a running protected one are frozen (`thrash`,
//!    opt-in);
//! 7. move protection (memory.low/min) with the working set (and the declared peak);
//! 8. bound stalls that throttling causes (`stall`): relieve or kill, per tier;
//! 9. drop writes that change nothing, touch a knob someone else set (`foreign_knobs`), or
//!    come sooner than `min_write_interval_ms` after the previous write of the same knob,
//!    and order the rest: thaws, highs, low/min, freezes,
//!    kills;
//! 10. remember what admission allowances depend on (`admit`: the daemon publishes them for
//!     `memqos run`, which arms a new cgroup's memory.high before its task starts).

mod admit;
mod escalate;
mod freezer;
mod park;
mod pressure;
mod protect;
mod queue;
mod reserve;
mod stall;
mod state;
mod thrash;
mod throttle;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use serde::Serialize;

use crate::config::{Config, ForeignKnobs, Tier};
use crate::decision::{Action, Decision, Reason};
use crate::obs::{CgroupId, CgroupObs, Observation, ParentObs};
use crate::size::{Limit, PAGE};
pub use admit::Allowance;
use escalate::Ladder;
use state::CgState;
pub use thrash::REST_MS as THRASH_REST_MS;

/// What the engine remembers per cgroup, by the cgroup's kernel id: a cgroup removed and
/// made again under its path is another key, and starts afresh.
pub(crate) type States = BTreeMap<CgroupId, CgState>;

/// The policy engine. Create one per config; feed it every observation in time order.
#[derive(Debug)]
pub struct Engine {
    cfg: Config,
    cgroups: States,
    first_ms: Option<u64>,
    last_tick_ms: Option<u64>,
    last_pressure_ms: Option<u64>,
    /// Whether a protected cgroup was running (or about to) at the last pressure: the hold
    /// after it keeps room for that cgroup's next burst, so it ends when none is left.
    pressure_had_protected: bool,
    /// Start of the current uninterrupted stall of protected cgroups.
    stall_since_ms: Option<u64>,
    ladder: Ladder,
    stalls: stall::Stalls,
    parking: park::Parking,
    queue: queue::Queue,
    thrash: thrash::Thrash,
    /// What admission allowances depend on besides the parent (`engine::admit`).
    admit: admit::Basis,
}

/// A summary for the daemon's stats output.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Status {
    /// Cgroups being tracked.
    pub tracked: usize,
    /// Time of the last tick that saw any pressure.
    pub last_pressure_ms: Option<u64>,
    /// Start of the current uninterrupted protected stall.
    pub stalled_since_ms: Option<u64>,
    /// Cgroups whose memory.high is below their original.
    pub throttled: Vec<String>,
    /// Cgroups frozen by us.
    pub frozen: Vec<String>,
    /// Lower cgroups parked at what they hold while a reservation lets others run first
    /// (`engine::park`), next to be admitted first.
    pub parked: Vec<String>,
    /// Cgroups held at their ceilings and frozen while an older held one grows first
    /// (`engine::queue`), next to run first.
    pub queued: Vec<String>,
    /// Lower cgroups frozen while they thrash beside a running protected cgroup
    /// (`engine::thrash`).
    pub thrashing: Vec<String>,
}

impl Engine {
    /// An engine with no history. After a daemon restart, pass the journaled originals in
    /// `CgroupObs::original`: cgroups left throttled are then released after `hold_ms`.
    pub fn new(cfg: Config) -> Engine {
        Engine {
            cfg,
            cgroups: BTreeMap::new(),
            first_ms: None,
            last_tick_ms: None,
            last_pressure_ms: None,
            pressure_had_protected: false,
            stall_since_ms: None,
            ladder: Ladder::default(),
            stalls: stall::Stalls::default(),
            parking: park::Parking::default(),
            queue: queue::Queue::default(),
            thrash: thrash::Thrash::default(),
            admit: admit::Basis::default(),
        }
    }

    /// The config this engine runs.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Runs `cfg` from the next tick on (a reload). A cgroup keeps its history (write times,
    /// working set, freeze cause) only if its tier carries over ([`crate::Tiers::carry_over`])
    /// and it still classifies into it; the state of every other cgroup is dropped, and the
    /// daemon restores the knobs memqos wrote for them, so they start as found. Returns the
    /// ids of the cgroups whose state was dropped.
    /// The cgroups [`Engine::reconfigure`] with `cfg` would drop (their tier ends or they
    /// move), without changing anything: the daemon puts their knobs back first and
    /// reconfigures only if that worked, so a reload is all or nothing.
    pub fn would_drop(&self, cfg: &Config, classify: impl Fn(&str) -> Option<crate::config::TierIndex>) -> Vec<String> {
        let mut paths: Vec<String> = self
            .cgroups
            .values()
            .filter(|s| cfg.tiers.carry_over(&self.cfg.tiers, s.tier).is_none_or(|to| classify(&s.path) != Some(to)))
            .map(|s| s.path.clone())
            .collect();
        paths.sort();
        paths
    }

    pub fn reconfigure(
        &mut self,
        cfg: Config,
        classify: impl Fn(&str) -> Option<crate::config::TierIndex>,
    ) -> Vec<String> {
        let mut dropped = Vec::new();
        let mut dropped_ids = Vec::new();
        let old = &self.cfg;
        self.cgroups.retain(|id, s| match cfg.tiers.carry_over(&old.tiers, s.tier) {
            Some(to) if classify(&s.path) == Some(to) => {
                s.tier = to;
                true
            }
            _ => {
                dropped.push(s.path.clone());
                dropped_ids.push(*id);
                false
            }
        });
        dropped.sort();
        if cfg.policy.ws_window_ms != self.cfg.policy.ws_window_ms {
            for s in self.cgroups.values_mut() {
                s.ws.set_window(cfg.policy.ws_window_ms);
            }
        }
        self.stalls.forget(&dropped_ids);
        self.cfg = cfg;
        dropped
    }

    /// The fast path: a pressure signal arrived between periodic ticks. `obs` holds only what
    /// the reaction needs (the parent, the cgroups that signalled, the throttle candidates);
    /// cgroups missing from it are *not* treated as gone, and cgroups the engine has not seen
    /// on a periodic tick are ignored (the next periodic tick adopts them). Only pressure
    /// detection and cuts run here: release, escalation, protection and stall bounds stay on
    /// the periodic path, where the whole tree is seen. Rates (`psi_some_delta_us`,
    /// `events_delta`) must be measured since the last periodic tick, which is what the
    /// engine divides by; the fast path does not move that tick.
    pub fn tick_fast(&mut self, obs: &Observation) -> Vec<Decision> {
        let now = self.last_tick_ms.map_or(obs.now_ms, |t| obs.now_ms.max(t));
        let elapsed = self.last_tick_ms.map(|t| now - t).filter(|&e| e > 0);
        let cgs = sync_known(&mut self.cgroups, &self.cfg, obs);
        let waiting = not_yet_run(&self.cgroups, &self.cfg, now);
        let growing = first_sight(&self.cgroups, &self.cfg, now);
        let ctx = Ctx::new(&self.cfg, now, &obs.parent, cgs, &waiting, &growing);
        let p = pressure::detect(&ctx, elapsed);
        if !p.any() {
            return Vec::new();
        }
        self.last_pressure_ms = Some(now);
        // The fast path sees only some cgroups: it may add a protected one, never clear it.
        self.pressure_had_protected |= protecting(&ctx);
        let mut plan = Plan::default();
        throttle::cut(&ctx, &p, &mut plan);
        self.stalls.drop_cuts_in_grace(&ctx, &mut plan);
        commit(plan, &ctx, &mut self.cgroups)
    }

    /// The periodic path: one observation of every managed cgroup (those missing are gone),
    /// returns the writes to make now, in order.
    pub fn tick_periodic(&mut self, obs: &Observation) -> Vec<Decision> {
        self.tick(obs)
    }

    /// Takes one observation of every managed cgroup, returns the writes to make now, in
    /// order (the periodic path; [`Engine::tick_periodic`] names it so at call sites).
    pub fn tick(&mut self, obs: &Observation) -> Vec<Decision> {
        // A clock that steps back is treated as no time passing.
        let now = self.last_tick_ms.map_or(obs.now_ms, |t| obs.now_ms.max(t));
        let elapsed = self.last_tick_ms.map(|t| now - t).filter(|&e| e > 0);
        let starting = self.last_tick_ms.is_none();
        let first = *self.first_ms.get_or_insert(now);
        self.last_tick_ms = Some(now);

        let cgs = sync(&mut self.cgroups, &self.cfg, obs, now, starting);
        let waiting = not_yet_run(&self.cgroups, &self.cfg, now);
        let growing = first_sight(&self.cgroups, &self.cfg, now);
        let ctx = Ctx::new(&self.cfg, now, &obs.parent, cgs, &waiting, &growing);
        let p = pressure::detect(&ctx, elapsed);
        // Periodic only: the shares need every member, which the fast path does not read.
        let reservation = reserve::find(&ctx);
        let protecting = protecting(&ctx);
        if p.any() || reservation.is_some() {
            self.last_pressure_ms = Some(now);
            self.pressure_had_protected = protecting;
        }
        self.stall_since_ms = p.top().map(|_| self.stall_since_ms.unwrap_or(now));

        let any_frozen = self.cgroups.values().any(|s| s.frozen_by.is_some());
        let mut plan = Plan::default();
        escalate::thaw(&ctx, &p, &self.cgroups, &mut plan);
        if p.any() {
            throttle::cut(&ctx, &p, &mut plan);
        } else {
            let calm_for = now - self.last_pressure_ms.unwrap_or(first);
            // The hold keeps lower tiers small for a protected cgroup's next burst; once every
            // one has emptied or gone there is none to come, and waiting only costs the lower
            // tiers time (issue 18's work conservation). Pressure with no protected cgroup
            // (lower tiers alone at the guard) keeps the hold: it damps their cut/regrow cycle.
            let why = if calm_for >= self.cfg.policy.hold_ms {
                Some(Reason::Release { calm_for_ms: calm_for })
            } else if self.pressure_had_protected && !protecting {
                Some(Reason::NothingToProtect { calm_for_ms: calm_for })
            } else {
                None
            };
            // Thaw strictly before release: a frozen cgroup is thawed on a tick of its own.
            if let (Some(why), false) = (why, any_frozen) {
                throttle::release(&ctx, why, &self.cgroups, &mut plan);
            }
        }
        if let (Some(top), Some(since)) = (p.top(), self.stall_since_ms) {
            escalate::escalate(&ctx, top, since, &self.ladder, &self.cgroups, &mut plan);
        }
        match &reservation {
            Some(r) => self.parking.plan(&ctx, r, &self.cgroups, p.any(), &mut plan),
            None => self.parking.clear(&ctx, &mut plan),
        }
        self.queue.plan(&ctx, &self.cgroups, &mut plan);
        self.thrash.plan(&ctx, &mut plan);
        protect::plan(&ctx, &self.cgroups, &mut plan);
        self.stalls.plan(&ctx, &mut plan);

        let decisions = commit(plan, &ctx, &mut self.cgroups);
        self.stalls.committed(&decisions, &ctx);
        self.parking.committed(&decisions, &ctx);
        self.queue.committed(&decisions, &ctx);
        self.thrash.committed(&decisions, &ctx);
        self.admit = admit::Basis::of(&ctx, self.parking.parked());
        for d in &decisions {
            match d.action {
                Action::Freeze(true) => self.ladder.last_freeze_ms = Some(now),
                Action::Kill => self.ladder.last_kill_ms = Some(now),
                _ => {}
            }
        }
        decisions
    }

    /// True when nothing needs the whole tree watched closely at `now_ms`: nothing memqos
    /// throttled or froze, no protected stall going on, and no pressure within `hold_ms`.
    /// The daemon then samples the whole tree less often (`signals.calm_interval_ms`).
    pub fn is_calm(&self, now_ms: u64) -> bool {
        let recent = self.last_pressure_ms.is_some_and(|t| now_ms.saturating_sub(t) < self.cfg.policy.hold_ms);
        !recent
            && self.stall_since_ms.is_none()
            && self
                .cgroups
                .values()
                .all(|s| s.current.high >= s.original.high && s.frozen_by.is_none() && !s.current.frozen)
    }

    /// What a new cgroup of each throttle tier may charge before a tick has seen it, for a
    /// parent as `parent` shows it (the last periodic observation's, or a fresher read of the
    /// parent alone): `engine::admit`. Empty unless `policy.admission` is on and the parent's
    /// limit is finite.
    pub fn admission(&self, parent: &ParentObs) -> Vec<Allowance> {
        admit::allowances(&self.cfg, &self.admit, parent)
    }

    /// A summary of the engine's state.
    pub fn status(&self) -> Status {
        let ids = |f: &dyn Fn(&CgState) -> bool| {
            let mut paths: Vec<String> = self.cgroups.values().filter(|s| f(s)).map(|s| s.path.clone()).collect();
            paths.sort();
            paths
        };
        Status {
            tracked: self.cgroups.len(),
            last_pressure_ms: self.last_pressure_ms,
            stalled_since_ms: self.stall_since_ms,
            throttled: ids(&|s| s.current.high < s.original.high),
            frozen: ids(&|s| s.frozen_by.is_some()),
            parked: self.parking.parked().to_vec(),
            queued: self.queue.queued().to_vec(),
            thrashing: self.thrash.frozen().to_vec(),
        }
    }
}

/// The usable cgroups of `obs`, sorted by path: unknown tiers skipped, and of two with
/// one id (or one path), the first.
fn usable<'a>(cfg: &Config, obs: &'a Observation, known: impl Fn(&CgroupObs) -> bool) -> Vec<&'a CgroupObs> {
    let (mut ids, mut paths) = (HashSet::new(), HashSet::new());
    let mut cgs: Vec<&CgroupObs> = obs
        .cgroups
        .iter()
        .filter(|c| cfg.tiers.get(c.tier).is_some() && known(c))
        .filter(|c| ids.insert(c.id) && paths.insert(c.path.as_str()))
        .collect();
    cgs.sort_by(|a, b| a.path.cmp(&b.path));
    cgs
}

/// Brings per-cgroup state in line with `obs` and returns the usable cgroups, sorted by path
/// (`usable`); the state of vanished cgroups is dropped. On the engine's first tick
/// (`starting`) every cgroup was there before it: its size then is not growth it saw.
fn sync<'a>(states: &mut States, cfg: &Config, obs: &'a Observation, now: u64, starting: bool) -> Vec<&'a CgroupObs> {
    let cgs = usable(cfg, obs, |_| true);
    let seen: HashMap<CgroupId, &CgroupObs> = cgs.iter().map(|c| (c.id, *c)).collect();
    // Keyed by the kernel id: a cgroup removed and re-created under the same name is
    // another key, and starts from scratch; so does one whose tier changed.
    states.retain(|id, s| seen.get(id).is_some_and(|c| c.tier == s.tier));
    for c in &cgs {
        let s = states.entry(c.id).or_insert_with(|| {
            CgState::new(c.tier, c.path.clone(), cfg.policy.ws_window_ms, c.original, c.current, now)
        });
        s.path.clone_from(&c.path);
        s.original = c.original;
        s.current = c.current;
        s.has_run |= c.is_populated();
        let ws = c.working_set_bytes.unwrap_or(c.usage_bytes);
        s.ws.push(now, ws);
        if starting {
            s.growth.adopt(ws);
        } else {
            s.growth.push(now, ws, cfg.policy.ws_granularity);
        }
    }
    cgs
}

/// First-sight expectations (`Tier::first_sight_growth`), by id: for each tracked protected
/// cgroup of a tier with a growth factor whose peak rose within `hold_ms`, that factor
/// times its peak so far. Whether a stronger source applies is `reserve::expectation`'s
/// business; this only says what a growing cgroup would expect without one.
fn first_sight(states: &States, cfg: &Config, now: u64) -> HashMap<CgroupId, u64> {
    // Off unless a tier sets a factor: then no pass over every tracked cgroup, on the fast
    // path least of all.
    if cfg.tiers.iter().all(|(_, t)| t.first_sight_growth.is_none()) {
        return HashMap::new();
    }
    states
        .iter()
        .filter(|(_, s)| s.growth.growing(now, cfg.policy.hold_ms))
        .filter_map(|(id, s)| {
            let factor = cfg.tiers.get(s.tier)?.first_sight_growth?;
            Some((*id, (s.growth.peak as f64 * factor) as u64))
        })
        .collect()
}

/// True while some protected cgroup has a process in it or has been made and not run yet:
/// someone the lower tiers may have to make room for.
fn protecting(ctx: &Ctx) -> bool {
    !ctx.not_yet_run.is_empty() || ctx.cgs.iter().any(|c| ctx.tier(c).is_protected() && c.is_populated())
}

/// How long a protected cgroup made but never run keeps its reservation: a tool call's
/// cgroup is populated within milliseconds of its mkdir; one that stays empty (a tenant's
/// stray mkdir, a runtime that failed to start) must not hold the lower tiers back forever.
pub const UNSTARTED_RESERVATION_MS: u64 = 60_000;

/// Ids of the tracked protected cgroups that have never had a process in them, seen less than
/// [`UNSTARTED_RESERVATION_MS`] ago (only their declarations count before they run; built
/// every tick, so kept to the protected few).
fn not_yet_run(states: &States, cfg: &Config, now: u64) -> BTreeSet<CgroupId> {
    let protected = |s: &CgState| cfg.tiers.get(s.tier).is_some_and(Tier::is_protected);
    let fresh = |s: &CgState| now.saturating_sub(s.first_seen_ms) < UNSTARTED_RESERVATION_MS;
    states.iter().filter(|(_, s)| !s.has_run && protected(s) && fresh(s)).map(|(id, _)| *id).collect()
}

/// The fast path's sync: updates the knobs of cgroups already tracked (same id, same tier)
/// and returns them, sorted by path; everything else is left alone.
fn sync_known<'a>(states: &mut States, cfg: &Config, obs: &'a Observation) -> Vec<&'a CgroupObs> {
    let cgs = usable(cfg, obs, |c| states.get(&c.id).is_some_and(|s| s.tier == c.tier));
    for c in &cgs {
        if let Some(s) = states.get_mut(&c.id) {
            s.current = c.current;
        }
    }
    cgs
}

/// What the sub-policies see in one tick.
pub(crate) struct Ctx<'a> {
    pub cfg: &'a Config,
    pub now: u64,
    pub parent: &'a ParentObs,
    /// Valid cgroups, sorted by path.
    pub cgs: Vec<&'a CgroupObs>,
    /// Where each of `cgs` is, by id.
    by_id: HashMap<CgroupId, usize>,
    /// Tracked protected cgroups never seen with a process in them.
    pub not_yet_run: &'a BTreeSet<CgroupId>,
    /// What growing protected cgroups expect at first sight (`first_sight`).
    pub first_sight: &'a HashMap<CgroupId, u64>,
}

impl<'a> Ctx<'a> {
    fn new(
        cfg: &'a Config,
        now: u64,
        parent: &'a ParentObs,
        cgs: Vec<&'a CgroupObs>,
        not_yet_run: &'a BTreeSet<CgroupId>,
        first_sight: &'a HashMap<CgroupId, u64>,
    ) -> Ctx<'a> {
        let by_id = cgs.iter().enumerate().map(|(i, c)| (c.id, i)).collect();
        Ctx { cfg, now, parent, cgs, by_id, not_yet_run, first_sight }
    }

    /// The tier of a cgroup from `cgs` (checked in `sync`).
    pub fn tier(&self, c: &CgroupObs) -> &'a Tier {
        self.cfg.tiers.get(c.tier).expect("tier checked in sync")
    }

    /// The cgroup at `path` this tick (reasons name cgroups by path).
    pub fn get(&self, path: &str) -> Option<&'a CgroupObs> {
        self.cgs.binary_search_by(|c| c.path.as_str().cmp(path)).ok().map(|i| self.cgs[i])
    }

    /// The cgroup with kernel id `id` this tick.
    pub fn get_id(&self, id: CgroupId) -> Option<&'a CgroupObs> {
        self.by_id.get(&id).map(|&i| self.cgs[i])
    }

    /// True when `c`'s declared room counts: it runs, or it has not run yet (a cgroup made
    /// and declared before its task starts). One that ran and emptied reserves nothing.
    pub fn reserving(&self, c: &CgroupObs) -> bool {
        c.is_populated() || self.not_yet_run.contains(&c.id)
    }

    /// `min_high`, rounded up to a page.
    pub fn floor(&self) -> u64 {
        self.cfg.policy.min_high.div_ceil(PAGE).saturating_mul(PAGE)
    }

    /// The parent's effective limit: the tighter of memory.max and memory.high.
    pub fn parent_limit(&self) -> Limit {
        self.parent.max.min(self.parent.high)
    }
}

/// Writes proposed in one tick, before rate limiting.
#[derive(Default)]
pub(crate) struct Plan {
    items: Vec<Proposal>,
}

/// One proposed write: matched to its cgroup by id; the path only orders the writes (as it
/// always has: within a rank, by path).
struct Proposal {
    id: CgroupId,
    path: String,
    action: Action,
    reason: Reason,
}

impl Proposal {
    fn is(&self, c: &CgroupObs) -> bool {
        self.id == c.id
    }
}

impl Plan {
    pub fn push(&mut self, c: &CgroupObs, action: Action, reason: Reason) {
        self.items.push(Proposal { id: c.id, path: c.path.clone(), action, reason });
    }

    /// Proposes lowering memory.high. Cuts never raise: values not below the current high are
    /// ignored; when several mechanisms propose, the lowest wins.
    pub fn lower_high(&mut self, c: &CgroupObs, bytes: u64, reason: Reason) {
        let new = Limit::Bytes(bytes);
        if new >= c.current.high {
            return;
        }
        let existing = self.items.iter_mut().find(|p| p.is(c) && matches!(p.action, Action::High(_)));
        match existing {
            Some(Proposal { action: Action::High(old), reason: r, .. }) if new < *old => {
                *old = new;
                *r = reason;
            }
            Some(_) => {}
            None => self.push(c, Action::High(new), reason),
        }
    }

    pub fn raise_high(&mut self, c: &CgroupObs, to: Limit, reason: Reason) {
        self.push(c, Action::High(to), reason);
    }

    /// True when a memory.high write of `c` is already proposed.
    pub fn has_high(&self, c: &CgroupObs) -> bool {
        self.items.iter().any(|p| p.is(c) && matches!(p.action, Action::High(_)))
    }

    /// True when a cgroup.freeze write of `c` is already proposed (escalation's or a thaw).
    pub fn has_freeze(&self, c: &CgroupObs) -> bool {
        self.items.iter().any(|p| p.is(c) && matches!(p.action, Action::Freeze(_)))
    }

    /// Withdraws every proposed memory.high write of `c`.
    pub fn drop_highs(&mut self, c: &CgroupObs) {
        self.items.retain(|p| !(p.is(c) && matches!(p.action, Action::High(_))));
    }

    /// Withdraws every proposed lowering of `c`'s memory.high.
    pub fn drop_cuts(&mut self, c: &CgroupObs) {
        self.items.retain(|p| !(p.is(c) && matches!(p.action, Action::High(l) if l < c.current.high)));
    }
}

/// `action` as `policy.foreign_knobs = "respect"` allows it on `c`. A memory.high someone
/// else set (a unit's MemoryHigh=, or a tenant's own value in a delegated subtree) is a
/// ceiling, not an exemption: memqos still throttles, writing the lower of its cut and their
/// value, and never raises it above theirs (their value is the journaled original, put back
/// at the end). A foreign memory.low/min (kubelet's MemoryQoS) is not written at all.
fn respecting(cfg: &Config, c: &CgroupObs, action: Action) -> Option<Action> {
    if cfg.policy.foreign_knobs != ForeignKnobs::Respect || !c.original.is_foreign(action.knob()) {
        return Some(action);
    }
    match action {
        Action::High(l) => Some(Action::High(l.min(c.original.high))),
        _ => None,
    }
}

/// Turns the plan into decisions: drops no-ops and rate-limited writes, records the rest.
fn commit(plan: Plan, ctx: &Ctx, states: &mut States) -> Vec<Decision> {
    let rank = |a: &Action| match a {
        Action::Freeze(false) => 0,
        Action::High(_) => 1,
        Action::Low(_) | Action::Min(_) => 2,
        Action::Freeze(true) => 3,
        Action::Kill => 4,
    };
    let mut items = plan.items;
    // The order of a tick's writes: by rank, then by path (stable: a cgroup's proposals of
    // one rank keep the order they were made in).
    items.sort_by(|a, b| (rank(&a.action), &a.path).cmp(&(rank(&b.action), &b.path)));
    let interval = ctx.cfg.policy.min_write_interval_ms;
    let mut out = Vec::new();
    for Proposal { id, action, reason, .. } in items {
        let Some(c) = ctx.get_id(id) else { continue };
        let Some(s) = states.get_mut(&c.id) else { continue };
        let Some(action) = respecting(ctx.cfg, c, action) else { continue };
        let unchanged = match action {
            Action::High(l) => c.current.high == l,
            Action::Low(l) => c.current.low == l,
            Action::Min(l) => c.current.min == l,
            Action::Freeze(b) => c.current.frozen == b,
            Action::Kill => false,
        };
        if unchanged {
            if action == Action::Freeze(false) {
                s.frozen_by = None; // someone else thawed it already
            }
            continue;
        }
        if !s.may_write(action.knob(), ctx.now, interval) {
            continue;
        }
        s.wrote(action, ctx.now);
        match (&action, &reason) {
            (Action::Freeze(true), Reason::Stalled { by, .. }) => s.frozen_by = Some(by.clone()),
            (Action::Freeze(false), _) => s.frozen_by = None,
            _ => {}
        }
        out.push(Decision::for_cgroup(c, action, reason));
    }
    out
}
