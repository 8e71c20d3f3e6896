//! `oom_score_adj` of the processes in a tier's cgroups (the tier's `oom_score_adj` field).
//!
//! memory.low/min steer reclaim, not the OOM killer. When a parent reaches memory.max with
//! nothing reclaimable (anonymous memory, no swap), the memcg OOM killer picks the task with
//! the highest badness: rss + swap + page tables, plus `oom_score_adj` x limit / 1000. That is
//! often the protected tenant, simply because it is the largest (the experiments' sweep saw
//! it). A negative adj on protected tiers makes an unavoidable kill land on a lower tier; it
//! is the knob Kubernetes sets per QoS class.
//!
//! Every process is handled once: its original value is journaled (with its start time, so
//! a recycled pid is never written) before the write; the original goes back when the process
//! leaves the tier's cgroups, when the daemon stops, or from the guardian / the next start
//! after a crash. A value already further in the tier's direction is left alone.

use crate::actuator::{Actuator, Request, Target};
use crate::events::{Outcome, WriteEvent};
use crate::journal::Process;
use memqos_policy::{Config, Observation};
use std::collections::{HashMap, HashSet};

pub const FILE: &str = "oom_score_adj";

/// One process we have looked at.
struct Handled {
    process: Process,
    /// The cgroup it was last seen in (relative path): when that cgroup empties or is
    /// removed, its processes are settled at once rather than at the next full sample.
    cgroup: String,
    /// False when its value was already at or beyond the target: nothing to put back.
    wrote: bool,
    /// The value to put back (journaled by the actuator; kept here for its children).
    original: i32,
}

pub struct OomAdjuster {
    handled: HashMap<u32, Handled>,
    /// Messages for the daemon's log (permission errors and the like), drained by the loop.
    pub notes: Vec<String>,
    reported_failure: bool,
}

/// Whether `current` should be moved to `target`: only towards the target's side of 0 and
/// never back from a more extreme value someone else set.
fn wants(current: i32, target: i32) -> bool {
    if target <= 0 {
        current > target
    } else {
        current < target
    }
}

/// A process as it is now, its parent's pid and its oom_score_adj; None if it is gone.
fn inspect(pid: u32) -> Option<(Process, u32, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let process = Process { pid, start_time: crate::proc_stat::start_time_of(&stat)? };
    let ppid = crate::proc_stat::ppid_of(&stat)?;
    let adj = std::fs::read_to_string(format!("/proc/{pid}/oom_score_adj")).ok()?.trim().parse().ok()?;
    Some((process, ppid, adj))
}

impl OomAdjuster {
    /// None when no tier sets `oom_score_adj`: the daemon then never reads a process.
    pub fn new(cfg: &Config) -> Option<OomAdjuster> {
        cfg.tiers.iter().any(|(_, t)| t.oom_score_adj.is_some()).then(|| OomAdjuster {
            handled: HashMap::new(),
            notes: Vec::new(),
            reported_failure: false,
        })
    }

    /// Processes whose value we changed and that are still in a tier's cgroups.
    pub fn adjusted(&self) -> usize {
        self.handled.values().filter(|h| h.wrote).count()
    }

    /// The writes that bring every process of the observed cgroups to its tier's value, and
    /// put back the value of processes that left. A child that inherited a value memqos set
    /// on its parent gets the parent's original journaled, so it is restored too.
    pub fn plan(&mut self, cfg: &Config, obs: &Observation, act: &mut Actuator) -> Vec<Request> {
        let mut present: HashSet<u32> = HashSet::new();
        let mut writes = self.plan_cgroups(cfg, &obs.cgroups, act, &mut present);
        writes.extend(self.settle(act, |pid, _| !present.contains(pid)));
        writes
    }

    /// Processes that left: exited (forgotten) or moved out of the tier (original put back),
    /// among those `left` says have left.
    fn settle(&mut self, act: &mut Actuator, left: impl Fn(&u32, &Handled) -> bool) -> Vec<Request> {
        let mut writes = Vec::new();
        let mut exited = Vec::new();
        self.handled.retain(|pid, h| {
            if !left(pid, h) {
                return true;
            }
            if h.wrote && h.process.is_alive() {
                let mut r = Request::new(
                    Target::Process { cgroup: String::new(), cgroup_id: 0, process: h.process },
                    FILE,
                    h.original.to_string(),
                    "process left its tier: original put back",
                );
                r.restores = true;
                writes.push(r);
            } else {
                exited.push(h.process);
            }
            false
        });
        act.forget_processes(&exited, FILE);
        writes
    }

    /// For cgroups just created or whose processes changed (not a whole observation): the
    /// writes for their processes, and the settling of processes that were last seen in one
    /// of them and are no longer there (a tool call's process moved out or exited).
    pub fn plan_new(&mut self, cfg: &Config, cgroups: &[memqos_policy::CgroupObs], act: &mut Actuator) -> Vec<Request> {
        let mut present = HashSet::new();
        let mut writes = self.plan_cgroups(cfg, cgroups, act, &mut present);
        let looked: HashSet<&str> = cgroups.iter().map(|c| c.id.as_str()).collect();
        writes.extend(self.settle(act, |pid, h| looked.contains(h.cgroup.as_str()) && !present.contains(pid)));
        writes
    }

    /// For cgroups just removed (relative paths): their processes have all left, so they
    /// are settled now. At 100 tool calls a second, leaving this to the calm path's full
    /// sample made one batch of ~500 restores every 5 s that held up new cgroups' knobs.
    pub fn settle_removed(&mut self, removed: &[String], act: &mut Actuator) -> Vec<Request> {
        if removed.is_empty() {
            return Vec::new();
        }
        let removed: HashSet<&str> = removed.iter().map(String::as_str).collect();
        self.settle(act, |_, h| removed.contains(h.cgroup.as_str()))
    }

    fn plan_cgroups(
        &mut self,
        cfg: &Config,
        cgroups: &[memqos_policy::CgroupObs],
        act: &mut Actuator,
        present: &mut HashSet<u32>,
    ) -> Vec<Request> {
        let mut writes = Vec::new();
        // The root cgroup reads go beneath, opened at the first cgroup that needs it.
        let mut dirs: Option<Option<crate::beneath::Root>> = None;
        for c in cgroups {
            let Some(target) = cfg.tiers.get(c.tier).and_then(|t| t.oom_score_adj) else {
                continue;
            };
            // A cgroup that vanished since the snapshot has no processes to adjust.
            if dirs.is_none() {
                dirs = Some(crate::beneath::Root::open(&cfg.cgroup_root).ok());
            }
            let Some(Ok(pids)) = dirs.as_ref().and_then(|r| Some(r.as_ref()?.cgroup(&c.id).ok()?.procs())) else {
                continue;
            };
            for pid in pids {
                present.insert(pid);
                if let Some(h) = self.handled.get_mut(&pid) {
                    if h.cgroup != c.id {
                        h.cgroup.clone_from(&c.id);
                    }
                    continue;
                }
                let Some((process, ppid, current)) = inspect(pid) else {
                    continue;
                };
                // Journaled by this daemon before a reload rebuilt the adjuster: ours, with
                // its true original (the value now is the one memqos wrote).
                if let Some(original) = act.process_original(process, FILE).and_then(|v| v.parse().ok()) {
                    if wants(current, target) {
                        writes.push(Request::new(
                            target_proc_of(c, process),
                            FILE,
                            target.to_string(),
                            "tier oom_score_adj",
                        ));
                    }
                    self.handled.insert(pid, Handled { process, cgroup: c.id.clone(), wrote: true, original });
                    continue;
                }
                let inherited = self.handled.get(&ppid).filter(|p| p.wrote && current == target).map(|p| p.original);
                let target_proc = Target::Process { cgroup: c.id.clone(), cgroup_id: c.cgroup_id, process };
                let (wrote, original) = if let Some(original) = inherited {
                    let mut r = Request::new(
                        target_proc,
                        FILE,
                        target.to_string(),
                        format!("inherited from pid {ppid}: its original {original} journaled"),
                    );
                    r.original = Some(original.to_string());
                    writes.push(r);
                    (true, original)
                } else if wants(current, target) {
                    writes.push(Request::new(target_proc, FILE, target.to_string(), "tier oom_score_adj"));
                    (true, current)
                } else {
                    (false, current)
                };
                self.handled.insert(pid, Handled { process, cgroup: c.id.clone(), wrote, original });
            }
        }
        writes
    }

    /// Looks at how the writes went: a permission error is reported once.
    pub fn review(&mut self, events: &[WriteEvent]) {
        for e in events.iter().filter(|e| e.file == FILE) {
            if let (Outcome::Error(err), false) = (&e.outcome, self.reported_failure) {
                self.reported_failure = true;
                self.notes.push(format!(
                    "cannot set oom_score_adj of pid {} in {} ({err}); lowering it needs CAP_SYS_RESOURCE. Protected tasks keep their OOM-kill order",
                    e.pid.unwrap_or(0),
                    e.cgroup
                ));
            }
        }
    }
}

fn target_proc_of(c: &memqos_policy::CgroupObs, process: Process) -> Target {
    Target::Process { cgroup: c.id.clone(), cgroup_id: c.cgroup_id, process }
}

#[cfg(test)]
mod tests {
    use super::wants;

    #[test]
    fn moves_only_towards_the_target_and_never_undoes_a_stronger_setting() {
        assert!(wants(0, -900));
        assert!(wants(-500, -900));
        assert!(!wants(-900, -900));
        assert!(!wants(-1000, -900), "an administrator's -1000 stays");
        assert!(wants(0, 500));
        assert!(!wants(800, 500));
        assert!(!wants(0, 0));
    }
}
