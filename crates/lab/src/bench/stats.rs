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

mod control;
mod report;
mod trees;

use anyhow::{bail, Context, Result};
use clap::Args;
use control::Control;
use memqos_stats::{CgroupStats, Snapshot, StatsSource, TextBackend, Walker};
use report::{finish, render, Cost, Report, Series, TreeResult};
use std::path::{Path, PathBuf};
use std::time::Instant;
use trees::{dirs_below, fake_tree, LiveTree, TempDir, TEMPLATE_FILES};

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

fn thread_cpu() -> (f64, f64) {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct we pass.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (tv(ru.ru_utime), tv(ru.ru_stime))
}

/// `measure` of `n` calls of `op` in a row.
fn measure_n<T, E>(n: u64, mut op: impl FnMut() -> std::result::Result<T, E>) -> Result<Cost>
where
    anyhow::Error: From<E>,
{
    measure(|| {
        for _ in 0..n {
            op()?;
        }
        Ok(())
    })
}

fn measure(mut f: impl FnMut() -> Result<()>) -> Result<Cost> {
    let (u0, s0) = thread_cpu();
    let t0 = Instant::now();
    f()?;
    let wall_s = t0.elapsed().as_secs_f64();
    let (u1, s1) = thread_cpu();
    Ok(Cost { wall_s, user_s: u1 - u0, sys_s: s1 - s0 })
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
        s_text_stat.add(per_batch, measure_n(per_batch, || text.read_stat_only(0, &mut out))?);
        if live {
            s_text_full.add(per_batch, measure_n(per_batch, || text.read_one(0, &mut out))?);
        }
        if let Ok(bpf) = &mut bpf {
            s_bpf.add(per_batch, measure_n(per_batch, || bpf.refresh(&mut snap))?);
        }
        if let Ok(bpf) = &mut bpf_iter {
            s_bpf_iter.add(per_batch, measure_n(per_batch, || bpf.refresh(&mut snap))?);
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
        let files: Vec<PathBuf> = dirs_below(&dir).into_iter().map(|d| d.join("memory.stat")).collect();
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
            s_text_stat.add(per, measure_n(per, || text_stat.refresh(&mut snap))?);
            s_text.add(per, measure_n(per, || text.refresh(&mut snap))?);
            for (b, series) in [(&mut bpf, &mut s_bpf), (&mut bpf_iter, &mut s_bpf_iter)] {
                let Ok(b) = b else { continue };
                series.add(per, measure_n(per, || b.refresh(&mut snap))?);
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
