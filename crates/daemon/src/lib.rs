//! The memqos daemon: sample the managed cgroups, run the policy engine, journal and write
//! the knobs it decides, and put everything back when it stops.
//!
//! Lifecycle (the order matters for safety):
//! 1. the config is parsed and validated, and the cgroup root checked, before anything is
//!    touched;
//! 2. a journal left by a crashed run is restored before anything else;
//! 3. a guardian process is started that restores the journal if the daemon dies, even by
//!    SIGKILL (it waits for EOF on a pipe only the daemon holds);
//! 4. the loop (`daemon::Daemon`, a value with named steps): wait for a signal (PSI
//!    trigger, memory.events change) or the sampling interval, sample, tick the engine,
//!    journal-then-write each decision, log it;
//! 5. a stop request (SIGTERM/SIGINT for the command, `Handle::request_stop` in-process)
//!    only sets a flag; the loop ends and the journal is restored. A reload request (SIGHUP,
//!    `Handle::request_reload`) sets another: the loop reloads the config between two ticks
//!    (`reload`).

pub use memqos_cgroupfs::mounts;
pub mod actuator;
mod admission;
pub mod beneath;
mod bpf_source;
pub mod control;
mod cpu_weight;
mod daemon;
mod deadline;
mod dirty;
pub mod events;
pub mod explain;
mod fast_read;
pub mod handle;
pub mod history;
pub mod inotify;
pub mod journal;
mod learn;
mod leftovers;
mod limit_writer;
pub mod lock;
pub mod memlock;
pub mod metrics;
mod observe;
mod oom_adj;
pub mod oom_report;
pub mod proc_stat;
pub mod protection_check;
pub mod reload;
pub mod sd_notify;
mod signals;
pub mod status;
mod swap_max;
pub use swap_max::PROC_SWAPS;
mod tier_static;

use actuator::Actuator;
use anyhow::{bail, Context, Result};
use events::{Event, EventLog};
use journal::Journal;
use lock::StateLock;
use memqos_cgroupfs::Cgroup;
use memqos_policy::Config;
use signals::Signals;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub use handle::Handle;
pub use journal::restore_state_dir;

#[derive(Clone)]
pub struct Options {
    pub config_path: PathBuf,
    /// Overrides the config's state_dir.
    pub state_dir: Option<PathBuf>,
    /// Start the guardian that restores knobs if the daemon dies (on by default).
    pub guardian: bool,
    /// The memqos executable, for the guardian.
    pub exe: PathBuf,
    /// Stop after this long (demos, tests that look only at the end); otherwise run until
    /// the `Handle` asks it to stop.
    pub duration: Option<Duration>,
    /// Where each tick's snapshot comes from (memqos-stats): text, bpf or auto.
    pub stats_backend: memqos_stats::BackendChoice,
    /// Decide and log as usual, write nothing (no knob, no journal).
    pub dry_run: bool,
    /// Print each event on stdout too (the command does; in-process tests need not).
    pub echo: bool,
    /// Lock the process's memory (`memlock`): the command does; in-process tests, which share
    /// their process with other tests, need not.
    pub lock_memory: bool,
    /// Where the host's active swap devices are listed (/proc/swaps): without any, the
    /// headroom guard caps at usage (`ParentObs::swapless`). Tests point it at a file.
    pub proc_swaps: PathBuf,
}

/// Loads and validates the config; nothing is touched.
pub fn load_config(path: &Path) -> Result<Config> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading config {}", path.display()))?;
    Config::from_str(&text, &path.to_string_lossy()).map_err(|e| anyhow::anyhow!("{e}"))
}

/// Checks that the cgroup root is a cgroup v2 directory whose children have the memory
/// controller; the error says what to do.
fn check_root(root: &Cgroup) -> Result<()> {
    if !root.path().join("cgroup.controllers").exists() {
        bail!(
            "cgroup_root {} is not a cgroup v2 directory (no cgroup.controllers); run `memqos doctor`",
            root.path().display()
        );
    }
    let controllers = root.controllers()?;
    if !controllers.iter().any(|c| c == "memory") {
        bail!("cgroup_root {}: the memory controller is not enabled for it (cgroup.controllers: {:?}); enable it in the parent's cgroup.subtree_control", root.path().display(), controllers);
    }
    Ok(())
}

/// Descriptors are cached per managed cgroup (the fast path's ~6 per protected cgroup, the
/// text backend's 7 per cgroup): lift the open-file limit so ten thousand cgroups fit. As
/// root, up to `fs.nr_open` (capped at 2^20); a 10,000-cgroup tree ran out at a guest
/// init's default hard limit. Otherwise the soft limit goes up to the hard one.
fn raise_fd_limit() {
    const WANT: libc::rlim_t = 1 << 20;
    let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse::<libc::rlim_t>().ok())
        .unwrap_or(WANT);
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: valid out-pointer; setrlimit with values the kernel gave us or bounded by
    // fs.nr_open (raising the hard limit needs CAP_SYS_RESOURCE; EPERM falls back).
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
            return;
        }
        let target = WANT.min(nr_open);
        if r.rlim_max < target {
            let raised = libc::rlimit { rlim_cur: target, rlim_max: target };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                return;
            }
        }
        if r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

/// Restores a journal left by an earlier run, under the lock. Err names each knob.
fn recover(state_dir: &Path, log: &mut EventLog) -> Result<()> {
    if let Some(report) = restore_state_dir(state_dir)? {
        for message in &report.skipped {
            log.emit(Event::Degraded { message: message.clone() });
        }
        if !report.other_boot.is_empty() {
            log.emit(Event::Degraded {
                message: format!(
                    "{}: {} journal entries of another boot dropped, not restored (cgroup ids and pids are reused across boots); the file is kept aside as journal.json.boot-*",
                    state_dir.display(),
                    report.other_boot.len()
                ),
            });
        }
        let failed = report.failures();
        log.emit(Event::Recovered {
            restored: report.restored.len(),
            vanished: report.vanished.len(),
            failed: failed.clone(),
        });
        if !failed.is_empty() {
            bail!(
                "could not restore knobs left by the previous run (the journal in {} keeps them): {}",
                state_dir.display(),
                failed.join("; ")
            );
        }
    }
    Ok(())
}

/// Runs the daemon until `handle` asks it to stop (or `opts.duration` is over, or the root
/// is lost), then restores every knob it wrote. `Handle::on_signals()` for the command:
/// SIGTERM/SIGINT stop it, SIGHUP reloads.
pub fn run(opts: Options, handle: Handle) -> Result<()> {
    let mut cfg = load_config(&opts.config_path)?;
    let state_dir = opts.state_dir.clone().unwrap_or_else(|| cfg.state_dir.clone());
    let root = Cgroup::new(&cfg.cgroup_root);
    check_root(&root)?;
    // A guardian restoring after a crash holds the lock for a moment: wait that long.
    let _lock = match StateLock::acquire_within(&state_dir, LOCK_PATIENCE)? {
        Some(l) => l,
        None => StateLock::try_acquire(&state_dir, "memqos daemon")?,
    };
    let _root_lock = lock::RootLock::try_acquire(root.path())?;
    let mut log = EventLog::open(&state_dir, events::DEFAULT_MAX_BYTES, opts.echo);

    // A journal here means the previous run did not finish its restore.
    if opts.dry_run {
        if state_dir.join(journal::JOURNAL_FILE).exists() {
            bail!("{}: a journal of an earlier run is left; a dry run writes nothing, so restore it first (`memqos restore --state-dir {}`)", state_dir.display(), state_dir.display());
        }
    } else {
        recover(&state_dir, &mut log)?;
    }
    raise_fd_limit();
    let journal = Journal::open(&state_dir, root.path())?;
    for message in &journal.skipped {
        log.emit(Event::Degraded { message: message.clone() });
    }
    let root_dir = beneath::Root::open(root.path())?;
    let mut act = Actuator::new(root_dir, journal, log, opts.dry_run);
    let _guardian = if opts.guardian && !opts.dry_run { Some(Guardian::start(&opts.exe, &state_dir)?) } else { None };
    handle.wire_signals_if_asked();

    let mut signals = Signals::new(cfg.signals.psi, cfg.signals.events, cfg.signals.bpf);
    act.emit(Event::Started {
        pid: std::process::id(),
        cgroup_root: cfg.cgroup_root.clone(),
        config: opts.config_path.clone(),
        dry_run: opts.dry_run,
    });
    if let Some(bpf) = &signals.bpf_started {
        act.emit(Event::BpfSource { hooks: bpf.clone() });
    }

    // Made once: a restart of the loop reuses it (see `daemon::AcrossRestarts`).
    let control = match control::Server::start(&state_dir, explain::View::new(cfg.clone(), opts.config_path.clone())) {
        Ok(c) => Some(c),
        Err(e) => {
            act.emit(Event::Degraded { message: format!("`memqos explain` unavailable: control socket: {e:#}") });
            None
        }
    };
    // The loop runs under catch_unwind so a panic still reaches the restore below (the
    // actuator's Drop is the second line of defence). A loop that fails while the root is
    // still there (a fault of the host, not of one cgroup: those are skipped inside) puts
    // every knob back and starts afresh: protection pauses for a moment, it does not end.
    // Only the loss of the root, a panic or a stop request ends the daemon.
    let started = Instant::now();
    // Restarts since an iteration last completed (a loop that ran a while before failing
    // meets a new fault, not the same one again), and the count of iterations then.
    let (mut failed_in_a_row, mut iterations_seen): (u32, u64) = (0, 0);
    let result = loop {
        let mut this_run = opts.clone();
        this_run.duration = opts.duration.map(|d| d.saturating_sub(started.elapsed()));
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let kept = daemon::AcrossRestarts { act: &mut act, signals: &mut signals, control: control.as_ref() };
            daemon::Daemon::new(&this_run, &handle, &mut cfg, &root, &state_dir, kept)?.run()
        }));
        let error = match &result {
            Ok(Err(e)) => format!("{e:#}"),
            _ => break result,
        };
        let over = opts.duration.is_some_and(|d| started.elapsed() + LOOP_RETRY >= d);
        if handle.stop_requested() || over || !root_is_there(&root) {
            break result;
        }
        admission::remove(&state_dir);
        let restored = match act.restore() {
            Ok(r) => r.restored.len(),
            Err(e) => {
                act.emit(Event::Degraded { message: format!("restoring before the restart of the loop: {e:#}") });
                0
            }
        };
        act.resume();
        let restarts = LOOP_RESTARTS.fetch_add(1, Ordering::Relaxed) + 1;
        // A fault that outlasts a few restarts is waited out with growing pauses (up to
        // LOOP_RETRY_MAX), not retried every second forever; the watchdog, fed only by
        // completed iterations, tells systemd when it never ends.
        let iterations = ITERATIONS.load(Ordering::Relaxed);
        failed_in_a_row = if iterations != iterations_seen { 1 } else { failed_in_a_row + 1 };
        iterations_seen = iterations;
        let retry = LOOP_RETRY.saturating_mul(1 << failed_in_a_row.min(6).saturating_sub(1)).min(LOOP_RETRY_MAX);
        act.emit(Event::LoopRestarted { error, restored, restarts, retry_ms: retry.as_millis() as u64 });
        std::thread::sleep(retry);
    };

    let _ = sd_notify::notify("STOPPING=1");
    if let Some(summary) = signals.bpf_summary() {
        act.emit(Event::BpfSummary { bpf: summary });
    }
    // Detach the BPF programs before restoring, so the restore's own reclaim is not counted.
    drop(signals);
    // First: no call is armed against a daemon that is going.
    admission::remove(&state_dir);
    let report = act.restore();
    let error = match &result {
        Ok(Err(e)) => Some(format!("{e:#}")),
        Err(_) => Some("panic in the daemon loop".to_string()),
        Ok(Ok(())) => None,
    };
    let (restored, vanished, failed) = match &report {
        Ok(r) => (r.restored.len(), r.vanished.len(), r.failures()),
        Err(e) => (0, 0, vec![format!("{e:#}")]),
    };
    act.emit(Event::Stopped { restored, vanished, failed: failed.clone(), error });
    status::remove(&state_dir);
    let _ = std::fs::remove_file(state_dir.join(memqos_schema::state::HEARTBEAT_FILE));
    match result {
        Err(panic) => std::panic::resume_unwind(panic),
        Ok(Err(e)) if failed.is_empty() => Err(e),
        Ok(r) if failed.is_empty() => r,
        Ok(r) => {
            let also = r.err().map(|e| format!(" (the loop had stopped on: {e:#})")).unwrap_or_default();
            bail!(
                "restore failed for {} knob(s), kept in the journal for `memqos restore`: {}{also}",
                failed.len(),
                failed.join("; ")
            )
        }
    }
}

/// The cgroup root is still a cgroup directory (the only loss that ends the daemon).
fn root_is_there(root: &Cgroup) -> bool {
    root.path().join("cgroup.controllers").exists()
}

/// How long a failed loop waits before it starts afresh, and at most after failures in a row.
const LOOP_RETRY: Duration = Duration::from_secs(1);
const LOOP_RETRY_MAX: Duration = Duration::from_secs(30);
const LOCK_PATIENCE: Duration = Duration::from_secs(2);

/// Restarts of the loop in this process, for status and metrics.
static LOOP_RESTARTS: AtomicU64 = AtomicU64::new(0);
/// Loop iterations completed in this process (the watchdog's food).
static ITERATIONS: AtomicU64 = AtomicU64::new(0);

/// Restarts of the loop so far, for status and metrics.
pub(crate) fn loop_restarts() -> u64 {
    LOOP_RESTARTS.load(Ordering::Relaxed)
}

/// How a completed iteration says the loop lives: systemd's watchdog, and the heartbeat
/// file for everyone else (the DaemonSet's liveness probe, `memqos status --live-within`).
pub(crate) struct Liveness {
    watchdog: sd_notify::Watchdog,
    heartbeat: PathBuf,
    last_beat: Option<Instant>,
}

impl Liveness {
    pub(crate) fn new(state_dir: &Path) -> Liveness {
        let heartbeat = state_dir.join(memqos_schema::state::HEARTBEAT_FILE);
        Liveness { watchdog: sd_notify::Watchdog::from_env(), heartbeat, last_beat: None }
    }
}

/// One iteration of the loop completed: counted, systemd's watchdog fed (at most once per
/// quarter of its interval; nothing outside systemd or without `WatchdogSec=`) and the
/// heartbeat's mtime set (at most every HEARTBEAT_EVERY_S; a full or read-only disk only
/// stops the heartbeat, never the loop).
pub(crate) fn iteration_done(live: &mut Liveness) {
    ITERATIONS.fetch_add(1, Ordering::Relaxed);
    live.watchdog.feed();
    let every = Duration::from_secs(memqos_schema::state::HEARTBEAT_EVERY_S);
    if live.last_beat.is_some_and(|t| t.elapsed() < every) {
        return;
    }
    live.last_beat = Some(Instant::now());
    let _ = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&live.heartbeat)
        .and_then(|f| f.set_modified(std::time::SystemTime::now()));
}
/// CLOCK_MONOTONIC in nanoseconds: the clock BPF's ktime and workloads' timestamps share,
/// so reaction delays can be measured across processes.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A child process holding the read end of a pipe whose write end only the daemon has. When
/// the daemon exits for any reason, including SIGKILL, the kernel closes the write end, the
/// guardian reads EOF and restores the journal (`memqos restore --await-eof`).
struct Guardian {
    _child: std::process::Child,
}

impl Guardian {
    fn start(exe: &Path, state_dir: &Path) -> Result<Guardian> {
        let child = std::process::Command::new(exe)
            .args(["restore", "--await-eof", "--state-dir"])
            .arg(state_dir)
            .stdin(std::process::Stdio::piped())
            .spawn()
            .with_context(|| format!("starting the guardian ({} restore)", exe.display()))?;
        Ok(Guardian { _child: child })
    }
}
