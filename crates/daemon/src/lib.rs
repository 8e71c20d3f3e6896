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
//! 5. SIGTERM/SIGINT only set a flag; the loop ends and the journal is restored. SIGHUP sets
//!    another: the loop reloads the config between two ticks (`reload`).

pub use memqos_cgroupfs::mounts;
pub mod actuator;
pub mod beneath;
mod bpf_source;
pub mod control;
mod cpu_weight;
mod deadline;
mod dirty;
pub mod events;
pub mod explain;
mod fast_read;
pub mod history;
pub mod journal;
mod learn;
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

use actuator::{Actuator, Request, Target};
use anyhow::{bail, Context, Result};
use events::{Event, EventLog, WriteEvent};
use journal::Journal;
use lock::StateLock;
use memqos_cgroupfs::Cgroup;
use memqos_policy::{Config, Decision, Engine, SignalEvent};
use observe::Sampler;
use signals::Signals;
use status::DecisionRecord;
use std::collections::{HashMap, HashSet, VecDeque};
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
    reload::install_handler();
}

#[derive(Clone)]
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
    /// Decide and log as usual, write nothing (no knob, no journal).
    pub dry_run: bool,
    /// Print each event on stdout too (the command does; in-process tests need not).
    pub echo: bool,
    /// Lock the process's memory (`memlock`): the command does; in-process tests, which share
    /// their process with other tests, need not.
    pub lock_memory: bool,
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

pub fn run(opts: Options) -> Result<()> {
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
    install_signal_handlers();

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

    // The loop runs under catch_unwind so a panic still reaches the restore below (the
    // actuator's Drop is the second line of defence). A loop that fails while the root is
    // still there (a fault of the host, not of one cgroup: those are skipped inside) puts
    // every knob back and starts afresh: protection pauses for a moment, it does not end.
    // Only the loss of the root, a panic or a stop request ends the daemon.
    let started = Instant::now();
    let result = loop {
        let mut this_run = opts.clone();
        this_run.duration = opts.duration.map(|d| d.saturating_sub(started.elapsed()));
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_loop(&this_run, &mut cfg, &root, &state_dir, &mut act, &mut signals)
        }));
        let error = match &result {
            Ok(Err(e)) => format!("{e:#}"),
            _ => break result,
        };
        let over = opts.duration.is_some_and(|d| started.elapsed() + LOOP_RETRY >= d);
        if SHUTDOWN.load(Ordering::SeqCst) || over || !root_is_there(&root) {
            break result;
        }
        let restored = match act.restore() {
            Ok(r) => r.restored.len(),
            Err(e) => {
                act.emit(Event::Degraded { message: format!("restoring before the restart of the loop: {e:#}") });
                0
            }
        };
        act.resume();
        act.emit(Event::Degraded {
            message: format!(
                "the loop stopped on: {error}; {restored} knob(s) put back, starting afresh in {} ms",
                LOOP_RETRY.as_millis()
            ),
        });
        std::thread::sleep(LOOP_RETRY);
    };

    let _ = sd_notify::notify("STOPPING=1");
    if let Some(summary) = signals.bpf_summary() {
        act.emit(Event::BpfSummary { bpf: summary });
    }
    // Detach the BPF programs before restoring, so the restore's own reclaim is not counted.
    drop(signals);
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

fn run_loop(
    opts: &Options,
    cfg: &mut Config,
    root: &Cgroup,
    state_dir: &Path,
    act: &mut Actuator,
    signals: &mut Signals,
) -> Result<()> {
    let mut interval = Duration::from_millis(cfg.signals.sampling_interval_ms);
    let mut engine = Engine::new(cfg.clone());
    let mut sampler = Sampler::new(stats_backend(opts.stats_backend, cfg));
    let mut dirty = dirty::DirtyEnforcer::new(cfg);
    let mut oom_adj = oom_adj::OomAdjuster::new(cfg);
    let mut cpu_weights = cpu_weight::CpuWeights::new(cfg);
    let mut swap_maxes = swap_max::SwapMaxes::new(cfg);
    let mut recent: VecDeque<DecisionRecord> = VecDeque::new();
    let started = Instant::now();
    let mut pending: Vec<(String, SignalEvent)> = Vec::new();
    let mut reported_degraded = 0;
    let mut last_status: Option<Instant> = None;
    // Why status.json could not be written last time (said once, and when it recovers).
    let mut status_failing: Option<String> = None;
    // When the last wait returned: BPF crossings are logged with it.
    let mut woke_ns = 0u64;
    let mut last_periodic: Option<Instant> = None;
    let mut told_ready = false;
    let mut exporter = metrics::Exporter::start(&cfg.metrics)?;
    if opts.lock_memory {
        if let Err(e) = memlock::lock_all() {
            act.emit(Event::Degraded { message: memlock::unlocked_message(&e) });
        }
    }
    let control = match control::Server::start(state_dir, explain::View::new(cfg.clone(), opts.config_path.clone())) {
        Ok(c) => Some(c),
        Err(e) => {
            act.emit(Event::Degraded { message: format!("`memqos explain` unavailable: control socket: {e:#}") });
            None
        }
    };
    let mount = mounts::current_cgroup2_of(root.path());
    let mut oom = oom_report::OomReporter::new(root.path(), mount.as_ref());
    signals.watch_kernel_log(oom.log_fd());
    // Protection capped by unprotected ancestors: checked on the first tick and after reloads.
    let mut check_protection = true;
    // Knobs changed on the fast path: the next periodic tick writes status.json.
    let mut status_due = false;
    let mut adopting: Vec<Adopting> = Vec::new();
    // When the whole tree was last sampled (the calm path samples only the parent).
    let mut last_full: Option<Instant> = None;
    let fast_root = beneath::Root::open(root.path())?;
    let hierarchy_root = root.is_hierarchy_root();
    // learn_peak: loaded whether or not a tier learns now, so a reload that turns it on
    // finds what earlier runs learned. The file is not written in a dry run.
    let mut learner = learn::Learner::open(
        cfg.history_path(state_dir),
        state_dir.join(memqos_schema::state::TIER_PEAKS_FILE),
        !opts.dry_run,
        &mut |e| act.emit(e),
    );
    while !SHUTDOWN.load(Ordering::SeqCst) {
        if opts.duration.is_some_and(|d| started.elapsed() >= d) {
            break;
        }
        if reload::take_request() {
            match reload_config(opts, cfg, root, act, &mut engine, exporter.as_mut(), control.as_ref()) {
                Ok(new_exporter) => {
                    if let Some(e) = new_exporter {
                        exporter = e;
                    }
                    dirty = dirty::DirtyEnforcer::new(cfg);
                    oom_adj = oom_adj::OomAdjuster::new(cfg);
                    cpu_weights = cpu_weight::CpuWeights::new(cfg);
                    swap_maxes = swap_max::SwapMaxes::new(cfg);
                    let s = &cfg.signals;
                    if (s.psi, s.events, s.bpf) != signals.enabled() {
                        *signals = Signals::new(s.psi, s.events, s.bpf);
                        signals.watch_kernel_log(oom.log_fd());
                        reported_degraded = 0;
                        if let Some(bpf) = &signals.bpf_started {
                            act.emit(Event::BpfSource { hooks: bpf.clone() });
                        }
                    }
                    learner.set_file(cfg.history_path(state_dir), &mut |e| act.emit(e));
                    sampler.reclassify();
                    sampler.set_backend(stats_backend(opts.stats_backend, cfg));
                    interval = Duration::from_millis(cfg.signals.sampling_interval_ms);
                    last_full = None;
                    check_protection = true;
                    last_status = None;
                    last_periodic = None;
                }
                Err(e) => act.emit(Event::ReloadRejected { config: opts.config_path.clone(), error: format!("{e:#}") }),
            }
        }
        let tick_started = Instant::now();
        // A wakeup by a pressure signal is the fast path: it reads the parent, the cgroups
        // that signalled and the largest throttle candidates, the engine reacts, its writes go
        // out. Everything else (the whole tree's sample, release, protection, stall bounds,
        // cpu_weight, oom_score_adj, dirty limits, OOM reports, status, housekeeping, the
        // signal set-up) waits for the periodic tick, a sampling interval after the last one.
        // A wakeup by new cgroups only adopts them (`adopt_created`).
        // A kill the kernel just logged is reported now (within the second, as promised),
        // not at the next full sample, which may be seconds away while calm.
        let kill_logged = std::mem::take(&mut signals.kernel_log_ready) && oom.read_log();
        let periodic = kill_logged || last_periodic.is_none_or(|t: Instant| t.elapsed() >= interval);
        // Calm (`signals.calm_interval_ms`): between full samples, the periodic tick reads
        // only the parent, unless the engine has something going on or the parent looks
        // near trouble.
        let calm_every = Duration::from_millis(cfg.signals.calm_interval_ms);
        let light = periodic
            && !std::mem::take(&mut sampler.full_sample_due)
            && !kill_logged
            && calm_every > interval
            && dirty.is_none()
            && last_full.is_some_and(|t: Instant| t.elapsed() < calm_every)
            && engine.is_calm(started.elapsed().as_millis() as u64)
            && match sampler.protected_room(cfg, &fast_root)? {
                Some(room) => !sampler.parent_needs_look(cfg, &fast_root, hierarchy_root, room)?,
                None => false,
            };
        if light {
            last_periodic = Some(tick_started);
        }
        if !periodic || light {
            if !pending.is_empty() {
                let now_ms = started.elapsed().as_millis() as u64;
                let signalled: Vec<&str> = pending.iter().map(|(id, _)| id.as_str()).collect();
                let signalled_ids: Vec<String> = signalled.iter().map(|s| s.to_string()).collect();
                let mut obs = sampler.sample_fast(cfg, &fast_root, hierarchy_root, &signalled, now_ms)?;
                let read_at = Instant::now();
                for (id, ev) in pending.drain(..) {
                    if let Some(c) = obs.cgroups.iter_mut().find(|c| c.id == id) {
                        c.signals.push(ev);
                    }
                }
                let ids: HashMap<String, u64> = obs.cgroups.iter().map(|c| (c.id.clone(), c.cgroup_id)).collect();
                let decisions = engine.tick_fast(&obs);
                let batch: Vec<Request> = decisions.iter().filter_map(|d| request(d, &ids)).collect();
                let (decided_at, writes) = (Instant::now(), batch.len());
                let wrote = act.apply(batch)?;
                // Logged after the writes: the log costs time on the reaction path.
                if writes > 0 {
                    act.emit(Event::Reaction {
                        signalled: signalled_ids,
                        read_cgroups: obs.cgroups.len() + usize::from(!hierarchy_root),
                        read_us: (read_at - tick_started).as_micros() as u64,
                        decide_us: (decided_at - read_at).as_micros() as u64,
                        writes,
                    });
                }
                if let Some(m) = exporter.as_mut() {
                    m.after_tick(cfg, &obs, &decisions, tick_started.elapsed());
                }
                remember(&wrote, now_ms, &mut recent, control.as_ref());
                status_due |= !wrote.is_empty();
                log_bpf_crossings(signals, act, woke_ns);
            }
            let now_ms = started.elapsed().as_millis() as u64;
            let wrote =
                adopt_created(cfg, root, &mut sampler, signals, &mut adopting, &mut cpu_weights, &mut oom_adj, act)?;
            remember(&wrote, now_ms, &mut recent, control.as_ref());
            status_due |= !wrote.is_empty();
            pending = wait_coalesced(
                signals,
                next_wait(last_periodic, interval, &adopting).min(until_stop(opts, started)),
                tick_started,
            );
            woke_ns = mono_ns();
            continue;
        }
        last_periodic = Some(tick_started);
        last_full = Some(tick_started);
        let now_ms = started.elapsed().as_millis() as u64;
        let (mut obs, mut seen) = sampler.sample(cfg, root, act.journal(), now_ms)?;
        let mut notes: Vec<String> = sampler.notes.drain(..).collect();
        if !act.dry_run() {
            notes.extend(note_takeovers(act, &mut obs, &mut seen));
        }
        // Managed until the last sample, unreadable now: not left throttled while unseen.
        let dropped = std::mem::take(&mut sampler.dropped);
        if !dropped.is_empty() {
            let why = |cg: &str| format!("{cg}: no longer managed (see the degraded line): original put back");
            let restores = reload::restores_of(act.journal(), &dropped, &why);
            let wrote = act.apply(restores)?;
            remember(&wrote, now_ms, &mut recent, control.as_ref());
        }
        if cfg.learns_peaks() {
            learner.observe(cfg, root.path(), &mut obs, &sampler.workloads, epoch_s(), &mut |e| act.emit(e));
        }
        if let Some((backend, why_not_bpf)) = sampler.backend_report.take() {
            act.emit(Event::StatsBackend { backend: backend.to_owned(), why_not_bpf });
        }
        for kill in oom.observe(cfg, root.path(), &seen, &obs.parent, now_ms) {
            act.emit(Event::OomKill(kill));
        }
        notes.append(&mut oom.notes);
        if std::mem::take(&mut check_protection) {
            for finding in mount.iter().flat_map(|m| protection_check::check(cfg, root.path(), &seen, m)) {
                act.emit(Event::ProtectionVoid(finding));
            }
        }
        let index: HashMap<String, usize> = obs.cgroups.iter().enumerate().map(|(i, c)| (c.id.clone(), i)).collect();
        for (id, ev) in pending.drain(..) {
            if let Some(&i) = index.get(id.as_str()) {
                obs.cgroups[i].signals.push(ev);
            }
        }
        let ids: HashMap<String, u64> = obs.cgroups.iter().map(|c| (c.id.clone(), c.cgroup_id)).collect();
        let mut decisions = engine.tick_periodic(&obs);
        if let Some(d) = dirty.as_mut() {
            decisions = d.adjust(cfg, root, &obs, decisions);
            notes.append(&mut d.notes);
        }
        let mut batch: Vec<Request> = decisions.iter().filter_map(|d| request(d, &ids)).collect();
        if let Some(w) = cpu_weights.as_mut() {
            batch.extend(w.plan(cfg, &obs, act));
            notes.append(&mut w.notes);
        }
        if let Some(s) = swap_maxes.as_mut() {
            batch.extend(s.plan(cfg, &obs, act));
            notes.append(&mut s.notes);
        }
        if let Some(adj) = oom_adj.as_mut() {
            batch.extend(adj.plan(cfg, &obs, act));
        }
        let wrote = act.apply(batch)?;
        sampler.note_written(&mut seen, &wrote);
        if let Some(m) = exporter.as_mut() {
            m.after_tick(cfg, &obs, &decisions, tick_started.elapsed());
        }
        if let Some(adj) = oom_adj.as_mut() {
            adj.review(&wrote);
            notes.append(&mut adj.notes);
        }
        remember(&wrote, now_ms, &mut recent, control.as_ref());
        {
            let observed: HashSet<u64> = obs.cgroups.iter().map(|c| c.cgroup_id).collect();
            act.retain_cgroups(&observed)?;
            if let Some(c) = &control {
                let managed: HashSet<&str> = obs.cgroups.iter().map(|c| c.id.as_str()).collect();
                c.update(|v| v.retain(|id| managed.contains(id)));
            }
        }
        log_bpf_crossings(signals, act, woke_ns);
        {
            let protected: Vec<(String, u64)> = obs
                .cgroups
                .iter()
                .filter(|c| cfg.tiers.get(c.tier).is_some_and(|t| t.is_protected()))
                .map(|c| (c.id.clone(), c.cgroup_id))
                .collect();
            let protected_paths: Vec<String> = protected.iter().map(|(p, _)| p.clone()).collect();
            // memory.events wakeups only from protected cgroups: a throttled lower tier bumps
            // its `high` counter on every charge, and watching it made the daemon re-sample
            // in a tight loop exactly when it had throttled someone (found by the experiments).
            signals.sync(root.path(), &protected, &protected_paths);
            signals.sync_tree(root.path(), &sampler.dirs());
            let adjusted: Vec<&str> = obs
                .cgroups
                .iter()
                .filter(|c| cfg.tiers.get(c.tier).is_some_and(|t| t.oom_score_adj.is_some()))
                .map(|c| c.id.as_str())
                .collect();
            signals.sync_populated(root.path(), &adjusted);
            sampler.warm_fast(cfg, &fast_root, hierarchy_root)?;
        }
        notes.extend(signals.degraded[reported_degraded..].iter().cloned());
        reported_degraded = signals.degraded.len();
        for message in notes {
            act.emit(Event::Degraded { message });
        }
        // status.json is for people and `memqos status`: once a second, or when knobs change.
        if !wrote.is_empty() || status_due || last_status.is_none_or(|t: Instant| t.elapsed() >= STATUS_EVERY) {
            status_due = false;
            let adjusted = oom_adj.as_ref().map_or(0, |a| a.adjusted());
            let mut snap =
                status::snapshot(cfg, &opts.config_path, act.dry_run(), &obs, &seen, &engine, &recent, adjusted);
            snap.oom_kills_by_tier = oom.by_tier.clone();
            snap.recent_oom_kills = oom.recent.iter().cloned().collect();
            // status.json is for people: a full or read-only state_dir is said once (and its
            // end), never a reason to stop protecting.
            match status::write(state_dir, &snap) {
                Ok(()) if status_failing.take().is_some() => {
                    act.emit(Event::Degraded { message: "status.json is written again".into() })
                }
                Ok(()) => {}
                Err(e) => {
                    if status_failing.is_none() {
                        act.emit(Event::Degraded {
                            message: format!("{e:#}: `memqos status` shows stale data until it can be written"),
                        });
                    }
                    status_failing = Some(e.to_string());
                }
            }
            last_status = Some(Instant::now());
            if let Some(c) = &control {
                c.update(|v| {
                    v.oom_kills = snap.recent_oom_kills.clone();
                    v.snapshot = Some(snap);
                });
            }
            if let Some(m) = exporter.as_mut() {
                m.counters.oom_kills = oom.by_tier.clone();
                let cpu =
                    proc_stat::cpu_ticks(std::process::id()).map_or(0.0, |t| t as f64 / proc_stat::ticks_per_second());
                let daemon = metrics::Daemon {
                    cpu_seconds: cpu,
                    parent_usage_bytes: obs.parent.usage_bytes,
                    parked: engine.status().parked.len(),
                };
                if let Err(e) = m.publish(&seen, &daemon) {
                    act.emit(Event::Degraded { message: format!("{e:#}") });
                }
            }
        }
        // Type=notify: systemd counts the unit started once the first tick is done.
        if !told_ready {
            told_ready = true;
            if let Err(e) = sd_notify::notify(&format!("READY=1\nSTATUS=managing {}", cfg.cgroup_root.display())) {
                act.emit(Event::Degraded { message: format!("sd_notify READY=1: {e}") });
            }
        }
        pending = wait_coalesced(
            signals,
            next_wait(last_periodic, interval, &adopting).min(until_stop(opts, started)),
            tick_started,
        );
        // Logged after the next tick's writes (the log costs time on the reaction path).
        woke_ns = mono_ns();
    }
    learner.finish(root.path(), epoch_s(), &mut |e| act.emit(e));
    Ok(())
}

/// Knobs someone else changed after memqos wrote them (`Actuator::taken_over`): their
/// value found becomes their original, so the engine leaves them alone (`foreign_knobs`)
/// and nothing stale is restored over them later. One line each.
fn note_takeovers(act: &mut Actuator, obs: &mut memqos_policy::Observation, seen: &mut [observe::Seen]) -> Vec<String> {
    let mut notes = Vec::new();
    for c in obs.cgroups.iter_mut() {
        for (file, found) in
            [("memory.high", c.current.high), ("memory.low", c.current.low), ("memory.min", c.current.min)]
        {
            let Some((wrote, original)) = act.taken_over(c.cgroup_id, file, found) else { continue };
            match file {
                "memory.high" => c.original.high = found,
                "memory.low" => c.original.low = found,
                _ => c.original.min = found,
            }
            if let Some(s) = seen.iter_mut().find(|s| s.cgroup_id == c.cgroup_id) {
                s.original = c.original;
            }
            notes.push(format!(
                "{}/{file} is {found} now, set by someone else after memqos wrote {wrote}: that value stays; memqos forgets the original it had ({original}) and leaves the knob alone",
                memqos_cgroupfs::name::display(&c.id)
            ));
        }
    }
    notes
}

/// Wall-clock seconds, for the history's last-seen times.
fn epoch_s() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// A cgroup made since the last sample (or whose first process just joined) whose tier sets
/// knobs of its own (cpu_weight, oom_score_adj), re-checked for a short while: `memqos run`
/// and container runtimes move the first process in just after the mkdir.
struct Adopting {
    obs: memqos_policy::CgroupObs,
    until: Instant,
    weight_done: bool,
    /// When its processes are read next, and how many times they were.
    due: Instant,
    polls: u32,
}

impl Adopting {
    /// After a read: the next one comes twice as late as the last (10, 20, 40, ... ms).
    /// A joining process is caught by the cgroup.events watch anyway (`due` becomes now);
    /// the reads catch processes forked inside an already populated cgroup. At 100 new
    /// cgroups/s, reading every adopting cgroup every 10 ms cost the daemon most of its CPU.
    fn polled(&mut self, now: Instant) {
        self.due = now + ADOPT_POLL * 2u32.pow(self.polls.min(8));
        self.polls += 1;
    }
}

/// How long a new cgroup is re-checked for processes to adjust, and the first interval
/// between checks (doubling): after that the periodic path handles it like any other.
const ADOPT_FOR: Duration = Duration::from_millis(300);
const ADOPT_POLL: Duration = Duration::from_millis(10);

/// `auto` means the BPF snapshot only where the config allows BPF at all (`signals.bpf`):
/// an operator who turned BPF off gets no BPF program of any kind.
fn stats_backend(choice: memqos_stats::BackendChoice, cfg: &Config) -> memqos_stats::BackendChoice {
    match choice {
        memqos_stats::BackendChoice::Auto if !cfg.signals.bpf => memqos_stats::BackendChoice::Text,
        c => c,
    }
}

/// Until `--duration` ends the run.
fn until_stop(opts: &Options, started: Instant) -> Duration {
    opts.duration.map_or(Duration::MAX, |d| d.saturating_sub(started.elapsed()))
}

/// Until the next periodic tick, or the next check of new cgroups.
fn next_wait(last_periodic: Option<Instant>, interval: Duration, adopting: &[Adopting]) -> Duration {
    let periodic = last_periodic.map_or(Duration::ZERO, |t| interval.saturating_sub(t.elapsed()));
    let now = Instant::now();
    adopting.iter().map(|a| a.due.saturating_duration_since(now)).fold(periodic, Duration::min)
}

/// Applies the per-tier knobs of cgroups made since the last wakeup (seen by the tree
/// watches) at once, instead of at the next periodic sample: cpu.weight, and oom_score_adj
/// of the processes that have joined them. Memory knobs wait for the periodic tick (the
/// engine adopts a cgroup there, with its history from the first sample).
#[allow(clippy::too_many_arguments)]
fn adopt_created(
    cfg: &Config,
    root: &Cgroup,
    sampler: &mut Sampler,
    signals: &mut Signals,
    adopting: &mut Vec<Adopting>,
    cpu_weights: &mut Option<cpu_weight::CpuWeights>,
    oom_adj: &mut Option<oom_adj::OomAdjuster>,
    act: &mut Actuator,
) -> Result<Vec<WriteEvent>> {
    use std::os::unix::fs::MetadataExt;
    let now = Instant::now();
    // Removals first: a name removed and made again in one wakeup is a new cgroup.
    let removed = signals.take_removed();
    adopting.retain(|a| !removed.contains(&a.obs.id));
    let mut batch = match oom_adj.as_mut() {
        Some(adj) => adj.settle_removed(&removed, act),
        None => Vec::new(),
    };
    for rel in signals.take_created() {
        let Ok(meta) = std::fs::symlink_metadata(memqos_cgroupfs::name::fs_path(root.path(), &rel)) else {
            continue; // removed already
        };
        if let Some(a) = adopting.iter_mut().find(|a| a.obs.cgroup_id == meta.ino()) {
            a.due = now; // its cgroup.events changed: a process joined
            continue;
        }
        let Some(tier) = sampler.tier_of(cfg, root.path(), &rel, meta.ino()) else {
            continue;
        };
        let t = cfg.tiers.get(tier).expect("classified into it");
        // Memory knobs are the periodic sample's: a new protected cgroup (its declaration
        // reserves at once) or a new throttle-tier cgroup beside a declared one (it must be
        // capped before it grows) wants that sample now, not at the calm path's next one.
        if t.is_protected() || (t.throttle && sampler.reservation_possible(cfg)) {
            sampler.full_sample_due = true;
        }
        if t.cpu_weight.is_none() && t.oom_score_adj.is_none() {
            continue;
        }
        if t.oom_score_adj.is_some() {
            signals.watch_populated(root.path(), &rel);
        }
        let mut obs = memqos_policy::CgroupObs::new(rel, tier, 0);
        obs.cgroup_id = meta.ino();
        adopting.push(Adopting { obs, until: now + ADOPT_FOR, weight_done: false, due: now, polls: 0 });
    }
    if batch.is_empty() && !adopting.iter().any(|a| a.due <= now) {
        return Ok(Vec::new());
    }
    if let Some(w) = cpu_weights.as_mut() {
        let fresh: Vec<memqos_policy::CgroupObs> =
            adopting.iter().filter(|a| !a.weight_done).map(|a| a.obs.clone()).collect();
        let obs = memqos_policy::Observation { cgroups: fresh, ..Default::default() };
        batch.extend(w.plan(cfg, &obs, act));
        for a in adopting.iter_mut() {
            a.weight_done = true;
        }
    }
    if let Some(adj) = oom_adj.as_mut() {
        let cgs: Vec<memqos_policy::CgroupObs> =
            adopting.iter().filter(|a| a.due <= now).map(|a| a.obs.clone()).collect();
        batch.extend(adj.plan_new(cfg, &cgs, act));
    }
    for a in adopting.iter_mut().filter(|a| a.due <= now) {
        a.polled(now);
    }
    let wrote = act.apply(batch)?;
    if let Some(adj) = oom_adj.as_mut() {
        adj.review(&wrote);
    }
    adopting.retain(|a| now < a.until);
    Ok(wrote)
}

/// Waits for pressure signals, at most `interval`. Coalescing: a storm of signals becomes at
/// most one reaction per COALESCE window. The first signal after a quiet spell is handled at
/// once; one arriving sooner than COALESCE after the last tick began waits out the window,
/// gathering what else arrives.
fn wait_coalesced(signals: &mut Signals, interval: Duration, tick_started: Instant) -> Vec<(String, SignalEvent)> {
    let mut pending = signals.wait(interval);
    let since = tick_started.elapsed();
    if !pending.is_empty() && since < COALESCE && !SHUTDOWN.load(Ordering::SeqCst) {
        for item in signals.wait(COALESCE - since) {
            if !pending.contains(&item) {
                pending.push(item);
            }
        }
    }
    pending
}

/// The writes just made, for `memqos status` and `memqos explain`.
fn remember(
    wrote: &[WriteEvent],
    now_ms: u64,
    recent: &mut VecDeque<DecisionRecord>,
    control: Option<&control::Server>,
) {
    for w in wrote {
        let record = DecisionRecord {
            cgroup: w.cgroup.clone(),
            file: w.file.clone(),
            value: w.value.clone(),
            reason: w.reason.clone(),
            why: w.why.clone(),
            at_ms: now_ms,
        };
        if let Some(c) = control {
            c.update(|v| v.record(record.clone()));
        }
        recent.push_back(record);
        if recent.len() > status::RECENT {
            recent.pop_front();
        }
    }
}

/// BPF threshold crossings drained by the last wait, logged with the time the daemon woke.
fn log_bpf_crossings(signals: &mut Signals, act: &mut Actuator, woke_ns: u64) {
    for c in signals.bpf_crossings.drain(..) {
        act.emit(Event::Bpf {
            cgroup: c.cgroup,
            cgroup_id: c.cgroup_id,
            kind: serde_json::to_value(c.kind).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default(),
            value: c.value,
            ktime_ns: c.ktime_ns,
            mono_ns: woke_ns,
        });
    }
}

/// SIGHUP: validates the config file whole and, if it is acceptable, runs it (see `reload`).
/// Err: rejected, nothing changed. Ok(Some(exporter)): the metrics exporter to use from now.
fn reload_config(
    opts: &Options,
    cfg: &mut Config,
    root: &Cgroup,
    act: &mut Actuator,
    engine: &mut Engine,
    exporter: Option<&mut metrics::Exporter>,
    control: Option<&control::Server>,
) -> Result<Option<Option<metrics::Exporter>>> {
    let new = reload::load(&opts.config_path, cfg, opts.state_dir.is_some())?;
    // What can fail comes first, so a failure leaves the old config running untouched.
    if new.metrics.listen != cfg.metrics.listen {
        bail!(
            "metrics.listen changed from {:?} to {:?}; the listener is bound at start-up, restart the daemon to move it",
            cfg.metrics.listen,
            new.metrics.listen
        );
    }
    // The running exporter is changed only once nothing can fail any more (below).
    let (keep_exporter, new_exporter) = match &exporter {
        Some(_) if new.metrics.textfile.is_some() || new.metrics.listen.is_some() => (true, None),
        Some(_) => (false, Some(None)),
        None => (false, metrics::Exporter::start(&new.metrics)?.map(Some)),
    };
    let apply_control = control.map(|c| c.prepare_reload(&new)).transpose()?;
    let root_path = root.path().to_owned();
    // All or nothing: the knobs of cgroups that leave their tier are put back first; only if
    // every one of them was (or its cgroup is gone) does the engine take the new config.
    let leaving = engine.would_drop(&new, |id| reload::classify(&new, &root_path, id));
    let (moved, restores) = reload::plan(cfg, &new, &root_path, act.journal(), &leaving);
    let wrote = act.apply(restores)?;
    let failed: Vec<String> = wrote
        .iter()
        .filter_map(|w| match &w.outcome {
            events::Outcome::Error(e) => Some(format!("{}/{}: {e}", w.cgroup, w.file)),
            _ => None,
        })
        .collect();
    if !failed.is_empty() {
        bail!(
            "the knobs of cgroups leaving their tier could not all be put back ({}); the old config runs on",
            failed.join("; ")
        );
    }
    let dropped = engine.reconfigure(new.clone(), |id| reload::classify(&new, &root_path, id));
    debug_assert_eq!(dropped.len(), leaving.len(), "would_drop and reconfigure agree");
    let restored = wrote.iter().filter(|w| w.outcome == events::Outcome::Ok).count();
    if let (true, Some(e)) = (keep_exporter, exporter) {
        e.set_textfile(new.metrics.textfile.clone());
    }
    if let Some(apply) = apply_control {
        if let Err(e) = apply() {
            act.emit(Event::Degraded { message: format!("control socket after reload: {e:#}") });
        }
    }
    let tiers = new.tiers.iter().map(|(_, t)| t.name.clone()).collect();
    *cfg = new;
    act.emit(Event::Reloaded { config: opts.config_path.clone(), tiers, moved, restored });
    Ok(new_exporter)
}

/// An engine decision as an actuator request (None for a cgroup no longer observed).
fn request(d: &Decision, ids: &HashMap<String, u64>) -> Option<Request> {
    let id = *ids.get(&d.cgroup)?;
    let mut r = Request::new(
        Target::Cgroup { path: d.cgroup.clone(), id },
        d.action.file(),
        d.action.value(),
        d.reason.to_string(),
    );
    r.reason = Some(d.reason.clone());
    Some(r)
}

/// The cgroup root is still a cgroup directory (the only loss that ends the daemon).
fn root_is_there(root: &Cgroup) -> bool {
    root.path().join("cgroup.controllers").exists()
}

const STATUS_EVERY: Duration = Duration::from_secs(1);
/// How long a failed loop waits before it starts afresh.
const LOOP_RETRY: Duration = Duration::from_secs(1);
const LOCK_PATIENCE: Duration = Duration::from_secs(2);
/// At most one reaction to pressure signals per window.
const COALESCE: Duration = Duration::from_millis(20);
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
