//! Turns the cgroup tree into the policy engine's `Observation`, one sample per tick.

use crate::journal::Journal;
use memqos_cgroupfs::{Cgroup, MemoryEvents, Pressure};
use memqos_policy::{CgroupObs, Config, Knobs, Limit, MemEvents, Observation, ParentObs, Psi};
use serde::Serialize;
use std::collections::HashMap;

/// Counters kept between samples to turn totals into deltas.
#[derive(Default)]
pub struct Sampler {
    prev_events: HashMap<String, MemoryEvents>,
    prev_psi_total: HashMap<String, u64>,
    prev_parent_events: Option<MemoryEvents>,
}

/// One managed cgroup as last seen, for `memqos status`.
#[derive(Clone, Debug, Serialize)]
pub struct Seen {
    pub cgroup: String,
    pub tier: String,
    pub usage_bytes: u64,
    pub knobs: Knobs,
    pub original: Knobs,
    pub psi_some_avg10: f64,
    pub events: MemoryEvents,
}

fn limit(l: memqos_cgroupfs::Limit) -> Limit {
    match l {
        memqos_cgroupfs::Limit::Bytes(b) => Limit::Bytes(b),
        memqos_cgroupfs::Limit::Max => Limit::Max,
    }
}

fn events(d: MemoryEvents) -> MemEvents {
    MemEvents { low: d.low, high: d.high, max: d.max, oom: d.oom, oom_kill: d.oom_kill }
}

fn read_knobs(cg: &Cgroup) -> memqos_cgroupfs::Result<Knobs> {
    Ok(Knobs {
        high: limit(cg.limit("memory.high")?),
        max: limit(cg.limit("memory.max")?),
        low: limit(cg.limit("memory.low")?),
        min: limit(cg.limit("memory.min")?),
        // The root of a hierarchy has no cgroup.freeze; leaves always do.
        frozen: cg.is_frozen().unwrap_or(false),
    })
}

/// Originals: the journaled value where memqos has written the knob, else the current one.
fn originals(journal: &Journal, id: &str, current: &Knobs) -> Knobs {
    let get = |file: &str, cur: Limit| journal.original(id, file).and_then(Limit::parse).unwrap_or(cur);
    Knobs {
        high: get("memory.high", current.high),
        max: current.max,
        low: get("memory.low", current.low),
        min: get("memory.min", current.min),
        frozen: journal.original(id, "cgroup.freeze").map(|v| v == "1").unwrap_or(current.frozen),
    }
}

impl Sampler {
    /// Reads the managed tree. Cgroups that vanish while being read are skipped; other
    /// read errors on a child are returned with its path.
    pub fn sample(&mut self, cfg: &Config, root: &Cgroup, journal: &Journal, now_ms: u64) -> anyhow::Result<(Observation, Vec<Seen>)> {
        let parent_ev = root.memory_events()?;
        let parent = ParentObs {
            usage_bytes: root.memory_current()?,
            max: limit(root.limit("memory.max")?),
            high: limit(root.limit("memory.high")?),
            events_delta: self.prev_parent_events.map(|p| events(parent_ev.delta_since(&p))).unwrap_or_default(),
        };
        self.prev_parent_events = Some(parent_ev);

        let mut cgroups = Vec::new();
        let mut seen = Vec::new();
        let mut alive = Vec::new();
        for cg in leaves(root)? {
            let Ok(rel) = cg.path().strip_prefix(root.path()) else { continue };
            let id = rel.to_string_lossy().into_owned();
            let Some(tier) = cfg.tiers.classify(&id) else { continue };
            match self.sample_one(&cg, &id, journal) {
                Ok((mut obs, s)) => {
                    obs.tier = tier;
                    let tier_name = cfg.tiers.get(tier).map(|t| t.name.clone()).unwrap_or_default();
                    seen.push(Seen { tier: tier_name, ..s });
                    alive.push(id);
                    cgroups.push(obs);
                }
                Err(e) if e.is_vanished() || !cg.exists() => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.prev_events.retain(|k, _| alive.contains(k));
        self.prev_psi_total.retain(|k, _| alive.contains(k));
        Ok((Observation { now_ms, parent, cgroups }, seen))
    }

    fn sample_one(&mut self, cg: &Cgroup, id: &str, journal: &Journal) -> memqos_cgroupfs::Result<(CgroupObs, Seen)> {
        let usage = cg.memory_current()?;
        let ev = cg.memory_events()?;
        let psi: Pressure = cg.memory_pressure()?;
        let current = read_knobs(cg)?;
        let delta = self.prev_events.get(id).map(|p| events(ev.delta_since(p))).unwrap_or_default();
        let psi_delta = self.prev_psi_total.get(id).map(|p| psi.some.total_us.saturating_sub(*p)).unwrap_or(0);
        self.prev_events.insert(id.to_owned(), ev);
        self.prev_psi_total.insert(id.to_owned(), psi.some.total_us);
        let original = originals(journal, id, &current);
        let mut obs = CgroupObs::new(id, memqos_policy::TierIndex(0), usage);
        obs.current = current;
        obs.original = original;
        obs.events_delta = delta;
        obs.psi = Psi {
            some_avg10: psi.some.avg10,
            full_avg10: psi.full.map(|f| f.avg10).unwrap_or(0.0),
            some_total_delta_us: psi_delta,
        };
        let seen = Seen {
            cgroup: id.to_owned(),
            tier: String::new(),
            usage_bytes: usage,
            knobs: current,
            original,
            psi_some_avg10: psi.some.avg10,
            events: ev,
        };
        Ok((obs, seen))
    }
}

/// The leaf cgroups below `root` (the engine requires non-nesting cgroups).
pub fn leaves(root: &Cgroup) -> memqos_cgroupfs::Result<Vec<Cgroup>> {
    let all = root.descendants()?;
    Ok(all
        .iter()
        .filter(|c| !all.iter().any(|o| o.path().parent() == Some(c.path())))
        .cloned()
        .collect())
}
