//! `memqos-lab bench stats`: the experiment of the memcg BPF kfuncs and memcg stat kfuncs threads
//! (docs/references.md) side by side in one run.
//!
//! - control: C, compiled here with `cc -O2`: open memory.stat once, then per iteration
//!   `fgets` + `sscanf("%s %llu")` every line into numbers and `fseek` back, as the seed did;
//! - text: memqos's text backend (fds kept open, one pread per file, no scanf), reading
//!   memory.stat only (the control's work) and all nine memory files (a full cgroup);
//! - bpf: memqos's BPF backend (one cgroup-iterator run per snapshot, memcg kfuncs).
//!
//! Single cgroup: N iterations split into batches, backends interleaved batch by batch so
//! drift on a shared machine hits all of them alike; per-op median and spread over batches.
//! Trees of 1, 100 and 1000 cgroups: whole snapshots, same batching.
//!
//! Live mode (a cgroup v2 root with the memory controller, e.g. inside a guest) builds its
//! cgroups under ROOT/memqos-bench and removes them afterwards. Elsewhere (a host whose memory
//! controller is on cgroup v1) it measures control and text on --stat-file and, with
//! --fake-tree-template, on fake trees in /dev/shm whose files are copies of a live cgroup's.

use anyhow::{bail, Context, Result};
use clap::Args;
use memqos_stats::{CgroupStats, Snapshot, StatsSource, TextBackend, Walker};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

#[derive(Args, Debug)]
pub struct BenchStatsArgs {
    /// Single-cgroup iterations per backend (the seeds used 1,000,000).
    #[arg(long, default_value_t = 1_000_000)]
    iterations: u64,
    /// Batches the iterations are split into (medians and spread are over batches).
    #[arg(long, default_value_t = 10)]
    batches: u64,
    /// Whole-tree snapshot sizes (cgroups, including the tree's root).
    #[arg(long, value_delimiter = ',', default_value = "1,100,1000")]
    tree_sizes: Vec<usize>,
    /// Cgroup reads per tree size and backend (iterations = this / size, at least --batches).
    #[arg(long, default_value_t = 200_000)]
    tree_reads: u64,
    /// cgroup v2 root to build the benchmark cgroups under.
    #[arg(long, default_value = "/sys/fs/cgroup")]
    root: PathBuf,
    /// Without a cgroup v2 memory controller: the memory.stat file the single-cgroup
    /// control and text runs read (default: the cgroup v1 root's, if mounted).
    #[arg(long)]
    stat_file: Option<PathBuf>,
    /// Without a cgroup v2 memory controller: a directory holding one live cgroup's memory
    /// files (a live run writes one to OUT/template) to build fake trees from.
    #[arg(long)]
    fake_tree_template: Option<PathBuf>,
    /// Directory for stats-bench-<kernel>.json (and the template of a live run).
    #[arg(long, default_value = ".")]
    out: PathBuf,
}

/// The seed's control method, written fresh: stdio + scanf family, seek back each time.
const CONTROL_C: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <sys/resource.h>

/* control ITERATIONS FILE...: per iteration, read every FILE line by line with fgets,
 * convert "key value" with sscanf into numbers, then fseek back to the start. */
int main(int argc, char **argv)
{
	if (argc < 3) { fprintf(stderr, "usage: control ITERATIONS FILE...\n"); return 2; }
	long iters = atol(argv[1]);
	int n = argc - 2;
	FILE **f = calloc(n, sizeof(*f));
	for (int i = 0; i < n; i++) {
		f[i] = fopen(argv[2 + i], "r");
		if (!f[i]) { perror(argv[2 + i]); return 2; }
	}
	static unsigned long long vals[512];
	char line[512], key[256];
	unsigned long long checksum = 0, lines = 0;
	struct timespec t0, t1;
	struct rusage r0, r1;
	getrusage(RUSAGE_SELF, &r0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (long it = 0; it < iters; it++) {
		for (int i = 0; i < n; i++) {
			int k = 0;
			while (k < 512 && fgets(line, sizeof(line), f[i]))
				if (sscanf(line, "%255s %llu", key, &vals[k]) == 2)
					k++;
			checksum += vals[0];
			lines += k;
			if (fseek(f[i], 0, SEEK_SET)) { perror("fseek"); return 2; }
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	getrusage(RUSAGE_SELF, &r1);
#define TV(a, b) ((b.tv_sec - a.tv_sec) + (b.tv_usec - a.tv_usec) / 1e6)
	printf("{\"wall_s\":%.6f,\"user_s\":%.6f,\"sys_s\":%.6f,\"lines\":%llu,\"checksum\":%llu}\n",
	       (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9,
	       TV(r0.ru_utime, r1.ru_utime), TV(r0.ru_stime, r1.ru_stime), lines, checksum);
	return 0;
}
"#;

#[derive(Clone, Copy, Debug, Default, Serialize)]
struct Cost {
    wall_s: f64,
    user_s: f64,
    sys_s: f64,
}

impl std::ops::AddAssign for Cost {
    fn add_assign(&mut self, o: Cost) {
        self.wall_s += o.wall_s;
        self.user_s += o.user_s;
        self.sys_s += o.sys_s;
    }
}

/// One method measured in batches.
#[derive(Debug, Default, Serialize)]
struct Series {
    method: String,
    /// What one operation is.
    op: String,
    ops: u64,
    total: Cost,
    per_op_us_median: f64,
    per_op_us_min: f64,
    per_op_us_max: f64,
    /// control per-op median / this per-op median (>1: faster than the control).
    speedup_vs_control: Option<f64>,
    #[serde(skip)]
    batches: Vec<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    unavailable: Option<String>,
}

impl Series {
    fn new(method: &str, op: &str) -> Series {
        Series { method: method.into(), op: op.into(), ..Default::default() }
    }

    fn add(&mut self, ops: u64, c: Cost) {
        self.ops += ops;
        self.total += c;
        self.batches.push(c.wall_s / ops as f64 * 1e6);
    }

    fn finish(&mut self) {
        let mut b = self.batches.clone();
        b.sort_by(f64::total_cmp);
        if b.is_empty() {
            return;
        }
        self.per_op_us_median =
            if b.len() % 2 == 1 { b[b.len() / 2] } else { (b[b.len() / 2 - 1] + b[b.len() / 2]) / 2.0 };
        self.per_op_us_min = b[0];
        self.per_op_us_max = b[b.len() - 1];
    }
}

#[derive(Debug, Serialize)]
struct TreeResult {
    size: usize,
    iterations: u64,
    series: Vec<Series>,
}

#[derive(Debug, Serialize)]
struct Report {
    kernel: String,
    machine: String,
    cpus: usize,
    mode: String,
    /// What the single-cgroup runs read.
    single_target: String,
    iterations: u64,
    batches: u64,
    single: Vec<Series>,
    trees: Vec<TreeResult>,
    notes: Vec<String>,
}

fn thread_cpu() -> (f64, f64) {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct we pass.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (tv(ru.ru_utime), tv(ru.ru_stime))
}

fn measure(mut f: impl FnMut() -> Result<()>) -> Result<Cost> {
    let (u0, s0) = thread_cpu();
    let t0 = Instant::now();
    f()?;
    let wall_s = t0.elapsed().as_secs_f64();
    let (u1, s1) = thread_cpu();
    Ok(Cost { wall_s, user_s: u1 - u0, sys_s: s1 - s0 })
}

struct Control {
    exe: PathBuf,
    _dir: TempDir,
}

impl Control {
    fn build() -> Result<Control> {
        let dir = TempDir::new("memqos-bench-control")?;
        let src = dir.0.join("control.c");
        std::fs::write(&src, CONTROL_C)?;
        let exe = dir.0.join("control");
        let out = Command::new("cc")
            .args(["-O2", "-o"])
            .arg(&exe)
            .arg(&src)
            .output()
            .context("running cc to build the C control (install gcc)")?;
        if !out.status.success() {
            bail!("cc failed building the C control:\n{}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(Control { exe, _dir: dir })
    }

    fn run(&self, iterations: u64, files: &[PathBuf]) -> Result<Cost> {
        let out = Command::new(&self.exe)
            .arg(iterations.to_string())
            .args(files)
            .output()
            .context("running the C control")?;
        if !out.status.success() {
            bail!("C control failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).context("C control output")?;
        let f = |k: &str| v[k].as_f64().unwrap_or(0.0);
        if v["lines"].as_u64().unwrap_or(0) == 0 {
            bail!("C control parsed no lines from {files:?}");
        }
        Ok(Cost { wall_s: f("wall_s"), user_s: f("user_s"), sys_s: f("sys_s") })
    }
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Result<TempDir> {
        let base = if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
        let dir = base.join(format!("{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(TempDir(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The benchmark's cgroups in live mode; removed on drop (the process moved back first).
struct LiveTree {
    base: PathBuf,
    original_cgroup: PathBuf,
    /// Touched memory charged to memqos-bench/one for the benchmark's duration.
    #[allow(dead_code)]
    ballast: Vec<u8>,
}

impl LiveTree {
    fn create(root: &Path, sizes: &[usize]) -> Result<LiveTree> {
        let base = root.join("memqos-bench");
        let cg = |p: &Path| -> Result<()> {
            match std::fs::create_dir(p) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
                Err(e) => Err(e).with_context(|| format!("creating cgroup {}", p.display())),
            }
        };
        let enable = |p: &Path| {
            std::fs::write(p.join("cgroup.subtree_control"), "+memory")
                .with_context(|| format!("enabling memory in {}", p.display()))
        };
        let own = std::fs::read_to_string("/proc/self/cgroup")?;
        let rel = own.lines().find_map(|l| l.strip_prefix("0::")).unwrap_or("/").trim_start_matches('/').to_owned();
        let mut tree = LiveTree { base: base.clone(), original_cgroup: root.join(rel), ballast: Vec::new() };
        cg(&base)?;
        enable(&base)?;
        cg(&base.join("one"))?;
        for &n in sizes {
            let t = base.join(format!("t{n}"));
            cg(&t)?;
            if n > 1 {
                enable(&t)?;
                for i in 1..n {
                    cg(&t.join(format!("c{i:04}")))?;
                }
            }
        }
        // The process itself in "one", so its counters are a real process's, not zeros:
        // charges do not move with a process, so allocate and touch memory after joining.
        std::fs::write(base.join("one/cgroup.procs"), std::process::id().to_string())
            .context("joining memqos-bench/one")?;
        let mut ballast = vec![0u8; 16 << 20];
        for (i, b) in ballast.iter_mut().enumerate().step_by(4096) {
            *b = i as u8 | 1;
        }
        let cache = std::env::temp_dir().join(format!("memqos-bench-cache-{}", std::process::id()));
        std::fs::write(&cache, &ballast[..4 << 20])?;
        let _ = std::fs::remove_file(&cache);
        tree.ballast = ballast;
        Ok(tree)
    }
}

impl Drop for LiveTree {
    fn drop(&mut self) {
        let _ = std::fs::write(self.original_cgroup.join("cgroup.procs"), std::process::id().to_string());
        let mut dirs = Vec::new();
        let mut stack = vec![self.base.clone()];
        while let Some(d) = stack.pop() {
            if let Ok(rd) = std::fs::read_dir(&d) {
                stack.extend(
                    rd.flatten().filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false)).map(|e| e.path()),
                );
            }
            dirs.push(d);
        }
        for d in dirs.iter().rev() {
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// The files a template cgroup of the fake trees holds: the ones the text backend reads.
const TEMPLATE_FILES: [&str; 9] = memqos_stats::FILES;

/// A fake tree of `n` cgroups (root + n-1 children) whose files are copies of `template`.
fn fake_tree(dir: &Path, template: &Path, n: usize) -> Result<()> {
    let fill = |d: &Path| -> Result<()> {
        std::fs::create_dir_all(d)?;
        for f in TEMPLATE_FILES {
            let src = template.join(f);
            std::fs::copy(&src, d.join(f)).with_context(|| format!("copying {}", src.display()))?;
        }
        Ok(())
    };
    fill(dir)?;
    for i in 1..n {
        fill(&dir.join(format!("c{i:04}")))?;
    }
    // What a kernel's cgroup.stat says, so the text backend skips the directory walk as it
    // does on a live tree whose shape has not changed.
    std::fs::write(dir.join("cgroup.stat"), format!("nr_descendants {}\nnr_dying_descendants 0\n", n - 1))?;
    Ok(())
}

fn progress(msg: &str) {
    eprintln!("[bench stats] {msg}");
}

pub fn run(a: BenchStatsArgs) -> Result<u8> {
    if a.iterations == 0 || a.batches == 0 || a.iterations < a.batches {
        bail!("--iterations ({}) must be at least --batches ({}), both positive", a.iterations, a.batches);
    }
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_owned();
    let machine = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("model name").map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned()))
        })
        .unwrap_or_default();
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let live = std::fs::read_to_string(a.root.join("cgroup.controllers"))
        .map(|c| c.split_whitespace().any(|x| x == "memory"))
        .unwrap_or(false);
    let control = Control::build()?;
    let mut notes = vec![format!(
        "{} CPUs shared with other work: figures are from a noisy machine; batches interleave backends so drift hits all alike",
        cpus
    )];
    let mut report = Report {
        kernel: kernel.clone(),
        machine,
        cpus,
        mode: if live { "live cgroup v2".into() } else { "host without a cgroup v2 memory controller".into() },
        single_target: String::new(),
        iterations: a.iterations,
        batches: a.batches,
        single: Vec::new(),
        trees: Vec::new(),
        notes: Vec::new(),
    };
    let per_batch = a.iterations / a.batches;

    let _live_tree;
    let mut fake_dirs = Vec::new();
    let mut bpf_iter: std::result::Result<memqos_stats::BpfBackend, String>;
    // (memory.stat for the control, text backend, node index, BPF backend or why not)
    let (stat_file, mut text, bpf): (PathBuf, TextBackend, std::result::Result<memqos_stats::BpfBackend, String>) =
        if live {
            _live_tree = LiveTree::create(&a.root, &a.tree_sizes)?;
            let one = a.root.join("memqos-bench/one");
            let template = a.out.join("template");
            std::fs::create_dir_all(&template)?;
            for f in TEMPLATE_FILES {
                std::fs::copy(one.join(f), template.join(f))
                    .with_context(|| format!("copying {f} of {}", one.display()))?;
            }
            let bpf = memqos_stats::BpfBackend::open_with(&one, Some(Walker::Syscall)).map_err(|e| e.to_string());
            bpf_iter = memqos_stats::BpfBackend::open_with(&one, Some(Walker::Iterator)).map_err(|e| e.to_string());
            (one.join("memory.stat"), TextBackend::open(&one)?, bpf)
        } else {
            let file = match &a.stat_file {
                Some(f) => f.clone(),
                None => PathBuf::from("/sys/fs/cgroup/memory/memory.stat"),
            };
            if !file.exists() {
                bail!(
                    "{} has no cgroup v2 memory controller and {} does not exist: pass --stat-file",
                    a.root.display(),
                    file.display()
                );
            }
            let dir = file.parent().unwrap().to_owned();
            notes.push(format!(
            "single cgroup: {} ({}), read by the control and by the text backend's memory.stat path; the full-cgroup text and BPF runs need cgroup v2 memory",
            file.display(),
            if dir.join("cgroup.controllers").exists() { "cgroup v2" } else { "cgroup v1 format" }
        ));
            let mut t = TextBackend::open_unchecked(&dir);
            // Only node 0 (the directory itself) is read; the walk must not descend a v1 tree.
            t.sync_tree_shallow();
            let why = format!("no cgroup v2 memory controller under {}", a.root.display());
            bpf_iter = Err(why.clone());
            (file, t, Err(why))
        };
    report.single_target = stat_file.display().to_string();
    if !live {
        text.sync_tree_shallow();
    } else {
        text.sync_tree()?;
    }

    // --- single cgroup ---
    progress(&format!(
        "single cgroup: {} iterations in {} batches per method ({})",
        a.iterations,
        a.batches,
        stat_file.display()
    ));
    let mut s_control = Series::new("control (C: fgets+sscanf, fseek)", "memory.stat read+parse");
    let mut s_text_stat = Series::new("text backend, memory.stat only", "memory.stat read+parse");
    let mut s_text_full = Series::new("text backend, full cgroup (9 files)", "cgroup's full stats");
    let mut s_bpf = Series::new("BPF backend (syscall prog), full cgroup", "cgroup's full stats");
    let mut s_bpf_iter = Series::new("BPF backend (cgroup iter), full cgroup", "cgroup's full stats");
    let mut out = CgroupStats::default();
    let mut snap = Snapshot::default();
    let mut bpf = bpf;
    let started = Instant::now();
    for b in 0..a.batches {
        s_control.add(per_batch, control.run(per_batch, std::slice::from_ref(&stat_file))?);
        s_text_stat.add(
            per_batch,
            measure(|| {
                for _ in 0..per_batch {
                    text.read_stat_only(0, &mut out)?;
                }
                Ok(())
            })?,
        );
        if live {
            s_text_full.add(
                per_batch,
                measure(|| {
                    for _ in 0..per_batch {
                        text.read_one(0, &mut out)?;
                    }
                    Ok(())
                })?,
            );
        }
        if let Ok(bpf) = &mut bpf {
            s_bpf.add(
                per_batch,
                measure(|| {
                    for _ in 0..per_batch {
                        bpf.refresh(&mut snap)?;
                    }
                    Ok(())
                })?,
            );
        }
        if let Ok(bpf) = &mut bpf_iter {
            s_bpf_iter.add(
                per_batch,
                measure(|| {
                    for _ in 0..per_batch {
                        bpf.refresh(&mut snap)?;
                    }
                    Ok(())
                })?,
            );
        }
        progress(&format!("  batch {}/{} done, {:.0} s elapsed", b + 1, a.batches, started.elapsed().as_secs_f64()));
    }
    if !live {
        s_text_full.unavailable = Some("needs cgroup v2 memory files".into());
    }
    if let Err(why) = &bpf {
        s_bpf.unavailable = Some(why.clone());
    }
    if let Err(why) = &bpf_iter {
        s_bpf_iter.unavailable = Some(why.clone());
    }
    let mut single = vec![s_control, s_text_stat, s_text_full, s_bpf, s_bpf_iter];
    finish(&mut single);
    report.single = single;

    // --- whole trees ---
    for &size in &a.tree_sizes {
        let iterations = (a.tree_reads / size as u64).max(a.batches);
        let per = (iterations / a.batches).max(1);
        let dir = if live {
            a.root.join(format!("memqos-bench/t{size}"))
        } else if let Some(t) = &a.fake_tree_template {
            let d = TempDir::new(&format!("memqos-bench-fake-t{size}"))?;
            fake_tree(&d.0, t, size)?;
            let p = d.0.clone();
            fake_dirs.push(d);
            p
        } else {
            notes.push(format!("tree of {size}: skipped (no cgroup v2 memory controller and no --fake-tree-template)"));
            continue;
        };
        progress(&format!("tree of {size} cgroups: {} snapshots per method", per * a.batches));
        let mut files = Vec::new();
        let mut stack = vec![dir.clone()];
        while let Some(d) = stack.pop() {
            files.push(d.join("memory.stat"));
            if let Ok(rd) = std::fs::read_dir(&d) {
                stack.extend(
                    rd.flatten().filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false)).map(|e| e.path()),
                );
            }
        }
        let mut text = if live { TextBackend::open(&dir)? } else { TextBackend::open_unchecked(&dir) };
        let open_bpf = |w| {
            if live {
                memqos_stats::BpfBackend::open_with(&dir, Some(w)).map_err(|e| e.to_string())
            } else {
                Err("no cgroup v2 memory controller (fake tree)".to_string())
            }
        };
        let mut bpf = open_bpf(Walker::Syscall);
        let mut bpf_iter = open_bpf(Walker::Iterator);
        let mut text_stat = if live { TextBackend::open(&dir)? } else { TextBackend::open_unchecked(&dir) };
        text_stat.set_stat_only(true);
        let mut s_control = Series::new("control (C: fgets+sscanf, fseek)", "memory.stat of every cgroup");
        let mut s_text_stat = Series::new("text backend snapshot, memory.stat only", "memory.stat of every cgroup");
        let mut s_text = Series::new("text backend snapshot", "full stats of every cgroup");
        let mut s_bpf = Series::new("BPF backend snapshot (syscall prog)", "full stats of every cgroup");
        let mut s_bpf_iter = Series::new("BPF backend snapshot (cgroup iter)", "full stats of every cgroup");
        let mut snap = Snapshot::default();
        // Warm-up: the first snapshot opens the files (and maps ids to paths); not timed.
        text_stat.refresh(&mut snap)?;
        for b in [&mut bpf, &mut bpf_iter].into_iter().flatten() {
            b.refresh(&mut snap)?;
        }
        text.refresh(&mut snap)?;
        if snap.cgroups.len() != size {
            bail!("tree {} has {} cgroups, expected {size}", dir.display(), snap.cgroups.len());
        }
        for _ in 0..a.batches {
            s_control.add(per, control.run(per, &files)?);
            s_text_stat.add(
                per,
                measure(|| {
                    for _ in 0..per {
                        text_stat.refresh(&mut snap)?;
                    }
                    Ok(())
                })?,
            );
            s_text.add(
                per,
                measure(|| {
                    for _ in 0..per {
                        text.refresh(&mut snap)?;
                    }
                    Ok(())
                })?,
            );
            for (b, series) in [(&mut bpf, &mut s_bpf), (&mut bpf_iter, &mut s_bpf_iter)] {
                let Ok(b) = b else { continue };
                series.add(
                    per,
                    measure(|| {
                        for _ in 0..per {
                            b.refresh(&mut snap)?;
                        }
                        Ok(())
                    })?,
                );
                if snap.cgroups.len() != size {
                    bail!("BPF snapshot of {} has {} cgroups, expected {size}", dir.display(), snap.cgroups.len());
                }
            }
        }
        for (b, series) in [(&bpf, &mut s_bpf), (&bpf_iter, &mut s_bpf_iter)] {
            if let Err(why) = b {
                series.unavailable = Some(why.clone());
            }
        }
        let mut series = vec![s_control, s_text_stat, s_text, s_bpf, s_bpf_iter];
        finish(&mut series);
        report.trees.push(TreeResult { size, iterations: per * a.batches, series });
    }
    if !live && a.fake_tree_template.is_some() {
        notes.push("trees: fake trees in /dev/shm (tmpfs) holding copies of a live 7.x cgroup's files: this measures memqos's syscalls and parsing, not the kernel formatting memory.stat".into());
    }
    report.notes = notes;

    let path = a.out.join(format!("stats-bench-{kernel}.json"));
    let mut doc = serde_json::to_value(&report)?;
    doc["provenance"] = serde_json::to_value(crate::provenance::Provenance::collect(Path::new("."), &kernel))?;
    std::fs::write(&path, serde_json::to_string_pretty(&doc)?)
        .with_context(|| format!("writing {}", path.display()))?;
    print!("{}", render(&report));
    println!("wrote {}", path.display());
    Ok(0)
}

fn finish(series: &mut [Series]) {
    for s in series.iter_mut() {
        s.finish();
    }
    let control = series[0].per_op_us_median;
    for s in series.iter_mut() {
        if s.ops > 0 && s.per_op_us_median > 0.0 {
            s.speedup_vs_control = Some(control / s.per_op_us_median);
        }
    }
}

fn render(r: &Report) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    let _ = writeln!(o, "kernel {} on {} ({} CPUs), {}", r.kernel, r.machine, r.cpus, r.mode);
    let row = |o: &mut String, s: &Series| {
        if let Some(why) = &s.unavailable {
            let _ = writeln!(o, "  {:<40} unavailable: {why}", s.method);
            return;
        }
        let _ = writeln!(
            o,
            "  {:<40} n={:<8} {:>9.2} us/op (min {:.2}, max {:.2})  wall {:.2} s user {:.2} s sys {:.2} s  x{:.1} vs control",
            s.method,
            s.ops,
            s.per_op_us_median,
            s.per_op_us_min,
            s.per_op_us_max,
            s.total.wall_s,
            s.total.user_s,
            s.total.sys_s,
            s.speedup_vs_control.unwrap_or(0.0)
        );
    };
    let _ = writeln!(
        o,
        "single cgroup ({}), {} iterations in {} batches, median per op over batches:",
        r.single_target, r.iterations, r.batches
    );
    for s in &r.single {
        row(&mut o, s);
    }
    for t in &r.trees {
        let _ =
            writeln!(o, "tree of {} cgroups, {} snapshots (per op = one whole-tree snapshot):", t.size, t.iterations);
        for s in &t.series {
            row(&mut o, s);
        }
    }
    for n in &r.notes {
        let _ = writeln!(o, "note: {n}");
    }
    o
}
