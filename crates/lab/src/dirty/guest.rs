//! The reproducer inside a guest: a 256 KB/s ext4 disk at /run/scratch, vm.dirty_bytes = 32 MB,
//! vm.dirty_background_bytes = 16 MB, two sibling cgroups. The victim runs fio 4 KiB sequential
//! buffered writes rate-limited to 500 KB/s, first alone, then for `contended_secs` next to a
//! noisy fio doing unlimited 4 KiB buffered random writes, `runs` times.

use super::trace::{self, BdpSummary, BdpTrace};
use super::{Fs, Policy, Settings};
use crate::configs::DaemonConfig;
use crate::daemon_process::{count_writes, DaemonProcess};
use anyhow::{bail, Context, Result};
use memqos_cgroupfs::Cgroup;
use memqos_policy::size::MIB;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SCRATCH: &str = "/run/scratch";
const ROOT: &str = "/sys/fs/cgroup/dirtyexp";
/// The issue's dirty limits: freerun ceiling = (32 + 16) / 2 = 24 MB.
const DIRTY_BYTES: u64 = 32 * MIB;
const DIRTY_BACKGROUND_BYTES: u64 = 16 * MIB;
const VICTIM_FILE_MB: u64 = 32;
const NOISY_FILE_MB: u64 = 64;

/// One fio job's write side, from its JSON output.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct FioWrite {
    pub iops: f64,
    pub bw_kib_s: f64,
    pub ios: u64,
    /// Completion latency (the write() call) percentiles, microseconds.
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

/// One sample of the dirty/writeback gauges, bytes.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Sample {
    /// Seconds since the victim's contended phase started (negative while noisy fills).
    pub t: f64,
    pub victim_dirty: u64,
    pub victim_writeback: u64,
    pub noisy_dirty: u64,
    pub noisy_writeback: u64,
    pub global_dirty: u64,
    pub global_writeback: u64,
    pub noisy_high: Option<u64>,
}

/// Throttling in balance_dirty_pages() per cgroup name ("victim", "noisy", "other:<ino>")
/// and per task.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Sleepers {
    pub by_cgroup: BTreeMap<String, trace::Sleeps>,
    pub by_task: BTreeMap<String, trace::Sleeps>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Iteration {
    pub solo: FioWrite,
    pub contended: FioWrite,
    /// The noisy fio over its whole run (fill + contended), as fio reports it.
    pub noisy_fio: FioWrite,
    /// What noisy write()s during the victim's contended window, KiB/s (/proc/PID/io wchar).
    pub noisy_dirtying_kib_s: f64,
    /// What reached the disk from each cgroup during the contended window, KiB/s (io.stat wbytes).
    pub noisy_disk_kib_s: f64,
    pub victim_disk_kib_s: f64,
    pub solo_sleepers: Sleepers,
    pub contended_sleepers: Sleepers,
    pub samples: Vec<Sample>,
    /// Knob writes the memqos daemon made (0 for stock).
    pub daemon_writes: usize,
    /// noisy's memory.high after the daemon stopped (must be back to "max").
    pub noisy_high_after_stop: Option<String>,
    /// Seconds the cleanup waited for in-flight writeback to drain.
    pub drain_secs: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GuestReport {
    pub kernel: String,
    pub policy: Policy,
    pub settings: Settings,
    pub dirty_threshold_pages: u64,
    pub dirty_background_threshold_pages: u64,
    pub iterations: Vec<Iteration>,
}

fn sysctl(name: &str, value: &str) -> Result<()> {
    let path = format!("/proc/sys/{}", name.replace('.', "/"));
    std::fs::write(&path, value).with_context(|| format!("writing {value} to {path}"))
}

fn vmstat(key: &str) -> u64 {
    std::fs::read_to_string("/proc/vmstat")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(' ')).and_then(|v| v.trim().parse().ok()))
        })
        .unwrap_or(0)
}

fn stat_of(cg: &Cgroup, keys: &[&str]) -> Vec<u64> {
    let stat = cg.memory_stat().unwrap_or_default();
    keys.iter().map(|k| stat.iter().find(|(n, _)| n == k).map(|(_, v)| *v).unwrap_or(0)).collect()
}

/// Sum of `wbytes` over the devices in io.stat.
fn io_wbytes(cg: &Cgroup) -> u64 {
    std::fs::read_to_string(cg.path().join("io.stat"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("wbytes="))
        .filter_map(|v| v.parse::<u64>().ok())
        .sum()
}

/// Bytes the cgroup's tasks passed to write() so far (wchar of every task in it).
fn wchar(cg: &Cgroup) -> u64 {
    cg.procs()
        .unwrap_or_default()
        .iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/io")).ok())
        .filter_map(|t| t.lines().find_map(|l| l.strip_prefix("wchar:").and_then(|v| v.trim().parse::<u64>().ok())))
        .sum()
}

/// Runs `argv` inside `cg` (the shell moves itself there, then execs).
fn spawn_in(cg: &Cgroup, argv: &[String]) -> Result<Child> {
    let script = format!("echo $$ > {}/cgroup.procs && exec \"$@\"", cg.path().display());
    Command::new("/bin/sh")
        .arg("-c")
        .arg(script)
        .arg("sh")
        .args(argv)
        .stdout(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {} in {}", argv[0], cg.path().display()))
}

fn run_in(cg: &Cgroup, argv: &[String]) -> Result<()> {
    let status = spawn_in(cg, argv)?.wait()?;
    if !status.success() {
        bail!("{} in {} failed: {status}", argv.join(" "), cg.path().display());
    }
    Ok(())
}

fn fio_args(name: &str, file: &Path, extra: &[&str], runtime: u64, size_mb: u64, out: &Path) -> Vec<String> {
    let mut v: Vec<String> = vec![
        "fio".into(),
        format!("--name={name}"),
        format!("--filename={}", file.display()),
        "--bs=4k".into(),
        "--ioengine=psync".into(),
        "--time_based".into(),
        format!("--runtime={runtime}"),
        format!("--size={size_mb}M"),
        "--eta=never".into(),
        "--output-format=json".into(),
        "--percentile_list=50:99:99.9".into(),
        format!("--output={}", out.display()),
    ];
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

/// The write side of the first job in fio's JSON output.
pub fn parse_fio(text: &str) -> Result<FioWrite> {
    // fio may print warnings before the JSON document.
    let start = text.find('{').context("no JSON in fio output")?;
    let v: serde_json::Value = serde_json::from_str(&text[start..]).context("parsing fio JSON")?;
    let w = &v["jobs"][0]["write"];
    if w.is_null() {
        bail!("fio JSON has no jobs[0].write");
    }
    let pct = |k: &str| w["clat_ns"]["percentile"][k].as_f64().unwrap_or(f64::NAN) / 1000.0;
    Ok(FioWrite {
        iops: w["iops"].as_f64().unwrap_or(0.0),
        bw_kib_s: w["bw"].as_f64().unwrap_or(0.0),
        ios: w["total_ios"].as_u64().unwrap_or(0),
        p50_us: pct("50.000000"),
        p99_us: pct("99.000000"),
        p999_us: pct("99.900000"),
        max_us: w["clat_ns"]["max"].as_f64().unwrap_or(f64::NAN) / 1000.0,
    })
}

fn read_fio(out: &Path) -> Result<FioWrite> {
    let text = std::fs::read_to_string(out).with_context(|| format!("reading {}", out.display()))?;
    parse_fio(&text).with_context(|| format!("in {}", out.display()))
}

fn cgroup_ino(cg: &Cgroup) -> u64 {
    std::fs::metadata(cg.path()).map(|m| std::os::unix::fs::MetadataExt::ino(&m)).unwrap_or(0)
}

fn sleepers(s: BdpSummary, names: &[(u64, &str)]) -> Sleepers {
    let by_cgroup = s
        .by_cgroup_ino
        .into_iter()
        .map(|(ino, v)| {
            (names.iter().find(|(i, _)| *i == ino).map(|(_, n)| n.to_string()).unwrap_or(format!("other:{ino}")), v)
        })
        .collect();
    Sleepers { by_cgroup, by_task: s.by_task }
}

/// Samples the gauges every 500 ms until stopped.
struct Sampler {
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<Vec<Sample>>,
    zero: Arc<Mutex<Option<Instant>>>,
}

impl Sampler {
    fn start(victim: Cgroup, noisy: Cgroup) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let zero: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
        let (stop2, zero2) = (stop.clone(), zero.clone());
        let started = Instant::now();
        let handle = std::thread::spawn(move || {
            let mut out = Vec::new();
            while !stop2.load(Ordering::SeqCst) {
                let now = Instant::now();
                let t = match *zero2.lock().unwrap() {
                    Some(z) if now >= z => (now - z).as_secs_f64(),
                    Some(z) => -(z - now).as_secs_f64(),
                    None => -(now - started).as_secs_f64() - 1000.0,
                };
                let v = stat_of(&victim, &["file_dirty", "file_writeback"]);
                let n = stat_of(&noisy, &["file_dirty", "file_writeback"]);
                out.push(Sample {
                    t,
                    victim_dirty: v[0],
                    victim_writeback: v[1],
                    noisy_dirty: n[0],
                    noisy_writeback: n[1],
                    global_dirty: vmstat("nr_dirty") * 4096,
                    global_writeback: vmstat("nr_writeback") * 4096,
                    noisy_high: noisy.limit("memory.high").ok().and_then(|l| l.bytes()),
                });
                std::thread::sleep(Duration::from_millis(500));
            }
            out
        });
        Sampler { stop, handle, zero }
    }

    fn mark_zero(&self) {
        *self.zero.lock().unwrap() = Some(Instant::now());
    }

    /// Stops; samples taken before the zero mark get their times fixed up.
    fn finish(self) -> Vec<Sample> {
        self.stop.store(true, Ordering::SeqCst);
        let mut v = self.handle.join().unwrap_or_default();
        v.retain(|s| s.t > -900.0);
        v
    }
}

struct Daemon(DaemonProcess);

impl Daemon {
    fn start() -> Result<Daemon> {
        let config = DaemonConfig::named("dirty.toml");
        let state_dir = config.state_dir();
        std::fs::create_dir_all(&state_dir)?;
        let path = state_dir.join("memqos.toml");
        config.write(&path)?;
        DaemonProcess::start(&std::env::current_exe()?, &path, &state_dir, &[], Stdio::null()).map(Daemon)
    }

    /// SIGTERM, wait; returns the number of knob writes it logged.
    fn stop(self) -> Result<usize> {
        let (st, log) = self.0.stop()?;
        if !st.success() {
            bail!("memqos daemon exited with {st}");
        }
        Ok(count_writes(&log))
    }
}

/// The block device under /run/scratch, from /proc/self/mounts.
fn scratch_device() -> Result<String> {
    let mounts = std::fs::read_to_string("/proc/self/mounts")?;
    mounts
        .lines()
        .find_map(|l| {
            let mut f = l.split_whitespace();
            let (dev, dir) = (f.next()?, f.next()?);
            (dir == SCRATCH).then(|| dev.to_string())
        })
        .with_context(|| format!("{SCRATCH} is not mounted"))
}

/// Replaces the guest's ext4 scratch file system with xfs on the same (throttled) disk.
fn reformat_xfs() -> Result<()> {
    let dev = scratch_device()?;
    let run = |cmd: &mut Command| -> Result<()> {
        let st = cmd.status().with_context(|| format!("running {cmd:?}"))?;
        if !st.success() {
            bail!("{cmd:?} failed: {st}");
        }
        Ok(())
    };
    run(Command::new("umount").arg(SCRATCH))?;
    // mkfs.xfs refuses file systems under 300 MB unless it runs under fstests, which these
    // three variables announce; the 256 MiB disk keeps the setup identical to ext4's. -K: no
    // discard pass over the throttled disk.
    run(Command::new("mkfs.xfs")
        .args(["-f", "-q", "-K", &dev])
        .env("TEST_DIR", "/run")
        .env("TEST_DEV", &dev)
        .env("QA_CHECK_FS", "1"))
    .context("mkfs.xfs (install xfsprogs on the host: the guest runs the host's binaries)")?;
    run(Command::new("mount").args(["-t", "xfs", &dev, SCRATCH]))
}

/// io.max `wbps` on the scratch device for `cg` (`max` when `None`).
fn set_io_max(cg: &Cgroup, wbps: Option<u64>) -> Result<()> {
    let meta = std::fs::metadata(SCRATCH)?;
    let dev = std::os::unix::fs::MetadataExt::dev(&meta);
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let value = format!("{major}:{minor} wbps={}", wbps.map_or("max".to_string(), |b| b.to_string()));
    std::fs::write(cg.path().join("io.max"), &value)
        .with_context(|| format!("writing {value:?} to {}/io.max (io controller enabled?)", cg.path().display()))
}

fn wait_for_drain(limit: Duration) -> f64 {
    let t0 = Instant::now();
    while t0.elapsed() < limit && vmstat("nr_writeback") + vmstat("nr_dirty") > 64 {
        std::thread::sleep(Duration::from_millis(200));
    }
    t0.elapsed().as_secs_f64()
}

fn log(msg: &str) {
    eprintln!("dirty-noisy-neighbour: {msg}");
}

/// Runs every iteration in this (guest) kernel.
pub fn run(settings: &Settings, policy: Policy, save: impl Fn(&GuestReport) -> Result<()>) -> Result<GuestReport> {
    if !Path::new(SCRATCH).join("lost+found").exists() {
        bail!("{SCRATCH} is not the ext4 scratch disk (run inside `memqos-lab vm run --scratch 256:262144` or via `memqos-lab experiment`)");
    }
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")?.trim().to_owned();
    if settings.fs == Fs::Xfs {
        reformat_xfs()?;
    }
    // lazytime keeps timestamp updates in memory. On ext4 that spares the victim's write() a
    // journal handle only where the kernel does not force one for the i_version bump (7.x
    // does not; 6.12 does, see docs/dirty-isolation.md): a jbd2 commit then stalls the
    // writer for as long as the data queued ahead of the journal write takes to drain.
    let opts = if settings.lazytime { "remount,lazytime" } else { "remount,strictatime" };
    let st = Command::new("mount").args(["-o", opts, SCRATCH]).status().context("running mount")?;
    if !st.success() {
        bail!("mount -o {opts} {SCRATCH} failed: {st}");
    }
    if let Some(kb) = settings.max_sectors_kb {
        let dev = scratch_device()?;
        let name = dev.rsplit('/').next().unwrap_or(&dev).to_string();
        let path = format!("/sys/block/{name}/queue/max_sectors_kb");
        std::fs::write(&path, kb.to_string()).with_context(|| format!("writing {kb} to {path}"))?;
    }
    sysctl("vm.dirty_bytes", &DIRTY_BYTES.to_string())?;
    sysctl("vm.dirty_background_bytes", &DIRTY_BACKGROUND_BYTES.to_string())?;
    let root = Cgroup::new(ROOT);
    root.create()?;
    root.enable_controllers(&["memory", "io"])?;
    let victim = root.child("victim");
    let noisy = root.child("noisy");
    victim.create()?;
    noisy.create()?;
    let names = [(cgroup_ino(&victim), "victim"), (cgroup_ino(&noisy), "noisy")];
    let bdp = BdpTrace::start()?;
    let mut report = GuestReport {
        kernel: kernel.clone(),
        policy,
        settings: settings.clone(),
        dirty_threshold_pages: 0,
        dirty_background_threshold_pages: 0,
        iterations: Vec::new(),
    };
    for i in 0..settings.runs {
        log(&format!("{policy:?} iteration {}/{} on {kernel}", i + 1, settings.runs));
        let it = iteration(settings, policy, &victim, &noisy, &bdp, &names)?;
        report.iterations.push(it);
        report.dirty_threshold_pages = vmstat("nr_dirty_threshold");
        report.dirty_background_threshold_pages = vmstat("nr_dirty_background_threshold");
        save(&report)?;
        let it = report.iterations.last().unwrap();
        log(&format!(
            "  victim solo {:.1} IOPS p99 {:.2} ms | contended {:.1} IOPS p99 {:.2} ms p99.9 {:.1} ms | noisy disk {:.0} KiB/s, write() {:.0} KiB/s",
            it.solo.iops, it.solo.p99_us / 1e3, it.contended.iops, it.contended.p99_us / 1e3, it.contended.p999_us / 1e3,
            it.noisy_disk_kib_s, it.noisy_dirtying_kib_s
        ));
    }
    drop(bdp);
    let _ = victim.remove();
    let _ = noisy.remove();
    let _ = root.remove();
    Ok(report)
}

fn iteration(
    settings: &Settings,
    policy: Policy,
    victim: &Cgroup,
    noisy: &Cgroup,
    bdp: &BdpTrace,
    names: &[(u64, &str)],
) -> Result<Iteration> {
    let dir = PathBuf::from(SCRATCH);
    let (va, vb, nf) = (dir.join("victim-solo.dat"), dir.join("victim-contended.dat"), dir.join("noisy.dat"));
    // Preallocated from inside each cgroup, so each inode's writeback domain (i_wb) is its
    // writer's cgroup from the start rather than the root's.
    for (cg, f, mb) in [(victim, &va, VICTIM_FILE_MB), (victim, &vb, VICTIM_FILE_MB), (noisy, &nf, NOISY_FILE_MB)] {
        run_in(cg, &["fallocate".into(), "-l".into(), format!("{mb}M"), f.display().to_string()])?;
    }
    run_in(victim, &["sync".into()])?;
    for (cg, wbps) in [(victim, settings.victim_wbps), (noisy, settings.noisy_wbps)] {
        set_io_max(cg, wbps)?;
    }
    let daemon = if policy == Policy::Memqos { Some(Daemon::start()?) } else { None };
    let out = Path::new("/tmp");
    let rate = format!("--rate={}k", settings.victim_rate_kib);

    // Phase 1: the victim alone.
    bdp.clear()?;
    run_in(
        victim,
        &fio_args("victim", &va, &["--rw=write", &rate], settings.solo_secs, VICTIM_FILE_MB, &out.join("solo.json")),
    )?;
    let solo = read_fio(&out.join("solo.json"))?;
    let solo_sleepers = sleepers(trace::summarize(&bdp.read()?), names);
    // Its dirty pages are dropped with the file, so the contended phase starts clean.
    std::fs::remove_file(&va)?;

    // Phase 2: noisy fills the dirty pool, then the victim runs next to it.
    bdp.clear()?;
    let sampler = Sampler::start(victim.clone(), noisy.clone());
    // Far longer than needed (fio's start-up under TCG takes seconds); stopped with SIGTERM
    // (fio then still writes its report) once the victim is done.
    let noisy_runtime = settings.fill_secs + settings.contended_secs + 120;
    let mut noisy_fio = spawn_in(
        noisy,
        &fio_args("noisy", &nf, &["--rw=randwrite"], noisy_runtime, NOISY_FILE_MB, &out.join("noisy.json")),
    )?;
    std::thread::sleep(Duration::from_secs(settings.fill_secs));
    let (n_wchar0, n_disk0, v_disk0) = (wchar(noisy), io_wbytes(noisy), io_wbytes(victim));
    sampler.mark_zero();
    let t0 = Instant::now();
    run_in(
        victim,
        &fio_args(
            "victim",
            &vb,
            &["--rw=write", &rate],
            settings.contended_secs,
            VICTIM_FILE_MB,
            &out.join("contended.json"),
        ),
    )?;
    let window = t0.elapsed().as_secs_f64();
    let (n_wchar1, n_disk1, v_disk1) = (wchar(noisy), io_wbytes(noisy), io_wbytes(victim));
    let contended = read_fio(&out.join("contended.json"))?;
    unsafe { libc::kill(noisy_fio.id() as i32, libc::SIGTERM) };
    let st = noisy_fio.wait()?;
    // We stop the noisy fio ourselves; fio may report that SIGTERM with a non-zero status
    // (seen: 128 with short phases). Its JSON report is what counts.
    if !st.success() && read_fio(&out.join("noisy.json")).is_err() {
        bail!("noisy fio failed ({st}) and left no report at {}", out.join("noisy.json").display());
    }
    let samples = sampler.finish();
    let contended_sleepers = sleepers(trace::summarize(&bdp.read()?), names);
    let noisy_fio = read_fio(&out.join("noisy.json"))?;

    let (daemon_writes, noisy_high_after_stop) = match daemon {
        Some(d) => (d.stop()?, Some(noisy.read_string("memory.high")?.trim().to_owned())),
        None => (0, None),
    };
    // Lifted before the cleanup: deleting a file waits for its pages under writeback, which
    // io.max would drain at its own rate.
    for cg in [victim, noisy] {
        set_io_max(cg, None)?;
    }
    // Deleting the files drops their dirty pages; only what is already in flight drains.
    for f in [&vb, &nf] {
        std::fs::remove_file(f)?;
    }
    let drain_secs = wait_for_drain(Duration::from_secs(90));
    let kib = |b: u64| b as f64 / 1024.0 / window;
    Ok(Iteration {
        solo,
        contended,
        noisy_fio,
        noisy_dirtying_kib_s: kib(n_wchar1.saturating_sub(n_wchar0)),
        noisy_disk_kib_s: kib(n_disk1.saturating_sub(n_disk0)),
        victim_disk_kib_s: kib(v_disk1.saturating_sub(v_disk0)),
        solo_sleepers,
        contended_sleepers,
        samples,
        daemon_writes,
        noisy_high_after_stop,
        drain_secs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fio_json_write_side() {
        let text = r#"note: a warning line
{"jobs":[{"write":{"iops":124.9,"bw":499,"total_ios":3748,
 "clat_ns":{"max":9000000,"percentile":{"50.000000":20000,"99.000000":600000,"99.900000":4000000}}}}]}"#;
        let w = parse_fio(text).unwrap();
        assert_eq!(w.ios, 3748);
        assert!(
            (w.p99_us - 600.0).abs() < 1e-9 && (w.p999_us - 4000.0).abs() < 1e-9 && (w.max_us - 9000.0).abs() < 1e-9
        );
        assert!(parse_fio("{\"jobs\":[{}]}").is_err());
    }
}
