//! `memqos-lab bench churn`: the daemon under tool-call cgroup churn, in a real-kernel guest.
//!
//! Layout (crates/lab/configs/churn.toml): `churn/s0..s9`, each with a protected `runtime`
//! holding a process, and tool-call cgroups `sN/tool.K` made at `--rate` per second, each
//! with one process moved in right after the mkdir (as `memqos run` moves itself, or a
//! container runtime its init), moved out and the cgroup removed `--lifetime-ms` later.
//! The daemon runs its default signals with BPF on.
//!
//! The processes come from a pool started before the clock runs, parked in `churn-park`
//! (outside the managed root) between calls: under TCG, starting a process per call
//! (fork + exec) capped the loop at ~26 calls/s. A parked process has left the tier, so the
//! daemon puts its oom_score_adj back when its call's cgroup is removed; it rests
//! `REUSE_AFTER` before its next call, long enough for that restore (and for a full sample
//! at the calm interval, should a removal be missed), so each call is one oom_score_adj
//! write, as for a new process.
//!
//! Per tool call: the time from just before its mkdir to the end of the daemon's write of
//! the tier's cpu.weight, and of its process's oom_score_adj (`mono_done_ns` of the write
//! events; both clocks are the guest's CLOCK_MONOTONIC). A call whose knob was never
//! written before its removal is a miss. Every 10 s: the daemon's RSS, its CPU over the
//! last 10 s, the journal's size and the event log's size. At the end: the daemon stopped,
//! its `stopped` event, every runtime's memory.low back to what it was, errors counted
//! (write errors, `degraded` lines, a failed restore).

use crate::configs::DaemonConfig;
use crate::daemon_process::DaemonProcess;
use anyhow::{bail, Context, Result};
use clap::Args;
use memqos_cgroupfs::Cgroup;
use memqos_daemon::events::{Event, Outcome, EVENTS_FILE, ROTATED_FILE};
use memqos_vmtest::self_run;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const ROOT: &str = "/sys/fs/cgroup/churn";
const STATE: &str = "/run/memqos-churn";
const SESSIONS: usize = 10;
const SAMPLE_EVERY: Duration = Duration::from_secs(10);
const PARK: &str = "/sys/fs/cgroup/churn-park";
/// How long a pooled process rests between two calls (see the module doc).
const REUSE_AFTER: Duration = Duration::from_secs(8);

#[derive(Args)]
pub struct ChurnArgs {
    /// Kernel series to boot: "6.12", "7", "6.12,7" or "all".
    #[arg(long, default_value = "7")]
    kernel: String,
    /// Tool-call cgroups made (and removed) per second.
    #[arg(long, default_value_t = 100)]
    rate: u32,
    /// Seconds of churn.
    #[arg(long, default_value_t = 600)]
    duration: u64,
    /// How long each tool-call cgroup lives, ms.
    #[arg(long, default_value_t = 500)]
    lifetime_ms: u64,
    /// Where the JSON result goes (kernels measured earlier and not in this run are kept).
    #[arg(long, default_value = "docs/agent/churn.json")]
    out: PathBuf,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    json: bool,
    #[arg(long, hide = true)]
    in_guest: bool,
}

/// Distribution of one delay, ms.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Delay {
    pub n: usize,
    pub misses: usize,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub max_ms: Option<f64>,
}

/// One 10 s sample of the daemon.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Sample {
    pub at_s: f64,
    pub rss_kib: u64,
    /// CPU over the last interval, percent of one core.
    pub cpu_pct: f64,
    pub journal_bytes: u64,
    pub log_bytes: u64,
    /// Tool-call cgroups alive at that moment.
    pub live_cgroups: usize,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KernelResult {
    pub kernel: String,
    pub rate_target: u32,
    pub lifetime_ms: u64,
    pub duration_s: f64,
    pub created: usize,
    /// Creations per second achieved (the bench's own loop under TCG may fall behind).
    pub rate_achieved: f64,
    pub cpu_weight: Delay,
    pub oom_score_adj: Delay,
    pub samples: Vec<Sample>,
    pub write_errors: usize,
    pub degraded: Vec<String>,
    pub restore_failed: Vec<String>,
    pub daemon_error: Option<String>,
    /// The 20 slowest oom_score_adj adoptions: (seconds into the run the call was made, ms),
    /// to tell a steady tail from one that comes with the daemon's periodic work.
    #[serde(default)]
    pub slowest: Vec<(f64, f64)>,
    /// After stop: runtime cgroups whose memory.low differs from its value before the daemon,
    /// and pooled processes whose oom_score_adj is not back at 0.
    pub not_restored: Vec<String>,
}

pub fn run(a: ChurnArgs) -> Result<u8> {
    if a.rate == 0 || a.rate > 1000 {
        bail!("--rate {}: expected 1..=1000 cgroups per second", a.rate);
    }
    if a.duration == 0 || a.lifetime_ms == 0 {
        bail!("--duration and --lifetime-ms must be positive");
    }
    if a.in_guest {
        let r = in_guest(&a)?;
        let out = std::env::var_os("MEMQOS_RESULTS").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/tmp"));
        std::fs::write(out.join("churn.json"), serde_json::to_string_pretty(&r)?)?;
        return Ok(0);
    }
    let mut all = Vec::new();
    for kernel in self_run::kernels(&a.kernel)? {
        eprintln!("bench churn: booting {} ({}/s for {} s)", kernel.release(), a.rate, a.duration);
        let args = [
            "bench",
            "churn",
            "--in-guest",
            "--rate",
            &a.rate.to_string(),
            "--duration",
            &a.duration.to_string(),
            "--lifetime-ms",
            &a.lifetime_ms.to_string(),
        ]
        .map(String::from);
        let run = self_run::run_self(&kernel, &args, |g| {
            g.memory_mb(2048).timeout(Duration::from_secs(a.duration * 3 + 600)).stream_console(!a.json)
        })?;
        let text = super::guest_result(&kernel, &run, "churn.json")?;
        let r: KernelResult = serde_json::from_str(&text)?;
        print_summary(&r);
        all.push(r);
    }
    let all = super::keep_earlier_kernels(&a.out, all);
    let doc = serde_json::json!({
        "benchmark": "memqos bench churn",
        "scenario": format!("{SESSIONS} sessions with a protected runtime; tool-call cgroups made at the target rate, one process each, removed after their lifetime; daemon with crates/lab/configs/churn.toml (default signals and sampling, BPF on)"),
        "delay": "CLOCK_MONOTONIC from just before the tool call's mkdir to the end of the daemon's write (cpu.weight of the cgroup; oom_score_adj of its process)",
        "host_note": "TCG guests (no KVM) on a shared 2-core host: absolute times include emulation overhead and host noise",
        "kernels": all,
        // This invocation's (kernels kept from an earlier file keep no provenance of theirs).
        "provenance": crate::provenance::Provenance::collect(std::path::Path::new("."), &a.kernel),
    });
    super::write_result(&a.out, &doc)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&doc)?);
    }
    Ok(0)
}

fn print_summary(r: &KernelResult) {
    let f = |v: Option<f64>| v.map(|x| format!("{x:.1}")).unwrap_or_else(|| "-".into());
    println!(
        "kernel {}: {} tool calls in {:.0} s ({:.1}/s of {}/s)",
        r.kernel, r.created, r.duration_s, r.rate_achieved, r.rate_target
    );
    for (name, d) in [("cpu.weight", &r.cpu_weight), ("oom_score_adj", &r.oom_score_adj)] {
        println!(
            "  {name:<14} n {:>6}  misses {:>4}  p50 {:>7} ms  p99 {:>7} ms  max {:>7} ms",
            d.n,
            d.misses,
            f(d.p50_ms),
            f(d.p99_ms),
            f(d.max_ms)
        );
    }
    if let (Some(first), Some(last)) = (r.samples.first(), r.samples.last()) {
        println!(
            "  daemon RSS {} -> {} KiB, CPU {:.1}% -> {:.1}%, journal {} -> {} B, log {} -> {} B",
            first.rss_kib,
            last.rss_kib,
            first.cpu_pct,
            last.cpu_pct,
            first.journal_bytes,
            last.journal_bytes,
            first.log_bytes,
            last.log_bytes
        );
    }
    println!(
        "  write errors {}, degraded {}, restore failed {}, not restored {}, daemon error {}",
        r.write_errors,
        r.degraded.len(),
        r.restore_failed.len(),
        r.not_restored.len(),
        r.daemon_error.as_deref().unwrap_or("none")
    );
}

/// Reads the daemon's event log as it grows, across a rotation (the log is size-bounded).
struct LogTail {
    dir: PathBuf,
    offset: u64,
    partial: Vec<u8>,
}

impl LogTail {
    fn new(dir: &Path) -> LogTail {
        LogTail { dir: dir.to_owned(), offset: 0, partial: Vec::new() }
    }

    /// The bytes of `path` from `offset` on, and the offset after them.
    fn read_from(path: &Path, offset: u64) -> Result<(Vec<u8>, u64)> {
        let mut f = match std::fs::File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), 0)),
            Err(e) => return Err(e.into()),
        };
        let len = f.metadata()?.len();
        if len < offset {
            return Ok((Vec::new(), len));
        }
        f.seek(SeekFrom::Start(offset))?;
        let mut bytes = Vec::new();
        f.read_to_end(&mut bytes)?;
        let end = offset + bytes.len() as u64;
        Ok((bytes, end))
    }

    /// New complete lines since the last call.
    fn next(&mut self) -> Result<Vec<Event>> {
        let current = self.dir.join(EVENTS_FILE);
        let len = std::fs::metadata(&current).map(|m| m.len()).unwrap_or(0);
        let mut bytes = std::mem::take(&mut self.partial);
        if len < self.offset {
            // Rotated since the last read: the rest of the old file is now the rotated one.
            let (rest, _) = Self::read_from(&self.dir.join(ROTATED_FILE), self.offset)?;
            bytes.extend(rest);
            self.offset = 0;
        }
        let (fresh, end) = Self::read_from(&current, self.offset)?;
        self.offset = end;
        bytes.extend(fresh);
        let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        self.partial = bytes.split_off(complete);
        let text = String::from_utf8_lossy(&bytes);
        Ok(memqos_daemon::events::parse(&text).into_iter().map(|l| l.event).collect())
    }
}

struct Call {
    cgroup: Cgroup,
    pid: u32,
    remove_at: Instant,
}

/// Processes that take turns as tool calls: the oldest parked one goes next.
struct Pool {
    park: Cgroup,
    children: Vec<Child>,
    /// (pid, parked since), oldest first.
    parked: VecDeque<(u32, Instant)>,
}

impl Pool {
    fn start(size: usize) -> Result<Pool> {
        let park = Cgroup::new(PARK);
        park.create()?;
        let mut children = Vec::with_capacity(size);
        let mut parked = VecDeque::with_capacity(size);
        let long_ago = Instant::now().checked_sub(REUSE_AFTER).unwrap_or_else(Instant::now);
        for _ in 0..size {
            let child = spawn_in(&park, "sleep", &["100000"])?;
            parked.push_back((child.id(), long_ago));
            children.push(child);
        }
        Ok(Pool { park, children, parked })
    }

    /// A process that has rested long enough, if any.
    fn take(&mut self, now: Instant) -> Option<u32> {
        match self.parked.front() {
            Some(&(pid, since)) if now.duration_since(since) >= REUSE_AFTER => {
                self.parked.pop_front();
                Some(pid)
            }
            _ => None,
        }
    }

    fn park(&mut self, pid: u32) -> Result<()> {
        self.park.write_string("cgroup.procs", &pid.to_string())?;
        self.parked.push_back((pid, Instant::now()));
        Ok(())
    }

    fn stop(mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = remove_when_empty(&self.park);
    }
}

/// A process in `cg` from its first instruction: it joins before exec.
pub(crate) fn spawn_in(cg: &Cgroup, program: &str, args: &[&str]) -> Result<Child> {
    use std::os::unix::ffi::OsStrExt;
    let procs = std::ffi::CString::new(cg.path().join("cgroup.procs").as_os_str().as_bytes())?;
    let mut cmd = Command::new(program);
    cmd.args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    // SAFETY: between fork and exec the closure makes only async-signal-safe system calls
    // (open, write, close) on memory prepared before the fork.
    unsafe {
        cmd.pre_exec(move || {
            let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let ok = libc::write(fd, b"0".as_ptr().cast(), 1) == 1;
            let err = std::io::Error::last_os_error();
            libc::close(fd);
            if ok {
                Ok(())
            } else {
                Err(err)
            }
        });
    }
    cmd.spawn().with_context(|| format!("starting {program} in {}", cg.path().display()))
}

pub(crate) fn remove_when_empty(cg: &Cgroup) -> Result<()> {
    let t0 = Instant::now();
    loop {
        match cg.remove() {
            Ok(()) => return Ok(()),
            Err(_) if t0.elapsed() < Duration::from_secs(2) => std::thread::sleep(Duration::from_millis(2)),
            Err(e) => return Err(e).with_context(|| format!("removing {}", cg.path().display())),
        }
    }
}

fn percentiles(mut v: Vec<f64>, misses: usize) -> Delay {
    v.sort_by(f64::total_cmp);
    let p = |q: f64| memqos_replay::report::percentile(&v, q);
    Delay { n: v.len(), misses, p50_ms: p(50.0), p99_ms: p(99.0), max_ms: v.last().copied() }
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

fn file_len(p: &Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

fn in_guest(a: &ChurnArgs) -> Result<KernelResult> {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")?.trim().to_string();
    let root = Cgroup::new(ROOT);
    root.create()?;
    root.write_string("cgroup.subtree_control", "+memory +cpu")?;
    let mut runtimes = Vec::new();
    for s in 0..SESSIONS {
        let session = root.child(&format!("s{s}"));
        session.create()?;
        session.write_string("cgroup.subtree_control", "+memory +cpu")?;
        let runtime = session.child("runtime");
        runtime.create()?;
        let child = spawn_in(&runtime, "sleep", &["100000"])?;
        let low = runtime.read_string("memory.low")?;
        runtimes.push((runtime, child, low));
    }
    // Calls alive at once, plus those resting, plus slack for a loop running late.
    let per_call = Duration::from_millis(a.lifetime_ms) + REUSE_AFTER;
    let pool_size = (f64::from(a.rate) * per_call.as_secs_f64() * 1.2).ceil() as usize + 8;
    eprintln!("churn: starting a pool of {pool_size} processes");
    let mut pool = Pool::start(pool_size)?;
    let exe = std::env::current_exe()?;
    let config = Path::new("/run/memqos-churn.toml");
    DaemonConfig::named("churn.toml").write(config)?;
    let _ = std::fs::remove_dir_all(STATE);
    let mut daemon = DaemonProcess::start(&exe, config, Path::new(STATE), &["--no-guardian"], Stdio::null())?;
    let mut tail = LogTail::new(Path::new(STATE));

    let period = Duration::from_secs_f64(1.0 / f64::from(a.rate));
    let lifetime = Duration::from_millis(a.lifetime_ms);
    let end = Instant::now() + Duration::from_secs(a.duration);
    let t0 = Instant::now();
    let mut live: VecDeque<Call> = VecDeque::new();
    let mut made: HashMap<String, u64> = HashMap::new();
    let mut weight_ms: HashMap<String, f64> = HashMap::new();
    let mut adj_ms: HashMap<String, f64> = HashMap::new();
    let mut write_errors = 0;
    let mut degraded = Vec::new();
    let mut samples = Vec::new();
    let mut next_sample = t0 + SAMPLE_EVERY;
    let mut last_cpu = daemon.cpu_seconds().unwrap_or(0.0);
    let mut next_make = t0;
    let mut n = 0usize;
    let mut absorb = |events: Vec<Event>, made: &HashMap<String, u64>| {
        for e in events {
            match e {
                Event::Write(w) => {
                    if matches!(w.outcome, Outcome::Error(_)) {
                        write_errors += 1;
                    }
                    let Some(&t) = made.get(&w.cgroup) else { continue };
                    let ms = (w.mono_done_ns as f64 - t as f64) / 1e6;
                    let into = match w.file.as_str() {
                        "cpu.weight" => &mut weight_ms,
                        "oom_score_adj" => &mut adj_ms,
                        _ => continue,
                    };
                    into.entry(w.cgroup.clone()).or_insert(ms);
                }
                Event::Degraded { message } => degraded.push(message),
                _ => {}
            }
        }
    };
    while Instant::now() < end {
        let now = Instant::now();
        // Removals first: a call whose lifetime is over.
        while live.front().is_some_and(|c| c.remove_at <= now) {
            let c = live.pop_front().expect("checked");
            pool.park(c.pid)?;
            remove_when_empty(&c.cgroup)?;
        }
        if now >= next_make {
            let Some(pid) = pool.take(now) else {
                bail!("no pooled process has rested {} s: the pool is too small", REUSE_AFTER.as_secs());
            };
            let rel = format!("s{}/tool.{n}", n % SESSIONS);
            let cg = root.child(&rel);
            let made_ns = memqos_daemon::mono_ns();
            cg.create()?;
            cg.write_string("cgroup.procs", &pid.to_string())?;
            made.insert(rel, made_ns);
            live.push_back(Call { cgroup: cg, pid, remove_at: now + lifetime });
            n += 1;
            next_make += period;
        }
        if now >= next_sample {
            if let Some(status) = daemon.exited() {
                eprintln!("churn: the daemon exited ({status}) after {:.0} s: stopping", t0.elapsed().as_secs_f64());
                break;
            }
            absorb(tail.next()?, &made);
            let cpu = daemon.cpu_seconds().unwrap_or(last_cpu);
            let s = Sample {
                at_s: t0.elapsed().as_secs_f64(),
                rss_kib: rss_kib(daemon.pid()),
                cpu_pct: (cpu - last_cpu) / SAMPLE_EVERY.as_secs_f64() * 100.0,
                journal_bytes: file_len(&Path::new(STATE).join(memqos_daemon::journal::JOURNAL_FILE)),
                log_bytes: file_len(&Path::new(STATE).join(EVENTS_FILE))
                    + file_len(&Path::new(STATE).join(ROTATED_FILE)),
                live_cgroups: live.len(),
            };
            eprintln!(
                "churn {:>4.0} s: {n} made, RSS {} KiB, CPU {:.1}%, journal {} B, log {} B",
                s.at_s, s.rss_kib, s.cpu_pct, s.journal_bytes, s.log_bytes
            );
            last_cpu = cpu;
            samples.push(s);
            next_sample += SAMPLE_EVERY;
        }
        let wake = next_make.min(live.front().map_or(next_make, |c| c.remove_at)).min(next_sample);
        if let Some(d) = wake.checked_duration_since(Instant::now()) {
            std::thread::sleep(d);
        }
    }
    let duration_s = t0.elapsed().as_secs_f64();
    for c in live.drain(..) {
        pool.park(c.pid)?;
        remove_when_empty(&c.cgroup)?;
    }
    std::thread::sleep(Duration::from_millis(500));
    absorb(tail.next()?, &made);
    let (status, _) = daemon.stop()?;
    let mut restore_failed = Vec::new();
    let mut daemon_error = (!status.success()).then(|| format!("daemon exited {status}"));
    for e in tail.next()? {
        if let Event::Stopped { failed, error, .. } = e {
            restore_failed = failed;
            daemon_error = daemon_error.or(error);
        }
    }
    let mut not_restored = Vec::new();
    for (runtime, mut child, low) in runtimes {
        if runtime.read_string("memory.low")? != low {
            not_restored.push(runtime.path().display().to_string());
        }
        let _ = child.kill();
        let _ = child.wait();
        let _ = remove_when_empty(&runtime);
        let _ = runtime.path().parent().map(|p| Cgroup::new(p).remove());
    }
    let _ = root.remove();
    // Every pooled process was in the tool tier many times: its oom_score_adj must be back.
    for c in &pool.children {
        let adj = std::fs::read_to_string(format!("/proc/{}/oom_score_adj", c.id())).unwrap_or_default();
        if adj.trim() != "0" {
            not_restored.push(format!("pid {} oom_score_adj {}", c.id(), adj.trim()));
        }
    }
    pool.stop();
    let misses = |got: &HashMap<String, f64>| made.len() - got.len();
    let t0_ns = made.values().min().copied().unwrap_or(0);
    let mut slowest: Vec<(f64, f64)> = adj_ms.iter().map(|(rel, &ms)| ((made[rel] - t0_ns) as f64 / 1e9, ms)).collect();
    slowest.sort_by(|a, b| b.1.total_cmp(&a.1));
    slowest.truncate(20);
    Ok(KernelResult {
        kernel,
        rate_target: a.rate,
        lifetime_ms: a.lifetime_ms,
        duration_s,
        created: made.len(),
        rate_achieved: made.len() as f64 / duration_s,
        cpu_weight: percentiles(weight_ms.values().copied().collect(), misses(&weight_ms)),
        oom_score_adj: percentiles(adj_ms.values().copied().collect(), misses(&adj_ms)),
        samples,
        write_errors,
        degraded,
        restore_failed,
        daemon_error,
        slowest,
        not_restored,
    })
}

impl super::PerKernel for KernelResult {
    fn kernel(&self) -> &str {
        &self.kernel
    }
}
