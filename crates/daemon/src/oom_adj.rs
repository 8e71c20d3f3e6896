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

use crate::journal::{Journal, Process};
use memqos_cgroupfs::Cgroup;
use memqos_policy::{Config, Observation};
use std::collections::{HashMap, HashSet};

pub const FILE: &str = "oom_score_adj";

/// One process we have looked at.
struct Handled {
    process: Process,
    /// False when its value was already at or beyond the target: nothing to put back.
    wrote: bool,
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

fn read_adj(process: Process) -> Option<i32> {
    std::fs::read_to_string(process.oom_score_adj_path()).ok()?.trim().parse().ok()
}

/// Writes the process's oom_score_adj; "ok" or the error, for the event log.
fn write_adj(process: Process, value: &str) -> String {
    match std::fs::write(process.oom_score_adj_path(), value) {
        Ok(()) => "ok".to_string(),
        Err(e) => format!("error: {e}"),
    }
}

/// One write made by `sync`, for the daemon's event log.
pub struct AdjWrite {
    pub cgroup: String,
    pub pid: u32,
    pub previous: i32,
    pub value: i32,
    /// "ok", or the error.
    pub outcome: String,
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

    /// Brings every process of the observed cgroups to its tier's value and puts back the
    /// value of processes that left. A process that exits mid-way is skipped.
    pub fn sync(
        &mut self,
        cfg: &Config,
        root: &Cgroup,
        obs: &Observation,
        journal: &mut Journal,
    ) -> anyhow::Result<Vec<AdjWrite>> {
        let mut writes = Vec::new();
        let mut present: HashSet<u32> = HashSet::new();
        for c in &obs.cgroups {
            let Some(target) = cfg.tiers.get(c.tier).and_then(|t| t.oom_score_adj) else { continue };
            // A cgroup that vanished since the snapshot has no processes to adjust.
            let Ok(pids) = root.child(&c.id).procs() else { continue };
            for pid in pids {
                present.insert(pid);
                if self.handled.contains_key(&pid) {
                    continue;
                }
                let Some(process) = Process::current(pid) else { continue };
                let Some(previous) = read_adj(process) else { continue };
                let wrote = wants(previous, target)
                    && {
                        journal.record_process(&c.id, process, FILE, &previous.to_string())?;
                        let outcome = write_adj(process, &target.to_string());
                        let ok = outcome == "ok";
                        if !ok && !self.reported_failure && process.is_alive() {
                            self.reported_failure = true;
                            self.notes.push(format!(
                            "cannot set oom_score_adj of pid {pid} in {} ({outcome}); lowering it needs CAP_SYS_RESOURCE. Protected tasks keep their OOM-kill order",
                            c.id
                        ));
                        }
                        writes.push(AdjWrite { cgroup: c.id.clone(), pid, previous, value: target, outcome });
                        ok
                    };
                if !wrote {
                    journal.forget_processes(&[process])?;
                }
                self.handled.insert(pid, Handled { process, wrote });
            }
        }
        // Processes that left: exited (forget them) or moved out of the tier (put back).
        let mut gone = Vec::new();
        self.handled.retain(|pid, h| {
            if present.contains(pid) {
                return true;
            }
            gone.push((h.process, h.wrote));
            false
        });
        let mut forget = Vec::new();
        for (process, wrote) in gone {
            if wrote && process.is_alive() {
                if let Some(original) = journal.process_original(process, FILE).map(str::to_owned) {
                    let previous = read_adj(process).unwrap_or(0);
                    let outcome = write_adj(process, &original);
                    let value = original.parse().unwrap_or(0);
                    // The process is no longer in a managed cgroup: no cgroup to name.
                    writes.push(AdjWrite { cgroup: String::new(), pid: process.pid, previous, value, outcome });
                }
            }
            forget.push(process);
        }
        journal.forget_processes(&forget)?;
        Ok(writes)
    }
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
