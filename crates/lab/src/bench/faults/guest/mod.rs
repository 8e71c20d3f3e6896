//! The campaign's scenarios, run inside a guest (see the parent module for what each proves).

use super::{Check, DescriptorsResult, HostileResult, KernelResult, Phase, SigkillResult, Spread, StateDirResult};
use crate::bench::churn::{remove_when_empty, spawn_in};
use crate::configs::DaemonConfig;
use crate::daemon_process::DaemonProcess;
use anyhow::{bail, Context, Result};
use memqos_cgroupfs::Cgroup;
use memqos_daemon::events::{self, Event, LogLine, Outcome, WriteEvent};
use memqos_daemon::journal::Journal;
use memqos_daemon::lock::StateLock;
use memqos_daemon::mono_ns;
use memqos_policy::size::MIB;
use memqos_policy::EXPECTED_PEAK_XATTR;
use std::collections::{HashMap, HashSet};
use std::ffi::{CString, OsStr};
use std::io::Write as _;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

// One file per scenario; they share this module's helpers and imports (`use super::*`).
mod churn;
mod descriptors;
mod hostile;
mod sigkill;
mod state_dir;

use churn::{caps, check, is_cap, note_first_reads, Churner};
use descriptors::descriptors;
use hostile::hostile;
use sigkill::sigkill;
use state_dir::state_dir;

pub const SCENARIOS: &[&str] = &["sigkill", "hostile", "state_dir", "descriptors"];

const ROOT: &str = "/sys/fs/cgroup/faults";
/// Rehearsal on a host without cgroup v2 (a developer's check of the scenarios' own logic,
/// never a result): the tree is plain directories with fake cgroup files below this one.
const FAKE_ENV: &str = "MEMQOS_FAULTS_FAKE_ROOT";
const STATE: &str = "/run/memqos-faults";
const CONFIG: &str = "/run/memqos-faults.toml";
const PARENT_LIMIT: u64 = 512 * MIB;
/// Names reused by the churn: `low/tool.{k % SLOTS}`.
const SLOTS: u64 = 50;
const CHURN_PERIOD: Duration = Duration::from_millis(10);
/// The tenants' own memory.high values start here: far above any cap memqos writes (at most
/// the parent's limit), page aligned so the kernel reads back exactly what was written.
const V_BASE: u64 = 1 << 30;
const RESTORE_PATIENCE: Duration = Duration::from_secs(30);

pub fn run(scenarios: &[String], kills: usize, seed: u64, cgroups: usize) -> Result<KernelResult> {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")?.trim().to_string();
    let mut r = KernelResult { kernel, ..Default::default() };
    for s in scenarios {
        eprintln!("faults: scenario {s}");
        let t0 = Instant::now();
        let outcome = match s.as_str() {
            "sigkill" => sigkill(kills, seed).map(|x| r.sigkill = Some(x)),
            "hostile" => hostile().map(|x| r.hostile = Some(x)),
            "state_dir" => state_dir().map(|x| r.state_dir = Some(x)),
            "descriptors" => descriptors(cgroups).map(|x| r.descriptors = Some(x)),
            other => bail!("unknown scenario {other}"),
        };
        if let Err(e) = outcome {
            eprintln!("faults: {s} stopped: {e:#}");
            r.errors.push(format!("{s}: {e:#}"));
        }
        eprintln!("faults: {s} took {:.0} s", t0.elapsed().as_secs_f64());
        teardown();
    }
    Ok(r)
}

fn root_path() -> PathBuf {
    std::env::var_os(FAKE_ENV).map_or_else(|| PathBuf::from(ROOT), |d| PathBuf::from(d).join("faults"))
}

fn state_path() -> PathBuf {
    std::env::var_os(FAKE_ENV).map_or_else(|| PathBuf::from(STATE), |d| PathBuf::from(d).join("state"))
}

fn config_path() -> PathBuf {
    std::env::var_os(FAKE_ENV).map_or_else(|| PathBuf::from(CONFIG), |d| PathBuf::from(d).join("memqos.toml"))
}

fn stderr_path() -> PathBuf {
    state_path().with_file_name("memqos-faults-daemon.stderr")
}

fn fake() -> bool {
    std::env::var_os(FAKE_ENV).is_some()
}

/// mkdir; in a rehearsal also the files the daemon reads.
fn make(cg: &Cgroup) -> Result<()> {
    cg.create()?;
    if fake() {
        let files = [
            ("cgroup.controllers", "memory\n"),
            ("cgroup.procs", ""),
            ("cgroup.events", "populated 1\nfrozen 0\n"),
            ("cgroup.freeze", "0\n"),
            ("cgroup.subtree_control", ""),
            ("cgroup.type", "domain\n"),
            ("memory.current", "1048576\n"),
            ("memory.max", "max\n"),
            ("memory.high", "max\n"),
            ("memory.low", "0\n"),
            ("memory.min", "0\n"),
            ("memory.events", "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n"),
            (
                "memory.pressure",
                "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
            ),
        ];
        for (f, v) in files {
            std::fs::write(cg.path().join(f), v)?;
        }
    }
    Ok(())
}

/// rmdir once empty; in a rehearsal the directory and its fake files.
fn unmake(cg: &Cgroup) -> Result<()> {
    if fake() {
        return std::fs::remove_dir_all(cg.path()).with_context(|| format!("removing {}", cg.path().display()));
    }
    remove_when_empty(cg)
}

/// Removes the campaign's tree (deepest first), ending the processes in it.
fn teardown() {
    let root = Cgroup::new(root_path());
    if !root.exists() {
        return;
    }
    let mut all = root.descendants().unwrap_or_default();
    all.push(root.clone());
    for cg in all.iter().rev() {
        if let Ok(pids) = cg.procs() {
            for pid in pids {
                // SAFETY: kill(2) on processes the campaign started in its own tree.
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            }
        }
        let _ = unmake(cg);
    }
}

/// The campaign's tree: the parent with a limit, a protected cgroup with a process that
/// declares `declared` (root-owned: honoured), and `low/` for the tenants' cgroups.
struct Tree {
    root: Cgroup,
    prot: Cgroup,
    low: Cgroup,
    sleepers: Vec<Child>,
}

impl Tree {
    fn setup(declared: &str) -> Result<Tree> {
        teardown();
        let root = Cgroup::new(root_path());
        make(&root)?;
        root.write_string("memory.max", &PARENT_LIMIT.to_string())?;
        root.write_string("cgroup.subtree_control", "+memory")?;
        let prot = root.child("prot");
        make(&prot)?;
        prot.set_xattr(EXPECTED_PEAK_XATTR, declared)?;
        let sleepers = vec![spawn_in(&prot, "sleep", &["100000"])?];
        let low = root.child("low");
        make(&low)?;
        low.write_string("cgroup.subtree_control", "+memory")?;
        Ok(Tree { root, prot, low, sleepers })
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        for c in &mut self.sleepers {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn config() -> Result<PathBuf> {
    daemon_config().write(config_path().as_path())?;
    Ok(config_path())
}

fn daemon_config() -> DaemonConfig {
    let c = DaemonConfig::named("faults.toml");
    if !fake() {
        return c;
    }
    // Fake files have no PSI triggers or events to watch.
    c.set("cgroup_root", root_path().display().to_string()).set("signals.psi", false).set("signals.events", false)
}

/// Launches `memqos daemon` (guardian on unless `extra` says otherwise) without waiting for
/// it, after removing the stale status and log of an earlier life. `nofile`: the open-file
/// limit, soft and hard, set before exec.
fn spawn_daemon(state: &Path, extra: &[&str], stdout: Stdio, nofile: Option<u64>) -> Result<Child> {
    std::fs::create_dir_all(state)?;
    for stale in [memqos_daemon::status::STATUS_FILE, events::EVENTS_FILE, events::ROTATED_FILE] {
        let _ = std::fs::remove_file(state.join(stale));
    }
    let stderr = std::fs::File::create(stderr_path())?;
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.args(["daemon", "--config"])
        .arg(config_path())
        .args(["--state-dir"])
        .arg(state)
        .args(extra)
        .stdout(stdout)
        .stderr(stderr);
    if let Some(n) = nofile {
        // SAFETY: setrlimit is async-signal-safe; the struct is built before the fork.
        let lim = libc::rlimit { rlim_cur: n, rlim_max: n };
        unsafe {
            cmd.pre_exec(move || {
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    cmd.spawn().context("starting memqos daemon")
}

fn daemon_stderr_tail() -> String {
    let t = std::fs::read_to_string(stderr_path()).unwrap_or_default();
    let lines: Vec<&str> = t.lines().collect();
    lines[lines.len().saturating_sub(3)..].join(" / ")
}

/// Waits until no process holds the state lock and the journal is gone or empty (the
/// guardian restored it). Err: not within the patience, with what was last seen.
fn await_restore(state: &Path) -> Result<Duration, String> {
    let t0 = Instant::now();
    let mut last = String::new();
    while t0.elapsed() < RESTORE_PATIENCE {
        if let Ok(lock) = StateLock::try_acquire(state, "memqos-lab bench faults") {
            let empty = match Journal::open(state, root_path().as_path()) {
                Ok(j) => j.is_empty(),
                Err(e) => {
                    last = format!("{e:#}");
                    false
                }
            };
            drop(lock);
            if empty {
                return Ok(t0.elapsed());
            }
        } else {
            last = "the state lock stayed taken".into();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Err(if last.is_empty() { "the journal kept entries".into() } else { last })
}

/// `memqos restore` by hand, after a guardian that did not.
fn restore_by_hand(state: &Path) {
    let _ = Command::new(std::env::current_exe().unwrap_or_default())
        .args(["restore", "--state-dir"])
        .arg(state)
        .stdout(Stdio::null())
        .status();
}

fn ms_between(from_ns: u64, to_ns: u64) -> f64 {
    to_ns.saturating_sub(from_ns) as f64 / 1e6
}
