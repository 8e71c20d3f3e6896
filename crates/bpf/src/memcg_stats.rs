//! Loader for the memcg stats programs, which copy every memcg's counters in a subtree into a
//! memory-mapped array through the memcg kfuncs (Linux 7.0+). Two walkers fill the same
//! records (`bpf/memcg_stats_common.bpf.h`):
//!
//! - [`Walker::Syscall`] (`memcg_stats_run.bpf.c`): a `BPF_PROG_TYPE_SYSCALL` program run with
//!   `BPF_PROG_TEST_RUN`, walking with the open-coded css iterator: one `bpf()` call per run;
//! - [`Walker::Iterator`] (`memcg_stats.bpf.c`): a sleepable cgroup iterator: `bpf_iter_create`
//!   + `read` + close per run, i.e. a new file, seq_file and 32 KiB buffer each time.
//!
//! [`MemcgStats::load`] tries the syscall walker first and falls back to the iterator. A run
//! holds up to [`MAX_RECS`] cgroups; bigger trees take `ceil(n / MAX_RECS)` runs, each skipping
//! the records earlier runs collected. Nothing goes through seq_file text (which one read can
//! return only ~32 KiB of), so tree size is not limited by it. Records are read in place from
//! the `.bss` mapping: no syscall per cgroup or counter.

use std::io::Read as _;
use std::mem::MaybeUninit;
use std::os::fd::AsFd;
use std::path::Path;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{CgroupIterOpts, CgroupIterOrder, IterOpts, Link};

mod skel {
    include!(concat!(env!("OUT_DIR"), "/memcg_stats.skel.rs"));
}

mod run_skel {
    include!(concat!(env!("OUT_DIR"), "/memcg_stats_run.skel.rs"));
}

pub use skel::types::memqos_memcg_rec as MemcgRecord;

// Both skeletons generate the record from the same C header; the syscall walker's records
// are viewed as `MemcgRecord`, which needs the layouts to agree.
const _: () = assert!(std::mem::size_of::<MemcgRecord>() == std::mem::size_of::<run_skel::types::memqos_memcg_rec>());
const _: () = assert!(std::mem::align_of::<MemcgRecord>() == std::mem::align_of::<run_skel::types::memqos_memcg_rec>());

/// How the subtree is walked (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Walker {
    Syscall,
    Iterator,
}

impl Walker {
    pub fn as_str(self) -> &'static str {
        match self {
            Walker::Syscall => "syscall program (BPF_PROG_TEST_RUN, css iterator)",
            Walker::Iterator => "cgroup iterator (iter.s/cgroup)",
        }
    }
}

/// Counters per cgroup the program can fetch (`MEMQOS_STATS_MAX_FETCH`).
pub const MAX_FETCH: usize = 192;
/// Records per iterator run (`MEMQOS_STATS_MAX_RECS`).
pub const MAX_RECS: usize = 2048;
/// `MEMQOS_REC_MEMCG`: the cgroup has its own memcg; the counters are valid.
pub const REC_MEMCG: u32 = 1;
/// `MEMQOS_REC_PSI`: the PSI fields are valid.
pub const REC_PSI: u32 = 2;

/// Where a counter comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fetch {
    /// `bpf_mem_cgroup_page_state(memcg, idx)`: enum node_stat_item or memcg_stat_item,
    /// in the units memory.stat prints (bytes, or a count for workingset/demotion items).
    PageState(u32),
    /// `bpf_mem_cgroup_vm_events(memcg, idx)`: enum vm_event_item.
    VmEvent(u32),
}

#[derive(Debug, thiserror::Error)]
pub enum MemcgStatsError {
    #[error("{0} counters requested, the BPF program holds at most {MAX_FETCH}")]
    TooManyCounters(usize),
    #[error("opening cgroup {path}: {source}")]
    Cgroup { path: String, source: std::io::Error },
    #[error("{stage} the memcg_stats BPF program: {source}")]
    Bpf { stage: &'static str, source: libbpf_rs::Error },
    #[error("reading the memcg_stats iterator: {0}")]
    Read(std::io::Error),
    #[error("the subtree's root cgroup is gone")]
    RootGone,
}

/// The loaded program for one subtree.
pub struct MemcgStats {
    prog: Prog,
}

enum Prog {
    Syscall(run_skel::MemcgStatsRunSkel<'static>),
    Iterator {
        skel: skel::MemcgStatsSkel<'static>,
        link: Link,
        /// Keeps the root directory open for the link's lifetime.
        _root: std::fs::File,
    },
}

/// Sets the counter list in a skeleton's `.rodata` (the same fields in both programs).
macro_rules! configure {
    ($open:expr, $fetches:expr) => {{
        let rodata = $open.maps.rodata_data.as_deref_mut().expect("memcg_stats has .rodata");
        rodata.nr_fetch = $fetches.len() as u32;
        for (i, f) in $fetches.iter().enumerate() {
            let (kind, idx) = match *f {
                Fetch::PageState(idx) => (0, idx),
                Fetch::VmEvent(idx) => (1, idx),
            };
            rodata.fetch_kind[i] = kind;
            rodata.fetch_idx[i] = idx;
        }
    }};
}

impl MemcgStats {
    /// Loads a walker for the subtree at `root` (a cgroup v2 directory) with `fetches` as the
    /// per-cgroup counter list: the syscall walker, or the iterator if that fails to load.
    pub fn load(root: &Path, fetches: &[Fetch]) -> Result<MemcgStats, MemcgStatsError> {
        match Self::load_with(root, fetches, Walker::Syscall) {
            Ok(s) => Ok(s),
            Err(MemcgStatsError::Bpf { .. }) => Self::load_with(root, fetches, Walker::Iterator),
            Err(e) => Err(e),
        }
    }

    pub fn load_with(root: &Path, fetches: &[Fetch], walker: Walker) -> Result<MemcgStats, MemcgStatsError> {
        if fetches.len() > MAX_FETCH {
            return Err(MemcgStatsError::TooManyCounters(fetches.len()));
        }
        let bpf = |stage| move |source| MemcgStatsError::Bpf { stage, source };
        let root_dir = std::fs::File::open(root)
            .map_err(|source| MemcgStatsError::Cgroup { path: root.display().to_string(), source })?;
        // The skeleton borrows its object storage for as long as it lives; a backend lives
        // for the process (CLI run, daemon), so the storage (a few hundred bytes) is leaked
        // rather than made self-referential.
        let storage: &'static mut MaybeUninit<libbpf_rs::OpenObject> = Box::leak(Box::new(MaybeUninit::uninit()));
        let prog = match walker {
            Walker::Syscall => {
                use std::os::unix::fs::MetadataExt;
                let id = root_dir
                    .metadata()
                    .map_err(|source| MemcgStatsError::Cgroup { path: root.display().to_string(), source })?
                    .ino();
                let mut open = run_skel::MemcgStatsRunSkelBuilder::default().open(storage).map_err(bpf("opening"))?;
                configure!(open, fetches);
                let mut skel = open.load().map_err(bpf("loading"))?;
                skel.maps.bss_data.as_deref_mut().expect("memcg_stats_run has .bss").root_cgroup_id = id;
                Prog::Syscall(skel)
            }
            Walker::Iterator => {
                let mut open = skel::MemcgStatsSkelBuilder::default().open(storage).map_err(bpf("opening"))?;
                configure!(open, fetches);
                let skel = open.load().map_err(bpf("loading"))?;
                let mut opts = CgroupIterOpts::from_fd(root_dir.as_fd());
                opts.order = CgroupIterOrder::DescendantsPre;
                let link =
                    skel.progs.memcg_stats.attach_iter_with_opts(IterOpts::Cgroup(opts)).map_err(bpf("attaching"))?;
                Prog::Iterator { skel, link, _root: root_dir }
            }
        };
        Ok(MemcgStats { prog })
    }

    pub fn walker(&self) -> Walker {
        match self.prog {
            Prog::Syscall(_) => Walker::Syscall,
            Prog::Iterator { .. } => Walker::Iterator,
        }
    }

    /// Walks the subtree (as many runs as it takes) and calls `each` with every record, in
    /// pre-order. Stats are flushed once, at the subtree root, at the start of the walk.
    /// Returns the number of cgroups walked.
    pub fn collect(&mut self, mut each: impl FnMut(&MemcgRecord)) -> Result<usize, MemcgStatsError> {
        let mut skip = 0usize;
        loop {
            let (seen, written) = match &mut self.prog {
                Prog::Syscall(skel) => {
                    {
                        let bss = skel.maps.bss_data.as_deref_mut().expect("memcg_stats_run has .bss");
                        bss.skip = skip as u32;
                        bss.flush_pending = (skip == 0) as u32;
                        bss.nr_seen = 0;
                        bss.nr_written = 0;
                    }
                    let out = skel
                        .progs
                        .memcg_stats_run
                        .test_run(libbpf_rs::ProgramInput::default())
                        .map_err(|source| MemcgStatsError::Bpf { stage: "running", source })?;
                    if out.return_value != 0 {
                        return Err(MemcgStatsError::RootGone);
                    }
                    let bss = skel.maps.bss_data.as_deref_mut().expect("memcg_stats_run has .bss");
                    let (seen, written) = (bss.nr_seen as usize, bss.nr_written as usize);
                    for rec in &bss.recs[..written.min(MAX_RECS)] {
                        // SAFETY: same C struct, same size and alignment (asserted above).
                        each(unsafe { &*(rec as *const run_skel::types::memqos_memcg_rec as *const MemcgRecord) });
                    }
                    (seen, written)
                }
                Prog::Iterator { skel, link, .. } => {
                    {
                        let bss = skel.maps.bss_data.as_deref_mut().expect("memcg_stats has .bss");
                        bss.skip = skip as u32;
                        bss.flush_pending = (skip == 0) as u32;
                        bss.nr_seen = 0;
                        bss.nr_written = 0;
                    }
                    let mut iter = libbpf_rs::Iter::new(link)
                        .map_err(|source| MemcgStatsError::Bpf { stage: "creating an iterator for", source })?;
                    // The program prints nothing, so one read walks the whole subtree and returns 0.
                    let mut byte = [0u8; 8];
                    while iter.read(&mut byte).map_err(MemcgStatsError::Read)? > 0 {}
                    drop(iter);
                    let bss = skel.maps.bss_data.as_deref_mut().expect("memcg_stats has .bss");
                    let (seen, written) = (bss.nr_seen as usize, bss.nr_written as usize);
                    for rec in &bss.recs[..written.min(MAX_RECS)] {
                        each(rec);
                    }
                    (seen, written)
                }
            };
            skip += written;
            if written == 0 || skip >= seen {
                return Ok(seen);
            }
        }
    }
}
