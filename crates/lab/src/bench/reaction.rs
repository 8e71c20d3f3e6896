//! `memqos-lab bench reaction`: how fast the daemon throttles a lower tier once a protected
//! cgroup starts reclaiming, for each signal source alone (BPF, PSI, memory.events).
//!
//! Scenario (inside a guest, no swap, a scratch ext4 disk): parent `bench` with
//! memory.max = 256 MiB; `low` (throttle tier) holds ~200 MiB of clean page cache (a file
//! on the scratch disk read from inside it); `prot` (protected tier) is empty. Per run: start
//! the daemon with one source enabled, then a probe process in `prot` allocates anonymous
//! memory in 64 KiB chunks. The parent's limit is hit during one chunk; the kernel then
//! reclaims (low's page cache) in the probe's context.
//!
//! The instant: the probe reads the parent's memory.events `max` after every chunk; the first
//! chunk after which it increased contains the first charge that hit the limit (the kernel
//! counts MEMCG_MAX right before it starts reclaiming for that charge). The instant is the
//! CLOCK_MONOTONIC time taken just before that chunk, so the reported delay is an upper
//! bound: the true crossing is at most one chunk (16 page faults) later. The end: the
//! daemon's CLOCK_MONOTONIC just before its first write to `low/memory.high` (the `mono_ns`
//! of the write in its event log). Both clocks are the guest's CLOCK_MONOTONIC.
//!
//! Periodic sampling is set to 60 s and the headroom guard off, so a reaction can only come
//! from the source's wakeup (the daemon's fast path); the first periodic tick happens at
//! start, before the probe.
//!
//! Size axis (`--sizes`): that many idle managed cgroups (`m0`, `m1`, ..., throttle tier)
//! beside the pair, so the reaction's cost can be compared across tree sizes. Per run, the
//! daemon's read and write system calls (`syscr + syscw` of /proc/PID/io) from the probe's
//! start to the write are recorded: what one pressure event costs it.

use crate::configs::DaemonConfig;
use crate::daemon_process::DaemonProcess;
use anyhow::{bail, Context, Result};
use clap::Args;
use memqos_cgroupfs::Cgroup;
use memqos_daemon::events::{BpfHooks, Event, LogLine, WriteEvent};
use memqos_policy::size::MIB;
use memqos_replay::memory::map_anonymous;
use memqos_replay::report::percentile;
use memqos_vmtest::self_run;
use serde::Serialize;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const PARENT_MAX: u64 = 256 * MIB;
const CACHE_MB: u64 = 200;
/// Anonymous memory the probe allocates in total (crosses the limit after ~56 MiB).
const PROBE_MB: u64 = 120;
const CHUNK: usize = 64 * 1024;
const STATE: &str = "/run/memqos-bench";
/// A run without a write within this long counts as a miss.
const RUN_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Args)]
pub struct ReactionArgs {
    /// Kernel series to boot: "6.12", "7", "6.12,7" or "all".
    #[arg(long, default_value = "all")]
    kernel: String,
    /// Runs per source (N).
    #[arg(long, default_value_t = 20)]
    runs: usize,
    /// Sources to measure, comma-separated: bpf, psi, events.
    #[arg(long, default_value = "bpf,psi,events")]
    sources: String,
    /// Idle managed cgroups beside the protected/low pair, one series per size.
    #[arg(long, default_value = "0,10,100,1000", value_delimiter = ',')]
    sizes: Vec<usize>,
    /// Managed cgroups (10% protected) for the CPU-cost windows, one series per size.
    #[arg(long, default_value = "100,1000,10000", value_delimiter = ',')]
    cpu_sizes: Vec<usize>,
    /// Where to write reaction.json (created if missing).
    #[arg(long, default_value = "docs/bpf")]
    out: PathBuf,
    /// Print the merged result as JSON on stdout.
    #[arg(long)]
    json: bool,
    #[arg(long, hide = true)]
    in_guest: bool,
    /// Seconds of each CPU-cost window (daemon with 100 cgroups, idle and under fault
    /// load, BPF source on and off); 0 skips the CPU-cost part.
    #[arg(long, default_value_t = 15)]
    cpu_window: u64,
    /// Internal: the allocating probe (run inside `prot`).
    #[arg(long, hide = true)]
    probe: bool,
    /// Internal: the steady fault load (run inside a protected cgroup).
    #[arg(long, hide = true)]
    fault_load: bool,
}

/// One source on one kernel.
#[derive(Debug, Serialize, serde::Deserialize, Clone)]
pub struct SourceResult {
    pub source: String,
    /// Idle managed cgroups beside the pair.
    #[serde(default)]
    pub cgroups: usize,
    /// Median read + write system calls of the daemon from the probe's start to its write.
    #[serde(default)]
    pub syscalls_p50: Option<f64>,
    /// Same, per reacting run.
    #[serde(default)]
    pub syscalls: Vec<u64>,
    pub runs: usize,
    /// Delays (ms) of the runs that reacted, in run order.
    pub delays_ms: Vec<f64>,
    /// Runs with no write within the timeout.
    pub misses: usize,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub max_ms: Option<f64>,
    pub min_ms: Option<f64>,
    /// Median duration of the chunk that crossed (the instant's uncertainty), ms.
    pub chunk_p50_ms: Option<f64>,
    /// Median time the write syscall took (memory.high write reclaims synchronously), ms.
    pub write_p50_ms: Option<f64>,
    /// The engine's reason for the first write, per reacting run (deduplicated).
    pub reasons: Vec<String>,
    /// BPF source only, medians (ms): instant -> the kernel's threshold crossing (bpf
    /// ktime), crossing -> the daemon drained it from the ring, drained -> write started
    /// (sample the tree, tick the engine, journal).
    pub bpf_split_p50_ms: Option<[f64; 3]>,
    /// Same, per run.
    #[serde(default)]
    pub bpf_split_ms: Vec<[f64; 3]>,
    /// The daemon's own account of its reaction (its `reaction` event), medians in µs:
    /// reading the parent, the signalled cgroup and the candidates; deciding.
    #[serde(default)]
    pub fast_read_p50_us: Option<f64>,
    #[serde(default)]
    pub fast_decide_p50_us: Option<f64>,
    /// Cgroups the fast path read (parent included), median.
    #[serde(default)]
    pub fast_read_cgroups_p50: Option<f64>,
}

#[derive(Debug, Serialize, serde::Deserialize, Clone)]
pub struct KernelResult {
    pub kernel: String,
    pub sources: Vec<SourceResult>,
    /// BPF hooks the daemon attached (from its log).
    pub bpf_hooks: Option<BpfHooks>,
    /// Daemon CPU cost with 100 managed cgroups.
    #[serde(default)]
    pub cpu_cost: Vec<CpuCost>,
    /// Sizes whose CPU-cost windows failed, with the error.
    #[serde(default)]
    pub cpu_cost_errors: Vec<String>,
}

/// The daemon's CPU use over one window.
#[derive(Debug, Serialize, serde::Deserialize, Clone)]
pub struct CpuCost {
    pub bpf: bool,
    /// The daemon's periodic sampling interval (every tick reads ~8 files per cgroup).
    #[serde(default)]
    pub sampling_interval_ms: u64,
    pub load: String,
    pub cgroups: usize,
    pub window_s: f64,
    /// utime + stime of the daemon over the window, in percent of one core.
    pub cpu_pct: f64,
    /// Page faults per second in the whole guest over the window (/proc/vmstat pgfault).
    pub faults_per_s: f64,
    /// Daemon wakeups: events it logged over the window (writes, BPF crossings).
    pub logged_events: usize,
    /// From launch to the daemon's first status.json (its first full sample), seconds.
    #[serde(default)]
    pub startup_s: f64,
}

pub fn run(a: ReactionArgs) -> Result<u8> {
    if a.probe {
        return probe();
    }
    if a.fault_load {
        return fault_load();
    }
    let sources: Vec<String> = a.sources.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
    for s in &sources {
        if !["bpf", "psi", "events"].contains(&s.as_str()) {
            bail!("--sources: unknown source {s:?} (expected bpf, psi, events)");
        }
    }
    if a.runs == 0 {
        bail!("--runs must be at least 1");
    }
    if a.sizes.is_empty() || a.cpu_sizes.iter().any(|&n| n < 10) {
        bail!("--sizes needs at least one size; --cpu-sizes needs at least 10 cgroups each");
    }
    if a.in_guest {
        let mut r = in_guest(&sources, a.runs, &a.sizes)?;
        if a.cpu_window > 0 {
            r.cpu_cost = cpu_cost(Duration::from_secs(a.cpu_window), &a.cpu_sizes, &mut r.cpu_cost_errors)?;
        }
        let out = std::env::var_os("MEMQOS_RESULTS").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/tmp"));
        std::fs::write(out.join("reaction.json"), serde_json::to_string_pretty(&r)?)?;
        return Ok(0);
    }
    let mut all = Vec::new();
    for kernel in self_run::kernels(&a.kernel)? {
        eprintln!("bench reaction: booting {} ({} runs x {} sources)", kernel.release(), a.runs, sources.len());
        let args = [
            "bench",
            "reaction",
            "--in-guest",
            "--runs",
            &a.runs.to_string(),
            "--sources",
            &sources.join(","),
            "--sizes",
            &join(&a.sizes),
            "--cpu-sizes",
            &join(&a.cpu_sizes),
            "--cpu-window",
            &a.cpu_window.to_string(),
        ]
        .map(String::from);
        // A guest big enough for 10,000 memcgs; an hour covers the default sizes under TCG.
        let run = self_run::run_self(&kernel, &args, |g| {
            g.scratch_mb(512, None).memory_mb(3072).timeout(Duration::from_secs(3600)).stream_console(!a.json)
        })?;
        let file = run.results_dir.join("reaction.json");
        let text = std::fs::read_to_string(&file).with_context(|| {
            format!(
                "guest on {} wrote no {} (exit {}); console:\n{}",
                kernel.release(),
                file.display(),
                run.exit_code,
                tail(&run.console, 40)
            )
        })?;
        let r: KernelResult = serde_json::from_str(&text)?;
        print_table(&r);
        for c in &r.cpu_cost {
            println!(
                "  daemon CPU, {} cgroups, bpf {}, sampling {} ms, {}: {:.3} % of one core ({:.0} faults/s, {:.1} s)",
                c.cgroups,
                if c.bpf { "on" } else { "off" },
                c.sampling_interval_ms,
                c.load,
                c.cpu_pct,
                c.faults_per_s,
                c.window_s
            );
        }
        all.push(r);
    }
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let path = a.out.join("reaction.json");
    let all = super::keep_earlier_kernels(&path, all);
    let doc = serde_json::json!({
        "benchmark": "memqos bench reaction",
        "scenario": format!("parent memory.max {} MiB, low holds {} MiB page cache, prot allocates {} MiB anon in {} KiB chunks; no swap; sampling 60 s (reactions come from the fast path); headroom guard off; idle managed cgroups beside the pair per size", PARENT_MAX / MIB, CACHE_MB, PROBE_MB, CHUNK / 1024),
        "delay": "CLOCK_MONOTONIC from just before the chunk whose charge first hit the parent's memory.max to just before the daemon's first write of low/memory.high",
        "host_note": "TCG guests (no KVM) on a shared 2-core host: absolute times include emulation overhead and host noise",
        "kernels": all,
        // This invocation's (kernels kept from an earlier file keep no provenance of theirs).
        "provenance": crate::provenance::Provenance::collect(std::path::Path::new("."), &a.kernel),
    });
    std::fs::write(&path, serde_json::to_string_pretty(&doc)? + "\n")?;
    eprintln!("wrote {}", path.display());
    if a.json {
        println!("{}", serde_json::to_string_pretty(&doc)?);
    }
    Ok(0)
}

fn join(v: &[usize]) -> String {
    v.iter().map(usize::to_string).collect::<Vec<_>>().join(",")
}

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn print_table(r: &KernelResult) {
    println!("kernel {}", r.kernel);
    println!(
        "  {:<8} {:>7} {:>4} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "source", "cgroups", "N", "misses", "p50 ms", "p99 ms", "max ms", "min ms", "syscalls"
    );
    let f = |v: Option<f64>| v.map(|x| format!("{x:.2}")).unwrap_or_else(|| "-".into());
    for s in &r.sources {
        println!(
            "  {:<8} {:>7} {:>4} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9}",
            s.source,
            s.cgroups + 2,
            s.runs,
            s.misses,
            f(s.p50_ms),
            f(s.p99_ms),
            f(s.max_ms),
            f(s.min_ms),
            s.syscalls_p50.map(|v| format!("{v:.0}")).unwrap_or_else(|| "-".into())
        );
    }
}

/// The reaction config with exactly `source` (bpf, psi or events) on.
fn config(source: &str) -> DaemonConfig {
    DaemonConfig::named("reaction.toml")
        .set("signals.psi", source == "psi")
        .set("signals.events", source == "events")
        .set("signals.bpf", source == "bpf")
}

fn set(cg: &Cgroup, file: &'static str, v: u64) -> Result<()> {
    cg.write_string(file, &v.to_string()).with_context(|| format!("{}/{file}", cg.path().display()))
}

fn in_guest(sources: &[String], runs: usize, sizes: &[usize]) -> Result<KernelResult> {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")?.trim().to_string();
    let root = Cgroup::new("/sys/fs/cgroup");
    let parent = root.child("bench");
    parent.create()?;
    root.child("bench").write_string("cgroup.subtree_control", "+memory")?;
    let (prot, low) = (parent.child("prot"), parent.child("low"));
    prot.create()?;
    low.create()?;
    set(&parent, "memory.max", PARENT_MAX)?;
    let file = Path::new("/run/scratch/cache");
    write_file(file, CACHE_MB)?;
    let exe = std::env::current_exe()?;

    let mut out = Vec::new();
    let mut bpf_hooks = None;
    let mut extra: Vec<Cgroup> = Vec::new();
    for &size in sizes {
        while extra.len() < size {
            let cg = parent.child(&format!("m{}", extra.len()));
            cg.create()?;
            extra.push(cg);
        }
        while extra.len() > size {
            let _ = extra.pop().map(|cg| cg.remove());
        }
        for source in sources {
            out.push(one_series(&kernel, source, runs, size, &exe, &prot, &low, file, &mut bpf_hooks)?);
        }
    }
    for cg in extra {
        let _ = cg.remove();
    }
    let _ = prot.remove();
    let _ = low.remove();
    let _ = parent.remove();
    Ok(KernelResult { kernel, sources: out, bpf_hooks, cpu_cost: Vec::new(), cpu_cost_errors: Vec::new() })
}

/// `runs` reactions with one source and `size` idle managed cgroups beside the pair.
#[allow(clippy::too_many_arguments)]
fn one_series(
    kernel: &str,
    source: &str,
    runs: usize,
    size: usize,
    exe: &Path,
    prot: &Cgroup,
    low: &Cgroup,
    file: &Path,
    bpf_hooks: &mut Option<BpfHooks>,
) -> Result<SourceResult> {
    {
        config(source).write(Path::new("/run/memqos-bench.toml"))?;
        let mut delays = Vec::new();
        let mut chunks = Vec::new();
        let mut writes = Vec::new();
        let mut reasons: Vec<String> = Vec::new();
        let mut splits: Vec<[f64; 3]> = Vec::new();
        let mut syscalls: Vec<u64> = Vec::new();
        let mut fast: Vec<(u64, u64, usize)> = Vec::new();
        let mut misses = 0;
        for i in 0..runs {
            fill_cache(low, file)?;
            let (r, hooks) = one_run(exe, prot, low)?;
            if hooks.is_some() {
                *bpf_hooks = hooks;
            }
            match r {
                Some(m) => {
                    eprintln!(
                        "[{kernel}] {source} +{size} cgroups run {}/{runs}: {:.2} ms, {} syscalls ({})",
                        i + 1,
                        m.delay_ms,
                        m.syscalls,
                        m.reason
                    );
                    syscalls.push(m.syscalls);
                    fast.extend(m.fast);
                    delays.push(m.delay_ms);
                    chunks.push(m.chunk_ms);
                    writes.push(m.write_ms);
                    splits.extend(m.bpf_split);
                    if !reasons.contains(&m.reason) {
                        reasons.push(m.reason);
                    }
                }
                None => {
                    eprintln!(
                        "[{kernel}] {source} +{size} cgroups run {}/{runs}: no write within {:?}",
                        i + 1,
                        RUN_TIMEOUT
                    );
                    misses += 1;
                }
            }
        }
        let mut sorted = delays.clone();
        sorted.sort_by(f64::total_cmp);
        chunks.sort_by(f64::total_cmp);
        writes.sort_by(f64::total_cmp);
        let mut sorted_calls: Vec<f64> = syscalls.iter().map(|&n| n as f64).collect();
        sorted_calls.sort_by(f64::total_cmp);
        let median = |f: &dyn Fn(&(u64, u64, usize)) -> f64| {
            let mut v: Vec<f64> = fast.iter().map(f).collect();
            v.sort_by(f64::total_cmp);
            percentile(&v, 50.0)
        };
        Ok(SourceResult {
            fast_read_p50_us: median(&|f| f.0 as f64),
            fast_decide_p50_us: median(&|f| f.1 as f64),
            fast_read_cgroups_p50: median(&|f| f.2 as f64),
            source: source.to_owned(),
            cgroups: size,
            syscalls_p50: percentile(&sorted_calls, 50.0),
            syscalls,
            runs,
            misses,
            p50_ms: percentile(&sorted, 50.0),
            p99_ms: percentile(&sorted, 99.0),
            max_ms: sorted.last().copied(),
            min_ms: sorted.first().copied(),
            chunk_p50_ms: percentile(&chunks, 50.0),
            write_p50_ms: percentile(&writes, 50.0),
            delays_ms: delays,
            reasons,
            bpf_split_p50_ms: (!splits.is_empty()).then(|| {
                let col = |i: usize| {
                    let mut v: Vec<f64> = splits.iter().map(|s| s[i]).collect();
                    v.sort_by(f64::total_cmp);
                    percentile(&v, 50.0).unwrap()
                };
                [col(0), col(1), col(2)]
            }),
            bpf_split_ms: splits,
        })
    }
}

/// One managed cgroup in ten is protected in the CPU-cost trees.
const CPU_PROTECTED_EVERY: usize = 10;

fn cpu_config(bpf: bool, interval_ms: u64) -> DaemonConfig {
    DaemonConfig::named("cpu-cost.toml").set("signals.bpf", bpf).set("signals.sampling_interval_ms", interval_ms as i64)
}

/// The machine's page faults so far (`pgfault` of /proc/vmstat).
fn vm_pgfault() -> Result<u64> {
    let text = std::fs::read_to_string("/proc/vmstat")?;
    text.lines()
        .find_map(|l| l.strip_prefix("pgfault "))
        .context("no pgfault in /proc/vmstat")?
        .trim()
        .parse()
        .map_err(Into::into)
}

/// For each size, the daemon managing that many cgroups (one in ten protected, the rest
/// throttleable, all sources on), idle and with a steady fault load in a protected cgroup:
/// default sampling (500 ms) with the BPF source on, then 5 s sampling idle (what the idle
/// cost is made of); at the smallest size also with the BPF source off.
fn cpu_cost(window: Duration, sizes: &[usize], errors: &mut Vec<String>) -> Result<Vec<CpuCost>> {
    let mut out = Vec::new();
    for (i, &size) in sizes.iter().enumerate() {
        let mut arms = vec![(true, 500, &["idle", "faults"][..]), (true, 5000, &["idle"][..])];
        if i == 0 {
            arms.push((false, 500, &["idle", "faults"][..]));
        }
        // One size failing (the daemon refusing a tree that large, say) is reported and the
        // others are still measured: a 10,000-cgroup failure used to lose the whole run.
        match cpu_cost_at(window, size, &arms) {
            Ok(costs) => out.extend(costs),
            Err(e) => {
                eprintln!("cpu cost: {size} cgroups: FAILED: {e:#}");
                errors.push(format!("{size} cgroups: {e:#}"));
            }
        }
    }
    Ok(out)
}

fn cpu_cost_at(window: Duration, size: usize, arms: &[(bool, u64, &[&str])]) -> Result<Vec<CpuCost>> {
    let root = Cgroup::new("/sys/fs/cgroup");
    let parent = root.child("cpucost");
    parent.create()?;
    parent.write_string("cgroup.subtree_control", "+memory")?;
    let names: Vec<String> =
        (0..size).map(|i| if i % CPU_PROTECTED_EVERY == 0 { format!("p{i}") } else { format!("b{i}") }).collect();
    let made = Instant::now();
    for n in &names {
        parent.child(n).create()?;
    }
    eprintln!("cpu cost: {size} cgroups created in {:.1} s", made.elapsed().as_secs_f64());
    let measured = cpu_cost_arms(window, size, arms, &parent);
    for n in &names {
        let _ = parent.child(n).remove();
    }
    let _ = parent.remove();
    measured
}

fn cpu_cost_arms(
    window: Duration,
    size: usize,
    arms: &[(bool, u64, &[&str])],
    parent: &Cgroup,
) -> Result<Vec<CpuCost>> {
    let exe = std::env::current_exe()?;
    let mut out = Vec::new();
    for &(bpf, interval_ms, loads) in arms {
        cpu_config(bpf, interval_ms).write(Path::new("/run/memqos-cpucost.toml"))?;
        let _ = std::fs::remove_dir_all(STATE);
        std::fs::create_dir_all(STATE)?;
        let launched = Instant::now();
        let daemon = DaemonProcess::start_within(
            &exe,
            Path::new("/run/memqos-cpucost.toml"),
            Path::new(STATE),
            &["--no-guardian"],
            Stdio::null(),
            Duration::from_secs(30 + size as u64 / 50),
        )
        .context("daemon for the CPU cost")?;
        let startup_s = launched.elapsed().as_secs_f64();
        eprintln!("cpu cost: {size} cgroups: daemon's first sample done {startup_s:.1} s after launch");
        // Start-up (BPF load, first ticks, fds opened for every cgroup) excluded.
        std::thread::sleep(Duration::from_secs(3 + (size / 1000) as u64 * 2));
        for &load in loads {
            let mut loader = (load == "faults")
                .then(|| {
                    Command::new(&exe)
                        .args(["bench", "reaction", "--fault-load"])
                        .env("MEMQOS_BENCH_CGROUP", parent.child("p0").path())
                        .spawn()
                })
                .transpose()?;
            if loader.is_some() {
                std::thread::sleep(Duration::from_secs(1));
            }
            let events_before = read_events(&Path::new(STATE).join(memqos_daemon::events::EVENTS_FILE)).len();
            let (c0, f0, w0) = (daemon.cpu_seconds().context("daemon CPU time")?, vm_pgfault()?, Instant::now());
            std::thread::sleep(window);
            let (c1, f1, secs) =
                (daemon.cpu_seconds().context("daemon CPU time")?, vm_pgfault()?, w0.elapsed().as_secs_f64());
            let logged = read_events(&Path::new(STATE).join(memqos_daemon::events::EVENTS_FILE)).len() - events_before;
            if let Some(l) = loader.as_mut() {
                let _ = l.kill();
                let _ = l.wait();
            }
            let c = CpuCost {
                bpf,
                sampling_interval_ms: interval_ms,
                load: load.into(),
                cgroups: size,
                window_s: secs,
                cpu_pct: (c1 - c0) / secs * 100.0,
                faults_per_s: (f1 - f0) as f64 / secs,
                logged_events: logged,
                startup_s,
            };
            eprintln!(
                "cpu cost: {size} cgroups, bpf {bpf} sampling {interval_ms} ms {load}: {:.3} % ({:.0} faults/s)",
                c.cpu_pct, c.faults_per_s
            );
            out.push(c);
        }
        daemon.stop()?;
    }
    Ok(out)
}

/// Steady minor-fault load: map 4 MiB, touch every page, unmap, sleep 10 ms, forever.
fn fault_load() -> Result<u8> {
    let cg = std::env::var("MEMQOS_BENCH_CGROUP").context("MEMQOS_BENCH_CGROUP unset")?;
    std::fs::write(Path::new(&cg).join("cgroup.procs"), std::process::id().to_string())?;
    let len = 4 << 20;
    loop {
        let p = map_anonymous(len).context("mmap")?.cast::<libc::c_void>();
        // SAFETY: advice on, touches inside and the unmap of our own fresh mapping.
        unsafe {
            libc::madvise(p, len, libc::MADV_NOHUGEPAGE); // one fault per page
            for off in (0..len).step_by(4096) {
                (p as *mut u8).add(off).write_volatile(1);
            }
            libc::munmap(p, len);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn write_file(path: &Path, mb: u64) -> Result<()> {
    let mut f = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let buf = vec![0x5au8; MIB as usize];
    for _ in 0..mb {
        f.write_all(&buf)?;
    }
    f.sync_all()?;
    drop(f);
    // The writer's cgroup owns the page cache it created; drop it so that the reads from
    // inside `low` charge the pages to `low`.
    std::fs::write("/proc/sys/vm/drop_caches", "1").context("dropping the page cache")?;
    Ok(())
}

/// Reads `file` from inside `low` so its (clean) page cache is charged there; a sibling's
/// charge at the parent's limit then reclaims it without swap.
fn fill_cache(low: &Cgroup, file: &Path) -> Result<()> {
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!("echo $$ > {}/cgroup.procs && cat {} > /dev/null", low.path().display(), file.display()))
        .status()?;
    if !status.success() {
        bail!("filling low's page cache failed: {status}");
    }
    let held = low.memory_current()?;
    if held < CACHE_MB * MIB * 3 / 4 {
        bail!(
            "low holds only {} MiB after reading {} ({} MiB): its page cache is charged elsewhere",
            held / MIB,
            file.display(),
            CACHE_MB
        );
    }
    Ok(())
}

struct Measured {
    delay_ms: f64,
    chunk_ms: f64,
    write_ms: f64,
    reason: String,
    bpf_split: Option<[f64; 3]>,
    syscalls: u64,
    /// (read µs, decide µs, cgroups read) of the daemon's first `reaction` event.
    fast: Option<(u64, u64, usize)>,
}

/// `syscr + syscw` of /proc/PID/io: the read and write system calls a process has made.
fn rw_syscalls(pid: u32) -> Result<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/io")).context("/proc/PID/io")?;
    let field = |k: &str| text.lines().find_map(|l| l.strip_prefix(k)).and_then(|v| v.trim().parse::<u64>().ok());
    Ok(field("syscr:").context("no syscr")? + field("syscw:").context("no syscw")?)
}

/// One daemon start, one probe; the measurement (None: no reaction or no crossing) and the
/// BPF hooks the daemon reported.
fn one_run(exe: &Path, prot: &Cgroup, low: &Cgroup) -> Result<(Option<Measured>, Option<BpfHooks>)> {
    let _ = std::fs::remove_dir_all(STATE);
    std::fs::create_dir_all(STATE)?;
    let log = std::fs::File::create("/run/memqos-bench.log")?;
    let daemon = DaemonProcess::start(
        exe,
        Path::new("/run/memqos-bench.toml"),
        Path::new(STATE),
        &["--no-guardian"],
        Stdio::from(log),
    )
    .context("see /run/memqos-bench.log")?;
    let events = Path::new(STATE).join(memqos_daemon::events::EVENTS_FILE);
    // Let the first tick sync the watches (PSI trigger, inotify, BPF thresholds).
    std::thread::sleep(Duration::from_millis(400));

    let stall_before = prot.memory_pressure().map(|p| p.some.total_us).unwrap_or(0);
    let calls_before = rw_syscalls(daemon.pid())?;
    let mut probe = Command::new(exe)
        .args(["bench", "reaction", "--probe"])
        .env("MEMQOS_BENCH_CGROUP", prot.path())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut lines = BufReader::new(probe.stdout.take().unwrap()).lines();
    // First line: the crossing, once the probe saw it.
    let crossing: Option<serde_json::Value> = lines.next().transpose()?.and_then(|l| serde_json::from_str(&l).ok());
    let deadline = Instant::now() + RUN_TIMEOUT;
    let low_id = low.path().file_name().unwrap().to_string_lossy().into_owned();
    let mut write = None;
    while write.is_none() && Instant::now() < deadline {
        write = find_write(&events, &low_id);
        if write.is_none() {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let calls = rw_syscalls(daemon.pid())? - calls_before;
    let stall_ms =
        prot.memory_pressure().map(|p| p.some.total_us).unwrap_or(0).saturating_sub(stall_before) as f64 / 1e3;
    let hooks = read_events(&events).into_iter().find_map(|l| match l.event {
        Event::BpfSource { hooks } => Some(hooks),
        _ => None,
    });
    let _ = probe.kill();
    let _ = probe.wait();
    daemon.stop()?;
    if write.is_none() {
        // The PSI trigger fires on `some` stall of 50 ms within 500 ms: say how much there was.
        eprintln!(
            "  no reaction; prot stalled {stall_ms:.1} ms in all (PSI some); the daemon logged: {}",
            miss_summary(&read_events(&events))
        );
        let stderr = std::fs::read_to_string("/run/memqos-bench.log").unwrap_or_default();
        for line in stderr.lines().rev().take(8).collect::<Vec<_>>().into_iter().rev() {
            eprintln!("  daemon stderr: {line}");
        }
    }
    let (Some(c), Some(w)) = (crossing, write) else { return Ok((None, hooks)) };
    let (Some(before), Some(after)) = (c["before_ns"].as_u64(), c["after_ns"].as_u64()) else {
        eprintln!("probe did not see the crossing: {c}");
        return Ok((None, hooks));
    };
    let (start, done) = (w.mono_ns, w.mono_done_ns);
    let ms = |a: u64, b: u64| (b as f64 - a as f64) / 1e6;
    // The BPF crossing that woke the daemon: the last one logged before its write.
    let crossing = read_events(&events).into_iter().rev().find_map(|l| match l.event {
        Event::Bpf { ktime_ns, mono_ns, .. } if mono_ns <= start => Some((ktime_ns, mono_ns)),
        _ => None,
    });
    let bpf_split = crossing.map(|(k, m)| [ms(before, k), ms(k, m), ms(m, start)]);
    let m = Measured {
        delay_ms: ms(before, start),
        chunk_ms: ms(before, after),
        write_ms: ms(start, done),
        reason: w.why.clone(),
        bpf_split,
        syscalls: calls,
        fast: read_events(&events).into_iter().find_map(|l| match l.event {
            Event::Reaction { read_us, decide_us, read_cgroups, .. } => Some((read_us, decide_us, read_cgroups)),
            _ => None,
        }),
    };
    Ok((Some(m), hooks))
}

/// What a daemon that did not react logged: its degraded lines, its writes and whether it
/// ever reacted, so a miss explains itself.
fn miss_summary(lines: &[LogLine]) -> String {
    let mut parts: Vec<String> = Vec::new();
    for l in lines {
        match &l.event {
            Event::Degraded { message } => parts.push(format!("degraded: {message}")),
            Event::Write(w) => parts.push(format!("write {}/{} = {} ({})", w.cgroup, w.file, w.value, w.why)),
            Event::Reaction { signalled, writes, .. } => {
                parts.push(format!("reaction to {} with {writes} writes", signalled.join(",")))
            }
            _ => {}
        }
    }
    if parts.is_empty() {
        format!("{} lines, no write, no reaction, nothing degraded", lines.len())
    } else {
        parts.join("; ")
    }
}

/// The daemon's event log, through its typed schema.
fn read_events(path: &Path) -> Vec<LogLine> {
    memqos_daemon::events::parse(&std::fs::read_to_string(path).unwrap_or_default())
}

fn find_write(path: &Path, cgroup: &str) -> Option<WriteEvent> {
    read_events(path).into_iter().find_map(|l| match l.event {
        Event::Write(w) if w.cgroup == cgroup && w.file == "memory.high" => Some(w),
        _ => None,
    })
}

/// The probe: joins the protected cgroup, allocates PROBE_MB in CHUNK steps, prints the
/// crossing chunk's timestamps as soon as it sees it, finishes allocating, then waits to be
/// killed (keeps the memory charged).
fn probe() -> Result<u8> {
    let cg = std::env::var("MEMQOS_BENCH_CGROUP").context("MEMQOS_BENCH_CGROUP unset")?;
    std::fs::write(Path::new(&cg).join("cgroup.procs"), std::process::id().to_string())?;
    let parent_events = Path::new(&cg).parent().unwrap().join("memory.events");
    let read_max = || -> Result<u64> {
        let text = std::fs::read_to_string(&parent_events)?;
        Ok(text.lines().find_map(|l| l.strip_prefix("max ")).and_then(|v| v.trim().parse().ok()).unwrap_or(0))
    };
    let base = read_max()?;
    let len = (PROBE_MB * MIB) as usize;
    // Unmapped at exit.
    let p = map_anonymous(len).with_context(|| format!("mmap {PROBE_MB} MiB"))?.cast::<libc::c_void>();
    // Base pages: one charge per 4 KiB, so the crossing chunk is a fine-grained instant
    // (a transparent huge page would charge 2 MiB in one fault).
    // SAFETY: advice on our own mapping.
    unsafe { libc::madvise(p, len, libc::MADV_NOHUGEPAGE) };
    let mem = p as *mut u8;
    let mut reported = false;
    let mut out = std::io::stdout();
    for off in (0..len).step_by(CHUNK) {
        let before = mono_ns();
        for page in (off..(off + CHUNK).min(len)).step_by(4096) {
            // SAFETY: inside the mapping.
            unsafe { mem.add(page).write_volatile(1) };
        }
        let after = mono_ns();
        if !reported && read_max()? > base {
            writeln!(out, "{}", serde_json::json!({"before_ns": before, "after_ns": after, "offset": off}))?;
            out.flush()?;
            reported = true;
        }
    }
    if !reported {
        writeln!(out, "{}", serde_json::json!({"error": "never hit the parent's limit"}))?;
        out.flush()?;
    }
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn mono_ns() -> u64 {
    memqos_daemon::mono_ns()
}

impl super::PerKernel for KernelResult {
    fn kernel(&self) -> &str {
        &self.kernel
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_committed_results_still_load() {
        // `keep_earlier_kernels` merges a new run into this file: its kernels must parse, BPF
        // hooks included (typed since they were free-form JSON).
        let text = include_str!("../../../../docs/bpf/reaction.json");
        let doc: serde_json::Value = serde_json::from_str(text).unwrap();
        let kernels: Vec<KernelResult> = serde_json::from_value(doc["kernels"].clone()).unwrap();
        assert!(!kernels.is_empty());
        let hooks = kernels.iter().find_map(|k| k.bpf_hooks.as_ref()).expect("a kernel with BPF hooks");
        assert!(hooks.attached.iter().any(|h| h.starts_with("memcg_reclaim_begin")), "{hooks:?}");
    }

    #[test]
    fn configs_enable_exactly_one_source() {
        for s in ["bpf", "psi", "events"] {
            let cfg = memqos_policy::Config::from_str(&config(s).text(), "bench.toml").unwrap();
            let on = [cfg.signals.bpf, cfg.signals.psi, cfg.signals.events];
            assert_eq!(on.iter().filter(|&&x| x).count(), 1, "{s}");
            assert_eq!(cfg.policy.headroom_guard, 0);
        }
    }
}
