//! The loop as a value. [`Daemon`] owns what the loop works with (the engine, the sampler,
//! the knob planners, the learner, the metrics exporter, the control socket, the OOM
//! reporter, the pending signals and the timers), built once per run of the loop by
//! [`Daemon::new`]; [`Daemon::run`] is a short loop over its named steps:
//! - `reload`: a reload asked for (SIGHUP, `Handle::request_reload`), between two ticks
//!   (`reload::reload_config` validates and runs it);
//! - `calm_check`: whether a periodic tick that is due may be light (the parent only);
//! - `react`: the fast path, on a pressure wakeup: the cgroups that signalled, the engine's
//!   reaction, its writes;
//! - `adopt`: cgroups made since the last wakeup get their tier's own knobs at once (whom it
//!   still looks after, and for how long: `adopting`);
//! - `periodic`: the whole tree's sample, release, protection, stall bounds, the per-tier
//!   knobs (cpu_weight, oom_score_adj, dirty caps, swap_max), OOM reports, status;
//! - `after_writes`: the tail every step that wrote shares: remember (status, explain),
//!   export the tick's metrics, log what the BPF source saw;
//! - `wait`: until a signal, the next tick, a new cgroup's next check or a request.

mod adopting;

use self::adopting::{Adopting, ADOPT_FOR};
use crate::actuator::{Actuator, Request, Target};
use crate::admission::Admissions;
use crate::events::{Event, WriteEvent};
use crate::handle::Handle;
use crate::observe::{self, Sampler};
use crate::signals::{Signals, Wakeup};
use crate::status::{self, DecisionRecord};
use crate::{
    beneath, control, cpu_weight, dirty, explain, learn, leftovers, memlock, metrics, mounts, oom_adj, oom_report,
    proc_stat, protection_check, reload, sd_notify, swap_max, Options,
};
use anyhow::Result;
use memqos_cgroupfs::Cgroup;
use memqos_policy::{CgroupId, Config, Decision, Engine, Observation};
use memqos_schema::KnobFile;
use std::collections::{HashMap, HashSet, VecDeque};
use std::path::Path;
use std::time::{Duration, Instant};

/// One run of the loop: what `run` keeps across a restart of the loop (the config, the
/// actuator, the signal sources) is borrowed; everything else is the loop's own.
pub(crate) struct Daemon<'r> {
    opts: &'r Options,
    handle: &'r Handle,
    cfg: &'r mut Config,
    root: &'r Cgroup,
    state_dir: &'r Path,
    act: &'r mut Actuator,
    signals: &'r mut Signals,

    engine: Engine,
    sampler: Sampler,
    dirty: Option<dirty::DirtyEnforcer>,
    oom_adj: Option<oom_adj::OomAdjuster>,
    cpu_weights: Option<cpu_weight::CpuWeights>,
    swap_maxes: Option<swap_max::SwapMaxes>,
    learner: learn::Learner,
    exporter: Option<metrics::Exporter>,
    control: Option<&'r control::Server>,
    mount: Option<mounts::Cgroup2Mount>,
    oom: oom_report::OomReporter,
    /// Allowances for `memqos run`, and its armed ceilings taken over (`policy.admission`).
    admissions: Admissions,
    /// Cgroups `memqos run` left behind, removed once idle (`policy.remove_leftovers_after_ms`).
    leftovers: leftovers::Leftovers,
    /// The root's descriptor the fast path and the calm check read through.
    fast_root: beneath::Root,
    hierarchy_root: bool,

    /// Signals the last wait returned, for the next step (by cgroup id).
    pending: Vec<Wakeup>,
    /// New cgroups re-checked for processes to adjust (`adopt`).
    adopting: Vec<Adopting>,
    /// The writes lately made, for `memqos status` and `memqos explain`.
    recent: VecDeque<DecisionRecord>,
    /// How many of `signals.degraded` were said.
    reported_degraded: usize,

    interval: Duration,
    started: Instant,
    /// When the last wait returned: BPF crossings are logged with it.
    woke_ns: u64,
    last_periodic: Option<Instant>,
    /// When the whole tree was last sampled (the calm path samples only the parent).
    last_full: Option<Instant>,
    last_status: Option<Instant>,
    /// Why status.json could not be written last time (said once, and when it recovers).
    status_failing: Option<String>,
    /// Knobs changed since status.json was written: the next periodic tick writes it.
    status_due: bool,
    /// Protection capped by unprotected ancestors: checked on the first tick and after reloads.
    check_protection: bool,
    /// systemd was told READY=1 (after the first periodic tick).
    told_ready: bool,
    /// Fed once per completed iteration (`crate::iteration_done`).
    liveness: crate::Liveness,
}

/// What outlives a restart of the loop besides the config: the actuator (its journal), the
/// signal sources and the control socket, each made once per process. A listener made anew
/// per run would find its address still held by the thread serving the last one.
pub(crate) struct AcrossRestarts<'r> {
    pub act: &'r mut Actuator,
    pub signals: &'r mut Signals,
    pub control: Option<&'r control::Server>,
}

/// What a tick read and decided, for the metrics.
struct Tick<'a> {
    obs: &'a Observation,
    decisions: &'a [Decision],
    started: Instant,
}

impl<'r> Daemon<'r> {
    pub(crate) fn new(
        opts: &'r Options,
        handle: &'r Handle,
        cfg: &'r mut Config,
        root: &'r Cgroup,
        state_dir: &'r Path,
        kept: AcrossRestarts<'r>,
    ) -> Result<Daemon<'r>> {
        let AcrossRestarts { act, signals, control } = kept;
        let interval = Duration::from_millis(cfg.signals.sampling_interval_ms);
        let engine = Engine::new(cfg.clone());
        let mut sampler = Sampler::new(stats_backend(opts.stats_backend, cfg));
        sampler.swaps = opts.proc_swaps.clone();
        let dirty = dirty::DirtyEnforcer::new(cfg);
        let oom_adj = oom_adj::OomAdjuster::new(cfg);
        let cpu_weights = cpu_weight::CpuWeights::new(cfg);
        let swap_maxes = swap_max::SwapMaxes::new(cfg);
        let started = Instant::now();
        let exporter = metrics::Exporter::start(&cfg.metrics)?;
        if opts.lock_memory {
            if let Err(e) = memlock::lock_all() {
                act.emit(Event::Degraded { message: memlock::unlocked_message(&e) });
            }
        }
        if let Some(c) = control {
            // A fresh run: nothing the last run published is explained any more.
            c.update(|v| *v = explain::View::new(cfg.clone(), opts.config_path.clone()));
        }
        let mount = mounts::current_cgroup2_of(root.path());
        let oom = oom_report::OomReporter::new(root.path(), mount.as_ref());
        signals.watch_kernel_log(oom.log_fd());
        signals.watch_wake(handle.wake_fd());
        let fast_root = beneath::Root::open(root.path())?;
        let hierarchy_root = root.is_hierarchy_root();
        // learn_peak: loaded whether or not a tier learns now, so a reload that turns it on
        // finds what earlier runs learned. The file is not written in a dry run.
        let learner = learn::Learner::open(
            cfg.history_path(state_dir),
            cfg.tier_peaks_path(state_dir),
            !opts.dry_run,
            &mut |e| act.emit(e),
        );
        Ok(Daemon {
            opts,
            handle,
            cfg,
            root,
            state_dir,
            act,
            signals,
            engine,
            sampler,
            dirty,
            oom_adj,
            cpu_weights,
            swap_maxes,
            learner,
            exporter,
            control,
            mount,
            oom,
            admissions: Admissions::default(),
            leftovers: leftovers::Leftovers::default(),
            fast_root,
            hierarchy_root,
            pending: Vec::new(),
            adopting: Vec::new(),
            recent: VecDeque::new(),
            reported_degraded: 0,
            interval,
            started,
            woke_ns: 0,
            last_periodic: None,
            last_full: None,
            last_status: None,
            status_failing: None,
            status_due: false,
            check_protection: true,
            told_ready: false,
            liveness: crate::Liveness::new(state_dir),
        })
    }

    /// Until a stop is requested or `--duration` is over. A wakeup by a pressure signal is
    /// the fast path (`react`). Everything else (the whole tree's sample, release,
    /// protection, stall bounds, cpu_weight, oom_score_adj, dirty limits, OOM reports,
    /// status, housekeeping, the signal set-up) waits for the periodic tick, a sampling
    /// interval after the last one (`periodic`), which may be light while calm
    /// (`calm_check`). A wakeup by new cgroups only adopts them (`adopt`).
    pub(crate) fn run(mut self) -> Result<()> {
        while !self.handle.stop_requested() && !self.over() {
            if self.handle.take_reload() {
                self.reload();
            }
            let tick_started = Instant::now();
            // A kill the kernel just logged is reported now (within the second, as
            // promised), not at the next full sample, which may be seconds away while calm.
            let kill_logged = std::mem::take(&mut self.signals.kernel_log_ready) && self.oom.read_log();
            let periodic = kill_logged || self.last_periodic.is_none_or(|t: Instant| t.elapsed() >= self.interval);
            if periodic && !self.calm_check(kill_logged)? {
                self.periodic(tick_started)?;
            } else {
                if periodic {
                    self.last_periodic = Some(tick_started); // a light tick
                    if let Some(parent) = self.sampler.calm_parent.take() {
                        self.publish_admission(&parent);
                    }
                }
                if !self.pending.is_empty() {
                    self.react(tick_started)?;
                }
                self.adopt()?;
            }
            self.wait(tick_started);
            // Limit writes a worker finished (one that reclaimed for seconds) are told now.
            let late = self.act.finished_writes();
            if !late.is_empty() {
                let now_ms = self.now_ms();
                self.after_writes(&late, now_ms, None);
            }
            crate::iteration_done(&mut self.liveness);
        }
        self.learner.finish(self.root.path(), epoch_s(), &mut |e| self.act.emit(e));
        Ok(())
    }

    /// `--duration` is over.
    fn over(&self) -> bool {
        self.opts.duration.is_some_and(|d| self.started.elapsed() >= d)
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// A reload asked for: the config file validated whole and, if it is acceptable, run
    /// (`reload_config`); everything built from the config is built anew from it.
    fn reload(&mut self) {
        match reload::reload_config(
            self.opts,
            self.cfg,
            self.root,
            self.act,
            &mut self.engine,
            self.exporter.as_mut(),
            self.control,
        ) {
            Ok(new_exporter) => {
                if let Some(e) = new_exporter {
                    self.exporter = e;
                }
                let cfg = &*self.cfg;
                self.dirty = dirty::DirtyEnforcer::new(cfg);
                self.oom_adj = oom_adj::OomAdjuster::new(cfg);
                self.cpu_weights = cpu_weight::CpuWeights::new(cfg);
                self.swap_maxes = swap_max::SwapMaxes::new(cfg);
                let s = &cfg.signals;
                if (s.psi, s.events, s.bpf) != self.signals.enabled() {
                    *self.signals = Signals::new(s.psi, s.events, s.bpf);
                    self.signals.watch_kernel_log(self.oom.log_fd());
                    self.signals.watch_wake(self.handle.wake_fd());
                    self.reported_degraded = 0;
                    if let Some(bpf) = &self.signals.bpf_started {
                        self.act.emit(Event::BpfSource { hooks: bpf.clone() });
                    }
                }
                let act = &mut *self.act;
                self.learner.set_file(cfg.history_path(self.state_dir), &mut |e| act.emit(e));
                self.sampler.reclassify();
                self.sampler.set_backend(stats_backend(self.opts.stats_backend, cfg));
                self.interval = Duration::from_millis(cfg.signals.sampling_interval_ms);
                self.last_full = None;
                self.check_protection = true;
                self.last_status = None;
                self.last_periodic = None;
            }
            Err(e) => {
                self.act.emit(Event::ReloadRejected { config: self.opts.config_path.clone(), error: format!("{e:#}") })
            }
        }
    }

    /// Calm (`signals.calm_interval_ms`): between full samples, the periodic tick due reads
    /// only the parent, unless a full sample was asked for, a kill was just logged, the
    /// engine has something going on or the parent looks near trouble. True: light.
    fn calm_check(&mut self, kill_logged: bool) -> Result<bool> {
        let calm_every = Duration::from_millis(self.cfg.signals.calm_interval_ms);
        Ok(!std::mem::take(&mut self.sampler.full_sample_due)
            && !kill_logged
            && calm_every > self.interval
            && self.dirty.is_none()
            && self.last_full.is_some_and(|t: Instant| t.elapsed() < calm_every)
            && self.engine.is_calm(self.now_ms())
            && match self.sampler.protected_room(self.cfg, &self.fast_root)? {
                Some(room) => !self.sampler.parent_needs_look(self.cfg, &self.fast_root, self.hierarchy_root, room)?,
                None => false,
            })
    }

    /// The fast path: it reads the parent, the cgroups that signalled and the largest
    /// throttle candidates, the engine reacts, its writes go out.
    fn react(&mut self, tick_started: Instant) -> Result<()> {
        let now_ms = self.now_ms();
        let signalled: Vec<CgroupId> = self.pending.iter().map(|w| w.cgroup).collect();
        let signalled_paths: Vec<String> = self.pending.iter().map(|w| w.path.clone()).collect();
        let mut obs = self.sampler.sample_fast(self.cfg, &self.fast_root, self.hierarchy_root, &signalled, now_ms)?;
        let read_at = Instant::now();
        for w in self.pending.drain(..) {
            if let Some(c) = obs.cgroups.iter_mut().find(|c| c.id == w.cgroup) {
                c.signals.push(w.event);
            }
        }
        let decisions = self.engine.tick_fast(&obs);
        let batch: Vec<Request> = decisions.iter().map(request).collect();
        let (decided_at, writes) = (Instant::now(), batch.len());
        let wrote = self.act.apply(batch)?;
        // Logged after the writes: the log costs time on the reaction path.
        if writes > 0 {
            self.act.emit(Event::Reaction {
                signalled: signalled_paths,
                read_cgroups: obs.cgroups.len() + usize::from(!self.hierarchy_root),
                read_us: (read_at - tick_started).as_micros() as u64,
                decide_us: (decided_at - read_at).as_micros() as u64,
                writes,
            });
        }
        self.after_writes(&wrote, now_ms, Some(Tick { obs: &obs, decisions: &decisions, started: tick_started }));
        Ok(())
    }

    /// Applies the per-tier knobs of cgroups made since the last wakeup (seen by the tree
    /// watches) at once, instead of at the next periodic sample: cpu.weight, and
    /// oom_score_adj of the processes that have joined them. Memory knobs wait for the
    /// periodic tick (the engine adopts a cgroup there, with its history from the first
    /// sample).
    fn adopt(&mut self) -> Result<()> {
        use std::os::unix::fs::MetadataExt;
        let now_ms = self.now_ms();
        let (cfg, root, act) = (&*self.cfg, self.root, &mut *self.act);
        let now = Instant::now();
        // Removals first: a name removed and made again in one wakeup is a new cgroup.
        let removed = self.signals.take_removed();
        self.adopting.retain(|a| !removed.contains(&a.obs.path));
        let mut batch = match self.oom_adj.as_mut() {
            Some(adj) => adj.settle_removed(&removed, act),
            None => Vec::new(),
        };
        for rel in self.signals.take_created() {
            let Ok(meta) = std::fs::symlink_metadata(memqos_cgroupfs::name::fs_path(root.path(), &rel)) else {
                continue; // removed already
            };
            if let Some(a) = self.adopting.iter_mut().find(|a| a.obs.id == CgroupId(meta.ino())) {
                a.due = now; // its cgroup.events changed: a process joined
                continue;
            }
            let Some(tier) = self.sampler.tier_of(cfg, root.path(), &rel, meta.ino()) else {
                continue;
            };
            let t = cfg.tiers.get(tier).expect("classified into it");
            // Memory knobs are the periodic sample's: a new protected cgroup (its
            // declaration reserves at once) or a new throttle-tier cgroup beside a declared
            // one (it must be capped before it grows) wants that sample now, not at the calm
            // path's next one. So does a new throttle-tier cgroup under `admission`: `memqos
            // run` arms it right after its mkdir, and its ceiling is to be managed (raised,
            // bounded) from the next tick, not the calm path's next full sample.
            let armable = t.throttle && cfg.policy.admission;
            if t.is_protected() || armable || (t.throttle && self.sampler.reservation_possible(cfg)) {
                self.sampler.full_sample_due = true;
            }
            if t.cpu_weight.is_none() && t.oom_score_adj.is_none() {
                continue;
            }
            if t.oom_score_adj.is_some() {
                self.signals.watch_populated(root.path(), &rel);
            }
            let mut obs = memqos_policy::CgroupObs::new(rel, tier, 0);
            obs.id = CgroupId(meta.ino());
            self.adopting.push(Adopting { obs, until: now + ADOPT_FOR, weight_done: false, due: now, polls: 0 });
        }
        if batch.is_empty() && !self.adopting.iter().any(|a| a.due <= now) {
            return Ok(());
        }
        if let Some(w) = self.cpu_weights.as_mut() {
            let fresh: Vec<memqos_policy::CgroupObs> =
                self.adopting.iter().filter(|a| !a.weight_done).map(|a| a.obs.clone()).collect();
            let obs = Observation { cgroups: fresh, ..Default::default() };
            batch.extend(w.plan(cfg, &obs, act));
            for a in self.adopting.iter_mut() {
                a.weight_done = true;
            }
        }
        if let Some(adj) = self.oom_adj.as_mut() {
            let cgs: Vec<memqos_policy::CgroupObs> =
                self.adopting.iter().filter(|a| a.due <= now).map(|a| a.obs.clone()).collect();
            batch.extend(adj.plan_new(cfg, &cgs, act));
        }
        for a in self.adopting.iter_mut().filter(|a| a.due <= now) {
            a.polled(now);
        }
        let wrote = act.apply(batch)?;
        if let Some(adj) = self.oom_adj.as_mut() {
            adj.review(&wrote);
        }
        self.adopting.retain(|a| now < a.until);
        self.after_writes(&wrote, now_ms, None);
        Ok(())
    }

    /// The periodic tick: the whole tree sampled, the engine's periodic decisions and the
    /// per-tier knobs written, OOM kills reported, the signal set-up kept in line with the
    /// managed set, status.json and the metrics published.
    fn periodic(&mut self, tick_started: Instant) -> Result<()> {
        self.last_periodic = Some(tick_started);
        self.last_full = Some(tick_started);
        let now_ms = self.now_ms();
        let (mut obs, mut seen) = self.sampler.sample(self.cfg, self.root, self.act.journal(), now_ms)?;
        let mut notes: Vec<String> = self.sampler.notes.drain(..).collect();
        // Before the take-overs: an armed value adopted now is the daemon's own write.
        notes.extend(self.admissions.adopt_armed(
            self.cfg,
            &self.fast_root,
            self.act,
            &mut self.sampler,
            &mut obs,
            &mut seen,
        ));
        if !self.act.dry_run() {
            notes.extend(note_takeovers(self.act, &mut obs, &mut seen));
        }
        // Managed until the last sample, unreadable now: not left throttled while unseen.
        let dropped = std::mem::take(&mut self.sampler.dropped);
        if !dropped.is_empty() {
            let why = |cg: &str| format!("{cg}: no longer managed (see the degraded line): original put back");
            let restores = reload::restores_of(self.act.journal(), &dropped, &why);
            let wrote = self.act.apply(restores)?;
            self.after_writes(&wrote, now_ms, None);
        }
        let (cfg, act) = (&*self.cfg, &mut *self.act);
        if cfg.learns_peaks() {
            self.learner
                .observe(cfg, self.root.path(), &mut obs, &self.sampler.workloads, epoch_s(), &mut |e| act.emit(e));
        }
        if let Some((backend, why_not_bpf)) = self.sampler.backend_report.take() {
            act.emit(Event::StatsBackend { backend: backend.to_owned(), why_not_bpf });
        }
        for kill in self.oom.observe(cfg, self.root.path(), &seen, &obs.parent, now_ms) {
            act.emit(Event::OomKill(kill));
        }
        notes.append(&mut self.oom.notes);
        if std::mem::take(&mut self.check_protection) {
            for finding in self.mount.iter().flat_map(|m| protection_check::check(cfg, self.root.path(), &seen, m)) {
                act.emit(Event::ProtectionVoid(finding));
            }
        }
        let index: HashMap<CgroupId, usize> = obs.cgroups.iter().enumerate().map(|(i, c)| (c.id, i)).collect();
        for w in self.pending.drain(..) {
            if let Some(&i) = index.get(&w.cgroup) {
                obs.cgroups[i].signals.push(w.event);
            }
        }
        let mut decisions = self.engine.tick_periodic(&obs);
        let (cfg, act) = (&*self.cfg, &mut *self.act);
        if let Some(message) = self.admissions.publish(self.state_dir, cfg, &self.engine, &obs.parent, act.dry_run()) {
            act.emit(Event::Degraded { message });
        }
        if let Some(d) = self.dirty.as_mut() {
            decisions = d.adjust(cfg, self.root, &obs, decisions);
            notes.append(&mut d.notes);
        }
        let mut batch: Vec<Request> = decisions.iter().map(request).collect();
        if let Some(w) = self.cpu_weights.as_mut() {
            batch.extend(w.plan(cfg, &obs, act));
            notes.append(&mut w.notes);
        }
        if let Some(s) = self.swap_maxes.as_mut() {
            s.knob.now = self.sampler.swap.clone();
            batch.extend(s.plan(cfg, &obs, act));
            notes.append(&mut s.notes);
        }
        if let Some(adj) = self.oom_adj.as_mut() {
            batch.extend(adj.plan(cfg, &obs, act));
        }
        let wrote = act.apply(batch)?;
        self.sampler.note_written(&mut seen, &wrote);
        if let Some(adj) = self.oom_adj.as_mut() {
            adj.review(&wrote);
            notes.append(&mut adj.notes);
        }
        self.after_writes(&wrote, now_ms, Some(Tick { obs: &obs, decisions: &decisions, started: tick_started }));
        let observed: HashSet<u64> = obs.cgroups.iter().map(|c| c.id.get()).collect();
        self.act.retain_cgroups(&observed)?;
        // After the tick's writes and off the reaction path; bounded per tick.
        let grace = self.cfg.policy.remove_leftovers_after_ms;
        self.leftovers.tick(grace, &self.fast_root, &self.sampler.leaves(), self.act);
        if let Some(c) = self.control {
            let managed: HashSet<&str> = obs.cgroups.iter().map(|c| c.path.as_str()).collect();
            c.update(|v| v.retain(|id| managed.contains(id)));
        }
        self.sync_signals(&obs)?;
        notes.extend(self.signals.degraded[self.reported_degraded..].iter().cloned());
        self.reported_degraded = self.signals.degraded.len();
        for message in notes {
            self.act.emit(Event::Degraded { message });
        }
        // status.json is for people and `memqos status`: once a second, or when knobs change.
        if self.status_due || self.last_status.is_none_or(|t: Instant| t.elapsed() >= STATUS_EVERY) {
            self.publish(&obs, &seen);
        }
        // Type=notify: systemd counts the unit started once the first tick is done.
        if !self.told_ready {
            self.told_ready = true;
            if let Err(e) = sd_notify::notify(&format!("READY=1\nSTATUS=managing {}", self.cfg.cgroup_root.display())) {
                self.act.emit(Event::Degraded { message: format!("sd_notify READY=1: {e}") });
            }
        }
        Ok(())
    }

    /// The allowances for new cgroups as of `parent` (`policy.admission`), for `memqos run`.
    fn publish_admission(&mut self, parent: &memqos_policy::ParentObs) {
        let dry = self.act.dry_run();
        if let Some(message) = self.admissions.publish(self.state_dir, self.cfg, &self.engine, parent, dry) {
            self.act.emit(Event::Degraded { message });
        }
    }

    /// Triggers and watches in line with the managed set, and the fast path's descriptors.
    fn sync_signals(&mut self, obs: &Observation) -> Result<()> {
        let cfg = &*self.cfg;
        let protected: Vec<(CgroupId, String)> = obs
            .cgroups
            .iter()
            .filter(|c| cfg.tiers.get(c.tier).is_some_and(|t| t.is_protected()))
            .map(|c| (c.id, c.path.clone()))
            .collect();
        // memory.events wakeups only from protected cgroups: a throttled lower tier bumps its
        // `high` counter on every charge, and watching it made the daemon re-sample in a
        // tight loop exactly when it had throttled someone (found by the experiments).
        self.signals.sync(self.root.path(), &protected, &protected);
        self.signals.sync_tree(self.root.path(), &self.sampler.dirs());
        let adjusted: Vec<&str> = obs
            .cgroups
            .iter()
            .filter(|c| cfg.tiers.get(c.tier).is_some_and(|t| t.oom_score_adj.is_some()))
            .map(|c| c.path.as_str())
            .collect();
        self.signals.sync_populated(self.root.path(), &adjusted);
        self.sampler.warm_fast(cfg, &self.fast_root, self.hierarchy_root)
    }

    /// status.json, the control socket's snapshot and the metrics.
    fn publish(&mut self, obs: &Observation, seen: &[observe::Seen]) {
        self.status_due = false;
        let cfg = &*self.cfg;
        let adjusted = self.oom_adj.as_ref().map_or(0, |a| a.adjusted());
        let mut snap = status::snapshot(
            cfg,
            &self.opts.config_path,
            self.act.dry_run(),
            obs,
            seen,
            &self.engine,
            &self.recent,
            adjusted,
        );
        snap.oom_kills_by_tier = self.oom.by_tier.clone();
        snap.recent_oom_kills = self.oom.recent.iter().cloned().collect();
        snap.loop_restarts = crate::loop_restarts();
        snap.leftovers_removed = self.leftovers.removed.clone();
        snap.leftovers_waiting = self.leftovers.waiting();
        // status.json is for people: a full or read-only state_dir is said once (and its
        // end), never a reason to stop protecting.
        match status::write(self.state_dir, &snap) {
            Ok(()) if self.status_failing.take().is_some() => {
                self.act.emit(Event::Degraded { message: "status.json is written again".into() })
            }
            Ok(()) => {}
            Err(e) => {
                if self.status_failing.is_none() {
                    self.act.emit(Event::Degraded {
                        message: format!("{e:#}: `memqos status` shows stale data until it can be written"),
                    });
                }
                self.status_failing = Some(e.to_string());
            }
        }
        self.last_status = Some(Instant::now());
        if let Some(c) = self.control {
            c.update(|v| {
                v.oom_kills = snap.recent_oom_kills.clone();
                v.snapshot = Some(snap);
            });
        }
        if let Some(m) = self.exporter.as_mut() {
            m.counters.oom_kills = self.oom.by_tier.clone();
            m.counters.leftovers_removed = self.leftovers.removed.clone();
            let cpu =
                proc_stat::cpu_ticks(std::process::id()).map_or(0.0, |t| t as f64 / proc_stat::ticks_per_second());
            let status = self.engine.status();
            let daemon = metrics::Daemon {
                cpu_seconds: cpu,
                parent_usage_bytes: obs.parent.usage_bytes,
                parked: status.parked.len(),
                queued: status.queued.len(),
                thrashing: status.thrashing.len(),
                loop_restarts: crate::loop_restarts(),
            };
            if let Err(e) = m.publish(seen, &daemon) {
                self.act.emit(Event::Degraded { message: format!("{e:#}") });
            }
        }
    }

    /// The tail every step that wrote shares: the writes remembered for `memqos status` and
    /// `memqos explain` (status.json is due when any was made); for a tick the engine
    /// decided, its metrics exported and the BPF crossings that woke it logged (after the
    /// writes: the log costs time on the reaction path).
    fn after_writes(&mut self, wrote: &[WriteEvent], now_ms: u64, tick: Option<Tick<'_>>) {
        let decided = tick.is_some();
        if let (Some(m), Some(t)) = (self.exporter.as_mut(), tick) {
            m.after_tick(self.cfg, t.obs, t.decisions, t.started.elapsed());
        }
        for w in wrote {
            let record = DecisionRecord {
                cgroup: w.cgroup.clone(),
                file: w.file.clone(),
                value: w.value.clone(),
                reason: w.reason.clone(),
                why: w.why.clone(),
                at_ms: now_ms,
            };
            if let Some(c) = self.control {
                c.update(|v| v.record(record.clone()));
            }
            self.recent.push_back(record);
            if self.recent.len() > status::RECENT {
                self.recent.pop_front();
            }
        }
        self.status_due |= !wrote.is_empty();
        if decided {
            for c in self.signals.bpf_crossings.drain(..) {
                self.act.emit(Event::Bpf {
                    cgroup: c.cgroup,
                    cgroup_id: c.cgroup_id.get(),
                    kind: serde_json::to_value(c.kind)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_default(),
                    value: c.value,
                    ktime_ns: c.ktime_ns,
                    mono_ns: self.woke_ns,
                });
            }
        }
    }

    /// Waits for pressure signals until the next periodic tick, the next check of a new
    /// cgroup or the end of `--duration`, whichever is first; a request ends the wait.
    /// Coalescing: a storm of signals becomes at most one reaction per COALESCE window. The
    /// first signal after a quiet spell is handled at once; one arriving sooner than COALESCE
    /// after the last tick began waits out the window, gathering what else arrives.
    fn wait(&mut self, tick_started: Instant) {
        let periodic = self.last_periodic.map_or(Duration::ZERO, |t| self.interval.saturating_sub(t.elapsed()));
        let now = Instant::now();
        let next = self.adopting.iter().map(|a| a.due.saturating_duration_since(now)).fold(periodic, Duration::min);
        let until_stop = self.opts.duration.map_or(Duration::MAX, |d| d.saturating_sub(self.started.elapsed()));
        let mut pending = self.signals.wait(next.min(until_stop));
        let since = tick_started.elapsed();
        if !pending.is_empty() && since < COALESCE && !self.handle.stop_requested() {
            for item in self.signals.wait(COALESCE - since) {
                if !pending.contains(&item) {
                    pending.push(item);
                }
            }
        }
        self.pending = pending;
        // Logged after the next tick's writes (the log costs time on the reaction path).
        self.woke_ns = crate::mono_ns();
    }
}

/// Knobs someone else changed after memqos wrote them (`Actuator::taken_over`): their
/// value found becomes their original, so the engine leaves them alone (`foreign_knobs`)
/// and nothing stale is restored over them later. One line each.
fn note_takeovers(act: &mut Actuator, obs: &mut Observation, seen: &mut [observe::Seen]) -> Vec<String> {
    let mut notes = Vec::new();
    for c in obs.cgroups.iter_mut() {
        // Every watched knob the sample holds (one list: `KnobFile::watched`), read and set
        // through `Knobs`; the others are looked at where the daemon reads them.
        for file in KnobFile::ALL.into_iter().filter(|k| k.watched()) {
            let Some(found) = c.current.text(file) else { continue };
            let key = crate::journal::Key::Cgroup(c.id.get(), file.name().to_owned());
            let Some((wrote, original)) = act.taken_over(key, &found) else { continue };
            c.original.set(file, &found);
            if let Some(s) = seen.iter_mut().find(|s| s.cgroup_id == c.id.get()) {
                s.original = c.original;
            }
            let at = memqos_cgroupfs::name::display(&c.path);
            notes.push(crate::actuator::takeover_note(&at, file.name(), &found, &wrote, &original));
        }
    }
    notes
}

/// Wall-clock seconds, for the history's last-seen times.
fn epoch_s() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// `auto` means the BPF snapshot only where the config allows BPF at all (`signals.bpf`):
/// an operator who turned BPF off gets no BPF program of any kind.
fn stats_backend(choice: memqos_stats::BackendChoice, cfg: &Config) -> memqos_stats::BackendChoice {
    match choice {
        memqos_stats::BackendChoice::Auto if !cfg.signals.bpf => memqos_stats::BackendChoice::Text,
        c => c,
    }
}

/// A decision as an actuator request: the decision names its cgroup by id, the path is where
/// the write goes.
fn request(d: &Decision) -> Request {
    let mut r = Request::new(
        Target::Cgroup { path: d.cgroup.clone(), id: d.id.0 },
        d.action.file(),
        d.action.value(),
        d.reason.to_string(),
    );
    r.reason = Some(d.reason.clone());
    r
}

const STATUS_EVERY: Duration = Duration::from_secs(1);
/// At most one reaction to pressure signals per window.
const COALESCE: Duration = Duration::from_millis(20);
