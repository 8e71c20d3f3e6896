//! `policy.admission`: the allowances for new cgroups published for `memqos run`
//! (`<state_dir>/admission.json`, `memqos_schema::admission`), and the armed ceilings it
//! writes taken over as knobs of the daemon's own.
//!
//! `memqos run` marks a call's cgroup with `user.memqos.armed_high` (the bytes) and then
//! writes memory.high = those bytes, before the call starts. Found as it is, that memory.high
//! would be an operator's value: its original would be the armed bytes, `foreign_knobs =
//! "respect"` would never touch it and a stop would "restore" it, leaving the call throttled.
//! So a throttle-tier cgroup whose memory.high is not journaled, carries the mark from a
//! trusted owner (`observe::trusted`, as for every hint) and still holds exactly the marked
//! value is adopted: original `max` journaled (a stop, the guardian or the next start puts
//! `max` back), the value remembered as the daemon's own write (a later change by someone
//! else is noticed as a take-over). From then on the engine raises it as room frees and the
//! tier's stall bound applies, as for any cut.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use anyhow::{Context, Result};
use memqos_cgroupfs::Limit;
use memqos_policy::{Config, Engine, Observation, ParentObs};
use memqos_schema::admission::{Admission, TierAllowance, ADMISSION_VERSION, ARMED_HIGH_XATTR};
use memqos_schema::state::{ADMISSION_CLAIM_FILE, ADMISSION_FILE, ADMISSION_TMP_FILE};
use memqos_schema::KnobFile;

use crate::actuator::Actuator;
use crate::beneath::Root;
use crate::observe::{self, Sampler, Seen};

/// The publisher and the adopter, one per run of the loop.
#[derive(Default)]
pub(crate) struct Admissions {
    /// Why the file could not be written last time (said once, and when it recovers).
    failing: Option<String>,
    /// Cgroups with a memory.high below max found not armed (no mark, another value, an
    /// untrusted owner): not read again.
    not_armed: HashSet<u64>,
    /// The last publication's `seq`: waiting calls start one per publication.
    seq: u64,
    /// What each adopted call was armed at (cgroup id: bytes), handed to the engine as
    /// `CgroupObs::armed_bytes` while the call lives. Lost with a restart: the engine then
    /// counts the memory.high it finds.
    armed: HashMap<u64, u64>,
}

impl Admissions {
    /// Writes the allowances for `parent` (atomically: a reader sees a whole file or none);
    /// nothing in a dry run or with `admission` off. Returns a note when writing starts or
    /// stops failing.
    pub fn publish(
        &mut self,
        state_dir: &Path,
        cfg: &Config,
        engine: &Engine,
        parent: &ParentObs,
        dry_run: bool,
    ) -> Option<String> {
        if dry_run || !cfg.policy.admission {
            return None;
        }
        // Counted whether or not the write lands: no seq is published twice.
        self.seq += 1;
        let tiers = engine
            .admission(parent)
            .into_iter()
            .filter_map(|a| {
                let t = cfg.tiers.get(a.tier)?;
                Some(TierAllowance {
                    tier: t.name.clone(),
                    allowance_bytes: a.bytes,
                    wait: a.wait,
                    room_bytes: Some(a.room),
                })
            })
            .collect();
        let file = Admission {
            version: ADMISSION_VERSION,
            pid: std::process::id(),
            cgroup_root: cfg.cgroup_root.display().to_string(),
            computed_unix_ms: unix_ms(),
            interval_ms: cfg.signals.sampling_interval_ms,
            tiers,
            seq: self.seq,
            wait_limit_ms: cfg.policy.admission_wait_ms,
        };
        match write(state_dir, &file) {
            Ok(()) => self.failing.take().map(|was| format!("admission.json is written again (it was not: {was})")),
            Err(e) => {
                let why = format!("{e:#}");
                let first = self.failing.is_none();
                self.failing = Some(why.clone());
                first.then(|| format!("{why}: `memqos run` arms no new call until it can be written"))
            }
        }
    }

    /// Adopts the armed memory.high of the cgroups of `obs` (see the module doc): their
    /// original becomes `max` in `obs`, `seen` and the sampler's view too, so this very tick
    /// (and a reaction before the next) manages them.
    pub fn adopt_armed(
        &mut self,
        cfg: &Config,
        root: &Root,
        act: &mut Actuator,
        sampler: &mut Sampler,
        obs: &mut Observation,
        seen: &mut [Seen],
    ) -> Vec<String> {
        if act.dry_run() {
            return Vec::new();
        }
        let alive: HashSet<u64> = obs.cgroups.iter().map(|c| c.id.get()).collect();
        self.not_armed.retain(|id| alive.contains(id));
        self.armed.retain(|id, _| alive.contains(id));
        for c in obs.cgroups.iter_mut() {
            c.armed_bytes = self.armed.get(&c.id.get()).copied();
        }
        let mut found = Vec::new();
        for (i, c) in obs.cgroups.iter().enumerate() {
            let Limit::Bytes(high) = c.current.high else { continue };
            let id = c.id.get();
            let throttled_tier = cfg.tiers.get(c.tier).is_some_and(|t| t.throttle);
            if !throttled_tier
                || self.not_armed.contains(&id)
                || act.journal().original(id, KnobFile::MemoryHigh.name()).is_some()
            {
                continue;
            }
            match armed_bytes(root, &c.path) {
                // Compared in pages, as the kernel keeps memory.high.
                Some(armed) if armed / 4096 == high / 4096 => found.push((i, high)),
                _ => {
                    self.not_armed.insert(id);
                }
            }
        }
        if found.is_empty() {
            return Vec::new();
        }
        let knobs: Vec<_> = found
            .iter()
            .map(|&(i, high)| {
                let c = &obs.cgroups[i];
                (c.path.clone(), c.id.get(), KnobFile::MemoryHigh.name(), "max".to_owned(), high.to_string())
            })
            .collect();
        if !act.adopt(&knobs) {
            // Tried again next tick; meanwhile the armed value stands as found.
            return vec![format!(
                "{} armed memory.high not taken over: the journal cannot be written; left as `memqos run` set it",
                knobs.len()
            )];
        }
        for (i, high) in found {
            let c = &mut obs.cgroups[i];
            c.original.high = Limit::Max;
            c.armed_bytes = Some(high);
            self.armed.insert(c.id.get(), high);
            sampler.note_adopted(c.id.get());
            if let Some(s) = seen.iter_mut().find(|s| s.cgroup_id == c.id.get()) {
                s.original.high = Limit::Max;
            }
        }
        Vec::new()
    }
}

/// The bytes `memqos run` marked the cgroup at `rel` armed with, if a trusted owner did.
fn armed_bytes(root: &Root, rel: &str) -> Option<u64> {
    let dir = root.cgroup(rel).ok()?;
    observe::trusted(root, &dir).ok()?;
    let bytes = dir.xattr_bytes(ARMED_HIGH_XATTR, 64).ok()??;
    std::str::from_utf8(&bytes).ok()?.trim().parse().ok()
}

fn write(state_dir: &Path, a: &Admission) -> Result<()> {
    let tmp = state_dir.join(ADMISSION_TMP_FILE);
    if let Err(e) = std::fs::write(&tmp, serde_json::to_vec(a)?) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("writing {}", tmp.display()));
    }
    std::fs::rename(&tmp, state_dir.join(ADMISSION_FILE)).with_context(|| format!("renaming {}", tmp.display()))
}

/// Withdraws the allowances (a stop, a restart of the loop): no new call is armed against a
/// daemon that is not there to manage it. The claim goes too: the next run counts `seq` from 1.
pub(crate) fn remove(state_dir: &Path) {
    let _ = std::fs::remove_file(state_dir.join(ADMISSION_FILE));
    let _ = std::fs::remove_file(state_dir.join(ADMISSION_CLAIM_FILE));
}

/// Wall-clock ms since the Unix epoch: `memqos run`, another process, compares it with its own.
fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}
