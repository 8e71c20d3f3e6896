//! `learn_peak`: records the lifetime peaks of protected cgroups that name their workload,
//! keeps them in `history_file`, and gives a later cgroup with the same key, and no
//! declaration of its own, the learned expectation as its expected peak. The engine then
//! reserves it exactly like a declared one (`engine::reserve`); only the reason names the
//! source. See `history` for why only an explicit key counts.
//!
//! The tier remembers too: every lifetime of a `learn_peak` tier's cgroup, keyed or not, is
//! recorded under the tier's name in `<state_dir>/tier-peaks.json` (the same bounded, all or
//! nothing, versioned format). A cgroup with neither a declaration nor a known key gets the
//! largest of its tier's last five peaks plus 10%: weaker than a key (the tier's members may
//! be different workloads, so a small one reserves for the largest), better than nothing at
//! first sight of a workload. A bad file is set aside with one warning, like the history.

use crate::events::Event;
use crate::history::History;
use memqos_cgroupfs::beneath::{Dir, Root};
use memqos_policy::size::PAGE;
use memqos_policy::{Config, LearnedPeak, Observation};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// One lifetime being watched: a protected cgroup of a `learn_peak` tier.
struct Lifetime {
    rel: String,
    /// Its valid workload key, if it names one.
    key: Option<String>,
    /// Its tier's name (the tier history's key).
    tier: String,
    /// The largest of memory.peak (Linux 5.19+) or, without it, memory.current as read.
    peak: u64,
    /// Seen populated once: a cgroup made before its task starts is empty, not ended.
    ran: bool,
    /// Recorded already (seen empty): a lingering empty cgroup is not recorded twice.
    recorded: bool,
    /// Its learned expectation was logged (once per cgroup).
    announced: bool,
}

pub struct Learner {
    file: PathBuf,
    history: History,
    /// Recent peaks per tier name, and their file.
    tier_file: PathBuf,
    tiers: History,
    lifetimes: HashMap<u64, Lifetime>,
    /// A dry run learns in memory but writes no file.
    persist: bool,
}

/// The expectation applied for a learned peak: 10% above it, rounded up to a page. The
/// margin is the one the experiments' declarations and kubelet's requests use over a
/// measured peak; a lifetime that grows a little past the last one still fits.
pub fn with_margin(peak: u64) -> u64 {
    peak.saturating_add(peak.div_ceil(10)).div_ceil(PAGE).saturating_mul(PAGE)
}

impl Learner {
    /// Loads `file`. Missing: an empty history. Unreadable or malformed: not fatal, one
    /// warning (`Degraded`) naming the file and the error, the file moved aside to
    /// `<file>.bad` (kept for a person to look at, and not overwritten by the next save),
    /// and an empty history.
    /// `tier_file` likewise, for the tiers' recent peaks.
    pub fn open(file: PathBuf, tier_file: PathBuf, persist: bool, emit: &mut dyn FnMut(Event)) -> Learner {
        let history = Self::load(&file, "history_file", persist, emit);
        let tiers = Self::load(&tier_file, "tier peaks", persist, emit);
        Learner { file, history, tier_file, tiers, lifetimes: HashMap::new(), persist }
    }

    fn load(file: &Path, what: &str, persist: bool, emit: &mut dyn FnMut(Event)) -> History {
        match std::fs::read_to_string(file) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => History::default(),
            Err(e) => Self::discard(file, what, &e.to_string(), persist, emit),
            Ok(text) => match History::from_json(&text) {
                Ok(h) => h,
                Err(e) => Self::discard(file, what, &e, persist, emit),
            },
        }
    }

    fn discard(file: &Path, what: &str, error: &str, persist: bool, emit: &mut dyn FnMut(Event)) -> History {
        let bad = bad_path(file);
        let moved = if !persist {
            "left in place (dry run)".to_owned()
        } else {
            match std::fs::rename(file, &bad) {
                Ok(()) => format!("moved aside to {}", bad.display()),
                Err(e) => format!("could not be moved aside to {} ({e})", bad.display()),
            }
        };
        emit(Event::Degraded {
            message: format!("{what} {}: {error}; {moved}; learned peaks start empty", file.display()),
        });
        History::default()
    }

    /// A reload named another `history_file`: the history comes from there now (the
    /// lifetimes being watched carry on and are recorded there).
    pub fn set_file(&mut self, file: PathBuf, emit: &mut dyn FnMut(Event)) {
        if file != self.file {
            self.history = Self::load(&file, "history_file", self.persist, emit);
            self.file = file;
        }
    }

    /// After a full sample: follows the lifetimes of the `learn_peak` cgroups (`workloads`:
    /// their valid keys by cgroup id, from the sampler), records those that ended (seen
    /// empty after running, or gone), and fills in the learned expected peak of those without
    /// a declaration. `now_s`: wall-clock seconds, for the history's last-seen times.
    pub fn observe(
        &mut self,
        cfg: &Config,
        root: &Path,
        obs: &mut Observation,
        workloads: &HashMap<u64, String>,
        now_s: u64,
        emit: &mut dyn FnMut(Event),
    ) {
        let mut changed = false;
        let mut present = Vec::new();
        // Cgroups are read beneath the root, opened when a lifetime may need it.
        let learning = !self.lifetimes.is_empty() || cfg.tiers.iter().any(|(_, t)| t.learn_peak);
        let dirs = if learning { Root::open(root).ok() } else { None };
        for c in obs.cgroups.iter_mut() {
            let Some(tier) = cfg.tiers.get(c.tier).filter(|t| t.learn_peak && t.is_protected()) else {
                continue;
            };
            let key = workloads.get(&c.id.get());
            present.push(c.id.get());
            let l = self.lifetimes.entry(c.id.get()).or_insert_with(|| Lifetime {
                rel: c.path.clone(),
                key: key.cloned(),
                tier: tier.name.clone(),
                peak: 0,
                ran: false,
                recorded: false,
                announced: false,
            });
            let ended = !l.recorded && {
                l.key = key.cloned();
                l.peak = l
                    .peak
                    .max(c.usage_bytes)
                    .max(cgroup(dirs.as_ref(), &c.path, None).and_then(|d| peak(&d)).unwrap_or(0));
                l.ran |= c.is_populated();
                l.ran && !c.is_populated()
            };
            if ended {
                changed |= self.record_lifetime(c.id.get(), now_s, emit);
            }
            // An explicit declaration always wins: the cgroup's xattr, or the tier's.
            if c.expected_peak_bytes.is_some() || tier.expected_peak.is_some() {
                continue;
            }
            // Its workload key's history, else its tier's recent peaks.
            let known = key.and_then(|k| Some((k, self.history.get(k)?, false)));
            let Some((name, entry, from_tier)) =
                known.or_else(|| Some((&tier.name, self.tiers.get(&tier.name)?, true)))
            else {
                continue;
            };
            let peak = entry.expectation().unwrap_or(0);
            let learned =
                LearnedPeak { workload: name.clone(), lifetimes: entry.peaks.len(), peak_bytes: peak, tier: from_tier };
            let expected = with_margin(peak);
            c.expected_peak_bytes = Some(expected);
            c.learned_peak = Some(learned.clone());
            let l = self.lifetimes.get_mut(&c.id.get()).expect("inserted above");
            if !std::mem::replace(&mut l.announced, true) {
                emit(Event::PeakLearned { cgroup: c.path.clone(), learned, expected_bytes: expected });
            }
        }
        let gone: Vec<u64> = self.lifetimes.keys().filter(|id| !present.contains(id)).copied().collect();
        for id in gone {
            let l = &self.lifetimes[&id];
            // Not observed any more. Only a cgroup whose directory is gone has ended; one still
            // there left this tier (a reload) or lost its key: forget it, record nothing.
            if l.ran && !l.recorded && cgroup(dirs.as_ref(), &l.rel, Some(id)).is_none() {
                changed |= self.record_lifetime(id, now_s, emit);
            }
            self.lifetimes.remove(&id);
        }
        if changed {
            self.save(emit);
        }
    }

    /// At stop: lifetimes that ended since the last full sample (their cgroup gone or empty
    /// now) are recorded too, so a task that ended just before the daemon stopped is not
    /// lost. Those still running are not: a lifetime cut off by our stop is not a lifetime.
    pub fn finish(&mut self, root: &Path, now_s: u64, emit: &mut dyn FnMut(Event)) {
        let mut changed = false;
        let ids: Vec<u64> = self.lifetimes.keys().copied().collect();
        let dirs = Root::open(root).ok();
        for id in ids {
            let l = &self.lifetimes[&id];
            if !l.ran || l.recorded {
                continue;
            }
            let dir = cgroup(dirs.as_ref(), &l.rel, Some(id));
            let ended = dir.as_ref().is_none_or(|d| d.is_populated().ok() == Some(false));
            if ended {
                if let Some(p) = dir.as_ref().and_then(peak) {
                    let l = self.lifetimes.get_mut(&id).expect("listed");
                    l.peak = l.peak.max(p);
                }
                changed |= self.record_lifetime(id, now_s, emit);
            }
        }
        if changed {
            self.save(emit);
        }
    }

    /// Records lifetime `id` into its tier's recent peaks and, if it has a key, the history;
    /// false when it has no peak to record.
    fn record_lifetime(&mut self, id: u64, now_s: u64, emit: &mut dyn FnMut(Event)) -> bool {
        let Some(l) = self.lifetimes.get_mut(&id) else { return false };
        l.recorded = true;
        if l.peak == 0 {
            return false;
        }
        self.tiers.record(&l.tier, l.peak, now_s);
        if let Some(key) = &l.key {
            self.history.record(key, l.peak, now_s);
            let lifetimes = self.history.get(key).map_or(0, |e| e.peaks.len());
            emit(Event::PeakRecorded { cgroup: l.rel.clone(), workload: key.clone(), peak_bytes: l.peak, lifetimes });
        }
        true
    }

    /// Writes both files, each atomically: a temporary file in the same directory, fsync,
    /// rename.
    fn save(&self, emit: &mut dyn FnMut(Event)) {
        if !self.persist {
            return;
        }
        for (what, file, h) in
            [("history_file", &self.file, &self.history), ("tier peaks", &self.tier_file, &self.tiers)]
        {
            if h.is_empty() && !file.exists() {
                continue;
            }
            if let Err(e) = write_atomically(file, h.to_json().as_bytes()) {
                emit(Event::Degraded {
                    message: format!("{what} {}: not saved ({e}); learned peaks live on in memory", file.display()),
                });
            }
        }
    }
}

/// `<file>.bad`.
pub fn bad_path(file: &Path) -> PathBuf {
    let mut s = file.as_os_str().to_owned();
    s.push(".bad");
    PathBuf::from(s)
}

/// memory.peak of the cgroup at `dir` (None before Linux 5.19, or when it is gone).
fn peak(dir: &Dir) -> Option<u64> {
    dir.memory_peak().ok()
}

/// The cgroup at `rel` beneath the root, if it is there and (with `id`) is still the cgroup
/// with this id (its inode).
fn cgroup(root: Option<&Root>, rel: &str, id: Option<u64>) -> Option<Dir> {
    root?.cgroup(rel).ok().filter(|d| id.is_none_or(|id| d.id() == id))
}

fn write_atomically(file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = file.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, file)?;
        // The rename itself survives a crash once the directory is synced.
        std::fs::File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_margin_is_ten_percent_rounded_up_to_a_page() {
        assert_eq!(with_margin(100 << 20), 115_343_360); // 110 MiB, already page aligned
        assert_eq!(with_margin(4096), 8192);
        assert_eq!(with_margin(0), 0);
        assert_eq!(with_margin(u64::MAX), u64::MAX, "saturates");
    }

    #[test]
    fn a_save_replaces_the_file_whole() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("sub/history.json");
        write_atomically(&file, b"one").unwrap();
        write_atomically(&file, b"two").unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "two");
        let left: Vec<_> = std::fs::read_dir(file.parent().unwrap()).unwrap().collect();
        assert_eq!(left.len(), 1, "no temporary file left");
        assert_eq!(bad_path(&file), dir.path().join("sub/history.json.bad"));
    }
}
