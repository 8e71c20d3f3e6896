//! Whole-subtree memcg statistics in one call.
//!
//! A [`Snapshot`] holds, for every cgroup under a root (the root first, then its
//! descendants in pre-order), the cgroup id, every `memory.stat` counter, `memory.events`,
//! `memory.current/peak/max/high/low/min` and `memory.pressure`, as numbers.
//!
//! Two backends fill the same type:
//! - [`TextBackend`] reads cgroupfs: it keeps one open fd per cgroup and file, reads each
//!   file with one `pread` into a reused buffer, parses without allocating per field and
//!   interns `memory.stat` key names once (kernels differ in which keys exist). It works on
//!   every cgroup v2 kernel and is the reference the BPF backend is tested against.
//! - [`BpfBackend`] walks the subtree in the kernel once per snapshot (a syscall program run
//!   with BPF_PROG_TEST_RUN, or a cgroup iterator) and reads the counters through the memcg
//!   kfuncs (Linux 7.0+) into a memory-mapped buffer: no text is formatted or parsed and
//!   there is no syscall per cgroup or file. Kernels without the kfuncs (6.12) use the text
//!   backend; [`open`] with [`BackendChoice::Auto`] says so once.
//!
//! docs/stats.md has the design, the tests and the benchmark.

mod bpf;
mod keys;
mod text;

pub use bpf::{stat_key_plan, BpfBackend, KeyPlan, KeySource, Walker};
pub use keys::StatKeys;
pub use memqos_cgroupfs::{Limit, MemoryEvents, Pressure, PressureLine};
pub use text::{FileSet, TextBackend, FILES};

use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub type Result<T> = std::result::Result<T, Error>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Cgroup(#[from] memqos_cgroupfs::Error),
    #[error("{}: not a cgroup v2 directory (no cgroup.controllers there)", .0.display())]
    NotCgroup2(PathBuf),
    /// The BPF backend cannot run on this kernel or with these privileges; the text backend can.
    #[error("BPF stats backend unavailable: {0}")]
    BpfUnavailable(String),
    #[error("BPF stats backend: {0}")]
    Bpf(String),
}

/// One cgroup's memory statistics.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CgroupStats {
    /// Relative to the snapshot root; "" is the root itself.
    pub path: String,
    /// The cgroup id: the directory's inode number, as in BPF and the memcg tracepoints.
    pub id: u64,
    /// Nesting depth below the snapshot root (root = 0).
    pub depth: u32,
    /// `memory.stat`, indexed like [`Snapshot::keys`]; `None` where this cgroup's file lacks
    /// the key or has no memory.stat (memory controller not enabled for it).
    pub stat: Vec<Option<u64>>,
    pub events: Option<MemoryEvents>,
    pub current: Option<u64>,
    pub peak: Option<u64>,
    pub max: Option<Limit>,
    pub high: Option<Limit>,
    pub low: Option<Limit>,
    pub min: Option<Limit>,
    pub pressure: Option<Pressure>,
    /// Why this cgroup's files could not be read in this snapshot (a malformed file, a path
    /// too long to open, out of descriptors): its values are `None`. It stays in the snapshot
    /// so the tree's shape (who is a leaf) is still right; one cgroup never fails the whole
    /// snapshot, only the root does.
    pub error: Option<String>,
}

impl CgroupStats {
    /// Clears every value but keeps the allocations, for reuse in the next snapshot.
    fn reset(&mut self, nkeys: usize) {
        self.stat.clear();
        self.stat.resize(nkeys, None);
        self.events = None;
        self.current = None;
        self.peak = None;
        self.max = None;
        self.high = None;
        self.low = None;
        self.min = None;
        self.pressure = None;
        self.error = None;
    }
}

/// Every cgroup under a root at one moment.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub root: PathBuf,
    /// `memory.stat` key names; `CgroupStats::stat[i]` is the value of `keys[i]`.
    pub keys: Arc<Vec<Box<str>>>,
    /// The root first, then descendants in pre-order (parents before children).
    pub cgroups: Vec<CgroupStats>,
    /// Which backend produced it ("text" or "bpf").
    pub backend: &'static str,
}

impl Snapshot {
    pub fn key_index(&self, key: &str) -> Option<usize> {
        self.keys.iter().position(|k| &**k == key)
    }

    /// The value of `memory.stat` key `key` for `cg`.
    pub fn stat(&self, cg: &CgroupStats, key: &str) -> Option<u64> {
        self.key_index(key).and_then(|i| cg.stat.get(i).copied().flatten())
    }

    pub fn get(&self, path: &str) -> Option<&CgroupStats> {
        self.cgroups.iter().find(|c| c.path == path)
    }

    /// Grows or shrinks `cgroups` to `n` entries, keeping allocations of the survivors.
    fn resize_cgroups(&mut self, n: usize) {
        self.cgroups.truncate(n);
        while self.cgroups.len() < n {
            self.cgroups.push(CgroupStats::default());
        }
    }
}

/// A source of snapshots.
pub trait StatsSource {
    /// Refills `snap` (reusing its allocations) with the tree as it is now.
    fn refresh(&mut self, snap: &mut Snapshot) -> Result<()>;

    fn snapshot(&mut self) -> Result<Snapshot> {
        let mut snap = Snapshot::default();
        self.refresh(&mut snap)?;
        Ok(snap)
    }

    fn name(&self) -> &'static str;

    /// From now on only usage, events, limits and PSI are needed; a backend for which the
    /// statistics cost extra (text: memory.stat) stops reading them. The BPF backend reads
    /// everything in one program run and ignores this.
    fn skip_statistics(&mut self) {}
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendChoice {
    /// BPF where the kernel has the memcg kfuncs, else text (with one message).
    Auto,
    Text,
    Bpf,
}

impl std::fmt::Display for BackendChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BackendChoice::Auto => "auto",
            BackendChoice::Text => "text",
            BackendChoice::Bpf => "bpf",
        })
    }
}

impl std::str::FromStr for BackendChoice {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "auto" => Ok(BackendChoice::Auto),
            "text" => Ok(BackendChoice::Text),
            "bpf" => Ok(BackendChoice::Bpf),
            _ => Err(format!("unknown stats backend {s:?}: expected bpf, text or auto")),
        }
    }
}

/// Opens a backend for the subtree at `root`. With `Auto`, a BPF failure falls back to
/// text and `note` receives the one message that says why.
pub fn open(root: &Path, choice: BackendChoice, note: &mut dyn FnMut(&str)) -> Result<Box<dyn StatsSource>> {
    match choice {
        BackendChoice::Text => Ok(Box::new(TextBackend::open(root)?)),
        BackendChoice::Bpf => Ok(Box::new(BpfBackend::open(root)?)),
        BackendChoice::Auto => match BpfBackend::open(root) {
            Ok(b) => Ok(Box::new(b)),
            Err(Error::BpfUnavailable(why)) => {
                note(&format!("memqos stats: using the text backend: {why}"));
                Ok(Box::new(TextBackend::open(root)?))
            }
            Err(e) => Err(e),
        },
    }
}

/// Bytes of one page on this machine (the kernel's page counters count pages).
pub(crate) fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if v > 0 {
        v as u64
    } else {
        4096
    }
}
