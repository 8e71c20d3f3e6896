//! Putting the journal's originals back: on orderly shutdown, from the guardian, at the next
//! start and from `memqos restore`. Every write goes beneath the journal's cgroup root into
//! the cgroup with the recorded id, or through the recorded process's /proc/PID fd; a knob
//! that is not in the list below is refused, so a tampered journal cannot write other files.

use super::{Entry, Journal, JOURNAL_FILE};
use crate::beneath::{self, FileError, OpenError, Root};
use anyhow::{Context, Result};
use memqos_schema::{KnobFile, Scope};
use std::path::Path;

/// What a restore did.
#[derive(Debug, Default)]
pub struct RestoreReport {
    pub restored: Vec<Entry>,
    /// The cgroup or process no longer exists (or the name is another cgroup's now).
    pub vanished: Vec<Entry>,
    pub failed: Vec<(Entry, String)>,
    /// Entries of another boot: not restored, the journal moved aside.
    pub other_boot: Vec<Entry>,
    /// Lines of the journal that did not parse and were skipped, as messages.
    pub skipped: Vec<String>,
}

impl RestoreReport {
    /// One line per knob that could not be restored, naming it.
    pub fn failures(&self) -> Vec<String> {
        self.failed.iter().map(|(e, err)| format!("{}: {err}", e.describe())).collect()
    }
}

/// Whether a journal may name `file` for a cgroup (or, `process`, for a process): only a
/// journaled knob of that scope (`KnobFile`); anything else is refused (a tampered journal
/// must not write arbitrary files).
fn restorable(file: &str, scope: Scope) -> bool {
    KnobFile::from_name(file).is_some_and(|k| k.journaled() && k.scope() == scope)
}

impl Journal {
    /// Writes every original back (cgroup.freeze first, so nothing stays frozen while its
    /// limits are restored) and removes the journal if everything was restored or vanished;
    /// otherwise it keeps exactly the failed entries for a retry.
    pub fn restore(mut self) -> Result<RestoreReport> {
        let mut report = RestoreReport { skipped: std::mem::take(&mut self.skipped), ..Default::default() };
        if let Some(boot) = self.other_boot().map(str::to_owned) {
            // Another boot's ids and pids may name other cgroups and processes now: nothing
            // is written; the file is kept aside for a person.
            let aside = self.path.with_extension(format!("json.boot-{boot}"));
            std::fs::rename(&self.path, &aside)
                .with_context(|| format!("moving {} aside to {}", self.path.display(), aside.display()))?;
            report.other_boot = self.entries.into_values().collect();
            return Ok(report);
        }
        let root = Root::open(&self.cgroup_root);
        let mut order: Vec<Entry> = self.entries.values().cloned().collect();
        order.sort_by_key(|e| KnobFile::restore_rank(&e.file));
        for e in order {
            match restore_entry(root.as_ref().ok(), &e) {
                Ok(true) => report.restored.push(e),
                Ok(false) => report.vanished.push(e),
                Err(why) => {
                    let why = match &root {
                        Err(re) if e.process.is_none() => format!("{why} ({re})"),
                        _ => why,
                    };
                    report.failed.push((e, why));
                }
            }
        }
        if report.failed.is_empty() {
            match std::fs::remove_file(&self.path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e).with_context(|| format!("removing {}", self.path.display())),
            }
        } else {
            self.entries = report.failed.iter().map(|(e, _)| (e.key(), e.clone())).collect();
            self.rewrite()?;
        }
        Ok(report)
    }
}

/// Ok(true): written; Ok(false): the cgroup or process is gone; Err: why it was not written.
fn restore_entry(root: Option<&Root>, e: &Entry) -> std::result::Result<bool, String> {
    if let Some(p) = e.process {
        if !restorable(&e.file, Scope::Process) {
            return Err(format!("unknown process knob {:?} (not written)", e.file));
        }
        if e.original.parse::<i32>().map_or(true, |v| !(-1000..=1000).contains(&v)) {
            return Err(format!("oom_score_adj {:?} is not in -1000..=1000 (not written)", e.original));
        }
        let dir = match beneath::open_process(p.pid, p.start_time) {
            Ok(d) => d,
            Err(FileError::Vanished) => return Ok(false),
            Err(FileError::Io(err)) => return Err(format!("opening /proc/{}: {err}", p.pid)),
        };
        return match beneath::write_at(&dir, &e.file, &e.original) {
            Ok(()) => Ok(true),
            Err(FileError::Vanished) => Ok(false),
            Err(FileError::Io(err)) => Err(format!("writing /proc/{}/oom_score_adj: {err}", p.pid)),
        };
    }
    if !restorable(&e.file, Scope::Cgroup) {
        return Err(format!("unknown knob {:?} (not written)", e.file));
    }
    let root = root.ok_or_else(|| "cannot open the journal's cgroup root".to_string())?;
    let dir = match root.open_dir(&e.cgroup, Some(e.cgroup_id)) {
        Ok((d, _)) => d,
        Err(OpenError::Vanished) => return Ok(false),
        Err(err) => return Err(format!("{err} (not written)")),
    };
    match beneath::write_at(&dir, &e.file, &e.original) {
        Ok(()) => Ok(true),
        Err(FileError::Vanished) => Ok(false),
        Err(FileError::Io(err)) => Err(format!("writing {}: {err}", e.file)),
    }
}

/// Restores the journal in `state_dir`, if there is one. Returns None when there is nothing
/// to restore. The caller holds the state directory's lock.
pub fn restore_state_dir(state_dir: &Path) -> Result<Option<RestoreReport>> {
    let path = state_dir.join(JOURNAL_FILE);
    let Some(j) = Journal::load(&path)? else {
        return Ok(None);
    };
    j.restore().map(Some)
}
