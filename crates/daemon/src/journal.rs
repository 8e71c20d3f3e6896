//! The write-ahead journal of original knob values.
//!
//! Before memqos changes a knob for the first time, the value it found is recorded here and
//! the journal is made durable (write to a temporary file, fsync, rename, fsync the
//! directory). Restoring writes every recorded original back, thaws first, so no tenant is
//! left throttled or frozen: on orderly shutdown, from the guardian process when the daemon
//! dies, and at the next start after a crash.
//!
//! Besides cgroup knobs it holds processes' `oom_score_adj` (see `oom_adj.rs`). Those entries
//! carry the process's start time, so a restore never writes to a recycled pid.

use anyhow::{Context, Result};
use memqos_cgroupfs::Cgroup;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

pub const JOURNAL_FILE: &str = "journal.json";

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Path relative to the cgroup root.
    pub cgroup: String,
    /// The cgroup file, e.g. "memory.high".
    pub file: String,
    /// The exact text found before memqos first wrote it, e.g. "max".
    pub original: String,
    /// For a per-process knob (`file` = "oom_score_adj"): which process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<Process>,
}

/// A process, identified across pid reuse by its start time (field 22 of /proc/PID/stat).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Process {
    pub pid: u32,
    pub start_time: u64,
}

impl Process {
    /// The process `pid` as it is now; None if it is gone.
    pub fn current(pid: u32) -> Option<Process> {
        crate::proc_stat::start_time(pid).map(|start_time| Process { pid, start_time })
    }

    /// True while this very process (not a successor with the same pid) exists.
    pub fn is_alive(&self) -> bool {
        Process::current(self.pid) == Some(*self)
    }

    pub fn oom_score_adj_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}/oom_score_adj", self.pid))
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct JournalFile {
    cgroup_root: PathBuf,
    entries: Vec<Entry>,
}

/// The journal of one state directory.
pub struct Journal {
    path: PathBuf,
    data: JournalFile,
}

/// What a restore did.
#[derive(Debug, Default)]
pub struct RestoreReport {
    pub restored: Vec<Entry>,
    /// The cgroup no longer exists: nothing to restore.
    pub vanished: Vec<Entry>,
    pub failed: Vec<(Entry, String)>,
}

impl Journal {
    /// Opens (or starts) the journal in `state_dir`; an existing journal is loaded as is.
    pub fn open(state_dir: &Path, cgroup_root: &Path) -> Result<Journal> {
        std::fs::create_dir_all(state_dir)
            .with_context(|| format!("creating state directory {}", state_dir.display()))?;
        let path = state_dir.join(JOURNAL_FILE);
        let data = match Journal::load(&path)? {
            Some(d) => d,
            None => JournalFile { cgroup_root: cgroup_root.to_owned(), entries: Vec::new() },
        };
        Ok(Journal { path, data })
    }

    fn load(path: &Path) -> Result<Option<JournalFile>> {
        match std::fs::read_to_string(path) {
            Ok(text) => serde_json::from_str(&text)
                .map(Some)
                .with_context(|| format!("{}: corrupt journal (restore by hand from its contents)", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }

    pub fn entries(&self) -> &[Entry] {
        &self.data.entries
    }

    /// The journaled original of a cgroup knob.
    pub fn original(&self, cgroup: &str, file: &str) -> Option<&str> {
        self.data
            .entries
            .iter()
            .find(|e| e.process.is_none() && e.cgroup == cgroup && e.file == file)
            .map(|e| e.original.as_str())
    }

    /// The journaled original of a process's knob.
    pub fn process_original(&self, process: Process, file: &str) -> Option<&str> {
        self.data.entries.iter().find(|e| e.process == Some(process) && e.file == file).map(|e| e.original.as_str())
    }

    /// Records a process knob's original (unless already recorded), durably, before the
    /// caller writes it. `cgroup` is where the process was found, for people reading it.
    pub fn record_process(&mut self, cgroup: &str, process: Process, file: &str, original: &str) -> Result<()> {
        if self.process_original(process, file).is_some() {
            return Ok(());
        }
        self.data.entries.push(Entry {
            cgroup: cgroup.into(),
            file: file.into(),
            original: original.trim().into(),
            process: Some(process),
        });
        self.persist()
    }

    /// Drops the entries of these processes (they exited, or their knob was put back).
    pub fn forget_processes(&mut self, gone: &[Process]) -> Result<()> {
        let before = self.data.entries.len();
        self.data.entries.retain(|e| e.process.is_none_or(|p| !gone.contains(&p)));
        if self.data.entries.len() != before {
            self.persist()?;
        }
        Ok(())
    }

    /// Records `original` for (cgroup, file) unless already recorded, durably, before the
    /// caller writes the knob.
    pub fn record(&mut self, cgroup: &str, file: &str, original: &str) -> Result<()> {
        if self.original(cgroup, file).is_some() {
            return Ok(());
        }
        self.data.entries.push(Entry {
            cgroup: cgroup.into(),
            file: file.into(),
            original: original.trim().into(),
            process: None,
        });
        self.persist()
    }

    fn persist(&self) -> Result<()> {
        let dir = self.path.parent().expect("journal has a directory");
        let tmp = self.path.with_extension("json.tmp");
        let mut f = std::fs::File::create(&tmp).with_context(|| format!("writing {}", tmp.display()))?;
        f.write_all(serde_json::to_string_pretty(&self.data)?.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, &self.path)?;
        std::fs::File::open(dir)?.sync_all()?;
        Ok(())
    }

    /// Writes every original back (cgroup.freeze first, so nothing stays frozen while its
    /// limits are restored) and removes the journal if everything was restored or vanished.
    pub fn restore(self) -> Result<RestoreReport> {
        let root = Cgroup::new(&self.data.cgroup_root);
        let mut order: Vec<&Entry> = self.data.entries.iter().collect();
        order.sort_by_key(|e| e.file != "cgroup.freeze");
        let mut report = RestoreReport::default();
        for e in order {
            if let Some(p) = e.process {
                match restore_process(p, &e.file, &e.original) {
                    Ok(true) => report.restored.push(e.clone()),
                    Ok(false) => report.vanished.push(e.clone()),
                    Err(err) => report.failed.push((e.clone(), err)),
                }
                continue;
            }
            let cg = if e.cgroup.is_empty() { root.clone() } else { root.child(&e.cgroup) };
            let file = knob_file(&e.file);
            match cg.write_string(file, &e.original) {
                Ok(()) => report.restored.push(e.clone()),
                Err(err) if err.is_vanished() || !cg.exists() => report.vanished.push(e.clone()),
                Err(err) => report.failed.push((e.clone(), err.to_string())),
            }
        }
        if report.failed.is_empty() {
            match std::fs::remove_file(&self.path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e).with_context(|| format!("removing {}", self.path.display())),
            }
        } else {
            // Keep only what still needs restoring, so `memqos restore` can retry.
            let left = Journal {
                path: self.path.clone(),
                data: JournalFile {
                    cgroup_root: self.data.cgroup_root.clone(),
                    entries: report.failed.iter().map(|(e, _)| e.clone()).collect(),
                },
            };
            left.persist()?;
        }
        Ok(report)
    }
}

/// Maps a journaled file name to the static names `Cgroup` writes; unknown names are
/// refused rather than written (a tampered journal must not write arbitrary files).
fn knob_file(file: &str) -> &'static str {
    match file {
        "memory.high" => "memory.high",
        "memory.low" => "memory.low",
        "memory.min" => "memory.min",
        "memory.max" => "memory.max",
        "cgroup.freeze" => "cgroup.freeze",
        "cpu.weight" => "cpu.weight",
        _ => "memqos.invalid-journal-entry",
    }
}

/// Writes a process knob back if the process still exists. Ok(false): it is gone (or its pid
/// now belongs to another process), nothing to do.
fn restore_process(p: Process, file: &str, original: &str) -> std::result::Result<bool, String> {
    if file != "oom_score_adj" {
        return Err(format!("unknown process knob {file:?} in the journal (not written)"));
    }
    if original.parse::<i32>().map_or(true, |v| !(-1000..=1000).contains(&v)) {
        return Err(format!("journaled oom_score_adj {original:?} is not in -1000..=1000 (not written)"));
    }
    if !p.is_alive() {
        return Ok(false);
    }
    match std::fs::write(p.oom_score_adj_path(), original) {
        Ok(()) => Ok(true),
        // Exited between the check and the write.
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) || e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(format!("writing /proc/{}/oom_score_adj: {e}", p.pid)),
    }
}

/// Restores the journal in `state_dir`, if there is one. Returns None when there is nothing
/// to restore.
pub fn restore_state_dir(state_dir: &Path) -> Result<Option<RestoreReport>> {
    let path = state_dir.join(JOURNAL_FILE);
    let Some(data) = Journal::load(&path)? else { return Ok(None) };
    Journal { path, data }.restore().map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(name: &str) -> (PathBuf, PathBuf) {
        let base = std::env::temp_dir().join(format!("memqos-journal-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let root = base.join("cg");
        for d in ["low/a", "low/b"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
            std::fs::write(root.join(d).join("cgroup.procs"), "").unwrap();
            std::fs::write(root.join(d).join("memory.high"), "max\n").unwrap();
            std::fs::write(root.join(d).join("cgroup.freeze"), "0\n").unwrap();
        }
        (root, base.join("state"))
    }

    #[test]
    fn records_once_survives_reopen_and_restores_everything() {
        let (root, state) = tree("restore");
        let mut j = Journal::open(&state, &root).unwrap();
        j.record("low/a", "memory.high", "max\n").unwrap();
        j.record("low/a", "memory.high", "12345").unwrap(); // second record keeps the first original
        j.record("low/a", "cgroup.freeze", "0").unwrap();
        j.record("low/gone", "memory.high", "max").unwrap();
        // memqos then throttled and froze a; the daemon "crashes" here.
        std::fs::write(root.join("low/a/memory.high"), "33554432").unwrap();
        std::fs::write(root.join("low/a/cgroup.freeze"), "1").unwrap();
        drop(j);

        let report = restore_state_dir(&state).unwrap().expect("journal present");
        assert_eq!(std::fs::read_to_string(root.join("low/a/memory.high")).unwrap(), "max");
        assert_eq!(std::fs::read_to_string(root.join("low/a/cgroup.freeze")).unwrap(), "0");
        assert_eq!(report.restored.len(), 2);
        assert_eq!(report.restored[0].file, "cgroup.freeze", "thaw comes first");
        assert_eq!(report.vanished.len(), 1);
        assert!(report.failed.is_empty());
        assert!(!state.join(JOURNAL_FILE).exists(), "a fully restored journal is removed");
        assert!(restore_state_dir(&state).unwrap().is_none());
    }

    #[test]
    fn process_entries_restore_only_the_same_process() {
        let (root, state) = tree("process");
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let live = Process::current(child.id()).expect("child is running");
        assert!(live.is_alive());
        let adj = live.oom_score_adj_path();
        let original = std::fs::read_to_string(&adj).unwrap();
        let mut j = Journal::open(&state, &root).unwrap();
        j.record_process("high", live, "oom_score_adj", &original).unwrap();
        // Raising oom_score_adj needs no privilege, so this runs unprivileged too.
        std::fs::write(&adj, "700").unwrap();
        // The same pid with another start time is another process: never written.
        let recycled = Process { pid: live.pid, start_time: live.start_time + 1 };
        j.record_process("high", recycled, "oom_score_adj", "-900").unwrap();
        drop(j);

        let report = restore_state_dir(&state).unwrap().expect("journal present");
        assert_eq!(std::fs::read_to_string(&adj).unwrap(), original);
        assert_eq!((report.restored.len(), report.vanished.len()), (1, 1));
        assert_eq!(report.vanished[0].process, Some(recycled));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!live.is_alive());
    }

    #[test]
    fn forgotten_processes_leave_the_journal() {
        let (root, state) = tree("forget");
        let mut j = Journal::open(&state, &root).unwrap();
        let p = Process { pid: 1, start_time: 1 };
        j.record_process("high", p, "oom_score_adj", "0").unwrap();
        j.record("low/a", "memory.high", "max").unwrap();
        j.forget_processes(&[p]).unwrap();
        let reopened = Journal::open(&state, &root).unwrap();
        assert_eq!(reopened.entries().len(), 1);
        assert_eq!(reopened.entries()[0].file, "memory.high");
    }

    #[test]
    fn corrupt_journal_is_a_clear_error() {
        let (root, state) = tree("corrupt");
        std::fs::create_dir_all(&state).unwrap();
        std::fs::write(state.join(JOURNAL_FILE), "{not json").unwrap();
        let err = Journal::open(&state, &root).err().unwrap();
        assert!(format!("{err:#}").contains("corrupt journal"), "{err:#}");
    }
}
