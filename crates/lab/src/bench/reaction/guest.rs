//! The reaction runs inside the guest: the bench tree, one daemon start and one probe per run,
//! and the probe itself.

use super::{KernelResult, SourceResult, CACHE_MB, CHUNK, PARENT_MAX, PROBE_MB, RUN_TIMEOUT, STATE};
use crate::configs::DaemonConfig;
use crate::daemon_process::DaemonProcess;
use anyhow::{bail, Context, Result};
use memqos_cgroupfs::Cgroup;
use memqos_daemon::events::{BpfHooks, Event, LogLine, WriteEvent};
use memqos_policy::size::MIB;
use memqos_replay::memory::map_anonymous;
use memqos_replay::report::percentile;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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

pub(super) fn in_guest(sources: &[String], runs: usize, sizes: &[usize]) -> Result<KernelResult> {
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
pub(super) fn read_events(path: &Path) -> Vec<LogLine> {
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
pub(super) fn probe() -> Result<u8> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
