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
//! after a crash. A value already further in the tier's direction is left alone, and so is one
//! someone else writes over memqos's (`Actuator::taken_over`): its original is forgotten.

use crate::actuator::{takeover_note, Actuator, Request, Target};
use crate::events::{Outcome, WriteEvent};
use crate::journal::{Key, Process};
use memqos_policy::knobs::{oom_score_adj, settle, AdjState};
use memqos_policy::{Config, Observation};
use memqos_schema::KnobFile;
use std::collections::{HashMap, HashSet};

pub const FILE: &str = KnobFile::OomScoreAdj.name();

/// One process we have looked at.
struct Handled {
    process: Process,
    /// The cgroup it was last seen in (relative path): when that cgroup empties or is
    /// removed, its processes are settled at once rather than at the next full sample.
    cgroup: String,
    /// Whether memqos wrote it, and the value to put back (journaled by the actuator; kept
    /// here for its children).
    state: AdjState,
}

pub struct OomAdjuster {
    handled: HashMap<u32, Handled>,
    /// Messages for the daemon's log (permission errors and the like), drained by the loop.
    pub notes: Vec<String>,
    reported_failure: bool,
}

/// A process as it is now, its parent's pid and its oom_score_adj; None if it is gone.
fn inspect(pid: u32) -> Option<(Process, u32, i32)> {
    let stat = crate::proc_stat::read(pid)?;
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
        self.handled.values().filter(|h| h.state.wrote).count()
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

    /// Processes that left: exited or exiting (forgotten) or moved out of the tier (original
    /// put back), among those `left` says have left.
    fn settle(&mut self, act: &mut Actuator, left: impl Fn(&u32, &Handled) -> bool) -> Vec<Request> {
        let mut writes = Vec::new();
        let mut exited = Vec::new();
        self.handled.retain(|pid, h| {
            if !left(pid, h) {
                return true;
            }
            // A task on its way out (an OOM-killed one leaves cgroup.procs before it is a
            // zombie) has not moved anywhere: nothing to put back, only to forget.
            if let Some(original) = settle(h.state, h.process.is_running()) {
                let mut r = Request::new(
                    Target::Process { cgroup: String::new(), cgroup_id: 0, process: h.process },
                    FILE,
                    original.to_string(),
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
        let looked: HashSet<&str> = cgroups.iter().map(|c| c.path.as_str()).collect();
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
            let Some(Ok(pids)) = dirs.as_ref().and_then(|r| Some(r.as_ref()?.cgroup(&c.path).ok()?.procs())) else {
                continue;
            };
            for pid in pids {
                present.insert(pid);
                if let Some(h) = self.handled.get_mut(&pid) {
                    if h.cgroup != c.path {
                        h.cgroup.clone_from(&c.path);
                    }
                    self.notes.extend(taken_back(h, act));
                    continue;
                }
                let Some((process, ppid, current)) = inspect(pid) else {
                    continue;
                };
                let journaled = act.process_original(process, FILE).and_then(|v| v.parse().ok());
                let parent = self.handled.get(&ppid).map(|p| (ppid, p.state));
                let (write, state) = oom_score_adj(target, current, journaled, parent);
                if let Some(w) = write {
                    let mut r =
                        Request::new(target_proc_of(c, process), FILE, w.value.to_string(), w.reason.to_string());
                    r.original = w.journal_original.map(|o| o.to_string());
                    writes.push(r);
                }
                self.handled.insert(pid, Handled { process, cgroup: c.path.clone(), state });
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

/// Whether someone else set `h`'s oom_score_adj since memqos did (an administrator, or the
/// process raising its own): then the value is theirs, nothing is put back when the process
/// leaves its tier or memqos stops, and the note says so.
fn taken_back(h: &mut Handled, act: &mut Actuator) -> Option<String> {
    if !h.state.wrote {
        return None;
    }
    let dir = crate::beneath::open_process(h.process.pid, h.process.start_time).ok()?;
    let found = crate::beneath::read_at(&dir, FILE).ok()?;
    let (wrote, original) = act.taken_over(Key::Process(h.process, FILE.to_owned()), &found)?;
    h.state.wrote = false;
    let at = format!("pid {} in {}", h.process.pid, memqos_cgroupfs::name::display(&h.cgroup));
    Some(takeover_note(&at, FILE, &found, &wrote, &original))
}

fn target_proc_of(c: &memqos_policy::CgroupObs, process: Process) -> Target {
    Target::Process { cgroup: c.path.clone(), cgroup_id: c.id.get(), process }
}
