//! The write-ahead journal of original knob values.
//!
//! Before memqos changes a knob for the first time, the value it found is appended here and
//! made durable (one fsync per batch of writes). Restoring writes every recorded original
//! back, thaws first, so no tenant is left throttled or frozen: on orderly shutdown, from
//! the guardian process when the daemon dies, and at the next start after a crash.
//!
//! Identity is the kernel's: a cgroup entry holds the cgroup's id (its directory inode) and
//! restore writes only into the directory with that id, so a cgroup re-created under the same
//! name counts as vanished. Paths are resolved beneath the journal's cgroup root only
//! ([`crate::beneath`]): an entry with `..`, an absolute path or a symlink is refused, never
//! written. Process entries (`oom_score_adj`) carry the start time and are written through a
//! /proc/PID directory fd, so a recycled pid is never touched.
//!
//! Format: JSON lines. The first line names the cgroup root and the boot it was written in;
//! then `set` lines (an original) and `forget` lines (a knob put back, a process gone). A
//! torn last line (a crash during the append, before the fsync that precedes any knob write)
//! is ignored. When forgotten lines outnumber live entries the file is rewritten (temporary
//! file, fsync, rename).
//!
//! Faults: an append that fails (disk full, EIO) is cut back to where it began and its
//! records are unstaged, so the file never holds half a record followed by the next one; if
//! even the cut fails, the next append starts on a new line. A line that does not parse is
//! reported and skipped, not fatal to the rest. Entries of another boot are never restored:
//! cgroup ids and pids are reused across boots, so they could name someone else.

use crate::beneath::CgroupId;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

pub use memqos_schema::state::JOURNAL_FILE;

mod restore;
pub use restore::{restore_state_dir, RestoreReport};

/// A process, identified across pid reuse by its start time (field 22 of /proc/PID/stat).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Process {
    pub pid: u32,
    pub start_time: u64,
}

impl Process {
    /// The process `pid` as it is now; None if it is gone.
    pub fn current(pid: u32) -> Option<Process> {
        crate::proc_stat::start_time(pid).map(|start_time| Process { pid, start_time })
    }

    /// True while this very process (not a successor with the same pid) exists and has not
    /// begun to exit.
    pub fn is_running(&self) -> bool {
        crate::proc_stat::start_time_and_exiting(self.pid) == Some((self.start_time, false))
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Path relative to the cgroup root, for people and for opening it.
    pub cgroup: String,
    /// The cgroup's id (directory inode): restore writes only into this very cgroup.
    pub cgroup_id: CgroupId,
    /// e.g. "memory.high", "oom_score_adj".
    pub file: String,
    /// The exact text found before memqos first wrote it, e.g. "max".
    pub original: String,
    /// For a per-process knob (`oom_score_adj`): which process (`cgroup` is where it was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<Process>,
}

/// What an entry is about: a cgroup's knob or a process's.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Key {
    Cgroup(CgroupId, String),
    Process(Process, String),
}

impl Entry {
    pub fn key(&self) -> Key {
        match self.process {
            Some(p) => Key::Process(p, self.file.clone()),
            None => Key::Cgroup(self.cgroup_id, self.file.clone()),
        }
    }

    /// "low/a/memory.high (cgroup id 1234)", for messages.
    pub fn describe(&self) -> String {
        match self.process {
            Some(p) => format!("pid {} ({}) {} in {}", p.pid, p.start_time, self.file, self.cgroup),
            None => format!("{}/{} (cgroup id {})", self.cgroup, self.file, self.cgroup_id),
        }
    }
}

#[derive(Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Record {
    Root {
        cgroup_root: PathBuf,
        /// /proc/sys/kernel/random/boot_id when the journal was started (absent in journals
        /// of older versions: their entries are taken as this boot's).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        boot_id: Option<String>,
    },
    Set(Entry),
    Forget {
        key: Key,
    },
}

/// The journal of one state directory.
pub struct Journal {
    path: PathBuf,
    cgroup_root: PathBuf,
    entries: BTreeMap<Key, Entry>,
    /// Lines in the file, for compaction.
    lines: usize,
    pending: Vec<Record>,
    /// Entries whose `forget` is staged, for putting back if the commit fails.
    forgotten: Vec<Entry>,
    file: Option<std::fs::File>,
    /// An append failed and could not be cut back: the next one starts on a new line.
    torn: bool,
    /// The boot the journal's entries belong to (None: unknown, an older journal).
    boot_id: Option<String>,
    /// Lines that did not parse when the journal was loaded, as messages naming them.
    pub skipped: Vec<String>,
}

/// This boot's id (None where /proc does not say).
pub fn current_boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok().map(|s| s.trim().to_owned())
}

impl Journal {
    /// Opens (or starts) the journal in `state_dir`; an existing journal is loaded as is.
    pub fn open(state_dir: &Path, cgroup_root: &Path) -> Result<Journal> {
        std::fs::create_dir_all(state_dir)
            .with_context(|| format!("creating state directory {}", state_dir.display()))?;
        let path = state_dir.join(JOURNAL_FILE);
        match Journal::load(&path)? {
            Some(j) => Ok(j),
            None => Ok(Journal::empty(path, cgroup_root.to_owned())),
        }
    }

    fn empty(path: PathBuf, cgroup_root: PathBuf) -> Journal {
        Journal {
            path,
            cgroup_root,
            entries: BTreeMap::new(),
            lines: 0,
            pending: Vec::new(),
            forgotten: Vec::new(),
            file: None,
            torn: false,
            boot_id: current_boot_id(),
            skipped: Vec::new(),
        }
    }

    /// Whether the entries were written in another boot (then they must not be restored).
    pub fn other_boot(&self) -> Option<&str> {
        let now = current_boot_id()?;
        self.boot_id.as_deref().filter(|b| *b != now)
    }

    fn load(path: &Path) -> Result<Option<Journal>> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        let corrupt = |n: usize, why: String| {
            anyhow::anyhow!(
                "{}: corrupt journal at line {n}: {why} (restore by hand from its contents)",
                path.display()
            )
        };
        let mut lines = text.split_inclusive('\n').enumerate().peekable();
        let mut cgroup_root = None;
        let mut boot_id = None;
        let mut entries = BTreeMap::new();
        let mut count = 0;
        let mut skipped = Vec::new();
        while let Some((i, line)) = lines.next() {
            let last_torn = lines.peek().is_none() && !line.ends_with('\n');
            if line.trim().is_empty() {
                continue; // where a failed append that could not be cut back ended
            }
            let rec: Record = match serde_json::from_str(line.trim_end()) {
                Ok(r) => r,
                Err(_) if last_torn => break,
                // Without the root line nothing can be restored safely.
                Err(e) if cgroup_root.is_none() => return Err(corrupt(i + 1, e.to_string())),
                Err(e) => {
                    skipped.push(format!(
                        "{}: line {} skipped ({e}); if it recorded an original, that knob is not restored",
                        path.display(),
                        i + 1
                    ));
                    continue;
                }
            };
            count += 1;
            match (rec, &cgroup_root) {
                (Record::Root { cgroup_root: r, boot_id: b }, None) => {
                    cgroup_root = Some(r);
                    boot_id = b;
                }
                (Record::Root { .. }, Some(_)) => return Err(corrupt(i + 1, "a second root line".into())),
                (_, None) => return Err(corrupt(i + 1, "the first line must name the cgroup root".into())),
                (Record::Set(e), Some(_)) => {
                    entries.entry(e.key()).or_insert(e);
                }
                (Record::Forget { key }, Some(_)) => {
                    entries.remove(&key);
                }
            }
        }
        let Some(cgroup_root) = cgroup_root else {
            return Ok(None);
        };
        let mut j = Journal::empty(path.to_owned(), cgroup_root);
        j.entries = entries;
        j.lines = count;
        j.boot_id = boot_id;
        j.skipped = skipped;
        Ok(Some(j))
    }

    /// A journal with no entries at the same place (what is left after a restore).
    pub(crate) fn open_empty_like(j: &Journal) -> Journal {
        Journal::empty(j.path.clone(), j.cgroup_root.clone())
    }

    pub fn cgroup_root(&self) -> &Path {
        &self.cgroup_root
    }

    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.entries.values()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn get(&self, key: &Key) -> Option<&Entry> {
        self.entries.get(key)
    }

    /// The journaled original of a cgroup knob.
    pub fn original(&self, id: CgroupId, file: &str) -> Option<&str> {
        self.entries.get(&Key::Cgroup(id, file.to_owned())).map(|e| e.original.as_str())
    }

    /// Stages `entry` unless its key is already journaled; durable after [`Journal::commit`].
    pub fn stage(&mut self, entry: Entry) -> bool {
        let key = entry.key();
        if self.entries.contains_key(&key) {
            return false;
        }
        self.entries.insert(key, entry.clone());
        self.pending.push(Record::Set(entry));
        true
    }

    /// Stages dropping an entry (its knob was put back, its process or cgroup is gone).
    /// Losing a forget in a crash is harmless: a restore then writes an original again.
    pub fn stage_forget(&mut self, key: &Key) {
        if let Some(e) = self.entries.remove(key) {
            self.pending.push(Record::Forget { key: key.clone() });
            self.forgotten.push(e);
        }
    }

    /// Appends the staged records with one fsync (compacting when mostly dead lines).
    /// All or nothing: on failure the file is as it was and so are the entries (the staged
    /// originals are unstaged, the staged forgets put back); Err names the file and why.
    pub fn commit(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let compact = self.lines + self.pending.len() > 2 * self.entries.len() + 64;
        let result = if self.file.is_none() {
            self.rewrite()
        } else if compact {
            // Compaction needs a new file; a state_dir that refuses new files (read-only
            // bind, no inodes left) may still take an append to the open one.
            self.rewrite().or_else(|_| self.append())
        } else {
            self.append()
        };
        match result {
            Ok(()) => {
                self.pending.clear();
                self.forgotten.clear();
            }
            Err(_) => self.unstage(),
        }
        result
    }

    /// Tests: swaps the open journal file (for one that fails every write, as a full disk).
    #[cfg(test)]
    pub(crate) fn swap_file_for_test(&mut self, file: std::fs::File) -> Option<std::fs::File> {
        self.file.replace(file)
    }

    /// Undoes the staged records after a failed commit.
    fn unstage(&mut self) {
        for r in self.pending.drain(..) {
            if let Record::Set(e) = r {
                self.entries.remove(&e.key());
            }
        }
        for e in self.forgotten.drain(..) {
            self.entries.insert(e.key(), e);
        }
    }

    fn append(&mut self) -> Result<()> {
        let mut buf = Vec::new();
        if self.torn {
            buf.push(b'\n');
        }
        for r in &self.pending {
            serde_json::to_writer(&mut buf, r)?;
            buf.push(b'\n');
        }
        let f = self.file.as_mut().expect("checked");
        let len = f.metadata().with_context(|| format!("stat {}", self.path.display()))?.len();
        let written = f.write_all(&buf).and_then(|()| f.sync_data());
        if let Err(e) = written {
            // Cut back what part of the records got out, so the next append is not glued to
            // half a record (a load would then lose both).
            self.torn = f.set_len(len).and_then(|()| f.sync_data()).is_err();
            return Err(e).with_context(|| format!("appending to {}", self.path.display()));
        }
        self.torn = false;
        self.lines += self.pending.len();
        Ok(())
    }

    /// Writes the live entries to a fresh file and renames it over the journal.
    fn rewrite(&mut self) -> Result<()> {
        let dir = self.path.parent().expect("journal has a directory").to_owned();
        let tmp = self.path.with_extension("json.tmp");
        let mut buf = Vec::new();
        let root = Record::Root { cgroup_root: self.cgroup_root.clone(), boot_id: self.boot_id.clone() };
        serde_json::to_writer(&mut buf, &root)?;
        buf.push(b'\n');
        for e in self.entries.values() {
            serde_json::to_writer(&mut buf, &Record::Set(e.clone()))?;
            buf.push(b'\n');
        }
        let written = (|| -> std::io::Result<()> {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&buf)?;
            f.sync_all()
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp); // the space it holds
            return Err(e).with_context(|| format!("writing {}", tmp.display()));
        }
        std::fs::rename(&tmp, &self.path)
            .with_context(|| format!("renaming {} to {}", tmp.display(), self.path.display()))?;
        // The rename is done: the file holds the new records whatever follows.
        let _ = std::fs::File::open(&dir).and_then(|d| d.sync_all());
        self.lines = 1 + self.entries.len();
        self.torn = false;
        self.file = std::fs::OpenOptions::new().append(true).open(&self.path).ok();
        Ok(())
    }
}

/// Fails unless the journal in `state_dir` (if any) is for `cgroup_root`.
pub fn check_root(state_dir: &Path, cgroup_root: &Path) -> Result<()> {
    if let Some(j) = Journal::load(&state_dir.join(JOURNAL_FILE))? {
        if j.cgroup_root != cgroup_root {
            bail!(
                "{}: journal is for cgroup_root {}, not {}",
                state_dir.display(),
                j.cgroup_root.display(),
                cgroup_root.display()
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// The scratch directory of one test, removed when the test ends (passed or not).
    struct Scratch(PathBuf);

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn tree(name: &str) -> (PathBuf, PathBuf, Scratch) {
        let base = std::env::temp_dir().join(format!("memqos-journal-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let root = base.join("cg");
        for d in ["low/a", "low/b"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
            std::fs::write(root.join(d).join("memory.high"), "max\n").unwrap();
            std::fs::write(root.join(d).join("cgroup.freeze"), "0\n").unwrap();
        }
        (root, base.join("state"), Scratch(base))
    }

    fn id(root: &Path, rel: &str) -> u64 {
        std::fs::metadata(root.join(rel)).unwrap().ino()
    }

    fn entry(root: &Path, cgroup: &str, file: &str, original: &str) -> Entry {
        let cgroup_id = std::fs::metadata(root.join(cgroup)).map(|m| m.ino()).unwrap_or(999_999);
        Entry { cgroup: cgroup.into(), cgroup_id, file: file.into(), original: original.into(), process: None }
    }

    #[test]
    fn records_once_survives_reopen_and_restores_everything() {
        let (root, state, _scratch) = tree("restore");
        let mut j = Journal::open(&state, &root).unwrap();
        assert!(j.stage(entry(&root, "low/a", "memory.high", "max")));
        assert!(!j.stage(entry(&root, "low/a", "memory.high", "12345")), "the first original stays");
        j.stage(entry(&root, "low/a", "cgroup.freeze", "0"));
        j.stage(entry(&root, "low/gone", "memory.high", "max"));
        j.commit().unwrap();
        j.stage(entry(&root, "low/b", "memory.high", "max"));
        j.commit().unwrap(); // an append
        std::fs::write(root.join("low/a/memory.high"), "33554432").unwrap();
        std::fs::write(root.join("low/a/cgroup.freeze"), "1").unwrap();
        std::fs::write(root.join("low/b/memory.high"), "1234").unwrap();
        drop(j);
        assert_eq!(Journal::open(&state, &root).unwrap().original(id(&root, "low/a"), "memory.high"), Some("max"));

        let report = restore_state_dir(&state).unwrap().expect("journal present");
        assert_eq!(std::fs::read_to_string(root.join("low/a/memory.high")).unwrap(), "max");
        assert_eq!(std::fs::read_to_string(root.join("low/a/cgroup.freeze")).unwrap(), "0");
        assert_eq!(std::fs::read_to_string(root.join("low/b/memory.high")).unwrap(), "max");
        assert_eq!(report.restored.len(), 3);
        assert_eq!(report.restored[0].file, "cgroup.freeze", "thaw comes first");
        assert_eq!(report.vanished.len(), 1);
        assert!(report.failed.is_empty());
        assert!(!state.join(JOURNAL_FILE).exists(), "a fully restored journal is removed");
        assert!(restore_state_dir(&state).unwrap().is_none());
    }

    #[test]
    fn swap_max_is_a_knob_the_journal_restores() {
        let (root, state, _scratch) = tree("swap");
        let mut j = Journal::open(&state, &root).unwrap();
        j.stage(entry(&root, "low/a", "memory.swap.max", "max"));
        j.commit().unwrap();
        std::fs::write(root.join("low/a/memory.swap.max"), "0").unwrap();
        drop(j);
        let report = restore_state_dir(&state).unwrap().expect("journal present");
        assert_eq!(std::fs::read_to_string(root.join("low/a/memory.swap.max")).unwrap(), "max");
        assert_eq!((report.restored.len(), report.failed.len()), (1, 0), "{:?}", report.failures());
    }

    #[test]
    fn a_recreated_name_is_another_cgroup() {
        let (root, state, _scratch) = tree("recreated");
        let mut j = Journal::open(&state, &root).unwrap();
        j.stage(entry(&root, "low/a", "memory.high", "max"));
        j.commit().unwrap();
        // Removed and created again under the same name, with its own value.
        // The old directory is moved aside, not deleted: alive, its inode cannot be reused by
        // the new one (a deleted one could be, which made this test flaky on ext4).
        std::fs::rename(root.join("low/a"), root.join("low/a.old")).unwrap();
        std::fs::create_dir_all(root.join("low/a")).unwrap();
        std::fs::write(root.join("low/a/memory.high"), "777").unwrap();
        drop(j);
        let report = restore_state_dir(&state).unwrap().unwrap();
        assert_eq!((report.restored.len(), report.vanished.len()), (0, 1));
        assert_eq!(
            std::fs::read_to_string(root.join("low/a/memory.high")).unwrap(),
            "777",
            "the new cgroup is not touched"
        );
    }

    #[test]
    fn tampered_entries_are_refused_and_kept() {
        let (root, state, _scratch) = tree("tampered");
        let base = root.parent().unwrap().to_owned();
        std::fs::create_dir_all(base.join("outside")).unwrap();
        std::fs::write(base.join("outside/memory.high"), "untouched").unwrap();
        std::os::unix::fs::symlink(base.join("outside"), root.join("low/link")).unwrap();
        let outside_id = id(&base, "outside");
        let mut j = Journal::open(&state, &root).unwrap();
        // Distinct ids: entries are keyed by (id, file).
        for (i, cgroup) in
            ["../outside", "low/link", &base.join("outside").display().to_string()].into_iter().enumerate()
        {
            j.stage(Entry {
                cgroup: cgroup.into(),
                cgroup_id: outside_id + i as u64,
                file: "memory.high".into(),
                original: "1".into(),
                process: None,
            });
        }
        j.stage(entry(&root, "low/a", "cgroup.procs", "1"));
        j.stage(entry(&root, "low/a", "memory.high", "max"));
        j.commit().unwrap();
        std::fs::write(root.join("low/a/memory.high"), "5").unwrap();
        drop(j);
        let report = restore_state_dir(&state).unwrap().unwrap();
        assert_eq!(std::fs::read_to_string(base.join("outside/memory.high")).unwrap(), "untouched");
        assert_eq!(
            std::fs::read_to_string(root.join("low/a/memory.high")).unwrap(),
            "max",
            "good entries are restored"
        );
        let failures = report.failures().join("\n");
        assert_eq!(report.failed.len(), 4, "{failures}");
        for what in ["\"..\" component", "symbolic link", "absolute path", "unknown knob \"cgroup.procs\""] {
            assert!(failures.contains(what), "{what} missing in:\n{failures}");
        }
        let left = Journal::open(&state, &root).unwrap();
        assert_eq!(left.entries().count(), 4, "failed entries stay for a retry");
    }

    #[test]
    fn process_entries_restore_only_the_same_process() {
        let (root, state, _scratch) = tree("process");
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let live = Process::current(child.id()).expect("child is running");
        let adj = format!("/proc/{}/oom_score_adj", live.pid);
        let original = std::fs::read_to_string(&adj).unwrap().trim().to_string();
        let mut j = Journal::open(&state, &root).unwrap();
        let pe = |p: Process, v: &str| Entry {
            cgroup: "high".into(),
            cgroup_id: 1,
            file: "oom_score_adj".into(),
            original: v.into(),
            process: Some(p),
        };
        j.stage(pe(live, &original));
        // Raising oom_score_adj needs no privilege, so this runs unprivileged too.
        std::fs::write(&adj, "700").unwrap();
        // The same pid with another start time is another process: never written.
        let recycled = Process { pid: live.pid, start_time: live.start_time + 1 };
        j.stage(pe(recycled, "-900"));
        j.commit().unwrap();
        drop(j);

        let report = restore_state_dir(&state).unwrap().expect("journal present");
        assert_eq!(std::fs::read_to_string(&adj).unwrap().trim(), original);
        assert_eq!((report.restored.len(), report.vanished.len()), (1, 1));
        assert_eq!(report.vanished[0].process, Some(recycled));
        child.kill().unwrap();
        child.wait().unwrap();
        assert_ne!(Process::current(live.pid), Some(live), "the killed child is gone");
    }

    #[test]
    fn forgets_compaction_and_torn_tail() {
        let (root, state, _scratch) = tree("forget");
        let mut j = Journal::open(&state, &root).unwrap();
        let p = Process { pid: 1, start_time: 1 };
        j.stage(Entry {
            cgroup: "high".into(),
            cgroup_id: 1,
            file: "oom_score_adj".into(),
            original: "0".into(),
            process: Some(p),
        });
        j.stage(entry(&root, "low/a", "memory.high", "max"));
        j.commit().unwrap();
        for i in 0..200 {
            let e = entry(&root, "low/b", "memory.high", &i.to_string());
            j.stage(e.clone());
            j.commit().unwrap();
            j.stage_forget(&e.key());
        }
        j.stage_forget(&Key::Process(p, "oom_score_adj".into()));
        j.commit().unwrap();
        let lines = std::fs::read_to_string(state.join(JOURNAL_FILE)).unwrap().lines().count();
        assert!(lines < 100, "compacted: {lines} lines");
        // A crash mid-append leaves a torn last line: ignored.
        let mut f = std::fs::OpenOptions::new().append(true).open(state.join(JOURNAL_FILE)).unwrap();
        f.write_all(br#"{"op":"set","cgr"#).unwrap();
        let reopened = Journal::open(&state, &root).unwrap();
        let files: Vec<&str> = reopened.entries().map(|e| e.file.as_str()).collect();
        assert_eq!(files, ["memory.high"]);
        assert_eq!(reopened.entries().next().unwrap().cgroup, "low/a");
    }

    #[test]
    fn a_failed_append_is_cut_back_and_unstaged_and_the_next_one_loads() {
        let (root, state, _scratch) = tree("enospc");
        let mut j = Journal::open(&state, &root).unwrap();
        j.stage(entry(&root, "low/a", "memory.high", "max"));
        j.commit().unwrap();
        let before = std::fs::read(state.join(JOURNAL_FILE)).unwrap();
        // A disk that is full: every write fails with ENOSPC, and /dev/full cannot be cut
        // back either, so the next append must start on a new line.
        let real = j.file.replace(std::fs::OpenOptions::new().append(true).open("/dev/full").unwrap());
        let b = entry(&root, "low/b", "memory.high", "max");
        assert!(j.stage(b.clone()));
        j.stage_forget(&entry(&root, "low/a", "memory.high", "max").key());
        let err = j.commit().expect_err("disk full");
        assert!(format!("{err:#}").contains("appending to"), "{err:#}");
        assert!(j.get(&b.key()).is_none(), "an original that is not durable is not journaled");
        assert!(j.original(id(&root, "low/a"), "memory.high").is_some(), "a failed forget keeps the entry");
        assert!(j.torn);
        // Half a record got out before the disk filled, and could not be cut back.
        j.file = real;
        j.file.as_mut().unwrap().write_all(br#"{"op":"set","cgroup":"lo"#).unwrap();
        assert!(j.stage(b.clone()));
        j.commit().unwrap();
        let reopened = Journal::open(&state, &root).unwrap();
        assert_eq!(reopened.entries().count(), 2, "both records load");
        assert_eq!(reopened.skipped.len(), 1, "the torn line is reported: {:?}", reopened.skipped);
        assert!(std::fs::read(state.join(JOURNAL_FILE)).unwrap().starts_with(&before));
    }

    #[test]
    fn a_compaction_that_cannot_make_its_new_file_appends_instead() {
        let (root, state, _scratch) = tree("compact-fallback");
        let mut j = Journal::open(&state, &root).unwrap();
        j.stage(entry(&root, "low/a", "memory.high", "max"));
        j.commit().unwrap();
        // Many forgotten lines make the next commit a compaction; its temporary file cannot
        // be made (a directory is in its way, as a read-only state_dir would refuse it).
        j.lines += 1000;
        std::fs::create_dir(state.join("journal.json.tmp")).unwrap();
        let b = entry(&root, "low/b", "memory.high", "max");
        j.stage(b.clone());
        j.commit().expect("appended instead");
        let reopened = Journal::open(&state, &root).unwrap();
        assert!(reopened.get(&b.key()).is_some(), "the new original is durable");
        assert_eq!(reopened.entries().count(), 2);
    }

    #[test]
    fn a_bad_line_is_skipped_and_named_and_the_rest_restored() {
        let (root, state, _scratch) = tree("badline");
        let mut j = Journal::open(&state, &root).unwrap();
        j.stage(entry(&root, "low/a", "memory.high", "max"));
        j.commit().unwrap();
        let mut text = std::fs::read_to_string(state.join(JOURNAL_FILE)).unwrap();
        text += "{\"op\":\"set\",garbage}\n";
        text += &serde_json::to_string(&Record::Set(entry(&root, "low/b", "memory.high", "max"))).unwrap();
        text += "\n";
        std::fs::write(state.join(JOURNAL_FILE), text).unwrap();
        std::fs::write(root.join("low/a/memory.high"), "1").unwrap();
        std::fs::write(root.join("low/b/memory.high"), "2").unwrap();
        let report = restore_state_dir(&state).unwrap().unwrap();
        assert_eq!(report.restored.len(), 2);
        assert!(report.skipped[0].contains("line 3 skipped"), "{:?}", report.skipped);
        assert_eq!(std::fs::read_to_string(root.join("low/b/memory.high")).unwrap(), "max");
    }

    #[test]
    fn another_boots_entries_are_not_restored_and_the_journal_is_kept_aside() {
        let (root, state, _scratch) = tree("boot");
        let mut j = Journal::open(&state, &root).unwrap();
        assert!(j.boot_id.is_some(), "this boot is recorded");
        j.boot_id = Some("00000000-0000-0000-0000-000000000000".into());
        j.stage(entry(&root, "low/a", "memory.high", "max"));
        j.commit().unwrap();
        std::fs::write(root.join("low/a/memory.high"), "1").unwrap();
        let report = restore_state_dir(&state).unwrap().unwrap();
        assert_eq!((report.restored.len(), report.other_boot.len()), (0, 1));
        assert_eq!(std::fs::read_to_string(root.join("low/a/memory.high")).unwrap(), "1", "not written");
        assert!(!state.join(JOURNAL_FILE).exists());
        assert!(state.join("journal.json.boot-00000000-0000-0000-0000-000000000000").exists());
    }

    #[test]
    fn corrupt_journal_is_a_clear_error() {
        let (root, state, _scratch) = tree("corrupt");
        std::fs::create_dir_all(&state).unwrap();
        std::fs::write(state.join(JOURNAL_FILE), "{not json\n{}\n").unwrap();
        let err = Journal::open(&state, &root).err().unwrap();
        assert!(format!("{err:#}").contains("corrupt journal at line 1"), "{err:#}");
    }
}
