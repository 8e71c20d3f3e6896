//! Booting one QEMU guest that runs one command.

use crate::cache::{cache_dir, FileLock};
use crate::host_cpu::HostCpu;
use crate::kernels::Kernel;
use anyhow::{Context, Result};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Errors a caller may want to tell apart; everything else is an `anyhow` chain.
#[derive(Debug, thiserror::Error)]
pub enum VmError {
    #[error("qemu-system-x86_64 not found: install the Debian package qemu-system-x86 (scripts/install-deps.sh does)")]
    QemuMissing,
    #[error("guest on kernel {kernel} timed out after {secs} s running {command:?}; last console lines:\n{tail}")]
    Timeout { kernel: String, secs: u64, command: String, tail: String },
    #[error("guest on kernel {kernel} ended without reporting an exit status (kernel panic or init failure); last console lines:\n{tail}")]
    NoExitStatus { kernel: String, tail: String, job_started: bool },
    #[error("guest on kernel {kernel} died before its job started, {attempts} times (last console lines below); TCG boot flakes are retried, this is not one:\n{tail}")]
    BootFailed { kernel: String, attempts: u32, tail: String },
}

/// How many times a guest that dies before its job starts is booted again. Under TCG with
/// several vCPUs, a boot now and then oopses in early text patching (int3 in
/// sched_clock_cpu, seen on 7.2.13); the job never ran, so running it again is safe.
const BOOT_ATTEMPTS: u32 = 3;

/// How many times a job whose guest kernel panicked is run, in a fresh guest each time. The
/// same TCG text-patching race strikes after boot too (CI, 6.12.117: a general protection
/// fault at a static-branch NOP in kmem_cache_free during a test's mkdir). Each run has its
/// own results directory and a fresh guest, so running the job again is safe; a panic that
/// our code causes repeats and still fails.
const PANIC_ATTEMPTS: u32 = 2;

/// True when a console tail shows the guest kernel died (rather than the job's init failing).
fn kernel_panicked(tail: &str) -> bool {
    tail.contains("Kernel panic - not syncing")
}

/// How QEMU executes guest code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accel {
    /// Software emulation: slow (user code 5-20x slower) but works everywhere.
    Tcg,
    Kvm,
}

/// An extra virtio-blk disk, backed by a sparse file in the run directory.
#[derive(Clone, Debug)]
pub struct Disk {
    pub size_mb: u64,
    pub purpose: DiskPurpose,
    /// QEMU `throttling.bps-write`, e.g. 262144 for the dirty-page reproducer's 256 KB/s disk.
    pub write_bps: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskPurpose {
    Swap,
    /// ext4, mounted at /run/scratch in the guest.
    Scratch,
}

/// A guest configuration; `run` boots it once.
#[derive(Clone, Debug)]
pub struct Guest {
    pub kernel: Kernel,
    pub memory_mb: u64,
    pub cpus: u32,
    pub disks: Vec<Disk>,
    pub zswap: bool,
    pub timeout: Duration,
    pub env: Vec<(String, String)>,
    /// Echo the guest console to stderr as it arrives.
    pub stream_console: bool,
    /// Working directory for the job (must exist on the host; the host root is shared).
    pub cwd: PathBuf,
    /// Host paths the job reads besides its binary and working directory (e.g. trace data);
    /// ones under /tmp or /run are carried into the guest like the working directory.
    pub shared_paths: Vec<PathBuf>,
    /// Boot the host's systemd as PID 1 (on a writable tmpfs overlay of the host root) and run
    /// the job as a service once basic.target is up, instead of chrooting into the host root.
    pub systemd: bool,
    /// Hold every guest slot (see [`shared_slots`]): the default, for anything that measures
    /// time. Mechanism tests set it to false and may share the host with another guest.
    pub exclusive: bool,
}

/// What one guest run produced.
#[derive(Debug)]
pub struct GuestRun {
    pub exit_code: i32,
    /// The job's stdout+stderr and the init's messages, from the serial console.
    pub console: String,
    /// Writable directory shared with the guest (same path inside and outside).
    pub results_dir: PathBuf,
    /// Host wall time from QEMU start to the job starting inside the guest.
    pub boot_secs: f64,
    pub wall_secs: f64,
    pub accel: Accel,
    /// The host's CPU over the same span as `wall_secs`, for telling a guest slowed by other
    /// host work from a clean one; `None` where the host does not say (no /proc/stat).
    pub host_cpu: Option<HostCpu>,
}

impl GuestRun {
    pub fn success(&self) -> bool {
        self.exit_code == 0
    }

    /// The guest kernel's log (dmesg), saved by init after the job.
    pub fn dmesg(&self) -> String {
        std::fs::read_to_string(self.results_dir.join("dmesg")).unwrap_or_default()
    }
}

impl Guest {
    pub fn new(kernel: Kernel) -> Guest {
        Guest {
            kernel,
            memory_mb: 2048,
            cpus: 2,
            disks: Vec::new(),
            zswap: false,
            timeout: Duration::from_secs(600),
            env: Vec::new(),
            stream_console: false,
            cwd: std::env::current_dir().unwrap_or_else(|_| "/".into()),
            shared_paths: Vec::new(),
            systemd: false,
            exclusive: true,
        }
    }

    /// `false`: this guest may run beside other shared guests (up to [`shared_slots`]).
    pub fn exclusive(mut self, exclusive: bool) -> Self {
        self.exclusive = exclusive;
        self
    }

    pub fn memory_mb(mut self, mb: u64) -> Self {
        self.memory_mb = mb;
        self
    }

    pub fn swap_mb(mut self, mb: u64) -> Self {
        self.disks.push(Disk { size_mb: mb, purpose: DiskPurpose::Swap, write_bps: None });
        self
    }

    pub fn scratch_mb(mut self, mb: u64, write_bps: Option<u64>) -> Self {
        self.disks.push(Disk { size_mb: mb, purpose: DiskPurpose::Scratch, write_bps });
        self
    }

    pub fn zswap(mut self, on: bool) -> Self {
        self.zswap = on;
        self
    }

    /// A swap disk of `mb` with zswap in front of it when `zswap`; no swap (and no zswap)
    /// when `mb` is `None`: what a scenario's optional `swap_mb` and `zswap` ask for.
    pub fn optional_swap(self, mb: Option<u64>, zswap: bool) -> Self {
        match mb {
            Some(mb) => self.swap_mb(mb).zswap(zswap),
            None => self,
        }
    }

    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }

    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Makes `path` visible in the guest even if it lives under the host's /tmp or /run
    /// (which the guest replaces with its own tmpfs).
    pub fn share_path(mut self, path: &Path) -> Self {
        self.shared_paths.push(path.to_path_buf());
        self
    }

    /// systemd as PID 1: the host root, read-only over 9p, below a tmpfs overlay (so packages
    /// can be installed and units written), cgroup2 mounted by systemd itself; the job runs as
    /// the unit memqos-job.service after basic.target. Nothing reaches the host's disk.
    pub fn systemd(mut self, on: bool) -> Self {
        self.systemd = on;
        self
    }

    pub fn stream_console(mut self, on: bool) -> Self {
        self.stream_console = on;
        self
    }

    /// Boots the guest, runs `argv` as root inside it (cgroup2 at /sys/fs/cgroup with the
    /// memory controller enabled for children), and returns when the guest powers off.
    pub fn run(&self, argv: &[String]) -> Result<GuestRun> {
        let mut attempt = 1;
        let mut panics = 0;
        loop {
            match self.run_once(argv) {
                Err(e) => match e.downcast_ref::<VmError>() {
                    Some(VmError::NoExitStatus { tail, job_started: true, .. })
                        if kernel_panicked(tail) && panics + 1 < PANIC_ATTEMPTS =>
                    {
                        panics += 1;
                        eprintln!(
                            "memqos vm: kernel {} panicked while the job ran (run {panics} of {PANIC_ATTEMPTS}), running the job again in a fresh guest; the console's last lines:\n{tail}",
                            self.kernel.release()
                        );
                    }
                    Some(VmError::NoExitStatus { tail, job_started: false, .. }) => {
                        if attempt == BOOT_ATTEMPTS {
                            return Err(VmError::BootFailed {
                                kernel: self.kernel.release(),
                                attempts: attempt,
                                tail: tail.clone(),
                            }
                            .into());
                        }
                        eprintln!(
                            "memqos vm: kernel {} died while booting (attempt {attempt} of {BOOT_ATTEMPTS}), booting again; last line: {}",
                            self.kernel.release(),
                            tail.lines().last().unwrap_or("")
                        );
                        attempt += 1;
                    }
                    _ => return Err(e),
                },
                ok => return ok,
            }
        }
    }

    fn run_once(&self, argv: &[String]) -> Result<GuestRun> {
        let qemu = which("qemu-system-x86_64").ok_or(VmError::QemuMissing)?;
        let initrd = crate::initramfs::ensure(&self.kernel)?;
        let results_dir = new_run_dir()?;
        self.write_job(&results_dir, argv)?;
        let accel = detect_accel(&qemu, &self.kernel, &initrd);
        let _slots = acquire_slots(self.exclusive)?;
        let mut cmd = self.qemu_command(&qemu, &initrd, &results_dir, accel)?;
        // After the slots: waiting for them while another guest runs is not this guest's time.
        let host_cpu = crate::host_cpu::Probe::start();
        let started = Instant::now();
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .stdin(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", qemu.display()))?;
        let (tx, rx) = mpsc::channel::<String>();
        let stdout = child.stdout.take().expect("piped");
        let stderr = child.stderr.take().expect("piped");
        let tx2 = tx.clone();
        std::thread::spawn(move || forward_lines(stdout, tx));
        std::thread::spawn(move || forward_lines(stderr, tx2));

        let mut console = String::new();
        let mut boot_secs = None;
        let mut log = std::fs::File::create(results_dir.join("console.log"))?;
        let deadline = started + self.timeout;
        let timed_out = loop {
            let now = Instant::now();
            if now >= deadline {
                break true;
            }
            match rx.recv_timeout((deadline - now).min(Duration::from_millis(200))) {
                Ok(line) => {
                    if boot_secs.is_none() && line.contains("memqos-init: job starting") {
                        boot_secs = Some(started.elapsed().as_secs_f64());
                    }
                    if self.stream_console {
                        eprintln!("[{}] {line}", self.kernel.series);
                    }
                    let _ = writeln!(log, "{line}");
                    console.push_str(&line);
                    console.push('\n');
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if child.try_wait()?.is_some() {
                        // Drain what is left, then stop.
                        while let Ok(line) = rx.recv_timeout(Duration::from_millis(100)) {
                            let _ = writeln!(log, "{line}");
                            console.push_str(&line);
                            console.push('\n');
                        }
                        break false;
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break false,
            }
        };
        if timed_out {
            let _ = child.kill();
            let _ = child.wait();
            return Err(VmError::Timeout {
                kernel: self.kernel.release(),
                secs: self.timeout.as_secs(),
                command: argv.join(" "),
                tail: tail(&console, 30),
            }
            .into());
        }
        child.wait()?;
        let host_cpu = host_cpu.finish();
        for i in 0..self.disks.len() {
            let _ = std::fs::remove_file(results_dir.join(format!("disk{i}.img")));
        }
        let wall_secs = started.elapsed().as_secs_f64();
        let status = std::fs::read_to_string(results_dir.join("exit-status")).ok();
        let exit_code = match status.and_then(|s| s.trim().parse().ok()) {
            Some(code) => code,
            None => {
                return Err(VmError::NoExitStatus {
                    kernel: self.kernel.release(),
                    tail: tail(&console, 40),
                    job_started: boot_secs.is_some(),
                }
                .into())
            }
        };
        Ok(GuestRun {
            exit_code,
            console,
            results_dir,
            boot_secs: boot_secs.unwrap_or(wall_secs),
            wall_secs,
            accel,
            host_cpu,
        })
    }

    fn write_job(&self, results_dir: &Path, argv: &[String]) -> Result<()> {
        let mut job = String::from("#!/bin/sh\n");
        // The calling binary's directory comes first so `memqos ...` works inside the guest.
        let exe_dir = std::env::current_exe().ok().and_then(|p| p.parent().map(|d| d.to_string_lossy().into_owned()));
        let std_path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
        let path = exe_dir.map(|d| format!("{d}:{std_path}")).unwrap_or_else(|| std_path.into());
        job += &format!("export PATH={} HOME=/tmp LANG=C.UTF-8\n", sh_quote(&path));
        job += &format!("export MEMQOS_IN_GUEST=1 MEMQOS_RESULTS={}\n", sh_quote(&results_dir.to_string_lossy()));
        job += &format!("export MEMQOS_GUEST_KERNEL={}\n", sh_quote(&self.kernel.release()));
        for (k, v) in &self.env {
            job += &format!("export {k}={}\n", sh_quote(v));
        }
        job += &format!("cd {} || exit 125\n", sh_quote(&self.cwd.to_string_lossy()));
        job += "exec";
        for a in argv {
            job += " ";
            job += &sh_quote(a);
        }
        job += "\n";
        std::fs::write(results_dir.join("job.sh"), job)?;
        Ok(())
    }

    fn qemu_command(&self, qemu: &Path, initrd: &Path, results: &Path, accel: Accel) -> Result<Command> {
        let mut append =
            format!("console=ttyS0 panic=-1 quiet loglevel=3 mitigations=off memqos.results={}", results.display());
        let keep = self.paths_to_keep(argv_exe(results));
        if !keep.is_empty() {
            append += &format!(" memqos.keep={}", keep.join(","));
        }
        let mut cmd = Command::new(qemu);
        // The emulator dies with the thread that waits for it: a lab command killed by a
        // signal it cannot catch (a `kill` of the process alone) otherwise left its guest
        // running as an orphan, taking host CPU from the next experiment's guest.
        // SAFETY: prctl is async-signal-safe and touches nothing of the parent's.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd.args(["-nodefaults", "-display", "none", "-no-reboot", "-serial", "stdio"]);
        match accel {
            Accel::Kvm => cmd.args(["-accel", "kvm", "-cpu", "host"]),
            Accel::Tcg => cmd.args(["-accel", "tcg,thread=multi", "-cpu", "max"]),
        };
        cmd.args(["-smp", &self.cpus.to_string(), "-m", &format!("{}M", self.memory_mb)]);
        cmd.arg("-kernel").arg(&self.kernel.vmlinuz).arg("-initrd").arg(initrd);
        cmd.arg("-virtfs").arg("local,path=/,mount_tag=host,security_model=none,readonly=on,multidevs=remap");
        cmd.arg("-virtfs")
            .arg(format!("local,path={},mount_tag=results,security_model=none,multidevs=remap", results.display()));
        for (i, disk) in self.disks.iter().enumerate() {
            let file = results.join(format!("disk{i}.img"));
            std::fs::File::create(&file)?.set_len(disk.size_mb << 20)?;
            let mut drive = format!("file={},format=raw,if=virtio,cache=none,aio=threads", file.display());
            if let Some(bps) = disk.write_bps {
                drive += &format!(",throttling.bps-write={bps}");
            }
            cmd.arg("-drive").arg(drive);
            let dev = format!("/dev/vd{}", (b'a' + i as u8) as char);
            match disk.purpose {
                DiskPurpose::Swap => append += &format!(" memqos.swap={dev}"),
                DiskPurpose::Scratch => append += &format!(" memqos.scratch={dev}"),
            }
        }
        if self.zswap {
            append += " memqos.zswap=1";
        }
        if self.systemd {
            append += " memqos.init=systemd";
        }
        cmd.arg("-append").arg(append);
        Ok(cmd)
    }
}

/// The most guest slots there can be; an exclusive guest holds all of them.
const MAX_SLOTS: usize = 4;

/// How many shared guests may run at once on this machine: `MEMQOS_VM_SLOTS` (default 1,
/// at most 4). An exclusive guest (experiments, benchmarks, tests that assert a delay) always
/// runs alone: timing results must not be distorted by a second emulator on the same cores.
/// Mechanism tests gain from 2 on a 2-core host: much of a guest's life is its boot and
/// waiting on timers, which a second guest overlaps.
pub fn shared_slots() -> usize {
    std::env::var("MEMQOS_VM_SLOTS").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(1).clamp(1, MAX_SLOTS)
}

/// Slot 0 keeps the lock file's old name, so a build from before slots still excludes
/// every guest of this one, and the reverse.
fn slot_file(dir: &Path, i: usize) -> PathBuf {
    if i == 0 {
        dir.join("vm.lock")
    } else {
        dir.join(format!("vm.lock.{i}"))
    }
}

fn acquire_slots(exclusive: bool) -> Result<Vec<FileLock>> {
    acquire_slots_in(&cache_dir(), exclusive, shared_slots())
}

/// Exclusive guests (and every guest when there is one shared slot) take every slot, in
/// order, so two of them never each hold a part; a shared guest takes the first free one of
/// its `shared` slots and polls, so it never waits holding a slot.
fn acquire_slots_in(dir: &Path, exclusive: bool, shared: usize) -> Result<Vec<FileLock>> {
    if exclusive || shared == 1 {
        return (0..MAX_SLOTS)
            .map(|i| FileLock::acquire_at(&slot_file(dir, i)).context("waiting for the guest slots"))
            .collect();
    }
    loop {
        for i in 0..shared.min(MAX_SLOTS) {
            if let Some(lock) = FileLock::try_acquire_at(&slot_file(dir, i)).context("taking a guest slot")? {
                return Ok(vec![lock]);
            }
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The job script records the command; the executable is its first word after `exec`.
fn argv_exe(results: &Path) -> Option<PathBuf> {
    let job = std::fs::read_to_string(results.join("job.sh")).ok()?;
    let line = job.lines().find(|l| l.starts_with("exec "))?;
    let first = line.strip_prefix("exec '")?.split('\'').next()?;
    Some(PathBuf::from(first))
}

impl Guest {
    /// Host directories under /tmp or /run (which the guest replaces with its own tmpfs) that
    /// the job needs: its working directory, the calling binary and the command.
    fn paths_to_keep(&self, command: Option<PathBuf>) -> Vec<String> {
        let mut keep: Vec<String> = Vec::new();
        let exe = std::env::current_exe().ok();
        let extra = self.shared_paths.iter().cloned().map(Some);
        for p in [Some(self.cwd.clone()), exe, command].into_iter().chain(extra).flatten() {
            let mut parts = p.components().skip(1);
            let (Some(top), Some(sub)) = (parts.next(), parts.next()) else { continue };
            let top = top.as_os_str().to_string_lossy();
            if top == "tmp" || top == "run" {
                let dir = format!("/{top}/{}", sub.as_os_str().to_string_lossy());
                if Path::new(&dir).is_dir() && !keep.contains(&dir) && !dir.contains(',') && !dir.contains(' ') {
                    keep.push(dir);
                }
            }
        }
        keep
    }
}

fn forward_lines(r: impl std::io::Read, tx: mpsc::Sender<String>) {
    for line in BufReader::new(r).lines() {
        let Ok(line) = line else { break };
        // Serial output carries \r; keep lines clean for logs and assertions.
        if tx.send(line.trim_end_matches('\r').to_owned()).is_err() {
            break;
        }
    }
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

fn which(prog: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(prog)).find(|p| p.is_file())
}

static RUN_COUNTER: AtomicU32 = AtomicU32::new(0);

/// A fresh results directory under the cache (never /tmp: the guest mounts its own tmpfs
/// there, which would hide the shared directory).
fn new_run_dir() -> Result<PathBuf> {
    let n = RUN_COUNTER.fetch_add(1, Ordering::Relaxed);
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_millis();
    let dir = cache_dir().join("runs").join(format!("{stamp}-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// KVM only if it actually boots a guest: on these machines /dev/kvm is a paravirtual nested
/// hypervisor on which a stock kernel dies at boot. `MEMQOS_VM_ACCEL=tcg|kvm` overrides; the
/// probe's verdict is cached per host boot.
fn detect_accel(qemu: &Path, kernel: &Kernel, initrd: &Path) -> Accel {
    match std::env::var("MEMQOS_VM_ACCEL").as_deref() {
        Ok("tcg") => return Accel::Tcg,
        Ok("kvm") => return Accel::Kvm,
        _ => {}
    }
    if std::fs::File::options().read(true).write(true).open("/dev/kvm").is_err() {
        return Accel::Tcg;
    }
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let verdict_file = cache_dir().join("kvm-probe");
    if let Ok(text) = std::fs::read_to_string(&verdict_file) {
        if let Some((id, verdict)) = text.split_once(' ') {
            if id == boot_id.trim() {
                return if verdict.trim() == "kvm" { Accel::Kvm } else { Accel::Tcg };
            }
        }
    }
    let probe = Guest { stream_console: false, timeout: Duration::from_secs(60), ..Guest::new(kernel.clone()) };
    let works = (|| -> Result<bool> {
        let dir = new_run_dir()?;
        probe.write_job(&dir, &["true".to_string()])?;
        let mut cmd = probe.qemu_command(qemu, initrd, &dir, Accel::Kvm)?;
        let out = cmd.stdout(Stdio::null()).stderr(Stdio::null()).stdin(Stdio::null()).spawn()?;
        let ok = wait_with_timeout(out, Duration::from_secs(20)) && dir.join("exit-status").exists();
        let _ = std::fs::remove_dir_all(&dir);
        Ok(ok)
    })()
    .unwrap_or(false);
    let _ = std::fs::write(&verdict_file, format!("{} {}\n", boot_id.trim(), if works { "kvm" } else { "tcg" }));
    if works {
        Accel::Kvm
    } else {
        Accel::Tcg
    }
}

fn wait_with_timeout(mut child: std::process::Child, t: Duration) -> bool {
    let end = Instant::now() + t;
    while Instant::now() < end {
        if let Ok(Some(status)) = child.try_wait() {
            return status.success();
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    false
}

#[cfg(test)]
mod tests {
    use super::{acquire_slots_in, kernel_panicked};
    use std::sync::mpsc;
    use std::time::Duration;

    /// Whether `f` finishes within `wait` (it runs on in the background if not).
    fn finishes_within<T: Send + 'static>(wait: Duration, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(wait).ok()
    }

    #[test]
    fn shared_guests_fill_their_slots_and_an_exclusive_one_waits_for_all() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        let first = acquire_slots_in(&path, false, 2).unwrap();
        let second = acquire_slots_in(&path, false, 2).unwrap();
        assert_eq!((first.len(), second.len()), (1, 1), "a shared guest holds one slot");
        let p = path.clone();
        let third = finishes_within(Duration::from_millis(600), move || acquire_slots_in(&p, false, 2).unwrap());
        assert!(third.is_none(), "a third shared guest ran while both slots were held");
        drop(first);
        let p = path.clone();
        let exclusive = finishes_within(Duration::from_millis(600), move || acquire_slots_in(&p, true, 2).unwrap());
        assert!(exclusive.is_none(), "an exclusive guest ran beside a shared one");
        drop(second);
        // Now free: the waiting shared guest or the exclusive one gets the host, then the other.
        let p = path.clone();
        let alone = finishes_within(Duration::from_secs(10), move || acquire_slots_in(&p, true, 2).unwrap().len());
        assert_eq!(alone, Some(super::MAX_SLOTS), "an exclusive guest holds every slot once they are free");
    }

    #[test]
    fn with_one_shared_slot_every_guest_runs_alone() {
        let dir = tempfile::tempdir().unwrap();
        let held = acquire_slots_in(dir.path(), false, 1).unwrap();
        assert_eq!(held.len(), super::MAX_SLOTS);
        let p = dir.path().to_path_buf();
        assert!(finishes_within(Duration::from_millis(600), move || acquire_slots_in(&p, false, 2).unwrap()).is_none());
    }

    #[test]
    fn a_panicked_kernel_is_told_from_a_failed_init() {
        let ci_tail = "[    3.180203] RIP: 0010:kmem_cache_free+0x105/0x450\n[    3.180327] Kernel panic - not syncing: Fatal exception in interrupt\n";
        assert!(kernel_panicked(ci_tail));
        assert!(!kernel_panicked("memqos-init: job starting\nsh: 1: exec: not found\n"));
    }
}
