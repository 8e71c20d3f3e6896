//! The memqos daemon: sample the managed cgroups, run the policy engine, journal and write
//! the knobs it decides, and put everything back when it stops.
//!
//! Lifecycle (the order matters for safety):
//! 1. the config is parsed and validated, and the cgroup root checked, before anything is
//!    touched;
//! 2. a journal left by a crashed run is restored before anything else;
//! 3. a guardian process is started that restores the journal if the daemon dies, even by
//!    SIGKILL (it waits for EOF on a pipe only the daemon holds);
//! 4. the loop: wait for a signal (PSI trigger, memory.events change) or the sampling
//!    interval, sample, tick the engine, journal-then-write each decision, log it;
//! 5. SIGTERM/SIGINT only set a flag; the loop ends and the journal is restored.

mod bpf_source;
mod cpu_weight;
mod dirty;
pub mod journal;
pub mod metrics;
mod observe;
mod oom_adj;
pub mod proc_stat;
pub mod process;
pub mod sd_notify;
mod signals;
pub mod status;

use anyhow::{bail, Context, Result};
use journal::Journal;
use memqos_cgroupfs::Cgroup;
use memqos_policy::{Action, Config, Decision, Engine, SignalEvent};
use observe::Sampler;
use signals::Signals;
use std::collections::VecDeque;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub use journal::restore_state_dir;

/// Set by SIGTERM/SIGINT; the loop checks it each wakeup.
static SHUTDOWN: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    SHUTDOWN.store(true, Ordering::SeqCst);
}

fn install_signal_handlers() {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: the handler only stores to an atomic. No SA_RESTART, so poll(2) returns
        // EINTR and the loop notices at once.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

pub struct Options {
    pub config_path: PathBuf,
    /// Overrides the config's state_dir.
    pub state_dir: Option<PathBuf>,
    /// Start the guardian that restores knobs if the daemon dies (on by default).
    pub guardian: bool,
    /// The memqos executable, for the guardian.
    pub exe: PathBuf,
    /// Stop after this long (tests, demos); run until signalled otherwise.
    pub duration: Option<Duration>,
    /// Where each tick's snapshot comes from (memqos-stats): text, bpf or auto.
    pub stats_backend: memqos_stats::BackendChoice,
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

pub fn run(opts: Options) -> Result<()> {
    let cfg = load_config(&opts.config_path)?;
    let state_dir = opts.state_dir.clone().unwrap_or_else(|| cfg.state_dir.clone());
    let root = Cgroup::new(&cfg.cgroup_root);
    check_root(&root)?;

    // A journal here means the previous run did not finish its restore.
    if let Some(report) = restore_state_dir(&state_dir)? {
        log_event(
            &state_dir,
            serde_json::json!({
                "event": "recovered", "restored": report.restored.len(),
                "vanished": report.vanished.len(), "failed": report.failed.len(),
            }),
        );
        if !report.failed.is_empty() {
            bail!("could not restore knobs left by the previous run: {:?}", report.failed);
        }
    }
    let mut journal = Journal::open(&state_dir, root.path())?;
    let _guardian = if opts.guardian { Some(Guardian::start(&opts.exe, &state_dir)?) } else { None };
    install_signal_handlers();

    let interval = Duration::from_millis(cfg.signals.sampling_interval_ms);
    let mut signals = Signals::new(cfg.signals.psi, cfg.signals.events, cfg.signals.bpf);
    let mut engine = Engine::new(cfg.clone());
    let mut sampler = Sampler::new(opts.stats_backend);
    let mut dirty = dirty::DirtyEnforcer::new(&cfg);
    let mut oom_adj = oom_adj::OomAdjuster::new(&cfg);
    let mut cpu_weights = cpu_weight::CpuWeights::new(&cfg);
    let mut recent: VecDeque<Decision> = VecDeque::new();
    let started = Instant::now();
    let mut pending: Vec<(String, SignalEvent)> = Vec::new();
    let mut reported_degraded = 0;
    let mut last_status: Option<Instant> = None;
    // When the last wait returned: BPF crossings are logged with it.
    let mut woke_ns = 0u64;
    let mut told_ready = false;
    let mut exporter = metrics::Exporter::start(&cfg.metrics)?;
    log_event(
        &state_dir,
        serde_json::json!({"event": "started", "pid": std::process::id(), "cgroup_root": cfg.cgroup_root, "config": opts.config_path}),
    );
    if let Some(bpf) = &signals.bpf_started {
        log_event(&state_dir, serde_json::json!({"event": "bpf_source", "hooks": bpf}));
    }

    let result = (|| -> Result<()> {
        while !SHUTDOWN.load(Ordering::SeqCst) {
            if opts.duration.is_some_and(|d| started.elapsed() >= d) {
                break;
            }
            let tick_started = Instant::now();
            let now_ms = started.elapsed().as_millis() as u64;
            let (mut obs, seen) = sampler.sample(&cfg, &root, &journal, now_ms)?;
            for msg in sampler.notes.drain(..) {
                log_event(&state_dir, serde_json::json!({"event": "degraded", "message": msg}));
            }
            for (id, ev) in pending.drain(..) {
                if let Some(c) = obs.cgroups.iter_mut().find(|c| c.id == id) {
                    c.signals.push(ev);
                }
            }
            let mut decisions = engine.tick(&obs);
            if let Some(d) = dirty.as_mut() {
                decisions = d.adjust(&cfg, &root, &obs, decisions, &state_dir);
            }
            for d in &decisions {
                apply(&root, &mut journal, d, &state_dir)?;
                recent.push_back(d.clone());
                if recent.len() > 20 {
                    recent.pop_front();
                }
            }
            if let Some(m) = exporter.as_mut() {
                m.after_tick(&cfg, &obs, &decisions, tick_started.elapsed());
            }
            if let Some(adj) = oom_adj.as_mut() {
                for w in adj.sync(&cfg, &root, &obs, &mut journal)? {
                    log_event(
                        &state_dir,
                        serde_json::json!({
                            "event": "write", "cgroup": w.cgroup, "pid": w.pid, "file": oom_adj::FILE,
                            "value": w.value.to_string(), "previous": w.previous.to_string(), "outcome": w.outcome,
                            "why": if w.cgroup.is_empty() { "process left its tier: original put back" } else { "tier oom_score_adj" },
                        }),
                    );
                }
                for msg in adj.notes.drain(..) {
                    log_event(&state_dir, serde_json::json!({"event": "degraded", "message": msg}));
                }
            }
            if let Some(w) = cpu_weights.as_mut() {
                for wr in w.sync(&cfg, &root, &obs, &mut journal)? {
                    log_event(
                        &state_dir,
                        serde_json::json!({
                            "event": "write", "cgroup": wr.cgroup, "file": cpu_weight::FILE, "value": wr.value.to_string(),
                            "previous": wr.previous, "outcome": wr.outcome, "why": "tier cpu_weight",
                        }),
                    );
                }
                for msg in w.notes.drain(..) {
                    log_event(&state_dir, serde_json::json!({"event": "degraded", "message": msg}));
                }
            }
            for c in signals.bpf_crossings.drain(..) {
                log_event(
                    &state_dir,
                    serde_json::json!({"event": "bpf", "cgroup": c.cgroup, "kind": c.kind, "value": c.value, "ktime_ns": c.ktime_ns, "mono_ns": woke_ns}),
                );
            }
            let protected: Vec<String> = obs
                .cgroups
                .iter()
                .filter(|c| cfg.tiers.get(c.tier).is_some_and(|t| t.is_protected()))
                .map(|c| c.id.clone())
                .collect();
            // memory.events wakeups only from protected cgroups: a throttled lower tier bumps
            // its `high` counter on every charge, and watching it made the daemon re-sample in
            // a tight loop exactly when it had throttled someone (found by the experiments).
            signals.sync(root.path(), &protected, &protected);
            for msg in &signals.degraded[reported_degraded..] {
                log_event(&state_dir, serde_json::json!({"event": "degraded", "message": msg}));
            }
            reported_degraded = signals.degraded.len();
            // status.json is for people and `memqos status`: once a second, or when knobs change.
            if !decisions.is_empty() || last_status.is_none_or(|t: Instant| t.elapsed() >= STATUS_EVERY) {
                status::write(
                    &state_dir,
                    &status::Snapshot::new(
                        &cfg,
                        &opts.config_path,
                        &obs,
                        &seen,
                        &engine,
                        &recent,
                        oom_adj.as_ref().map_or(0, |a| a.adjusted()),
                    ),
                )?;
                last_status = Some(Instant::now());
                if let Some(m) = exporter.as_mut() {
                    let cpu = proc_stat::cpu_ticks(std::process::id())
                        .map_or(0.0, |t| t as f64 / proc_stat::ticks_per_second());
                    let daemon = metrics::Daemon { cpu_seconds: cpu, parent_usage_bytes: obs.parent.usage_bytes };
                    if let Err(e) = m.publish(&seen, &daemon) {
                        log_event(&state_dir, serde_json::json!({"event": "degraded", "message": format!("{e:#}")}));
                    }
                }
            }
            // Type=notify: systemd counts the unit started once the first tick is done.
            if !told_ready {
                told_ready = true;
                if let Err(e) = sd_notify::notify(&format!("READY=1\nSTATUS=managing {}", cfg.cgroup_root.display())) {
                    log_event(
                        &state_dir,
                        serde_json::json!({"event": "degraded", "message": format!("sd_notify READY=1: {e}")}),
                    );
                }
            }
            pending = signals.wait(interval);
            // Logged after the next tick's writes (the log costs time on the reaction path).
            woke_ns = mono_ns();
        }
        Ok(())
    })();

    let _ = sd_notify::notify("STOPPING=1");
    if let Some(summary) = signals.bpf_summary() {
        log_event(&state_dir, serde_json::json!({"event": "bpf_summary", "bpf": summary}));
    }
    // Detach the BPF programs before restoring, so the restore's own reclaim is not counted.
    drop(signals);
    let report = journal.restore()?;
    log_event(
        &state_dir,
        serde_json::json!({
            "event": "stopped", "restored": report.restored.len(), "vanished": report.vanished.len(),
            "failed": report.failed.iter().map(|(e, err)| format!("{}/{}: {err}", e.cgroup, e.file)).collect::<Vec<_>>(),
            "error": result.as_ref().err().map(|e| format!("{e:#}")),
        }),
    );
    status::remove(&state_dir);
    result
}

/// Journals the original, then writes. A cgroup that vanished is not an error.
fn apply(root: &Cgroup, journal: &mut Journal, d: &Decision, state_dir: &Path) -> Result<()> {
    let cg = root.child(&d.cgroup);
    let file = d.action.file();
    let previous = if matches!(d.action, Action::Kill) {
        None
    } else {
        match cg.read_string(file) {
            Ok(v) => Some(v.trim().to_owned()),
            Err(e) if e.is_vanished() => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    };
    if let Some(prev) = &previous {
        journal.record(&d.cgroup, file, prev)?;
    }
    let started_ns = mono_ns();
    let outcome = write_knob(&cg, file, &d.action.value());
    log_event(
        state_dir,
        serde_json::json!({
            "event": "write", "cgroup": d.cgroup, "file": file, "value": d.action.value(),
            "previous": previous, "outcome": outcome, "reason": d.reason, "why": d.reason.to_string(),
            "mono_ns": started_ns, "mono_done_ns": mono_ns(),
        }),
    );
    Ok(())
}

/// Writes one knob and says how it went, for the event log: "ok", "vanished" (the cgroup went
/// away, which is not an error) or "error: ...".
fn write_knob(cg: &Cgroup, file: &'static str, value: &str) -> String {
    match cg.write_string(file, value) {
        Ok(()) => "ok".to_string(),
        Err(e) if e.is_vanished() => "vanished".to_string(),
        Err(e) => format!("error: {e}"),
    }
}

const STATUS_EVERY: Duration = Duration::from_secs(1);
/// CLOCK_MONOTONIC in nanoseconds: the clock BPF's ktime and workloads' timestamps share,
/// so reaction delays can be measured across processes.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One JSON line per event on stdout and in `<state_dir>/events.jsonl`.
fn log_event(state_dir: &Path, mut ev: serde_json::Value) {
    let ts = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    ev["ts"] = serde_json::json!(ts.as_secs_f64());
    let line = ev.to_string();
    println!("{line}");
    let _ = std::io::stdout().flush();
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(state_dir.join("events.jsonl")) {
        let _ = writeln!(f, "{line}");
    }
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
