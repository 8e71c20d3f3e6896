//! The one loop for the knobs a tier sets to one value on each of its cgroups
//! (`memqos_policy::knobs::TierStatic`: cpu.weight, memory.swap.max): read the file through
//! the actuator, report a cgroup whose file cannot be read once, decide with the policy's one
//! rule (`tier_static`), request the write. A value someone else wrote over memqos's is
//! theirs from then on (`Actuator::taken_over`). What differs per knob is a [`StaticKnob`]:
//! when to look at all, and what a missing file means.

use crate::actuator::{takeover_note, Actuator, Request, Target};
use crate::beneath::FileError;
use crate::journal::Key;
use memqos_policy::knobs::{tier_static, StaticDecision, TierStatic};
use memqos_policy::{CgroupObs, Config, Observation};
use std::collections::HashSet;

/// What the knob's file missing on a cgroup that was just sampled means.
pub(crate) enum Missing {
    /// The cgroup itself went (short-lived cgroups do): nothing to say.
    Gone,
    /// The file cannot be had on this cgroup: reported once, as unreadable ("no such file").
    Unreadable,
    /// The kernel has no such file at all: this note, and nothing more this tick.
    Unsupported(String),
}

/// One tier-static knob's difference from the others.
pub(crate) trait StaticKnob: Default {
    const KNOB: TierStatic;

    /// Whether to look at any cgroup this tick (notes go to `notes`).
    fn active(&mut self, _notes: &mut Vec<String>) -> bool {
        true
    }

    /// The file is missing on `c` (`reported`: its file was reported unreadable before):
    /// what that means.
    fn missing(&mut self, cfg: &Config, c: &CgroupObs, reported: bool, act: &mut Actuator) -> Missing;

    /// The note for `c`'s file being unreadable (`why`); `path` is the cgroup's directory.
    fn unreadable(path: &std::path::Path, why: &str) -> String;
}

pub struct TierStatics<K> {
    pub(crate) knob: K,
    /// Cgroups already reported as unreadable: one message each, not one per tick.
    reported: HashSet<u64>,
    pub notes: Vec<String>,
}

impl<K: StaticKnob> TierStatics<K> {
    /// None when no tier sets the knob.
    pub fn new(cfg: &Config) -> Option<TierStatics<K>> {
        cfg.tiers.iter().any(|(_, t)| K::KNOB.target(t).is_some()).then(|| TierStatics {
            knob: K::default(),
            reported: HashSet::new(),
            notes: Vec::new(),
        })
    }

    /// The writes that bring each observed cgroup's file to its tier's value. Read on the
    /// periodic path through the actuator's cached directory fd (one small file each).
    pub fn plan(&mut self, cfg: &Config, obs: &Observation, act: &mut Actuator) -> Vec<Request> {
        if !self.knob.active(&mut self.notes) {
            return Vec::new();
        }
        let file = K::KNOB.file().name();
        let mut writes = Vec::new();
        for c in &obs.cgroups {
            let Some(target) = cfg.tiers.get(c.tier).and_then(|t| K::KNOB.target(t)) else {
                continue;
            };
            let key = Key::Cgroup(c.id.get(), file.to_owned());
            if act.is_theirs(&key) {
                continue;
            }
            let current = match act.read(&c.path, c.id.get(), file) {
                Ok(v) => v,
                Err(e) => {
                    let why = match e {
                        FileError::Vanished => {
                            match self.knob.missing(cfg, c, self.reported.contains(&c.id.get()), act) {
                                Missing::Gone => continue,
                                Missing::Unreadable => "no such file".to_string(),
                                Missing::Unsupported(note) => {
                                    self.notes.push(note);
                                    return Vec::new();
                                }
                            }
                        }
                        FileError::Io(e) => e.to_string(),
                    };
                    if self.reported.insert(c.id.get()) {
                        let path = memqos_cgroupfs::name::fs_path(&cfg.cgroup_root, &c.path);
                        self.notes.push(K::unreadable(&path, &why));
                    }
                    continue;
                }
            };
            // Someone else wrote it since memqos did: theirs from now on.
            if let Some((wrote, original)) = act.taken_over(key, &current) {
                let at = memqos_cgroupfs::name::display(&c.path);
                self.notes.push(takeover_note(&at, file, &current, &wrote, &original));
                continue;
            }
            // Journaled: memqos wrote it, so a value other than the kernel's is not foreign
            // (a knob without a kernel default to respect, cpu.weight, is never foreign).
            let ours = act.journal().original(c.id.get(), file).is_some();
            if let StaticDecision::Write { value, reason } =
                tier_static(K::KNOB, target, &current, ours, cfg.policy.foreign_knobs)
            {
                let target = Target::Cgroup { path: c.path.clone(), id: c.id.get() };
                writes.push(Request::new(target, file, value, reason));
            }
        }
        writes
    }
}
