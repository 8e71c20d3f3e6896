//! The fast path's reads: a few files of a few cgroups, through descriptors kept open.
//!
//! A pressure reaction needs the parent's usage and limits, the signalling cgroup's
//! pressure and events, and the throttle candidates' usage and memory.high — not a sample
//! of the whole tree. Each cgroup's directory is opened once beneath the root (never
//! following a symlink) and checked against the cgroup id the periodic sample gave it; its
//! files are opened once and re-read with pread(2), so a reaction costs one system call
//! per value, however many cgroups the tree holds.

use crate::beneath::{self, OpenError, Root};
use memqos_cgroupfs::parse::{parse_limit, parse_u64};
use memqos_cgroupfs::{MemoryEvents, Pressure};
use memqos_policy::Limit;
use std::collections::HashMap;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;

/// The files the fast path reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FastFile {
    Current,
    High,
    Max,
    Events,
    Pressure,
}

impl FastFile {
    const ALL: [FastFile; 5] = [FastFile::Current, FastFile::High, FastFile::Max, FastFile::Events, FastFile::Pressure];

    fn name(self) -> &'static str {
        match self {
            FastFile::Current => "memory.current",
            FastFile::High => "memory.high",
            FastFile::Max => "memory.max",
            FastFile::Events => "memory.events",
            FastFile::Pressure => "memory.pressure",
        }
    }

    fn index(self) -> usize {
        FastFile::ALL.iter().position(|f| *f == self).expect("in ALL")
    }
}

/// What one fast read found (fields not asked for stay `None`).
#[derive(Clone, Debug, Default)]
pub struct FastStats {
    pub current: Option<u64>,
    pub high: Option<Limit>,
    pub max: Option<Limit>,
    pub events: Option<MemoryEvents>,
    pub pressure: Option<Pressure>,
}

struct Node {
    dir: OwnedFd,
    files: [Option<File>; 5],
    /// Descriptors it counts against the process's budget (`memqos_cgroupfs::fds`).
    kept: u64,
}

const FDS: memqos_cgroupfs::fds::Use = memqos_cgroupfs::fds::Use::Reaction;

impl Drop for Node {
    fn drop(&mut self) {
        memqos_cgroupfs::fds::release(FDS, self.kept);
    }
}

/// The descriptor budget says no more may be kept: like EMFILE, but before it happens.
fn over_budget(what: String) -> anyhow::Error {
    OutOfDescriptors(format!("{what} (descriptor budget of {})", memqos_cgroupfs::fds::budget())).into()
}

/// The process ran out of descriptors (EMFILE/ENFILE) opening a fast-path file: callers
/// degrade (the cgroup is left to the periodic sample) instead of stopping the daemon.
#[derive(Debug)]
pub struct OutOfDescriptors(pub String);

impl std::fmt::Display for OutOfDescriptors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: out of file descriptors (the open-file limit)", self.0)
    }
}

impl std::error::Error for OutOfDescriptors {}

/// Whether `e` is [`OutOfDescriptors`].
pub fn out_of_descriptors(e: &anyhow::Error) -> bool {
    e.downcast_ref::<OutOfDescriptors>().is_some()
}

fn too_many(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE))
}

/// Open descriptors per cgroup id; dropped with the cgroup (`retain`).
#[derive(Default)]
pub struct FastReader {
    nodes: HashMap<u64, Node>,
    buf: Vec<u8>,
    /// read(2)/pread(2) and open calls made, for the benchmark's syscalls-per-event figure.
    pub syscalls: u64,
}

impl FastReader {
    /// Opens what `read` will need (on the periodic path, so a reaction finds its
    /// descriptors open). Ok(false): the cgroup vanished.
    pub fn prepare(&mut self, root: &Root, rel: &str, id: u64, files: &[FastFile]) -> anyhow::Result<bool> {
        if !self.nodes.contains_key(&id) {
            self.syscalls += 2; // openat2 + fstat
            let expect = (id != 0).then_some(id);
            let dir = match root.open_dir(rel, expect) {
                Ok((dir, _)) => dir,
                Err(OpenError::Vanished) => return Ok(false),
                Err(OpenError::Io(e)) if too_many(&e) => {
                    return Err(OutOfDescriptors(format!("cgroup {}/{rel}", root.path().display())).into())
                }
                Err(e) => anyhow::bail!("cgroup {}/{rel}: {e}", root.path().display()),
            };
            if !memqos_cgroupfs::fds::try_keep(FDS, 1) {
                return Err(over_budget(format!("cgroup {}/{rel}", root.path().display())));
            }
            self.nodes.insert(id, Node { dir, files: Default::default(), kept: 1 });
        }
        for &f in files {
            let node = self.nodes.get_mut(&id).expect("inserted above");
            let slot = &mut node.files[f.index()];
            if slot.is_some() {
                continue;
            }
            if !memqos_cgroupfs::fds::try_keep(FDS, 1) {
                return Err(over_budget(format!("{}/{rel}/{}", root.path().display(), f.name())));
            }
            node.kept += 1;
            self.syscalls += 1;
            match beneath::open_file(&node.dir, f.name(), libc::O_RDONLY) {
                Ok(file) => *slot = Some(file),
                Err(e) if vanished(&e) => {
                    self.nodes.remove(&id);
                    return Ok(false);
                }
                Err(e) if too_many(&e) => {
                    return Err(OutOfDescriptors(format!("{}/{rel}/{}", root.path().display(), f.name())).into())
                }
                Err(e) => anyhow::bail!("{}/{rel}/{}: {e}", root.path().display(), f.name()),
            }
        }
        Ok(true)
    }

    /// Reads `files` of the cgroup at `rel` whose id must be `id` (0: the root, unchecked).
    /// Ok(None): it vanished or its name now belongs to another cgroup.
    pub fn read(&mut self, root: &Root, rel: &str, id: u64, files: &[FastFile]) -> anyhow::Result<Option<FastStats>> {
        if self.buf.is_empty() {
            self.buf = vec![0; 4096];
        }
        if !self.prepare(root, rel, id, files)? {
            return Ok(None);
        }
        let mut out = FastStats::default();
        for &f in files {
            let Some(text) = self.read_file(id, f)? else {
                self.nodes.remove(&id);
                return Ok(None);
            };
            let bad = |e: &dyn std::fmt::Display| anyhow::anyhow!("{}/{rel}/{}: {e}", root.path().display(), f.name());
            match f {
                FastFile::Current => out.current = Some(parse_u64(&text).map_err(|e| bad(&e))?),
                FastFile::High => out.high = Some(parse_limit(&text).map_err(|e| bad(&e))?),
                FastFile::Max => out.max = Some(parse_limit(&text).map_err(|e| bad(&e))?),
                FastFile::Events => out.events = Some(MemoryEvents::parse(&text).map_err(|e| bad(&e))?),
                FastFile::Pressure => out.pressure = Some(Pressure::parse(&text).map_err(|e| bad(&e))?),
            }
        }
        Ok(Some(out))
    }

    /// The file's text, or None when the cgroup is gone.
    fn read_file(&mut self, id: u64, f: FastFile) -> anyhow::Result<Option<String>> {
        let node = self.nodes.get(&id).expect("prepared by read");
        let file = node.files[f.index()].as_ref().expect("prepared by read");
        self.syscalls += 1;
        match file.read_at(&mut self.buf, 0) {
            Ok(n) => Ok(Some(String::from_utf8_lossy(&self.buf[..n]).trim().to_owned())),
            Err(e) if vanished(&e) => Ok(None),
            Err(e) => Err(anyhow::anyhow!("reading {}: {e}", f.name())),
        }
    }

    /// Closes the descriptors of cgroups not in `alive` (the root, id 0, always stays).
    pub fn retain(&mut self, alive: &std::collections::HashSet<u64>) {
        self.nodes.retain(|id, _| *id == 0 || alive.contains(id));
    }
}

use memqos_cgroupfs::vanished;

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> (tempfile::TempDir, Root) {
        let dir = tempfile::tempdir().unwrap();
        let cg = dir.path().join("batch/job");
        std::fs::create_dir_all(&cg).unwrap();
        std::fs::write(cg.join("memory.current"), "1048576\n").unwrap();
        std::fs::write(cg.join("memory.high"), "max\n").unwrap();
        std::fs::write(cg.join("memory.events"), "low 0\nhigh 3\nmax 0\noom 0\noom_kill 0\n").unwrap();
        let root = Root::open(dir.path()).unwrap();
        (dir, root)
    }

    fn id_of(p: &std::path::Path) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(p).unwrap().ino()
    }

    #[test]
    fn reads_through_kept_descriptors() {
        let (dir, root) = tree();
        let id = id_of(&dir.path().join("batch/job"));
        let mut r = FastReader::default();
        let files = [FastFile::Current, FastFile::High, FastFile::Events];
        let s = r.read(&root, "batch/job", id, &files).unwrap().unwrap();
        assert_eq!(s.current, Some(1 << 20));
        assert_eq!(s.high, Some(Limit::Max));
        assert_eq!(s.events.unwrap().high, 3);
        let first = r.syscalls;
        // The second read re-reads the same descriptors: one pread per file.
        std::fs::write(dir.path().join("batch/job/memory.current"), "2097152\n").unwrap();
        let s = r.read(&root, "batch/job", id, &files).unwrap().unwrap();
        assert_eq!(s.current, Some(2 << 20));
        assert_eq!(r.syscalls - first, files.len() as u64);
    }

    #[test]
    fn a_recreated_name_is_vanished_not_read() {
        let (dir, root) = tree();
        let old = dir.path().join("batch/job");
        let id = id_of(&old);
        // Moved aside (not deleted, so its inode cannot be reused) and re-created.
        std::fs::rename(&old, dir.path().join("batch/old")).unwrap();
        std::fs::create_dir(&old).unwrap();
        std::fs::write(old.join("memory.current"), "5\n").unwrap();
        let mut r = FastReader::default();
        assert!(r.read(&root, "batch/job", id, &[FastFile::Current]).unwrap().is_none());
    }

    #[test]
    fn a_symlink_or_an_escape_is_refused() {
        let (dir, root) = tree();
        std::os::unix::fs::symlink(dir.path().join("batch"), dir.path().join("link")).unwrap();
        let mut r = FastReader::default();
        let e = r.read(&root, "link/job", 1, &[FastFile::Current]).unwrap_err();
        assert!(format!("{e}").contains("symbolic link"), "{e}");
        let e = r.read(&root, "../etc", 1, &[FastFile::Current]).unwrap_err();
        assert!(format!("{e}").contains("refused"), "{e}");
    }
}
