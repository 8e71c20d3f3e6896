//! The cgroupfs text backend: open fds per cgroup and file, one `pread` per file into a
//! reused buffer, allocation-free parsing. Files and directories are opened beneath the
//! root's fd (`memqos_cgroupfs::beneath`: no symlink followed, no PATH_MAX limit).
//!
//! The tree is walked (readdir) only when it may have changed: the root's `cgroup.stat`
//! (`nr_descendants`) differs from the last walk, or a cgroup vanished while being read.
//! A cgroup created and another removed between two snapshots leaves the count unchanged,
//! but the removed one's fds then return ENODEV, which triggers the walk in that snapshot.

use crate::keys::{KeyOrder, StatKeys};
use crate::{CgroupStats, Error, Result, Snapshot, StatsSource};
use memqos_cgroupfs::beneath::{self, OpenError, Root};
use memqos_cgroupfs::fds::{self, Use};
use memqos_cgroupfs::parse::{self, flat_keyed, ParseError};
use memqos_cgroupfs::{Limit, MemoryEvents, Pressure};
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The files read for every cgroup, in the order of [`Node::files`].
pub const FILES: [&str; 9] = [
    "memory.stat",
    "memory.events",
    "memory.current",
    "memory.peak",
    "memory.max",
    "memory.high",
    "memory.low",
    "memory.min",
    "memory.pressure",
];
/// Which of [`FILES`] a snapshot reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileSet {
    /// Every file.
    All,
    /// memory.stat only (the benchmark's like-for-like comparison with its control).
    StatOnly,
    /// Usage, events, limits and PSI, without memory.stat and memory.peak: for callers that
    /// need no statistics (the daemon's sampler). memory.stat is the costliest file: the kernel
    /// flushes the memcg's counters and formats some 60 lines of them.
    Knobs,
}

impl FileSet {
    /// How many files of each cgroup a snapshot reads.
    pub fn files_per_cgroup(self) -> usize {
        self.indices().len()
    }

    fn indices(self) -> &'static [usize] {
        match self {
            FileSet::All => &[0, 1, 2, 3, 4, 5, 6, 7, 8],
            FileSet::StatOnly => &[STAT],
            FileSet::Knobs => &[EVENTS, CURRENT, 4, 5, 6, 7, 8],
        }
    }
}

const STAT: usize = 0;
const EVENTS: usize = 1;
const CURRENT: usize = 2;
const PEAK: usize = 3;
const MAX: usize = 4;
const HIGH: usize = 5;
const LOW: usize = 6;
const MIN: usize = 7;
const PRESSURE: usize = 8;

/// The open-file limit is raised (as far as this process may) once, before the process's
/// descriptor budget (`memqos_cgroupfs::fds`, shared with the daemon's other caches) is
/// taken from it.
static RAISED: OnceLock<u64> = OnceLock::new();

enum Slot {
    /// Not opened yet.
    Unopened,
    Open(File),
    /// The file does not exist for this cgroup (root, or controller not enabled).
    Absent,
    /// Over the fd budget: opened, read and closed on every snapshot.
    Transient,
}

struct Node {
    rel: String,
    path: PathBuf,
    id: u64,
    depth: u32,
    files: [Slot; FILES.len()],
    order: KeyOrder,
}

impl Node {
    fn new(root: &Path, rel: String, id: u64, depth: u32) -> Node {
        let path = memqos_cgroupfs::name::fs_path(root, &rel);
        Node { rel, path, id, depth, files: std::array::from_fn(|_| Slot::Unopened), order: KeyOrder::default() }
    }
}

/// Why one file read did not produce text.
enum ReadOutcome {
    Text(usize),
    Absent,
    Vanished,
}

pub struct TextBackend {
    root: PathBuf,
    /// The root's fd; opened again at the next walk if it could not be.
    dir: Option<Root>,
    nodes: Vec<Node>,
    root_stat: Option<File>,
    walked_descendants: Option<u64>,
    need_walk: bool,
    buf: Vec<u8>,
    keys: StatKeys,
    fds_open: u64,
    file_set: FileSet,
}

impl Drop for TextBackend {
    fn drop(&mut self) {
        fds::release(Use::Bulk, self.fds_open);
    }
}

impl TextBackend {
    /// Opens the subtree at `root`, which must be a cgroup v2 directory.
    pub fn open(root: &Path) -> Result<TextBackend> {
        if !root.join("cgroup.controllers").exists() {
            return Err(Error::NotCgroup2(root.to_owned()));
        }
        Ok(Self::open_unchecked(root))
    }

    /// For fake trees in tests: no cgroup v2 check.
    pub fn open_unchecked(root: &Path) -> TextBackend {
        let dir = Root::open(root).ok();
        TextBackend {
            root: root.to_owned(),
            root_stat: dir.as_ref().and_then(|d| d.open_file("", "cgroup.stat", libc::O_RDONLY).ok()),
            dir,
            nodes: Vec::new(),
            walked_descendants: None,
            need_walk: true,
            buf: vec![0; 64 << 10],
            keys: StatKeys::default(),
            fds_open: 0,
            file_set: FileSet::All,
        }
    }

    /// Snapshots read memory.stat only (the other fields stay `None`): the benchmark's
    /// like-for-like comparison with a control that reads only memory.stat.
    pub fn set_stat_only(&mut self, on: bool) {
        self.file_set = if on { FileSet::StatOnly } else { FileSet::All };
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// fds this backend holds open (for diagnostics and the bench).
    pub fn open_fds(&self) -> u64 {
        self.fds_open
    }

    /// Reads one cgroup's files into `out` (reusing its allocations). For the benchmark's
    /// single-cgroup loop and for callers that want one cgroup, not the tree.
    pub fn read_one(&mut self, index: usize, out: &mut CgroupStats) -> Result<bool> {
        let dir = root_dir(&mut self.dir, &self.root)?;
        read_node(
            dir,
            &mut self.nodes[index],
            &mut self.buf,
            &mut self.keys,
            &mut self.fds_open,
            FileSet::All.indices(),
            out,
        )
    }

    /// Reads only memory.stat of node `index` (the seed's control experiment reads only that).
    pub fn read_stat_only(&mut self, index: usize, out: &mut CgroupStats) -> Result<bool> {
        let dir = root_dir(&mut self.dir, &self.root)?;
        let node = &mut self.nodes[index];
        out.stat.clear();
        out.stat.resize(self.keys.len(), None);
        match read_file(dir, node, STAT, &mut self.buf, &mut self.fds_open)? {
            ReadOutcome::Text(n) => {
                parse_stat(node, &self.buf[..n], &mut self.keys, &mut out.stat)?;
                Ok(true)
            }
            ReadOutcome::Absent => Ok(true),
            ReadOutcome::Vanished => Ok(false),
        }
    }

    pub fn keys(&self) -> &StatKeys {
        &self.keys
    }

    /// Walks the tree if it may have changed. Returns the number of cgroups.
    pub fn sync_tree(&mut self) -> Result<usize> {
        let descendants = self.root_descendants();
        if self.need_walk || descendants.is_none() || descendants != self.walked_descendants {
            self.walk()?;
            self.walked_descendants = descendants;
            self.need_walk = false;
        }
        Ok(self.nodes.len())
    }

    /// Only the root directory itself, without walking below it: for reading one
    /// directory's files with `read_one`/`read_stat_only` (node 0), e.g. a cgroup v1 memory.stat.
    pub fn sync_tree_shallow(&mut self) {
        if self.nodes.is_empty() {
            let id = std::fs::metadata(&self.root).map(|m| m.ino()).unwrap_or(0);
            self.nodes.push(Node::new(&self.root, String::new(), id, 0));
        }
    }

    /// `nr_descendants` from the root's cgroup.stat (None on fake trees without it).
    fn root_descendants(&mut self) -> Option<u64> {
        let f = self.root_stat.as_ref()?;
        let n = f.read_at(&mut self.buf, 0).ok()?;
        let text = std::str::from_utf8(&self.buf[..n]).ok()?;
        flat_keyed(text).filter_map(|kv| kv.ok()).find(|(k, _)| *k == "nr_descendants").map(|(_, v)| v)
    }

    /// Rebuilds the node list in pre-order, keeping the open fds of cgroups that still exist
    /// (same path and same id).
    fn walk(&mut self) -> Result<()> {
        let mut old: std::collections::HashMap<(String, u64), Node> =
            self.nodes.drain(..).map(|n| ((n.rel.clone(), n.id), n)).collect();
        let mut out = Vec::with_capacity(old.len().max(1));
        let root_id = std::fs::metadata(&self.root).map_err(|e| cgroup_err(&self.root, "stat", "", e))?.ino();
        let root = root_dir(&mut self.dir, &self.root)?;
        // (relative path, id, depth), pre-order via an explicit stack.
        let mut stack = vec![(String::new(), root_id, 0u32)];
        while let Some((rel, id, depth)) = stack.pop() {
            let node = old.remove(&(rel.clone(), id)).unwrap_or_else(|| Node::new(&self.root, rel.clone(), id, depth));
            let dir = node.path.clone();
            out.push(node);
            let listed = match root.open_dir(&rel, None) {
                Ok((fd, _)) => beneath::subdirs(&fd),
                Err(OpenError::Vanished) => Err(io::Error::from_raw_os_error(libc::ENOENT)),
                Err(OpenError::Io(e)) => Err(e),
                Err(OpenError::Refused(why)) => Err(io::Error::new(io::ErrorKind::InvalidInput, why)),
            };
            let entries = match listed {
                Ok(entries) => entries,
                Err(e) if is_gone(&e) && !rel.is_empty() => {
                    out.pop();
                    continue;
                }
                Err(e) if rel.is_empty() => return Err(cgroup_err(&dir, "readdir", "", e)),
                // Unlistable (out of descriptors): the cgroup is read as a leaf now, its
                // children at the next walk, which this forces.
                Err(_) => {
                    self.need_walk = true;
                    continue;
                }
            };
            let mut kids = Vec::new();
            for (raw, ino) in entries {
                // Names that are not UTF-8 (or hold a backslash) are escaped reversibly, so
                // a tenant cannot hide a subtree from memqos with an odd name.
                let name = memqos_cgroupfs::name::encode(&raw);
                let child = if rel.is_empty() { name } else { format!("{rel}/{name}") };
                kids.push((child, ino, depth + 1));
            }
            kids.sort_by(|a, b| b.0.cmp(&a.0)); // reversed: the stack pops in name order
            stack.extend(kids);
        }
        for gone in old.into_values() {
            let n = gone.files.iter().filter(|s| matches!(s, Slot::Open(_))).count() as u64;
            self.fds_open -= n;
            fds::release(Use::Bulk, n);
        }
        self.nodes = out;
        Ok(())
    }
}

impl StatsSource for TextBackend {
    fn refresh(&mut self, snap: &mut Snapshot) -> Result<()> {
        self.sync_tree()?;
        snap.root.clone_from(&self.root);
        snap.backend = "text";
        snap.resize_cgroups(self.nodes.len());
        let mut filled = 0;
        let files = self.file_set.indices();
        let dir = self.dir.as_ref().expect("opened by sync_tree");
        for i in 0..self.nodes.len() {
            let out = &mut snap.cgroups[filled];
            match read_node(dir, &mut self.nodes[i], &mut self.buf, &mut self.keys, &mut self.fds_open, files, out) {
                Ok(true) => filled += 1,
                // Vanished mid-snapshot: leave it out and re-walk next time.
                Ok(false) => self.need_walk = true,
                Err(e) if i == 0 => return Err(e),
                // One cgroup's trouble is that cgroup's: kept with its error and no values,
                // and read afresh (reopened) next time.
                Err(e) => {
                    let keys = self.keys.len();
                    out.reset(keys);
                    out.error = Some(e.to_string());
                    close_files(&mut self.nodes[i], &mut self.fds_open);
                    filled += 1;
                }
            }
        }
        snap.cgroups.truncate(filled);
        // Keys learnt during this snapshot: earlier cgroups' vectors are shorter.
        let nkeys = self.keys.len();
        for cg in &mut snap.cgroups {
            cg.stat.resize(nkeys, None);
        }
        snap.keys = self.keys.shared();
        Ok(())
    }

    fn skip_statistics(&mut self) {
        self.file_set = FileSet::Knobs;
    }

    fn name(&self) -> &'static str {
        "text"
    }
}

/// Reads `files` (indices into [`FILES`]) of `node` into `out`. `Ok(false)`: the cgroup vanished.
fn read_node(
    root: &Root,
    node: &mut Node,
    buf: &mut Vec<u8>,
    keys: &mut StatKeys,
    fds_open: &mut u64,
    files: &[usize],
    out: &mut CgroupStats,
) -> Result<bool> {
    out.reset(keys.len());
    out.path.clone_from(&node.rel);
    out.id = node.id;
    out.depth = node.depth;
    for &file in files {
        let n = match read_file(root, node, file, buf, fds_open)? {
            ReadOutcome::Text(n) => n,
            ReadOutcome::Absent => continue,
            ReadOutcome::Vanished => return Ok(false),
        };
        let bytes = &buf[..n];
        let parse_err = |source: ParseError| memqos_cgroupfs::Error::Parse {
            cgroup: node.path.clone(),
            file: FILES[file].into(),
            source,
        };
        match file {
            STAT => {
                parse_stat(node, bytes, keys, &mut out.stat)?;
                continue;
            }
            EVENTS => out.events = Some(MemoryEvents::parse(utf8(node, file, bytes)?).map_err(parse_err)?),
            CURRENT => out.current = Some(parse_u64(bytes).ok_or_else(|| bad_number(bytes)).map_err(parse_err)?),
            PEAK => out.peak = Some(parse_u64(bytes).ok_or_else(|| bad_number(bytes)).map_err(parse_err)?),
            MAX | HIGH | LOW | MIN => {
                let limit = parse_limit(bytes).map_err(parse_err)?;
                *match file {
                    MAX => &mut out.max,
                    HIGH => &mut out.high,
                    LOW => &mut out.low,
                    _ => &mut out.min,
                } = Some(limit);
            }
            PRESSURE => out.pressure = Some(Pressure::parse(utf8(node, file, bytes)?).map_err(parse_err)?),
            _ => unreachable!(),
        }
    }
    Ok(true)
}

/// memory.stat into `stat` (indexed by interned key); new keys grow the vector.
fn parse_stat(node: &mut Node, bytes: &[u8], keys: &mut StatKeys, stat: &mut Vec<Option<u64>>) -> Result<()> {
    let text = utf8(node, STAT, bytes)?;
    for (line, kv) in flat_keyed(text).enumerate() {
        let (key, value) = kv.map_err(|source| memqos_cgroupfs::Error::Parse {
            cgroup: node.path.clone(),
            file: FILES[STAT].into(),
            source,
        })?;
        let i = node.order.resolve(keys, line, key) as usize;
        if i >= stat.len() {
            stat.resize(i + 1, None);
        }
        stat[i] = Some(value);
    }
    Ok(())
}

/// Closes the kept files of a node whose read failed, so the next snapshot reopens them.
fn close_files(node: &mut Node, fds_open: &mut u64) {
    for slot in node.files.iter_mut() {
        if matches!(slot, Slot::Open(_)) {
            *fds_open -= 1;
            fds::release(Use::Bulk, 1);
        }
        *slot = Slot::Unopened;
    }
}

/// One pread of `FILES[file]` from offset 0 into `buf` (grown if the file fills it).
fn read_file(root: &Root, node: &mut Node, file: usize, buf: &mut Vec<u8>, fds_open: &mut u64) -> Result<ReadOutcome> {
    let open = || root.open_file(&node.rel, FILES[file], libc::O_RDONLY);
    if matches!(node.files[file], Slot::Unopened) {
        RAISED.get_or_init(raise_nofile_limit);
        node.files[file] = match open() {
            Ok(f) if fds::try_keep(Use::Bulk, 1) => {
                *fds_open += 1;
                Slot::Open(f)
            }
            Ok(_) => Slot::Transient,
            // Out of fds (other code, other processes' limits): read this file by reopening.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE)) => Slot::Transient,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) && root.exists(&node.rel) => Slot::Absent,
            Err(e) if is_gone(&e) => return Ok(ReadOutcome::Vanished),
            Err(e) => return Err(cgroup_err(&node.path, "open", FILES[file], e)),
        };
    }
    let transient;
    let f = match &node.files[file] {
        Slot::Open(f) => f,
        Slot::Absent => return Ok(ReadOutcome::Absent),
        Slot::Transient => {
            transient = match open() {
                Ok(f) => f,
                Err(e) if is_gone(&e) => return Ok(ReadOutcome::Vanished),
                Err(e) => return Err(cgroup_err(&node.path, "open", FILES[file], e)),
            };
            &transient
        }
        Slot::Unopened => unreachable!(),
    };
    loop {
        match f.read_at(buf, 0) {
            Ok(n) if n == buf.len() => {
                let len = buf.len();
                buf.resize(len * 2, 0);
            }
            Ok(n) => return Ok(ReadOutcome::Text(n)),
            Err(e) if is_gone(&e) => return Ok(ReadOutcome::Vanished),
            Err(e) => return Err(cgroup_err(&node.path, "read", FILES[file], e)),
        }
    }
}

fn utf8<'a>(node: &Node, file: usize, bytes: &'a [u8]) -> Result<&'a str> {
    std::str::from_utf8(bytes).map_err(|_| {
        memqos_cgroupfs::Error::Parse {
            cgroup: node.path.clone(),
            file: FILES[file].into(),
            source: ParseError::Unexpected {
                line: 1,
                expected: "UTF-8 text",
                found: String::from_utf8_lossy(bytes).into(),
            },
        }
        .into()
    })
}

/// A decimal number followed by optional whitespace, straight from bytes.
fn parse_u64(bytes: &[u8]) -> Option<u64> {
    let t = bytes.trim_ascii();
    if t.is_empty() {
        return None;
    }
    let mut v: u64 = 0;
    for &b in t {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(d as u64)?;
    }
    Some(v)
}

fn bad_number(bytes: &[u8]) -> ParseError {
    ParseError::Unexpected { line: 1, expected: "a number", found: String::from_utf8_lossy(bytes).trim().into() }
}

fn parse_limit(bytes: &[u8]) -> std::result::Result<Limit, ParseError> {
    match parse_u64(bytes) {
        Some(v) => Ok(Limit::Bytes(v)),
        // The rare path ("max" or garbage): the shared parser names the error.
        None => parse::parse_limit(&String::from_utf8_lossy(bytes)),
    }
}

/// The root's descriptor, opened now if it could not be before.
fn root_dir<'a>(dir: &'a mut Option<Root>, path: &Path) -> Result<&'a Root> {
    if dir.is_none() {
        *dir = Some(Root::open(path).map_err(|e| cgroup_err(path, "open", "", e))?);
    }
    Ok(dir.as_ref().expect("set above"))
}

/// The cgroup is gone or going (`memqos_cgroupfs::vanished`, the one rule).
fn is_gone(e: &io::Error) -> bool {
    memqos_cgroupfs::vanished(e)
}

fn cgroup_err(cgroup: &Path, op: &'static str, file: &str, source: io::Error) -> Error {
    memqos_cgroupfs::Error::Io { cgroup: cgroup.to_owned(), file: file.into(), op, source }.into()
}

/// Raises RLIMIT_NOFILE (a tree of N cgroups needs 9N fds to keep every file open): the soft
/// limit to the hard one, and with CAP_SYS_RESOURCE both to at least 65536 (within
/// fs.nr_open). Returns the soft limit now in force.
#[allow(clippy::unnecessary_cast)] // rlim_t is u64 here, u32 on some 32-bit targets
fn raise_nofile_limit() -> u64 {
    const WANT: u64 = 65536;
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: plain syscalls on local structs.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 1024;
        }
        let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(WANT);
        let hard = (lim.rlim_max as u64).max(WANT.min(nr_open));
        for (cur, max) in [(hard, hard), (lim.rlim_max as u64, lim.rlim_max as u64)] {
            if cur <= lim.rlim_cur as u64 {
                break;
            }
            let want = libc::rlimit { rlim_cur: cur as libc::rlim_t, rlim_max: max as libc::rlim_t };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &want) == 0 {
                lim = want;
                break;
            }
        }
    }
    lim.rlim_cur as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake tree: root (no memory.current etc., like a real root), a/ with all files,
    /// a/x with an extra stat key, b/ with a broken memory.current.
    fn fake_tree(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("memqos-stats-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("a/x")).unwrap();
        std::fs::write(dir.join("memory.stat"), "anon 1\nfile 2\n").unwrap();
        std::fs::write(
            dir.join("memory.pressure"),
            "some avg10=0.00 avg60=0.00 avg300=0.00 total=5\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=3\n",
        )
        .unwrap();
        for d in ["a", "a/x"] {
            let p = dir.join(d);
            std::fs::write(p.join("memory.events"), "low 0\nhigh 7\nmax 1\noom 0\noom_kill 0\noom_group_kill 0\n")
                .unwrap();
            std::fs::write(p.join("memory.current"), "4096\n").unwrap();
            std::fs::write(p.join("memory.peak"), "8192\n").unwrap();
            std::fs::write(p.join("memory.max"), "max\n").unwrap();
            std::fs::write(p.join("memory.high"), "1048576\n").unwrap();
            std::fs::write(p.join("memory.low"), "0\n").unwrap();
            std::fs::write(p.join("memory.min"), "0\n").unwrap();
            std::fs::write(
                p.join("memory.pressure"),
                "some avg10=1.25 avg60=0.50 avg300=0.10 total=1234\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=99\n",
            )
            .unwrap();
        }
        std::fs::write(dir.join("a/memory.stat"), "anon 4096\nfile 8192\nkernel 12\n").unwrap();
        std::fs::write(dir.join("a/x/memory.stat"), "anon 4096\nzswap 5\nfile 0\nkernel 1\n").unwrap();
        dir
    }

    #[test]
    fn snapshot_of_a_fake_tree() {
        let root = fake_tree("snap");
        let mut b = TextBackend::open_unchecked(&root);
        let snap = b.snapshot().unwrap();
        let paths: Vec<_> = snap.cgroups.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(paths, ["", "a", "a/x"]);
        let depths: Vec<_> = snap.cgroups.iter().map(|c| c.depth).collect();
        assert_eq!(depths, [0, 1, 2]);
        let (r, a, x) = (&snap.cgroups[0], &snap.cgroups[1], &snap.cgroups[2]);
        assert_eq!(r.current, None, "the root has no memory.current");
        assert_eq!(r.pressure.unwrap().some.total_us, 5);
        assert_eq!(snap.stat(r, "anon"), Some(1));
        assert_eq!(snap.stat(r, "kernel"), None);
        assert_eq!(snap.stat(a, "file"), Some(8192));
        assert_eq!(snap.stat(x, "zswap"), Some(5));
        assert_eq!(snap.stat(a, "zswap"), None, "a key one cgroup lacks is None, not 0");
        assert_eq!(a.events.unwrap().high, 7);
        assert_eq!((a.current, a.peak), (Some(4096), Some(8192)));
        assert_eq!((a.max, a.high, a.low), (Some(Limit::Max), Some(Limit::Bytes(1 << 20)), Some(Limit::Bytes(0))));
        let p = a.pressure.unwrap();
        assert_eq!((p.some.avg10, p.some.total_us, p.full.unwrap().total_us), (1.25, 1234, 99));
        assert_eq!(snap.keys.len(), 4);
        assert!(a.id != 0 && a.id != x.id);
        assert_eq!(b.open_fds(), 2 + 9 + 9, "root has 2 files, a and a/x 9 each");

        // Values change, files stay open: the next snapshot sees the new values.
        std::fs::write(root.join("a/memory.current"), "12288\n").unwrap();
        let mut snap2 = Snapshot::default();
        b.refresh(&mut snap2).unwrap();
        assert_eq!(snap2.get("a").unwrap().current, Some(12288));

        // A new cgroup appears (fake trees have no cgroup.stat, so every snapshot walks).
        std::fs::create_dir(root.join("b")).unwrap();
        std::fs::write(root.join("b/memory.current"), "junk\n").unwrap();
        // One cgroup's garbage is that cgroup's error, not the snapshot's.
        let snap = b.snapshot().unwrap();
        let bad = snap.get("b").unwrap();
        let err = bad.error.clone().expect("b's error");
        assert!(err.contains("/b") && err.contains("memory.current") && err.contains("junk"), "{err}");
        assert_eq!(bad.current, None);
        assert_eq!(snap.get("a").unwrap().current, Some(12288), "the others are read");
        std::fs::remove_dir_all(root.join("b")).unwrap();

        // A removed cgroup disappears from the snapshot.
        std::fs::remove_dir_all(root.join("a/x")).unwrap();
        let snap3 = b.snapshot().unwrap();
        assert_eq!(snap3.cgroups.len(), 2);
        assert_eq!(b.open_fds(), 2 + 9);
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn skip_statistics_reads_neither_memory_stat_nor_peak() {
        let root = fake_tree("knobs");
        let mut b = TextBackend::open_unchecked(&root);
        b.skip_statistics();
        // Garbage in the skipped files cannot matter: they are never opened.
        std::fs::write(root.join("a/memory.stat"), "anon x\n").unwrap();
        let snap = b.snapshot().unwrap();
        let a = snap.get("a").unwrap();
        assert_eq!(snap.stat(a, "file"), None);
        assert_eq!((a.current, a.peak), (Some(4096), None));
        assert_eq!(a.events.unwrap().high, 7);
        assert_eq!(b.open_fds(), 1 + 7 + 7, "root: memory.pressure; a and a/x: 7 files each");
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn garbage_in_memory_stat_names_cgroup_file_and_line() {
        let root = fake_tree("garbage");
        std::fs::write(root.join("a/memory.stat"), "anon 1\nfile x\n").unwrap();
        let snap = TextBackend::open_unchecked(&root).snapshot().unwrap();
        let err = snap.get("a").unwrap().error.clone().expect("a's error");
        assert!(err.contains("/a") && err.contains("memory.stat") && err.contains("line 2"), "{err}");
        assert_eq!(snap.get("a/x").unwrap().error, None, "its child is read");
        std::fs::remove_dir_all(root).unwrap();
    }

    /// A tenant may nest cgroups past PATH_MAX (no path names the deepest), and may plant a
    /// symlink: every cgroup is read relative to its parent's descriptor, and the link is
    /// not a cgroup (its target outside the root is never read).
    #[test]
    fn deep_trees_are_read_and_symlinks_are_not_followed() {
        use std::os::fd::{AsRawFd, OwnedFd};
        let root = fake_tree("deep");
        let outside = root.with_file_name(format!("memqos-stats-deep-outside-{}", std::process::id()));
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("memory.current"), "666\n").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("a/link")).unwrap();
        let name = "n".repeat(200);
        let depth = 25; // 25 * 201 bytes: past PATH_MAX (4096)
        let mut dir: OwnedFd = File::open(root.join("a")).unwrap().into();
        for _ in 0..depth {
            let c = std::ffi::CString::new(name.as_str()).unwrap();
            // SAFETY: a valid fd and a NUL-terminated name.
            assert_eq!(unsafe { libc::mkdirat(dir.as_raw_fd(), c.as_ptr(), 0o755) }, 0);
            dir = beneath::open_file(&dir, &name, libc::O_DIRECTORY | libc::O_RDONLY).unwrap().into();
        }
        let c = std::ffi::CString::new("memory.current").unwrap();
        // SAFETY: a valid fd and a NUL-terminated name; the new fd is ours.
        let fd = unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), libc::O_WRONLY | libc::O_CREAT, 0o644) };
        assert!(fd >= 0);
        // SAFETY: a new fd we own.
        let f = File::from(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) });
        f.write_at(b"4242\n", 0).unwrap();
        drop(dir);

        let snap = TextBackend::open_unchecked(&root).snapshot().unwrap();
        let deepest = format!("a/{}", vec![name.as_str(); depth].join("/"));
        assert!(deepest.len() > libc::PATH_MAX as usize);
        let d = snap.get(&deepest).expect("the deepest cgroup is in the snapshot");
        assert_eq!((d.current, d.error.as_deref()), (Some(4242), None));
        assert_eq!(d.depth as usize, depth + 1);
        assert!(snap.get("a/link").is_none(), "a symlink is not a cgroup");
        assert!(snap.cgroups.iter().all(|c| c.current != Some(666)));
        // Removed deepest first: each rmdir beneath the parent's descriptor.
        let mut chain: Vec<OwnedFd> = vec![File::open(root.join("a")).unwrap().into()];
        for _ in 0..depth {
            let next = beneath::open_file(chain.last().unwrap(), &name, libc::O_DIRECTORY | libc::O_RDONLY).unwrap();
            chain.push(next.into());
        }
        // SAFETY: valid fds and NUL-terminated names.
        unsafe { libc::unlinkat(chain[depth].as_raw_fd(), c.as_ptr(), 0) };
        let n = std::ffi::CString::new(name.as_str()).unwrap();
        for i in (0..depth).rev() {
            // SAFETY: as above.
            assert_eq!(unsafe { libc::unlinkat(chain[i].as_raw_fd(), n.as_ptr(), libc::AT_REMOVEDIR) }, 0);
        }
        std::fs::remove_dir_all(root).unwrap();
        std::fs::remove_dir_all(outside).unwrap();
    }

    #[test]
    fn not_a_cgroup2_dir() {
        let err = TextBackend::open(Path::new("/")).err().unwrap().to_string();
        assert!(err.contains("not a cgroup v2 directory"), "{err}");
    }

    #[test]
    fn numbers() {
        assert_eq!(parse_u64(b"123\n"), Some(123));
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
        assert_eq!(parse_u64(b"max\n"), None);
        assert_eq!(parse_u64(b""), None);
        assert_eq!(parse_limit(b"max\n").unwrap(), Limit::Max);
        assert_eq!(parse_limit(b"4096\n").unwrap(), Limit::Bytes(4096));
        assert!(parse_limit(b"-1\n").is_err());
    }

    proptest::proptest! {
        /// Differential: the byte-level number and limit parsers of the hot path agree with
        /// cgroupfs's text parsers on any input (the values and whether it is an error).
        #[test]
        fn proptest_byte_parsers_agree_with_cgroupfs(
            text in proptest::prop_oneof![
                "[ \t\n]{0,2}([0-9]{1,21}|max|-1|[0-9]+x)[ \t\n]{0,2}",
                proptest::prelude::any::<String>(),
            ],
        ) {
            let b = text.as_bytes();
            proptest::prop_assert_eq!(parse_u64(b), parse::parse_u64(&text).ok());
            proptest::prop_assert_eq!(parse_limit(b), parse::parse_limit(&text));
        }

        /// Any bytes in any file of a cgroup: a snapshot or an error naming the cgroup and the
        /// file, never a panic.
        #[test]
        fn proptest_any_file_content_gives_a_snapshot_or_a_named_error(
            file in 0..FILES.len(),
            content in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
        ) {
            let root = fake_tree(&format!("fuzz{file}"));
            std::fs::write(root.join("a").join(FILES[file]), &content).unwrap();
            let result = TextBackend::open_unchecked(&root).snapshot();
            std::fs::remove_dir_all(&root).unwrap();
            if let Err(e) = result {
                let e = e.to_string();
                proptest::prop_assert!(e.contains("/a") && e.contains(FILES[file]), "{}", e);
            }
        }
    }
}
