//! Kills per run against the clairvoyant bound of [`crate::avoidability`]: the bound depends
//! only on a run's traces, tiers, baseline and parent limit (not on the arm or the speed), so
//! it is computed once per distinct set and looked up for every run.

use crate::avoidability::{concurrent_peak, min_kills, park_deadline, Bound, ParkDeadline, Problem, Profile};
use crate::runner::{trace_path, ArmResult};
use crate::scenario::Tier;
use anyhow::{Context, Result};
use memqos_replay::Outcome;
use std::collections::BTreeMap;
use std::path::Path;

/// Tasks of a run that were killed for memory: OOM-killed by the kernel (the parent's
/// memory.events oom_kill counts the same processes; a task is one process) or SIGKILLed by a
/// userspace OOM killer (the oomd arm; see [`userspace_kills`]).
pub fn task_kills(r: &ArmResult) -> u64 {
    r.tasks.iter().filter(|t| matches!(t.outcome, Outcome::OomKilled { .. })).count() as u64 + userspace_kills(r)
}

/// Tasks SIGKILLed with no kernel OOM kill counted in their cgroup: nothing in the runner
/// sends SIGKILL to a task (a stuck arm fails instead), so these are a userspace killer's.
pub fn userspace_kills(r: &ArmResult) -> u64 {
    r.tasks.iter().filter(|t| matches!(t.outcome, Outcome::Killed { signal: 9 })).count() as u64
}

/// The bound of every distinct (tasks, baseline, limit) among the results.
#[derive(Debug, Default, Clone)]
pub struct KillBounds {
    /// `Err` holds why no bound could be computed (a search too large); the report shows "–".
    bounds: BTreeMap<String, Result<(Bound, ParkDeadline), String>>,
    /// The tasks' unpaused concurrent peak (bytes) per key, swap runs included.
    peaks: BTreeMap<String, u64>,
}

/// Swap is part of the key: a swap run has no bound (the model has no swap), even where a
/// swapless run of the same traces and limit has one.
fn key(r: &ArmResult) -> String {
    let tasks: Vec<String> = r.tasks.iter().map(|t| format!("{:?}:{}", t.tier, t.trace)).collect();
    format!("{}|{}|{}|swap {:?}", r.parent_max_bytes, r.baseline_mb, tasks.join(","), r.swap_mb)
}

impl KillBounds {
    /// Loads each run's traces from `traces_dir`; a missing or malformed trace is an error
    /// naming the run it belongs to.
    pub fn compute(results: &[ArmResult], traces_dir: &Path) -> Result<KillBounds> {
        let mut bounds = BTreeMap::new();
        let mut peaks = BTreeMap::new();
        for r in
            results.iter().filter(|r| r.workload == crate::scenario::Workload::Replay && !r.arm.starts_with("solo:"))
        {
            let k = key(r);
            if peaks.contains_key(&k) {
                continue;
            }
            let mut profiles = Vec::new();
            for t in &r.tasks {
                let trace = memqos_replay::trace::load_trace(&trace_path(traces_dir, &t.trace))
                    .with_context(|| format!("concurrent peak for {}/{} run {}", r.scenario, r.variant, r.run))?;
                profiles.push(Profile::from_trace(&trace, r.baseline_mb << 20));
            }
            peaks.insert(k, concurrent_peak(&profiles));
        }
        // A stress-ng scenario has no traces to bound.
        // The bound's model has no swap: with swap, a policy can also push pages out, so
        // the bound does not apply (its runs get none, and no avoidable count).
        for r in results.iter().filter(|r| r.workload == crate::scenario::Workload::Replay && r.swap_mb.is_none()) {
            let k = key(r);
            if bounds.contains_key(&k) {
                continue;
            }
            let context = || format!("kill bound for {}/{} run {} arm {}", r.scenario, r.variant, r.run, r.arm);
            let mut high = None;
            let mut lows = Vec::new();
            for (i, t) in r.tasks.iter().enumerate() {
                let trace =
                    memqos_replay::trace::load_trace(&trace_path(traces_dir, &t.trace)).with_context(context)?;
                let p = Profile::from_trace(&trace, r.baseline_mb << 20);
                // A solo arm's one task is never paused, whatever its tier.
                if (t.tier == Tier::High || r.tasks.len() == 1) && high.is_none() {
                    high = Some(p);
                } else {
                    lows.push((i, p));
                }
            }
            let bound = match high {
                Some(high) => {
                    let p = Problem { limit: r.parent_max_bytes, high, lows: lows.into_iter().map(|l| l.1).collect() };
                    min_kills(&p).and_then(|b| Ok((b, park_deadline(&p)?))).map_err(|e| e.to_string())
                }
                None => Err("no protected task".to_string()),
            };
            bounds.insert(k, bound);
        }
        Ok(KillBounds { bounds, peaks })
    }

    /// The bound for this run's traces and limit, if it was computed.
    pub fn for_run(&self, r: &ArmResult) -> Option<&Bound> {
        self.bounds.get(&key(r)).and_then(|b| b.as_ref().ok()).map(|b| &b.0)
    }

    /// The latest moment a one-shot "park every low task" could come (see [`ParkDeadline`]).
    pub fn park_deadline(&self, r: &ArmResult) -> Option<ParkDeadline> {
        self.bounds.get(&key(r)).and_then(|b| b.as_ref().ok()).map(|b| b.1)
    }

    /// What the run's tasks hold at once at most when none is paused (bytes), if computed.
    pub fn concurrent_peak(&self, r: &ArmResult) -> Option<u64> {
        self.peaks.get(&key(r)).copied()
    }

    /// Why a run has no bound (`None` if it has one or was never computed).
    pub fn why_none(&self, r: &ArmResult) -> Option<&str> {
        self.bounds.get(&key(r)).and_then(|b| b.as_ref().err()).map(String::as_str)
    }
}
