//! A deterministic harness: a fake subtree whose knobs follow the engine's decisions, with
//! invariants checked on every tick, and a tiny memory model for trace replays.
#![allow(dead_code)] // each test file uses a different part

use std::collections::BTreeMap;

use memqos_policy::{
    Action, CgroupObs, Config, Decision, Engine, Knob, Limit, Observation, ParentObs, PressureLine, Reason, TierIndex,
};

pub use memqos_policy::size::MIB as MB;

/// Config text with `tiers` (TOML for the `[[tier]]` tables) and extra `[policy]` lines.
pub fn config(tiers: &str, policy: &str) -> Config {
    let text = format!("cgroup_root = \"/sys/fs/cgroup/test\"\n{tiers}\n[policy]\n{policy}\n");
    Config::from_str(&text, "test.toml").unwrap_or_else(|e| panic!("{e}"))
}

/// `tiers` (a `[[tier]]` TOML snippet) with the tier called `name` changed by `edit`: tests
/// vary a config as data, not by replacing text in it.
pub fn edit_tier(tiers: &str, name: &str, edit: impl FnOnce(&mut toml::Table)) -> String {
    let mut doc: toml::Table = tiers.parse().unwrap_or_else(|e| panic!("tier snippet: {e}"));
    let tier = doc
        .get_mut("tier")
        .and_then(|t| t.as_array_mut())
        .expect("a [[tier]] snippet")
        .iter_mut()
        .filter_map(|t| t.as_table_mut())
        .find(|t| t.get("name").and_then(|n| n.as_str()) == Some(name))
        .unwrap_or_else(|| panic!("no tier named {name}"));
    edit(tier);
    toml::to_string(&doc).expect("a TOML table serializes")
}

/// critical (protect=low) > batch (throttle).
pub const TWO_TIERS: &str = r#"
[[tier]]
name = "critical"
match = ["critical/*"]
protect = "low"
[[tier]]
name = "batch"
match = ["batch/*"]
throttle = true
"#;

/// critical (protect=low) > low (throttle) > batch (throttle), default policy.
pub const THREE_TIERS: &str = r#"
[[tier]]
name = "critical"
match = ["critical/*"]
protect = "low"
[[tier]]
name = "low"
match = ["low/*"]
throttle = true
[[tier]]
name = "batch"
match = ["batch/*"]
throttle = true
"#;

/// Sets `c`'s own memory.pressure `full avg10` (percent): its tasks all stalled that share of
/// the last ten seconds.
pub fn set_full(c: &mut CgroupObs, avg10: f64) {
    c.psi.full = Some(PressureLine { avg10, ..Default::default() });
}

/// The cgroup.freeze writes among `d`: (cgroup, frozen, reason).
pub fn freezes(d: &[Decision]) -> Vec<(String, bool, Reason)> {
    d.iter()
        .filter_map(|d| match d.action {
            Action::Freeze(f) => Some((d.cgroup.clone(), f, d.reason.clone())),
            _ => None,
        })
        .collect()
}

/// A reason that raises memory.high back after pressure: the hold ran out, or nothing is left
/// to protect.
pub fn is_release(r: &Reason) -> bool {
    matches!(r, Reason::Release { .. } | Reason::NothingToProtect { .. })
}

pub struct Sim {
    pub engine: Engine,
    pub cfg: Config,
    pub now: u64,
    pub tick_ms: u64,
    pub parent: ParentObs,
    /// When set, parent usage is the sum of the cgroups' usage each tick.
    pub parent_is_sum: bool,
    pub cgs: BTreeMap<String, CgroupObs>,
    /// Every decision with its tick time.
    pub log: Vec<(u64, Decision)>,
    last_write: BTreeMap<(String, Knob), u64>,
}

impl Sim {
    pub fn new(cfg: Config) -> Sim {
        Sim {
            engine: Engine::new(cfg.clone()),
            cfg,
            now: 0,
            tick_ms: 500,
            parent: ParentObs::default(),
            parent_is_sum: true,
            cgs: BTreeMap::new(),
            log: Vec::new(),
            last_write: BTreeMap::new(),
        }
    }

    pub fn tier(&self, id: &str) -> TierIndex {
        self.cfg.tiers.classify(id).unwrap_or_else(|| panic!("{id} matches no tier"))
    }

    /// Adds a cgroup with kernel-default knobs (its kernel id made up from its name).
    pub fn add(&mut self, id: &str, usage: u64) {
        let c = CgroupObs::named(id, self.tier(id), usage);
        self.cgs.insert(id.to_string(), c);
    }

    pub fn remove(&mut self, id: &str) {
        self.cgs.remove(id);
        // A cgroup created later under this name is another cgroup: no rate limit carried.
        self.last_write.retain(|(c, _), _| c != id);
    }

    pub fn cg(&mut self, id: &str) -> &mut CgroupObs {
        self.cgs.get_mut(id).unwrap_or_else(|| panic!("no cgroup {id}"))
    }

    pub fn high(&self, id: &str) -> Limit {
        self.cgs[id].current.high
    }

    /// PSI as a cgroup stalled `pct` percent of the time would show it.
    pub fn set_stall(&mut self, id: &str, pct: f64) {
        let tick_ms = self.tick_ms;
        let c = self.cg(id);
        c.psi.some.avg10 = pct;
        c.psi_some_delta_us = (pct * tick_ms as f64 * 10.0) as u64;
    }

    /// One observation -> decisions; checks invariants, applies the writes, advances time.
    pub fn tick(&mut self) -> Vec<Decision> {
        if self.parent_is_sum {
            self.parent.usage_bytes = self.cgs.values().map(|c| c.usage_bytes).sum();
        }
        let obs = Observation {
            now_ms: self.now,
            parent: self.parent.clone(),
            cgroups: self.cgs.values().cloned().collect(),
        };
        let decisions = self.engine.tick(&obs);
        self.check(&decisions);
        for d in &decisions {
            let c = self.cgs.get_mut(&d.cgroup).unwrap();
            match d.action {
                Action::High(l) => c.current.high = l,
                Action::Low(l) => c.current.low = l,
                Action::Min(l) => c.current.min = l,
                Action::Freeze(b) => c.current.frozen = b,
                Action::Kill => c.usage_bytes = 0,
            }
            self.last_write.insert((d.cgroup.clone(), d.knob()), self.now);
            self.log.push((self.now, d.clone()));
        }
        for c in self.cgs.values_mut() {
            c.signals.clear();
            c.events_delta = Default::default();
            c.refault_delta_bytes = 0;
        }
        self.parent.events_delta = Default::default();
        self.now += self.tick_ms;
        decisions
    }

    /// Ticks for `ms`, calling `each` before every tick.
    pub fn run(&mut self, ms: u64, mut each: impl FnMut(&mut Sim)) {
        let end = self.now + ms;
        while self.now < end {
            each(self);
            self.tick();
        }
    }

    /// Invariants that hold for every tick of every test.
    fn check(&self, decisions: &[Decision]) {
        let p = &self.cfg.policy;
        let mut seen_other = false;
        for d in decisions {
            let c = self.cgs.get(&d.cgroup).unwrap_or_else(|| panic!("decision for unknown cgroup: {d}"));
            let tier = self.cfg.tiers.get(c.tier).unwrap();
            let at = format!("t={} {d}", self.now);
            if let Some(&t) = self.last_write.get(&(d.cgroup.clone(), d.knob())) {
                assert!(self.now - t >= p.min_write_interval_ms, "rate limit broken: {at} (previous write at {t})");
            }
            match d.action {
                Action::High(l) => {
                    assert_ne!(l, c.current.high, "no-op write: {at}");
                    let lowering = l < c.current.high;
                    if lowering {
                        assert!(tier.throttle, "throttled a non-throttle tier: {at}");
                        assert!(l >= Limit::Bytes(p.min_high).min(c.original.high), "below the floor: {at}");
                        assert!(!is_release(&d.reason) && d.reason != Reason::Restore, "{at}");
                    } else {
                        assert!(l <= c.original.high, "raised above the original: {at}");
                        assert!(
                            is_release(&d.reason)
                                || matches!(d.reason, Reason::StallBound { .. } | Reason::Reservation { .. }),
                            "raise without release, stall bound or reservation: {at}"
                        );
                    }
                }
                Action::Low(l) => {
                    assert_eq!(tier.protect, memqos_policy::Protect::Low, "{at}");
                    assert_ne!(l, c.current.low, "no-op write: {at}");
                }
                Action::Min(l) => {
                    assert_eq!(tier.protect, memqos_policy::Protect::Min, "{at}");
                    assert_ne!(l, c.current.min, "no-op write: {at}");
                }
                Action::Freeze(true) => {
                    let queued = tier.queue_held && matches!(d.reason, Reason::Queued { .. });
                    let thrashing = tier.freeze_thrashing && matches!(d.reason, Reason::Thrashing { .. });
                    assert!(
                        tier.freeze || queued || thrashing,
                        "froze a tier without freeze, queue_held or freeze_thrashing = true: {at}"
                    )
                }
                Action::Freeze(false) => {
                    assert!(!seen_other, "thaw after another write in one tick: {at}")
                }
                Action::Kill => {
                    let stall_kill = matches!(d.reason, Reason::StallBound { .. })
                        && tier.stall.action == memqos_policy::StallAction::Kill;
                    assert!(
                        tier.kill || stall_kill,
                        "killed in a tier without kill = true or stall.action = \"kill\": {at}"
                    )
                }
            }
            if d.action != Action::Freeze(false) {
                seen_other = true;
            }
        }
    }

    /// Decisions of one kind of knob for one cgroup: (time, action).
    pub fn writes(&self, id: &str, knob: Knob) -> Vec<(u64, Action)> {
        self.log.iter().filter(|(_, d)| d.cgroup == id && d.knob() == knob).map(|(t, d)| (*t, d.action)).collect()
    }

    /// Every (cgroup, knob) the engine wrote: what the daemon journals and puts back on stop.
    pub fn written(&self) -> std::collections::BTreeSet<(String, Knob)> {
        self.log.iter().map(|(_, d)| (d.cgroup.clone(), d.knob())).collect()
    }

    /// When memory.high of `id` was written.
    pub fn high_times(&self, id: &str) -> Vec<u64> {
        self.writes(id, Knob::High).into_iter().map(|(t, _)| t).collect()
    }

    /// The memory.high values written to `id`, in MiB (Max as u64::MAX).
    pub fn high_trail_mb(&self, id: &str) -> Vec<u64> {
        self.writes(id, Knob::High)
            .into_iter()
            .map(|(_, a)| match a {
                Action::High(Limit::Bytes(b)) => b / MB,
                _ => u64::MAX,
            })
            .collect()
    }
}

/// Swapless tasks (nothing reclaimed) each in its own cgroup, ticked until all are done or
/// `max_ticks` pass; a finished task's cgroup turns unpopulated, and `before(tick, sim)` runs
/// first every tick (to add cgroups late). Returns the first time the cgroups together held
/// more than `limit` bytes: on a swapless host, the moment of an OOM kill.
pub fn run_swapless(
    sim: &mut Sim,
    tasks: &mut [Workload],
    max_ticks: u32,
    limit: u64,
    mut before: impl FnMut(u32, &mut Sim),
) -> Option<u64> {
    let mut over = None;
    for tick in 0..max_ticks {
        before(tick, sim);
        for w in tasks.iter_mut() {
            if !sim.cgs.contains_key(&w.id) {
                continue;
            }
            w.step(sim, 0);
            if w.done() {
                sim.cg(&w.id).populated = Some(false);
            }
        }
        let held: u64 = sim.cgs.values().map(|c| c.usage_bytes).sum();
        if held > limit && over.is_none() {
            over = Some(sim.now);
        }
        if tasks.iter().all(Workload::done) {
            break;
        }
        sim.tick();
    }
    over
}

/// A replayed memory trace: demanded usage per step. The workload advances one step per tick
/// when memory.high lets it have what the step demands; otherwise it stalls on that step
/// (the kernel puts it to sleep instead of failing the charge) and the part of its usage
/// over memory.high is reclaimed at `reclaim_per_tick` (swap was on in the seed experiment;
/// 0 models anon memory without swap).
pub struct Workload {
    pub id: String,
    pub trace: Vec<u64>,
    pub pos: usize,
    pub stalled_ticks: u64,
    pub finished_at: Option<u64>,
}

impl Workload {
    pub fn new(id: &str, trace: Vec<u64>) -> Workload {
        Workload { id: id.to_string(), trace, pos: 0, stalled_ticks: 0, finished_at: None }
    }

    pub fn done(&self) -> bool {
        self.pos >= self.trace.len()
    }

    /// Advances one tick against the sim's current knobs.
    pub fn step(&mut self, sim: &mut Sim, reclaim_per_tick: u64) {
        let now = sim.now;
        let Some(&want) = self.trace.get(self.pos) else {
            sim.cg(&self.id).usage_bytes = 0; // exited
            return;
        };
        let c = sim.cg(&self.id);
        let high = c.current.high.bytes().unwrap_or(u64::MAX);
        if c.current.frozen {
            self.stalled_ticks += 1;
        } else if want <= c.usage_bytes.max(high) {
            c.usage_bytes = want;
            self.pos += 1;
            if self.done() {
                self.finished_at = Some(now);
            }
        } else {
            self.stalled_ticks += 1;
            c.usage_bytes = c.usage_bytes.max(high.min(want));
        }
        if c.usage_bytes > high {
            c.usage_bytes = (c.usage_bytes - reclaim_per_tick.min(c.usage_bytes - high)).max(high);
        }
    }
}

/// `from` to `to` (MiB) in `steps` equal steps, in bytes, excluding `from`.
pub fn ramp(from: u64, to: u64, steps: u64) -> Vec<u64> {
    let (from, to, steps) = (from as i64, to as i64, steps as i64);
    (1..=steps).map(|i| (from + (to - from) * i / steps) as u64 * MB).collect()
}

pub fn hold(mb: u64, ticks: usize) -> Vec<u64> {
    vec![mb * MB; ticks]
}
