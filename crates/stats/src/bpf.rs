//! The BPF backend: one cgroup-iterator walk per snapshot, counters read through the memcg
//! kfuncs (Linux 7.0+), records read from a memory-mapped array.
//!
//! Which counters exist, and under which name, is learnt once from the kernel itself: the
//! backend reads one `memory.stat` to get the key list, then resolves every key to an
//! index of `enum node_stat_item`/`memcg_stat_item` (keys before `pgscan`) or
//! `enum vm_event_item` (keys after `pgsteal`) from the running kernel's BTF — the order of
//! `memory_stat_format()` in mm/memcontrol.c. Indexes change with kernel config, so nothing
//! is hard-coded but the few names that differ from their enum constant.
//!
//! On kernels without the kfuncs (6.12) this backend is unavailable and the text backend is
//! used: there the counters live in per-CPU rstat structures behind a boot-time compacted
//! index (`mem_cgroup_stats_index`) that BTF does not describe, and BPF cannot flush them,
//! so a CO-RE reader would be fragile and up to 2 s stale. Reading them there is not worth it.

use crate::keys::StatKeys;
use crate::{CgroupStats, Error, Limit, MemoryEvents, Pressure, PressureLine, Result, Snapshot, StatsSource};
use memqos_bpf::features::Availability;
pub use memqos_bpf::memcg_stats::Walker;
use memqos_bpf::memcg_stats::{Fetch, MemcgRecord, MemcgStats, REC_MEMCG, REC_PSI};
use memqos_bpf::{Btf, KernelFeatures};
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// How each `memory.stat` key is obtained.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeySource {
    /// `values[slot]` of the BPF record.
    Fetched(usize),
    /// The sum of other keys (`slab`, `pgscan`, `pgsteal`), as memory.stat prints them.
    Sum(Vec<usize>),
}

/// The resolved key list for one kernel.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyPlan {
    pub keys: Vec<String>,
    pub sources: Vec<KeySource>,
    pub fetches: Vec<Fetch>,
    /// Keys the running kernel's BTF could not resolve (the plan is unusable if any).
    pub unresolved: Vec<String>,
}

/// memory.stat names whose enum constant is not simply the upper-cased name (checked
/// against mm/memcontrol.c `memory_stats[]` of 6.12 and 7.x). Alternatives are tried in order:
/// 7.x moved some counters between enums.
const PAGE_STATE_NAMES: &[(&str, &[&str])] = &[
    ("anon", &["NR_ANON_MAPPED"]),
    ("file", &["NR_FILE_PAGES"]),
    ("kernel", &["MEMCG_KMEM"]),
    ("kernel_stack", &["NR_KERNEL_STACK_KB"]),
    ("pagetables", &["NR_PAGETABLE"]),
    ("sec_pagetables", &["NR_SECONDARY_PAGETABLE"]),
    ("percpu", &["MEMCG_PERCPU_B"]),
    ("sock", &["MEMCG_SOCK"]),
    ("vmalloc", &["MEMCG_VMALLOC", "NR_VMALLOC"]),
    ("zswap", &["MEMCG_ZSWAP_B"]),
    ("zswapped", &["MEMCG_ZSWAPPED"]),
    ("file_writeback", &["NR_WRITEBACK"]),
    ("swapcached", &["NR_SWAPCACHE"]),
    ("anon_thp", &["NR_ANON_THPS"]),
    ("file_thp", &["NR_FILE_THPS"]),
    ("shmem_thp", &["NR_SHMEM_THPS"]),
    ("slab_reclaimable", &["NR_SLAB_RECLAIMABLE_B"]),
    ("slab_unreclaimable", &["NR_SLAB_UNRECLAIMABLE_B"]),
];

/// vm event names (mm/vmstat.c `vmstat_text`) that are not the upper-cased enum constant.
const VM_EVENT_NAMES: &[(&str, &str)] = &[("numa_pages_migrated", "NUMA_PAGE_MIGRATE")];

/// Resolves `keys` (in memory.stat order) against `btf`.
pub fn stat_key_plan(keys: &[&str], btf: &Btf) -> KeyPlan {
    let mut plan = KeyPlan::default();
    let pgscan = keys.iter().position(|k| *k == "pgscan");
    let pgsteal = keys.iter().position(|k| *k == "pgsteal");
    for (i, &key) in keys.iter().enumerate() {
        plan.keys.push(key.to_owned());
        let sum_of = |prefix: &str| -> Vec<usize> {
            keys.iter().enumerate().filter(|(_, k)| k.starts_with(prefix)).map(|(j, _)| j).collect()
        };
        let source = match key {
            "slab" => Some(KeySource::Sum(
                ["slab_reclaimable", "slab_unreclaimable"]
                    .iter()
                    .filter_map(|s| keys.iter().position(|k| k == s))
                    .collect(),
            )),
            "pgscan" => Some(KeySource::Sum(sum_of("pgscan_"))),
            "pgsteal" => Some(KeySource::Sum(sum_of("pgsteal_"))),
            _ => {
                let is_event = pgsteal.is_some_and(|p| i > p) || (pgsteal.is_none() && pgscan.is_some_and(|p| i > p));
                let fetch = if is_event { vm_event(btf, key) } else { page_state(btf, key) };
                fetch.map(|f| {
                    plan.fetches.push(f);
                    KeySource::Fetched(plan.fetches.len() - 1)
                })
            }
        };
        match source {
            Some(s) => plan.sources.push(s),
            None => {
                plan.unresolved.push(key.to_owned());
                plan.sources.push(KeySource::Sum(Vec::new()));
            }
        }
    }
    plan
}

fn page_state(btf: &Btf, key: &str) -> Option<Fetch> {
    let upper = key.to_ascii_uppercase();
    let explicit = PAGE_STATE_NAMES.iter().find(|(k, _)| *k == key).map(|(_, names)| names.to_vec());
    let candidates: Vec<String> = match explicit {
        Some(names) => names.iter().map(|s| s.to_string()).collect(),
        None => vec![format!("NR_{upper}"), upper.clone(), format!("MEMCG_{upper}")],
    };
    for name in &candidates {
        for enum_name in ["node_stat_item", "memcg_stat_item"] {
            if let Some(v) = btf.enum_value(enum_name, name) {
                return Some(Fetch::PageState(v as u32));
            }
        }
    }
    None
}

fn vm_event(btf: &Btf, key: &str) -> Option<Fetch> {
    let name = VM_EVENT_NAMES
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, n)| n.to_string())
        .unwrap_or_else(|| key.to_ascii_uppercase());
    btf.enum_value("vm_event_item", &name).map(|v| Fetch::VmEvent(v as u32))
}

/// The BPF backend for one subtree.
pub struct BpfBackend {
    root: PathBuf,
    prog: MemcgStats,
    decoder: Decoder,
    /// cgroup id -> path relative to root; rebuilt when an unknown id shows up.
    paths: HashMap<u64, String>,
    /// The ids of the last snapshot in order, with their paths: an unchanged tree (the
    /// common case) gets its paths without a hash lookup per cgroup.
    last: Vec<(u64, String)>,
    /// The hierarchy root's PSI is the system's: read from its memory.pressure file.
    root_pressure: Option<std::fs::File>,
    buf: Vec<u8>,
}

impl BpfBackend {
    /// Loads the program for the subtree at `root`. `Error::BpfUnavailable` says why not
    /// (kernel without the memcg kfuncs, no BTF, no privileges, verifier refusal).
    pub fn open(root: &Path) -> Result<BpfBackend> {
        Self::open_with(root, None)
    }

    /// Like [`BpfBackend::open`] with a given walker (`None`: the syscall walker, falling
    /// back to the cgroup iterator).
    pub fn open_with(root: &Path, walker: Option<Walker>) -> Result<BpfBackend> {
        if !root.join("cgroup.controllers").exists() {
            return Err(Error::NotCgroup2(root.to_owned()));
        }
        let unavailable = |why: String| Error::BpfUnavailable(why);
        let btf = Btf::load_vmlinux().map_err(|e| unavailable(format!("no kernel BTF ({e})")))?;
        let features = KernelFeatures::probe(&btf);
        let needed = memqos_bpf::features::MEMCG_KFUNCS;
        let missing: Vec<_> = features
            .memcg_kfuncs
            .kfuncs
            .iter()
            .filter(|k| needed.contains(&k.name) && !k.present)
            .map(|k| k.name)
            .collect();
        if features.memcg_kfuncs.availability == Availability::Absent || !missing.is_empty() {
            return Err(unavailable(format!(
                "kernel {} lacks the memcg BPF kfuncs (Linux 7.0+){}",
                kernel_release(),
                if missing.len() < needed.len() && !missing.is_empty() {
                    format!(": missing {}", missing.join(", "))
                } else {
                    String::new()
                }
            )));
        }
        if !features.cgroup_iter {
            return Err(unavailable("kernel has no BPF cgroup iterator".into()));
        }
        // The key list, from the kernel itself: the first cgroup with a memory.stat.
        let sample = find_memory_stat(root)?;
        let text =
            std::fs::read_to_string(&sample).map_err(|e| Error::Bpf(format!("reading {}: {e}", sample.display())))?;
        let key_names: Vec<&str> =
            memqos_cgroupfs::parse::flat_keyed(&text).filter_map(|kv| kv.ok()).map(|(k, _)| k).collect();
        let plan = stat_key_plan(&key_names, &btf);
        if !plan.unresolved.is_empty() {
            return Err(unavailable(format!(
                "memory.stat keys not found in this kernel's BTF enums: {}",
                plan.unresolved.join(", ")
            )));
        }
        let prog = match walker {
            None => MemcgStats::load(root, &plan.fetches),
            Some(w) => MemcgStats::load_with(root, &plan.fetches, w),
        }
        .map_err(|e| unavailable(e.to_string()))?;
        let mut keys = StatKeys::default();
        for k in &plan.keys {
            keys.intern(k);
        }
        let page_size = crate::page_size();
        let root_level = cgroup_level(root);
        Ok(BpfBackend {
            root: root.to_owned(),
            prog,
            decoder: Decoder {
                keys,
                sources: plan.sources,
                page_size,
                counter_max: (i64::MAX as u64) / page_size,
                root_level,
            },
            paths: HashMap::new(),
            last: Vec::new(),
            root_pressure: if root_level == 0 { std::fs::File::open(root.join("memory.pressure")).ok() } else { None },
            buf: vec![0; 4096],
        })
    }

    /// Which walker was loaded.
    pub fn walker(&self) -> Walker {
        self.prog.walker()
    }

    /// Maps cgroup ids to paths by walking the directory tree (only when an id is unknown).
    fn rebuild_paths(&mut self) -> Result<()> {
        self.paths.clear();
        let mut stack = vec![String::new()];
        while let Some(rel) = stack.pop() {
            let dir = memqos_cgroupfs::name::fs_path(&self.root, &rel);
            let Ok(meta) = std::fs::metadata(&dir) else { continue };
            self.paths.insert(meta.ino(), rel.clone());
            let Ok(rd) = std::fs::read_dir(&dir) else { continue };
            for e in rd.flatten() {
                if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                    let name = memqos_cgroupfs::name::encode(&e.file_name());
                    stack.push(if rel.is_empty() { name } else { format!("{rel}/{name}") });
                }
            }
        }
        Ok(())
    }
}

/// Turns a BPF record into [`CgroupStats`], in the units and forms of the cgroupfs files.
struct Decoder {
    keys: StatKeys,
    sources: Vec<KeySource>,
    page_size: u64,
    /// `PAGE_COUNTER_MAX`: a page counter limit of this value reads as "max".
    counter_max: u64,
    /// Level of the snapshot root in its hierarchy (depths are relative to it).
    root_level: u32,
}

impl Decoder {
    fn fill(&self, rec: &MemcgRecord, out: &mut CgroupStats) {
        out.reset(self.keys.len());
        out.id = rec.cgroup_id;
        out.depth = rec.level.saturating_sub(self.root_level);
        if rec.flags & REC_PSI != 0 {
            let line = |i: usize| PressureLine {
                avg10: psi_avg(rec.psi_avg[i][0]),
                avg60: psi_avg(rec.psi_avg[i][1]),
                avg300: psi_avg(rec.psi_avg[i][2]),
                total_us: rec.psi_total_ns[i] / 1000,
            };
            out.pressure = Some(Pressure { some: line(0), full: Some(line(1)) });
        }
        if rec.flags & REC_MEMCG == 0 {
            return;
        }
        for (i, src) in self.sources.iter().enumerate() {
            out.stat[i] = Some(match src {
                KeySource::Fetched(slot) => rec.values[*slot],
                // memory.stat adds these in unsigned long, so a sum wraps as the kernel's does
                // (and never panics on a record of garbage).
                KeySource::Sum(parts) => parts
                    .iter()
                    .map(|&p| match &self.sources[p] {
                        KeySource::Fetched(slot) => rec.values[*slot],
                        KeySource::Sum(_) => 0,
                    })
                    .fold(0u64, u64::wrapping_add),
            });
        }
        // The hierarchy root has no memory.events/current/peak/limits files.
        if rec.level == 0 {
            return;
        }
        let e = &rec.events;
        out.events =
            Some(MemoryEvents { low: e[0], high: e[1], max: e[2], oom: e[3], oom_kill: e[4], oom_group_kill: e[5] });
        out.current = Some(rec.usage_bytes);
        // Page counters stay below PAGE_COUNTER_MAX, so these products fit; saturating keeps a
        // corrupt record from panicking (debug) or wrapping to a small number (release).
        out.peak = Some(rec.watermark.saturating_mul(self.page_size));
        let limit = |pages: u64| {
            if pages >= self.counter_max {
                Limit::Max
            } else {
                Limit::Bytes(pages.saturating_mul(self.page_size))
            }
        };
        out.max = Some(limit(rec.max));
        out.high = Some(limit(rec.high));
        out.low = Some(limit(rec.low));
        out.min = Some(limit(rec.min));
    }
}

impl StatsSource for BpfBackend {
    fn refresh(&mut self, snap: &mut Snapshot) -> Result<()> {
        snap.root.clone_from(&self.root);
        snap.backend = "bpf";
        snap.keys = self.decoder.keys.shared();
        let mut n = 0;
        let (decoder, cgroups) = (&self.decoder, &mut snap.cgroups);
        self.prog
            .collect(|rec| {
                if n == cgroups.len() {
                    cgroups.push(CgroupStats::default());
                }
                decoder.fill(rec, &mut cgroups[n]);
                n += 1;
            })
            .map_err(|e| Error::Bpf(e.to_string()))?;
        snap.cgroups.truncate(n);
        // Paths are attached after the walk: a cgroup created since the last directory
        // walk costs one more walk, not a failure.
        let same_tree = snap.cgroups.len() == self.last.len()
            && snap.cgroups.iter().zip(&self.last).all(|(c, (id, _))| c.id == *id);
        if same_tree {
            for (cg, (_, path)) in snap.cgroups.iter_mut().zip(&self.last) {
                cg.path.clone_from(path);
            }
            return self.finish(snap);
        }
        if snap.cgroups.iter().any(|c| !self.paths.contains_key(&c.id)) {
            self.rebuild_paths()?;
        }
        // Cgroups removed between the walk and the path lookup are dropped.
        snap.cgroups.retain(|c| self.paths.contains_key(&c.id));
        for cg in &mut snap.cgroups {
            cg.path.clone_from(&self.paths[&cg.id]);
        }
        self.last.clear();
        self.last.extend(snap.cgroups.iter().map(|c| (c.id, c.path.clone())));
        self.finish(snap)
    }

    fn name(&self) -> &'static str {
        "bpf"
    }
}

impl BpfBackend {
    /// What every snapshot gets after its paths are known.
    fn finish(&mut self, snap: &mut Snapshot) -> Result<()> {
        if let (Some(f), Some(root)) = (&self.root_pressure, snap.cgroups.first_mut()) {
            use std::os::unix::fs::FileExt;
            if let Ok(n) = f.read_at(&mut self.buf, 0) {
                root.pressure = std::str::from_utf8(&self.buf[..n]).ok().and_then(|t| Pressure::parse(t).ok());
            }
        }
        Ok(())
    }
}

/// PSI averages are fixed point (FIXED_1 = 1 << 11); memory.pressure prints them as
/// `LOAD_INT.LOAD_FRAC` with two decimals, reproduced exactly here.
fn psi_avg(fixed: u64) -> f64 {
    const FSHIFT: u32 = 11;
    const FIXED_1: u64 = 1 << FSHIFT;
    let int = fixed >> FSHIFT;
    let frac = ((fixed & (FIXED_1 - 1)) * 100) >> FSHIFT;
    format!("{int}.{frac:02}").parse().unwrap_or(0.0)
}

fn find_memory_stat(root: &Path) -> Result<PathBuf> {
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        let f = dir.join("memory.stat");
        if f.exists() {
            return Ok(f);
        }
        if let Ok(rd) = std::fs::read_dir(&dir) {
            stack.extend(rd.flatten().filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false)).map(|e| e.path()));
        }
    }
    Err(Error::BpfUnavailable(format!("no memory.stat under {} (memory controller not enabled there)", root.display())))
}

/// Depth of a cgroup directory in its hierarchy (the mount point is 0).
fn cgroup_level(dir: &Path) -> u32 {
    let mut level = 0;
    let mut p = dir.to_owned();
    while let Some(parent) = p.parent() {
        if !parent.join("cgroup.controllers").exists() {
            break;
        }
        level += 1;
        p = parent.to_owned();
    }
    level
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease").map(|s| s.trim().to_owned()).unwrap_or_else(|_| "?".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use memqos_bpf::btf::builder::Builder;

    #[test]
    fn psi_fixed_point_matches_the_kernels_text() {
        assert_eq!(psi_avg(0), 0.0);
        assert_eq!(psi_avg(2048), 1.0);
        // 1.25 * 2048 = 2560
        assert_eq!(psi_avg(2560), 1.25);
        // LOAD_FRAC truncates: 0.999 -> 0.99
        assert_eq!(psi_avg(2046), 0.99);
    }

    /// Enum constants as a 7.x kernel might number them (values differ per config).
    fn fake_kernel() -> Btf {
        let mut b = Builder::new();
        b.enum32(
            "node_stat_item",
            false,
            &[
                ("NR_ANON_MAPPED", 3),
                ("NR_FILE_PAGES", 4),
                ("NR_SLAB_RECLAIMABLE_B", 7),
                ("NR_SLAB_UNRECLAIMABLE_B", 8),
                ("WORKINGSET_REFAULT_ANON", 9),
                ("NR_VMALLOC", 12),
            ],
        );
        b.enum32("memcg_stat_item", false, &[("MEMCG_SWAP", 50), ("MEMCG_KMEM", 52)]);
        b.enum32(
            "vm_event_item",
            false,
            &[("PGFAULT", 2), ("PGSCAN_KSWAPD", 20), ("PGSCAN_DIRECT", 21), ("PGSTEAL_KSWAPD", 30)],
        );
        Btf::parse(b.build(), "fake.btf").unwrap()
    }

    #[test]
    fn key_plan_resolves_by_section_and_sums() {
        let keys = [
            "anon",
            "file",
            "kernel",
            "vmalloc",
            "slab_reclaimable",
            "slab_unreclaimable",
            "slab",
            "workingset_refault_anon",
            "pgscan",
            "pgsteal",
            "pgscan_kswapd",
            "pgscan_direct",
            "pgsteal_kswapd",
            "pgfault",
        ];
        let plan = stat_key_plan(&keys, &fake_kernel());
        assert!(plan.unresolved.is_empty(), "{:?}", plan.unresolved);
        let fetched = |k: &str| match &plan.sources[keys.iter().position(|x| *x == k).unwrap()] {
            KeySource::Fetched(slot) => plan.fetches[*slot],
            other => panic!("{k}: {other:?}"),
        };
        assert_eq!(fetched("anon"), Fetch::PageState(3));
        assert_eq!(fetched("kernel"), Fetch::PageState(52));
        assert_eq!(fetched("vmalloc"), Fetch::PageState(12), "7.x moved vmalloc to node_stat_item");
        assert_eq!(fetched("workingset_refault_anon"), Fetch::PageState(9));
        assert_eq!(fetched("pgfault"), Fetch::VmEvent(2));
        assert_eq!(fetched("pgscan_direct"), Fetch::VmEvent(21));
        assert_eq!(plan.sources[6], KeySource::Sum(vec![4, 5]));
        assert_eq!(plan.sources[8], KeySource::Sum(vec![10, 11]));
        assert_eq!(plan.sources[9], KeySource::Sum(vec![12]));
    }

    #[test]
    fn unknown_keys_are_reported() {
        let plan =
            stat_key_plan(&["anon", "brand_new_counter", "pgscan", "pgsteal", "pgfault", "pgnew"], &fake_kernel());
        assert_eq!(plan.unresolved, ["brand_new_counter", "pgnew"]);
    }

    /// The kernel's memory.pressure text of one fixed-point average (`LOAD_INT.LOAD_FRAC`).
    fn psi_text(fixed: u64) -> String {
        format!("{}.{:02}", fixed >> 11, ((fixed & 2047) * 100) >> 11)
    }

    /// Keys with the shapes a plan has: fetched counters, `slab` as a sum of two, `pgscan`
    /// as a sum of its parts.
    const DIFF_KEYS: [&str; 8] =
        ["anon", "file", "slab_reclaimable", "slab_unreclaimable", "slab", "pgscan", "pgscan_kswapd", "pgscan_direct"];

    fn diff_sources() -> Vec<KeySource> {
        use KeySource::*;
        vec![Fetched(0), Fetched(1), Fetched(2), Fetched(3), Sum(vec![2, 3]), Sum(vec![6, 7]), Fetched(4), Fetched(5)]
    }

    proptest::proptest! {
        // Each differential case writes and reads a fake tree: few cases unless a long run
        // (scripts/fuzz-long.sh) asks for more with PROPTEST_CASES.
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: if std::env::var_os("PROPTEST_CASES").is_some() { proptest::prelude::ProptestConfig::default().cases } else { 48 },
            ..Default::default()
        })]

        /// Differential: a BPF record decodes to exactly what the text backend reads from the
        /// files a kernel with those counters prints (units, "max", PSI rounding, sums).
        #[test]
        fn proptest_bpf_decoder_agrees_with_the_text_backend(
            values in proptest::array::uniform6(proptest::prelude::any::<u64>()),
            events in proptest::array::uniform6(proptest::prelude::any::<u64>()),
            usage in proptest::prelude::any::<u64>(),
            // Pages up to PAGE_COUNTER_MAX for a 4 KiB page, and PAGE_COUNTER_MAX itself ("max").
            pages in proptest::array::uniform5(proptest::prop_oneof![0u64..1 << 20, 0..=(i64::MAX as u64) / 4096]),
            psi_avg in proptest::array::uniform6(0u64..(100 << 11) + 1),
            psi_total in proptest::array::uniform2(proptest::prelude::any::<u64>()),
            level in 1u32..8,
        ) {
            let page_size = 4096;
            let counter_max = (i64::MAX as u64) / page_size;
            let mut keys = StatKeys::default();
            for k in DIFF_KEYS {
                keys.intern(k);
            }
            let decoder = Decoder { keys, sources: diff_sources(), page_size, counter_max, root_level: level - 1 };
            let mut rec = MemcgRecord { cgroup_id: 7, level, flags: REC_MEMCG | REC_PSI, usage_bytes: usage, ..Default::default() };
            rec.values[..6].copy_from_slice(&values);
            rec.events = events;
            [rec.watermark, rec.max, rec.high, rec.low, rec.min] = pages;
            rec.psi_total_ns = psi_total;
            rec.psi_avg = [[psi_avg[0], psi_avg[1], psi_avg[2]], [psi_avg[3], psi_avg[4], psi_avg[5]]];
            let mut from_bpf = CgroupStats::default();
            decoder.fill(&rec, &mut from_bpf);

            // The same cgroup as cgroupfs files.
            let dir = std::env::temp_dir().join(format!("memqos-stats-diff-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(dir.join("a")).unwrap();
            let a = dir.join("a");
            let v = |k: &str| values[[0, 1, 2, 3, usize::MAX, usize::MAX, 4, 5][DIFF_KEYS.iter().position(|x| *x == k).unwrap()]];
            let stat = format!(
                "anon {}\nfile {}\nslab_reclaimable {}\nslab_unreclaimable {}\nslab {}\npgscan {}\npgscan_kswapd {}\npgscan_direct {}\n",
                v("anon"), v("file"), v("slab_reclaimable"), v("slab_unreclaimable"),
                v("slab_reclaimable").wrapping_add(v("slab_unreclaimable")),
                v("pgscan_kswapd").wrapping_add(v("pgscan_direct")),
                v("pgscan_kswapd"), v("pgscan_direct"),
            );
            let limit = |p: u64| if p >= counter_max { "max".to_owned() } else { (p * page_size).to_string() };
            let psi = |name: &str, i: usize| format!(
                "{name} avg10={} avg60={} avg300={} total={}\n",
                psi_text(rec.psi_avg[i][0]), psi_text(rec.psi_avg[i][1]), psi_text(rec.psi_avg[i][2]), rec.psi_total_ns[i] / 1000
            );
            let files = [
                ("memory.stat", stat),
                ("memory.events", format!(
                    "low {}\nhigh {}\nmax {}\noom {}\noom_kill {}\noom_group_kill {}\n",
                    events[0], events[1], events[2], events[3], events[4], events[5]
                )),
                ("memory.current", format!("{usage}\n")),
                ("memory.peak", format!("{}\n", pages[0] * page_size)),
                ("memory.max", limit(pages[1]) + "\n"),
                ("memory.high", limit(pages[2]) + "\n"),
                ("memory.low", limit(pages[3]) + "\n"),
                ("memory.min", limit(pages[4]) + "\n"),
                ("memory.pressure", psi("some", 0) + &psi("full", 1)),
            ];
            for (f, text) in &files {
                std::fs::write(a.join(f), text).unwrap();
            }
            let snap = crate::TextBackend::open_unchecked(&dir).snapshot().unwrap();
            std::fs::remove_dir_all(&dir).unwrap();
            let from_text = snap.get("a").unwrap();
            for (i, k) in DIFF_KEYS.iter().enumerate() {
                proptest::prop_assert_eq!(from_bpf.stat[i], snap.stat(from_text, k), "key {}", k);
            }
            proptest::prop_assert_eq!(from_bpf.events, from_text.events);
            proptest::prop_assert_eq!(
                (from_bpf.current, from_bpf.peak, from_bpf.max, from_bpf.high, from_bpf.low, from_bpf.min),
                (from_text.current, from_text.peak, from_text.max, from_text.high, from_text.low, from_text.min)
            );
            proptest::prop_assert_eq!(from_bpf.pressure, from_text.pressure);
            proptest::prop_assert_eq!(from_bpf.depth, 1);
        }

        /// Any record, however corrupt (a kernel bug, a torn map read): decoding never panics
        /// and a limit is "max" exactly at or above PAGE_COUNTER_MAX.
        #[test]
        fn proptest_bpf_decoder_never_panics(
            words in proptest::collection::vec(proptest::prelude::any::<u64>(), 16),
            level in proptest::prelude::any::<u32>(),
            root_level in proptest::prelude::any::<u32>(),
            flags in proptest::prelude::any::<u32>(),
        ) {
            let mut keys = StatKeys::default();
            for k in DIFF_KEYS {
                keys.intern(k);
            }
            let counter_max = (i64::MAX as u64) / 4096;
            let decoder = Decoder { keys, sources: diff_sources(), page_size: 4096, counter_max, root_level };
            let mut rec = MemcgRecord { level, flags, usage_bytes: words[0], watermark: words[1], max: words[2], ..Default::default() };
            rec.values[..6].copy_from_slice(&words[3..9]);
            rec.psi_avg[0] = [words[9], words[10], words[11]];
            rec.psi_total_ns = [words[12], words[13]];
            let mut out = CgroupStats::default();
            decoder.fill(&rec, &mut out);
            proptest::prop_assert_eq!(out.depth, level.saturating_sub(root_level));
            if let Some(max) = out.max {
                proptest::prop_assert_eq!(max == Limit::Max, words[2] >= counter_max);
            }
        }
    }
}
