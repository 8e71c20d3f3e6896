//! The in-guest side of the agent-host experiment: for each run, each session's trace alone
//! (the solo baselines), then every concurrency level with every arm, in an order that
//! rotates from run to run.
//!
//! A host is the parent cgroup (memory.max = the budget) with one session cgroup per agent.
//! Each session's runtime runs as `memqos run --runtime --session sK -- memqos-lab replay <its
//! part of the trace>`, and each tool call as `memqos run --session sK -- memqos-lab replay <the
//! call's part>`: the layout of docs/agent-hosts.md, made by the same command an agent host
//! uses, in every arm. Arms differ only in the memory knobs: none, a memory.max per session
//! at its peak, or the daemon with the documented session config. cpu.weight is the same in
//! every arm: what the session config gives each tier (the daemon writes it in the memqos arm,
//! the runner in the others).
//!
//! A session is a closed loop ([`super::session`]): a call starts when the previous one has
//! ended and the runtime's clock has reached its start in the trace; the runtime's replay is
//! paused while a call runs past its end in the trace; a failed call is retried once, then
//! fails its session; a killed runtime loses its session's remaining calls.

use super::scenario::{HostPolicy, HostScenario};
use super::session::{Action, CallFate, CallSpan, SessionFate, SessionLoop};
use super::split::{resources_json, split, SessionPlan};
use crate::runner::{epoch_now, remove_tree};
use anyhow::{bail, Context, Result};
use memqos_cgroupfs::{Cgroup, Limit};
use memqos_lab::daemon_process::DaemonProcess;
use memqos_replay::report::{LatencyStats, Report};
use memqos_replay::Outcome;
use memqos_schema::events::{self, WriteEvent};
use memqos_schema::state::JOURNAL_FILE;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const PARENT: &str = "/sys/fs/cgroup/memqos-agent-host";
const STATE_DIR: &str = "/run/memqos-agent-host/state";
const WORK_DIR: &str = "/run/memqos-agent-host/work";
const TICK: Duration = Duration::from_millis(20);
const SAMPLE_EVERY: Duration = Duration::from_millis(100);
const DEADLINE: Duration = Duration::from_secs(600);
/// The longest the runner waits for a runtime's replay worker before starting its clock.
const RUNTIME_START_LIMIT: Duration = Duration::from_secs(2);

/// One arm at one level of one run (or one session alone: arm "solo").
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HostArmResult {
    pub kernel: String,
    pub run: usize,
    /// Concurrent sessions (1 for a solo arm).
    pub level: usize,
    /// `solo` or a policy name.
    pub arm: String,
    /// Position of this arm within its run.
    pub order: usize,
    pub speed: f64,
    /// The parent's memory.max; `None` for a solo arm (unlimited).
    pub host_budget_bytes: Option<u64>,
    pub started_epoch: f64,
    pub sessions: Vec<SessionResult>,
    /// memory.events oom_kill of the parent at the end.
    pub parent_oom_kills: u64,
    pub parent_peak_bytes: Option<u64>,
    /// The parent's memory.current every 100 ms.
    pub parent_current: Vec<(f64, u64)>,
    /// memqos arm: the daemon exited cleanly, left no journal, and every session cgroup
    /// still there has memory.high max and memory.low/min 0.
    pub knobs_restored: Option<bool>,
    pub daemon_cpu_s: Option<f64>,
    /// memqos arm: knob writes and stall actions the daemon logged.
    pub daemon_writes: Option<usize>,
    /// Stall-bound relieves and kills carried out. The runs in docs/agent-host/runs were
    /// counted by a matcher that never matched (0 whatever happened); they keep no event log
    /// to count again, so their 0 means "not counted".
    pub daemon_stall_actions: Option<usize>,
    /// Whether cgroup2 was mounted with memory_recursiveprot (the runtime's memory.low
    /// protects it below its session only then).
    pub recursiveprot: bool,
    /// The cpu controller was on for the sessions and their cgroups (cpu.weight counts only
    /// then). `None`: results from before it was recorded (it was off).
    #[serde(default)]
    pub cpu_controller: Option<bool>,
    /// The sessions were closed loops ([`super::session`]). `false` in results from before
    /// (every call started when the trace said, whatever became of the previous one).
    #[serde(default)]
    pub closed_loop: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionResult {
    /// `s0`, `s1`, ...
    pub name: String,
    pub trace: String,
    /// When its runtime started, seconds after the arm's start.
    pub start_s: f64,
    /// static-peak: the session's memory.max.
    pub memory_max: Option<u64>,
    /// Times an OOM was triggered at the session's own limit (memory.events.local `oom`):
    /// its kills were the session's limit's doing, not the host's. `None` in results from
    /// before it was recorded.
    #[serde(default)]
    pub own_limit_ooms: Option<u64>,
    pub runtime: ProcResult,
    pub calls: Vec<CallResult>,
    /// Closed loop: how the session ended. `None` in open-loop results.
    #[serde(default)]
    pub fate: Option<SessionFate>,
    /// Closed loop: seconds its runtime's replay stood paused waiting for late calls.
    #[serde(default)]
    pub runtime_paused_s: Option<f64>,
}

/// A `memqos run` of a replay: what the replay and `memqos run --json` reported.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProcResult {
    pub outcome: Outcome,
    /// `memqos run`'s exit status (the replay's: 0 finished, 3 OOM-killed, ...; 128 + signal).
    pub status: Option<i32>,
    pub wall_s: f64,
    pub schedule_s: Option<f64>,
    pub completion_s: Option<f64>,
    /// Growth-step latencies (the runtime's only: calls keep the summary).
    pub latencies_ms: Vec<f64>,
    pub latency: Option<LatencyStats>,
    /// From `memqos run --json`: the cgroup's memory.peak and memory.events.
    pub peak_bytes: Option<u64>,
    pub oom_kills: u64,
    pub high_events: u64,
    /// The plain-language account `memqos run` printed for an OOM kill.
    pub explanation: Option<String>,
}

impl ProcResult {
    /// Killed by the OOM killer: the cgroup counted a kill and the replay did not finish.
    pub fn oom_killed(&self) -> bool {
        !matches!(self.outcome, Outcome::Finished)
            && (self.oom_kills > 0 || matches!(self.outcome, Outcome::OomKilled { .. }))
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CallResult {
    pub index: usize,
    pub tools: String,
    pub planned_peak_bytes: u64,
    /// Scheduled start, seconds after the arm's start.
    pub due_s: f64,
    /// `None`: never started (its session's runtime had been killed).
    pub started_s: Option<f64>,
    /// The last attempt's result.
    pub result: Option<ProcResult>,
    /// Closed loop: the attempt that failed before the retry in `result`, if any.
    #[serde(default)]
    pub failed_attempt: Option<ProcResult>,
    /// Closed loop: what became of the call. `None` in open-loop results.
    #[serde(default)]
    pub fate: Option<CallFate>,
}

pub struct HostRunnerOptions {
    pub scenario: HostScenario,
    pub traces_dir: PathBuf,
    pub runs: usize,
    pub first_run: usize,
    pub out_dir: PathBuf,
    pub exe: PathBuf,
}

/// The session plans of every trace the scenario names, in its order.
pub fn plans(s: &HostScenario, traces_dir: &Path) -> Result<Vec<SessionPlan>> {
    s.traces
        .iter()
        .map(|name| {
            let dir = traces_dir.join(name);
            let trace = memqos_replay::trace::load_trace(&dir.join("resources.json"))
                .with_context(|| format!("{}: trace {name}", s.file.display()))?;
            let calls_file = dir.join("tool_calls.json");
            if !calls_file.is_file() {
                bail!("{}: trace {name} has no tool_calls.json: a session needs its tool calls", s.file.display());
            }
            let calls = memqos_replay::tool_calls::load_tool_calls(&calls_file)?;
            Ok(split(&trace, &calls, s.min_call_bytes))
        })
        .collect()
}

/// A static-peak session's memory.max: its peak plus 10%, where its peak is the larger of the
/// trace's (with the replay's baseline) and what the same session took alone in this run
/// (`measured`: the replay's own processes, one `memqos run` and `memqos-lab replay` per call,
/// add to the trace). An operator sizing sandboxes by their peaks sees the measured one.
pub fn static_limit(plan: &SessionPlan, baseline_mb: u64, measured: Option<u64>) -> u64 {
    let peak = (plan.peak_bytes + (baseline_mb << 20)).max(measured.unwrap_or(0));
    (peak + peak / 10) / 4096 * 4096
}

/// Runs the series; returns how many arm results were written.
pub fn run_all(opts: &HostRunnerOptions) -> Result<usize> {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").context("reading the kernel release")?;
    let kernel = kernel.trim().to_string();
    let s = &opts.scenario;
    let plans = plans(s, &opts.traces_dir)?;
    let recursiveprot = ensure_recursiveprot();
    std::fs::create_dir_all(&opts.out_dir)?;
    let per_run = s.traces.len() + s.policies.iter().map(|&p| s.levels_of(p).len()).sum::<usize>();
    let total = per_run * opts.runs;
    let started = Instant::now();
    // The first exec of the binary and the first replay read them through the guest's shared
    // filesystem: one session alone first, not recorded, so the first solo is not slower.
    let warm = plans.iter().min_by(|a, b| a.duration_s.total_cmp(&b.duration_s)).expect("a scenario trace");
    let session = Session { trace: warm.trace.clone(), plan: warm, solo_peak: None };
    run_host(opts, &[session], None, recursiveprot).context("the warm-up session")?;
    let mut done = 0;
    for run in opts.first_run..opts.first_run + opts.runs {
        // Solo first (each trace's session alone, no budget), then the host arms rotated.
        let mut arms: Vec<(usize, Option<HostPolicy>)> = Vec::new();
        for &p in &s.policies {
            for &level in s.levels_of(p) {
                arms.push((level, Some(p)));
            }
        }
        arms.sort_by_key(|&(level, _)| level);
        let shift = run % arms.len().max(1);
        arms.rotate_left(shift);
        let solos: Vec<(usize, Option<HostPolicy>)> = (0..s.traces.len()).map(|i| (i, None)).collect();
        // Each trace's session peak alone in this run: the static-peak arm's limits.
        let mut solo_peaks: Vec<Option<u64>> = vec![None; s.traces.len()];
        for (order, (level_or_trace, policy)) in solos.into_iter().chain(arms).enumerate() {
            let (label, level) = match policy {
                Some(p) => (format!("{level_or_trace:02}-{p}"), level_or_trace),
                None => (format!("solo-{}", s.traces[level_or_trace]), 1),
            };
            eprintln!(
                "progress: agent-host {kernel} run {run} {label} ({}/{total}), elapsed {:.0}s",
                done + 1,
                started.elapsed().as_secs_f64()
            );
            let sessions: Vec<Session> = match policy {
                Some(_) => (0..level)
                    .map(|k| {
                        let trace = s.trace_of(run, k);
                        let i = s.traces.iter().position(|t| t == trace).expect("a scenario trace");
                        Session { trace: trace.to_string(), plan: &plans[i], solo_peak: solo_peaks[i] }
                    })
                    .collect(),
                None => vec![Session {
                    trace: s.traces[level_or_trace].clone(),
                    plan: &plans[level_or_trace],
                    solo_peak: None,
                }],
            };
            let mut r = run_host(opts, &sessions, policy, recursiveprot)?;
            if policy.is_none() {
                solo_peaks[level_or_trace] = r.parent_peak_bytes;
            }
            r.kernel = kernel.clone();
            r.run = run;
            r.level = level;
            r.order = order;
            eprintln!("  {}", one_line(&r));
            let file = opts.out_dir.join(format!("run{run:02}-{label}.json"));
            std::fs::write(&file, serde_json::to_vec_pretty(&r)?)?;
            done += 1;
        }
    }
    Ok(done)
}

fn one_line(r: &HostArmResult) -> String {
    let lost = r.sessions.iter().filter(|s| s.runtime.oom_killed()).count();
    let calls: Vec<&CallResult> = r.sessions.iter().flat_map(|s| &s.calls).collect();
    let killed = calls.iter().filter(|c| c.result.as_ref().is_some_and(ProcResult::oom_killed)).count();
    format!(
        "{} x{}: runtimes killed {lost}/{}, calls killed {killed}/{}, parent oom_kill {}, restored {:?}",
        r.arm,
        r.level,
        r.sessions.len(),
        calls.len(),
        r.parent_oom_kills,
        r.knobs_restored
    )
}

/// Remounts cgroup2 with memory_recursiveprot (as systemd mounts it) so that protection of
/// a runtime below its session counts; says whether the mount has it.
fn ensure_recursiveprot() -> bool {
    let has = || {
        std::fs::read_to_string("/proc/self/mountinfo")
            .map(|m| m.lines().any(|l| l.contains(" /sys/fs/cgroup ") && l.contains("memory_recursiveprot")))
            .unwrap_or(false)
    };
    if !has() {
        let _ = Command::new("mount").args(["-o", "remount,memory_recursiveprot", "/sys/fs/cgroup"]).status();
    }
    has()
}

/// Turns the cpu controller on for `parent`'s children (and at the root if it is off there);
/// says whether it is on.
fn enable_cpu(parent: &Cgroup) -> bool {
    let root = Cgroup::new("/sys/fs/cgroup");
    let on = |cg: &Cgroup| cg.subtree_control().is_ok_and(|c| c.iter().any(|c| c == "cpu"));
    if !on(&root) {
        let _ = root.enable_controllers(&["cpu"]);
    }
    if !on(parent) {
        let _ = parent.enable_controllers(&["cpu"]);
    }
    on(parent)
}

/// A session of one host: its trace, its plan, its peak alone in this run.
struct Session<'a> {
    trace: String,
    plan: &'a SessionPlan,
    solo_peak: Option<u64>,
}

struct Running {
    child: Child,
    json: PathBuf,
    stderr: PathBuf,
    started: f64,
}

/// One host: `sessions` under `policy` (`None`: solo, no budget).
fn run_host(
    opts: &HostRunnerOptions,
    sessions: &[Session],
    policy: Option<HostPolicy>,
    recursiveprot: bool,
) -> Result<HostArmResult> {
    let s = &opts.scenario;
    let parent = Cgroup::new(PARENT);
    remove_tree(&parent)?;
    let _ = std::fs::remove_dir_all(WORK_DIR);
    std::fs::create_dir_all(WORK_DIR)?;
    parent.create()?;
    let result = (|| -> Result<HostArmResult> {
        parent.enable_controllers(&["memory"])?;
        // cpu.weight counts only with the cpu controller on down to the session's children.
        let cpu = enable_cpu(&parent);
        let budget = policy.map(|_| s.host_budget_bytes);
        if let Some(b) = budget {
            parent.set_limit("memory.max", Limit::Bytes(b))?;
        }
        let mut limits = Vec::new();
        for (k, session) in sessions.iter().enumerate() {
            let plan = session.plan;
            let cg = parent.child(&format!("s{k}"));
            cg.create()?;
            cg.enable_controllers(if cpu { &["memory", "cpu"] } else { &["memory"] })?;
            let limit =
                (policy == Some(HostPolicy::StaticPeak)).then(|| static_limit(plan, s.baseline_mb, session.solo_peak));
            if let Some(l) = limit {
                cg.set_limit("memory.max", Limit::Bytes(l))?;
            }
            limits.push(limit);
            let dir = Path::new(WORK_DIR).join(format!("s{k}"));
            std::fs::create_dir_all(&dir)?;
            // Epoch 0 is fine: the replay only uses differences.
            std::fs::write(dir.join("runtime.json"), resources_json(&plan.runtime, 1.0))?;
            for c in &plan.calls {
                std::fs::write(dir.join(format!("call{}.json", c.index)), resources_json(&c.points, 1.0 + c.start_s))?;
            }
        }
        let daemon = match policy {
            Some(HostPolicy::Memqos) => Some(start_daemon(s, &opts.exe)?),
            _ => None,
        };
        // The memqos arm's daemon writes its tiers' cpu.weight; in the other arms the runner
        // writes the same values, so every arm runs with the same CPU shares.
        let weights = s.cpu_weights().map_err(|e| anyhow::anyhow!(e))?;
        let weight_of = |child: &str| match policy {
            Some(HostPolicy::Memqos) => None,
            _ if !cpu => None,
            _ => weights.of(&format!("s0/{child}")),
        };
        let run = drive(opts, sessions, &limits, &weight_of);
        let (knobs_restored, daemon_cpu_s, daemon_writes, daemon_stall_actions) = match daemon {
            Some(d) => {
                let cpu = d.cpu_seconds();
                let (status, log) = d.stop()?;
                let journal_left = Path::new(STATE_DIR).join(JOURNAL_FILE).exists();
                let cgs = parent.descendants().unwrap_or_default();
                let clean = cgs.iter().all(|cg| {
                    cg.limit("memory.high").map(|l| l == Limit::Max).unwrap_or(true)
                        && cg.limit("memory.low").map(|l| l == Limit::Bytes(0)).unwrap_or(true)
                        && cg.limit("memory.min").map(|l| l == Limit::Bytes(0)).unwrap_or(true)
                });
                let DaemonActions { writes, stall_actions } = DaemonActions::count(&log);
                (Some(status.success() && !journal_left && clean), cpu, Some(writes), Some(stall_actions))
            }
            None => (None, None, None, None),
        };
        let (started_epoch, mut results, parent_current) = run?;
        for (k, r) in results.iter_mut().enumerate() {
            r.own_limit_ooms = Some(local_ooms(&parent.child(&format!("s{k}"))));
        }
        Ok(HostArmResult {
            kernel: String::new(),
            run: 0,
            level: sessions.len(),
            arm: policy.map(|p| p.name().to_string()).unwrap_or_else(|| "solo".into()),
            order: 0,
            speed: s.speed,
            host_budget_bytes: budget,
            started_epoch,
            sessions: results,
            parent_oom_kills: parent.memory_events()?.oom_kill,
            parent_peak_bytes: parent.memory_peak().ok(),
            parent_current,
            knobs_restored,
            daemon_cpu_s,
            daemon_writes,
            daemon_stall_actions,
            recursiveprot,
            cpu_controller: Some(cpu),
            closed_loop: true,
        })
    })();
    let cleanup = remove_tree(&parent);
    let r = result?;
    cleanup?;
    Ok(r)
}

/// What the daemon logged doing in one arm.
#[derive(Debug, PartialEq)]
struct DaemonActions {
    /// Every `write` event.
    writes: usize,
    /// Stall-bound relieves and kills that were carried out ([`WriteEvent::is_stall_action`]).
    stall_actions: usize,
}

impl DaemonActions {
    fn count(log: &str) -> DaemonActions {
        let lines = events::parse(log);
        let writes: Vec<&WriteEvent> = events::writes(&lines).map(|(_, w)| w).collect();
        DaemonActions { writes: writes.len(), stall_actions: writes.iter().filter(|w| w.is_stall_action()).count() }
    }
}

/// `oom` of a cgroup's memory.events.local (0 if unreadable).
fn local_ooms(cg: &Cgroup) -> u64 {
    let text = std::fs::read_to_string(cg.path().join("memory.events.local")).unwrap_or_default();
    text.lines().find_map(|l| l.strip_prefix("oom ")).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

fn start_daemon(s: &HostScenario, exe: &Path) -> Result<DaemonProcess> {
    let _ = std::fs::remove_dir_all(STATE_DIR);
    std::fs::create_dir_all(STATE_DIR)?;
    let text = s.daemon_config(PARENT, STATE_DIR).map_err(|e| anyhow::anyhow!(e))?;
    let config = Path::new(STATE_DIR).join("memqos.toml");
    std::fs::write(&config, text)?;
    DaemonProcess::start(exe, &config, Path::new(STATE_DIR), &[], Stdio::null())
}

type Drive = (f64, Vec<SessionResult>, Vec<(f64, u64)>);

/// A session runtime's clock (trace seconds, pauses excluded) as the runner keeps it. It
/// starts when the replay's worker appears in the runtime's cgroup (its second process after
/// `memqos-lab replay` itself), not at the spawn: `memqos run` and two execs of memqos take a few
/// hundred ms under TCG, several seconds of trace at 25x, and calls would start that early in
/// the runtime's trace. What is left is the worker's own start (reading its schedule).
struct RuntimeClock {
    started: Instant,
    paused_since: Option<Instant>,
    paused: Duration,
}

impl RuntimeClock {
    fn trace_s(&self, speed: f64) -> f64 {
        let stood = self.paused + self.paused_since.map_or(Duration::ZERO, |p| p.elapsed());
        self.started.elapsed().saturating_sub(stood).as_secs_f64() * speed
    }
}

/// One session's state in [`drive`].
struct Live {
    dir: PathBuf,
    cgroup: Cgroup,
    plan_loop: SessionLoop,
    runtime: Option<Running>,
    clock: Option<RuntimeClock>,
    runtime_done: Option<ProcResult>,
    runtime_spawned: Option<Instant>,
    /// The running call: (index in the plan, attempt, process).
    call: Option<(usize, u32, Running)>,
    /// The running call's and the runtime's cpu.weight are written (or there is none to
    /// write): `memqos run` makes their cgroups, so the runner writes once they exist.
    call_weighted: bool,
    runtime_weighted: bool,
}

/// Runs every session as a closed loop ([`SessionLoop`]) until all have ended, and collects
/// the results. `weight_of` gives a session's child cgroup (`runtime`, `tool.<pid>`) the
/// cpu.weight the runner writes for it (`None` in the memqos arm: the daemon writes it).
fn drive(
    opts: &HostRunnerOptions,
    sessions: &[Session],
    limits: &[Option<u64>],
    weight_of: &dyn Fn(&str) -> Option<u32>,
) -> Result<Drive> {
    let s = &opts.scenario;
    let started_epoch = epoch_now();
    let t0 = Instant::now();
    let starts: Vec<f64> = (0..sessions.len()).map(|k| k as f64 * s.stagger_s).collect();
    let parent = Cgroup::new(PARENT);
    let mut calls: Vec<Vec<CallResult>> = sessions
        .iter()
        .enumerate()
        .map(|(k, session)| {
            session
                .plan
                .calls
                .iter()
                .map(|c| CallResult {
                    index: c.index,
                    tools: c.tools.clone(),
                    planned_peak_bytes: c.peak_bytes(),
                    due_s: starts[k] + c.start_s / s.speed,
                    started_s: None,
                    result: None,
                    failed_attempt: None,
                    fate: None,
                })
                .collect()
        })
        .collect();
    let mut live: Vec<Live> = sessions
        .iter()
        .enumerate()
        .map(|(k, session)| Live {
            dir: Path::new(WORK_DIR).join(format!("s{k}")),
            cgroup: parent.child(&format!("s{k}")),
            plan_loop: SessionLoop::new(
                session.plan.calls.iter().map(|c| CallSpan { start_s: c.start_s, end_s: c.end_s }).collect(),
            ),
            runtime: None,
            clock: None,
            runtime_done: None,
            runtime_spawned: None,
            call: None,
            call_weighted: false,
            runtime_weighted: false,
        })
        .collect();
    let mut parent_current = Vec::new();
    let mut next_sample = Duration::ZERO;
    let kill_all = |live: &mut [Live]| {
        for l in live.iter_mut() {
            for r in l.runtime.iter_mut().chain(l.call.as_mut().map(|(_, _, r)| r)) {
                let _ = r.child.kill();
                let _ = r.child.wait();
            }
        }
    };
    let result = (|| -> Result<()> {
        loop {
            let now = t0.elapsed().as_secs_f64();
            if t0.elapsed() >= next_sample {
                parent_current.push((now, parent.memory_current().unwrap_or(0)));
                next_sample += SAMPLE_EVERY;
            }
            let mut busy = false;
            for (k, l) in live.iter_mut().enumerate() {
                if l.runtime.is_none() && l.runtime_done.is_none() {
                    if now >= starts[k] {
                        let _ = std::fs::remove_file(pause_file(&l.dir));
                        l.runtime = Some(spawn(opts, k, &l.dir, "runtime", "runtime", true)?);
                        l.runtime_spawned = Some(Instant::now());
                    } else {
                        busy = true;
                        continue;
                    }
                }
                if let (Some(_), None, Some(spawned)) = (&l.runtime, &l.clock, l.runtime_spawned) {
                    let worker = l.cgroup.child("runtime").procs().is_ok_and(|p| p.len() >= 2);
                    // Never wait forever on a proxy: after 2 s the clock starts regardless.
                    if worker || spawned.elapsed() > RUNTIME_START_LIMIT {
                        l.clock =
                            Some(RuntimeClock { started: Instant::now(), paused_since: None, paused: Duration::ZERO });
                    }
                }
                if l.runtime.is_some() && !l.runtime_weighted {
                    l.runtime_weighted = write_weight(&l.cgroup.child("runtime"), weight_of("runtime"));
                }
                // Reap first, so the loop hears of an end before it is asked what is next.
                if let Some(r) = l.runtime.as_mut() {
                    if let Some(status) = r.child.try_wait()? {
                        let r = l.runtime.take().expect("checked");
                        let done = collect(r, status.code(), &opts.exe, true);
                        let killed = !matches!(done.outcome, Outcome::Finished);
                        l.runtime_done = Some(done);
                        if let Some(c) = l.clock.as_mut() {
                            if let Some(p) = c.paused_since.take() {
                                c.paused += p.elapsed();
                            }
                        }
                        let actions = l.plan_loop.runtime_ended(killed);
                        apply(opts, k, l, &mut calls[k], actions, t0)?;
                    }
                }
                if let Some((j, _, r)) = l.call.as_mut() {
                    let j = *j;
                    if let Some(status) = r.child.try_wait()? {
                        let (_, _, r) = l.call.take().expect("checked");
                        let done = collect(r, status.code(), &opts.exe, false);
                        let ok = matches!(done.outcome, Outcome::Finished);
                        let c = &mut calls[k][j];
                        if let Some(previous) = c.result.replace(done) {
                            c.failed_attempt = Some(previous);
                        }
                        let actions = l.plan_loop.call_ended(j, ok);
                        apply(opts, k, l, &mut calls[k], actions, t0)?;
                    } else if !l.call_weighted {
                        let cg = l.cgroup.child(&format!("tool.{}", r.child.id()));
                        l.call_weighted = write_weight(&cg, weight_of("tool.0"));
                    }
                }
                // Nothing is due before the runtime's clock starts; once the runtime has
                // ended, the loop no longer reads the clock.
                let t = match (&l.clock, &l.runtime) {
                    (Some(c), _) => Some(c.trace_s(s.speed)),
                    (None, Some(_)) => None,
                    (None, None) => Some(0.0),
                };
                if let Some(t) = t {
                    let actions = l.plan_loop.tick(t);
                    apply(opts, k, l, &mut calls[k], actions, t0)?;
                }
                busy |= l.runtime.is_some() || l.call.is_some() || l.plan_loop.fate().is_none();
            }
            if !busy {
                return Ok(());
            }
            if t0.elapsed() > DEADLINE {
                bail!("sessions still running after {} s", DEADLINE.as_secs());
            }
            std::thread::sleep(TICK);
        }
    })();
    if let Err(e) = result {
        kill_all(&mut live);
        return Err(e);
    }
    let results = sessions
        .iter()
        .enumerate()
        .zip(live)
        .zip(calls)
        .map(|(((k, session), l), mut calls)| {
            for (j, c) in calls.iter_mut().enumerate() {
                c.fate = l.plan_loop.call_fate(j);
            }
            SessionResult {
                name: format!("s{k}"),
                trace: session.trace.clone(),
                start_s: starts[k],
                memory_max: limits[k],
                own_limit_ooms: None,
                runtime: l.runtime_done.expect("every runtime ended"),
                calls,
                fate: l.plan_loop.fate(),
                runtime_paused_s: l.clock.map(|c| c.paused.as_secs_f64()),
            }
        })
        .collect();
    Ok((started_epoch, results, parent_current))
}

/// The file whose presence pauses a session's runtime replay (`memqos-lab replay --pause-file`).
fn pause_file(dir: &Path) -> PathBuf {
    dir.join("runtime.pause")
}

/// Carries out what a session's loop asked for.
fn apply(
    opts: &HostRunnerOptions,
    k: usize,
    l: &mut Live,
    calls: &mut [CallResult],
    actions: Vec<Action>,
    t0: Instant,
) -> Result<()> {
    for a in actions {
        match a {
            Action::StartCall { call, attempt } => {
                let c = &mut calls[call];
                let label = if attempt == 1 { format!("call{}", c.index) } else { format!("call{}-retry", c.index) };
                let r = spawn(opts, k, &l.dir, &format!("call{}", c.index), &label, false)?;
                c.started_s.get_or_insert(t0.elapsed().as_secs_f64());
                l.call = Some((call, attempt, r));
                l.call_weighted = false;
            }
            Action::Pause => {
                std::fs::write(pause_file(&l.dir), "")?;
                if let Some(c) = l.clock.as_mut() {
                    c.paused_since.get_or_insert_with(Instant::now);
                }
            }
            Action::Resume => {
                let _ = std::fs::remove_file(pause_file(&l.dir));
                if let Some(c) = l.clock.as_mut() {
                    if let Some(p) = c.paused_since.take() {
                        c.paused += p.elapsed();
                    }
                }
            }
            // cgroup.kill, as the OOM killer or a stall bound would end it: `memqos run`
            // reports the kill and cleans up.
            Action::StopRuntime => {
                let _ = l.cgroup.child("runtime").write_string("cgroup.kill", "1");
            }
            Action::StopCall { .. } => {
                if let Some((_, _, r)) = &l.call {
                    let _ = l.cgroup.child(&format!("tool.{}", r.child.id())).write_string("cgroup.kill", "1");
                }
            }
        }
    }
    Ok(())
}

/// Writes `weight` to `cg`'s cpu.weight; says whether it is done (nothing to write counts).
fn write_weight(cg: &Cgroup, weight: Option<u32>) -> bool {
    match weight {
        None => true,
        Some(w) => cg.write_string("cpu.weight", &w.to_string()).is_ok(),
    }
}

/// `memqos run [--runtime] --session sK -- memqos-lab replay <dir>/<schedule>.json`, its report
/// and stderr named after `label`.
fn spawn(
    opts: &HostRunnerOptions,
    k: usize,
    dir: &Path,
    schedule: &str,
    label: &str,
    runtime: bool,
) -> Result<Running> {
    let s = &opts.scenario;
    let json = dir.join(format!("{label}.report.json"));
    let stderr = dir.join(format!("{label}.stderr"));
    let mut c = Command::new(&opts.exe);
    c.args(["run", "--root", PARENT, "--session", &format!("s{k}"), "--json"]);
    if runtime {
        c.arg("--runtime");
    }
    c.arg("--").arg(&opts.exe).arg("replay").arg(dir.join(format!("{schedule}.json")));
    c.args(["--speed", &s.speed.to_string(), "-q", "--json"]).arg(&json);
    if runtime {
        c.args(["--baseline-mb", &s.baseline_mb.to_string()]);
        c.arg("--pause-file").arg(pause_file(dir));
    }
    let child = c
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr)?)
        .spawn()
        .with_context(|| format!("starting memqos run for s{k} {label}"))?;
    Ok(Running { child, json, stderr, started: epoch_now() })
}

/// What a finished `memqos run` left: the replay's report and `memqos run --json`'s line.
fn collect(r: Running, status: Option<i32>, exe: &Path, keep_latencies: bool) -> ProcResult {
    let wall_s = epoch_now() - r.started;
    let report: Option<Report> = std::fs::read(&r.json).ok().and_then(|b| serde_json::from_slice(&b).ok());
    let stderr = std::fs::read_to_string(&r.stderr).unwrap_or_default();
    let call: Option<serde_json::Value> =
        stderr.lines().rev().find(|l| l.starts_with('{')).and_then(|l| serde_json::from_str(l).ok());
    let call = call.unwrap_or(serde_json::Value::Null);
    let oom_kills = call["events"]["oom_kill"].as_u64().unwrap_or(0);
    // The account names the command, whose path is this build's: keep results free of it.
    let explanation = (oom_kills > 0).then(|| {
        let text: Vec<&str> = stderr.lines().filter(|l| l.starts_with("memqos:")).collect();
        text.join("\n").replace(&exe.display().to_string(), "memqos-lab")
    });
    let (outcome, schedule_s, completion_s, latencies_ms, latency) = match report {
        Some(rep) => (
            rep.summary.outcome.clone(),
            Some(rep.summary.schedule_s),
            rep.summary.completion_s,
            if keep_latencies {
                rep.steps.iter().filter(|st| st.grown > 0).map(|st| st.latency_us as f64 / 1e3).collect()
            } else {
                Vec::new()
            },
            rep.summary.latency,
        ),
        None => (
            Outcome::Failed { exit_code: status, message: format!("no report at {}", r.json.display()) },
            None,
            None,
            Vec::new(),
            None,
        ),
    };
    ProcResult {
        outcome,
        status,
        wall_s,
        schedule_s,
        completion_s,
        latencies_ms,
        latency,
        peak_bytes: call["peak_bytes"].as_u64(),
        oom_kills,
        high_events: call["events"]["high"].as_u64().unwrap_or(0),
        explanation,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An arm's log as the daemon writes it: a start, a cut for pressure, a stall-bound relieve
    /// (memory.high raised), a stall-bound kill, a kill of a call that had already ended, and
    /// a torn last line. Stall-bound writes carry `"reason":{"kind":"stall_bound",...}`.
    const LOG: &str = r#"{"event":"started","pid":812,"cgroup_root":"/sys/fs/cgroup/memqos-agent-host","config":"/run/memqos-agent-host/state/memqos.toml","dry_run":false,"ts":1795599100.25}
{"event":"write","cgroup":"s1/tool-low.901","cgroup_id":4101,"file":"memory.high","value":"209715200","previous":"max","outcome":"ok","reason":{"kind":"protected_pressure","by":"s0","trigger":{"kind":"psi_trigger"}},"why":"pressure in s0: PSI trigger fired","dry_run":false,"mono_ns":1000,"mono_done_ns":1100,"ts":1795599101.5}
{"event":"write","cgroup":"s1/tool-low.901","cgroup_id":4101,"file":"memory.high","value":"362807296","previous":"209715200","outcome":"ok","reason":{"kind":"stall_bound","stalled_for_ms":10006,"bound_ms":10000,"usage_bytes":209715200,"high_bytes":209715200,"psi_full_avg10":92.0},"why":"no progress for 10006 ms (bound 10000 ms)","dry_run":false,"mono_ns":2000,"mono_done_ns":2100,"ts":1795599111.5}
{"event":"write","cgroup":"s2/tool-low.902","cgroup_id":4102,"file":"cgroup.kill","value":"1","previous":null,"outcome":"ok","reason":{"kind":"stall_bound","stalled_for_ms":10012,"bound_ms":10000,"usage_bytes":402653184,"high_bytes":402653184,"psi_full_avg10":61.5},"why":"no progress for 10012 ms (bound 10000 ms)","dry_run":false,"mono_ns":5000,"mono_done_ns":5100,"ts":1795599120.5}
{"event":"write","cgroup":"s3/tool-low.903","cgroup_id":4103,"file":"cgroup.kill","value":"1","previous":null,"outcome":"vanished","reason":{"kind":"stall_bound","stalled_for_ms":10001,"bound_ms":10000,"usage_bytes":104857600,"high_bytes":104857600,"psi_full_avg10":55.0},"why":"no progress for 10001 ms (bound 10000 ms)","dry_run":false,"mono_ns":6000,"mono_done_ns":6100,"ts":1795599121.5}
{"event":"write","cgroup":"s3/tool-low.9"#;

    #[test]
    fn the_fixture_is_the_daemons_own_encoding() {
        let complete: Vec<&str> = LOG.lines().filter(|l| l.ends_with('}')).collect();
        let parsed = events::parse(LOG);
        assert_eq!(parsed.len(), complete.len(), "every complete line is an event of the schema");
        for (line, event) in complete.iter().zip(&parsed) {
            assert_eq!(&serde_json::to_string(event).unwrap(), line);
        }
    }

    #[test]
    fn stall_bound_relieves_and_kills_that_happened_are_counted() {
        assert_eq!(DaemonActions::count(LOG), DaemonActions { writes: 4, stall_actions: 2 });
        assert_eq!(DaemonActions::count(""), DaemonActions { writes: 0, stall_actions: 0 });
    }
}
