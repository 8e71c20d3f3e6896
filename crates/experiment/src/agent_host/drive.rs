//! One host's sessions driven to their end: each a closed loop ([`SessionLoop`]) whose
//! runtime and tool calls run as `memqos run ... -- memqos-lab replay`, the parent's memory
//! sampled meanwhile, and each finished `memqos run` read back into a [`ProcResult`].

use super::result::{CallResult, ProcResult, SessionResult};
use super::runner::{HostRunnerOptions, Session, PARENT, STATE_DIR, WORK_DIR};
use super::session::{Action, CallSpan, SessionLoop};
use crate::series::epoch_now;
use anyhow::{Context, Result};
use memqos_cgroupfs::Cgroup;
use memqos_replay::report::Report;
use memqos_replay::Outcome;
use memqos_schema::call::CallReport;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TICK: Duration = Duration::from_millis(20);
const SAMPLE_EVERY: Duration = Duration::from_millis(100);
const DEADLINE: Duration = Duration::from_secs(600);
/// The longest the runner waits for a runtime's replay worker before starting its clock.
const RUNTIME_START_LIMIT: Duration = Duration::from_secs(2);

struct Running {
    child: Child,
    json: PathBuf,
    stderr: PathBuf,
    started: f64,
}

pub(super) type Drive = (f64, Vec<SessionResult>, Vec<(f64, u64)>);

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
pub(super) fn drive(
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
                        l.runtime = Some(spawn(opts, k, &l.dir, "runtime", "runtime", Launch::Runtime)?);
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
                // What each unfinished session was doing, for the console: a hang must say
                // where it is (a call held at its memory.high, a runtime paused for a call).
                eprintln!("{}", hang_report(&parent, &live));
                eprintln!(
                    "agent-host: sessions still running after {} s: recorded as hung (lost), the level goes on",
                    DEADLINE.as_secs()
                );
                for (k, l) in live.iter_mut().enumerate() {
                    end_hung(opts, l, &mut calls[k]);
                }
                return Ok(());
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
                let declared = opts.scenario.declare_calls.then(|| declaration(c.planned_peak_bytes));
                let r = spawn(opts, k, &l.dir, &format!("call{}", c.index), &label, Launch::Call { declared })?;
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

/// What `memqos run` starts: the session's runtime, or one of its tool calls (declaring its
/// peak when the scenario says so).
#[derive(Clone, Copy)]
enum Launch {
    Runtime,
    Call { declared: Option<u64> },
}

/// A call's declared peak: its peak in the trace plus 10%, the margin of every declared peak
/// in the experiments.
fn declaration(planned_peak_bytes: u64) -> u64 {
    planned_peak_bytes.saturating_add(planned_peak_bytes / 10)
}

/// `memqos run [--runtime] [--expect B] --session sK -- memqos-lab replay
/// <dir>/<schedule>.json`, its report and stderr named after `label`.
fn spawn(
    opts: &HostRunnerOptions,
    k: usize,
    dir: &Path,
    schedule: &str,
    label: &str,
    launch: Launch,
) -> Result<Running> {
    let runtime = matches!(launch, Launch::Runtime);
    let s = &opts.scenario;
    let json = dir.join(format!("{label}.report.json"));
    let stderr = dir.join(format!("{label}.stderr"));
    let mut c = Command::new(&opts.exe);
    c.args(["run", "--root", PARENT, "--state-dir", STATE_DIR, "--session", &format!("s{k}"), "--json"]);
    match launch {
        Launch::Runtime => {
            c.arg("--runtime");
        }
        Launch::Call { declared: Some(bytes) } => {
            c.args(["--expect", &bytes.to_string()]);
        }
        Launch::Call { declared: None } => {}
    }
    c.arg("--").arg(&opts.exe).arg("replay").arg(dir.join(format!("{schedule}.json")));
    c.args(["--speed", &s.speed.to_string(), "-q", "--json"]).arg(&json);
    if let Some(ratio) = s.compression_ratio {
        c.args(["--compression-ratio", &ratio.to_string()]);
    }
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
    read_back(&r.json, &r.stderr, epoch_now() - r.started, status, exe, keep_latencies)
}

/// [`collect`] from the files: the replay's report at `json`, `memqos run`'s stderr at `stderr`
/// (its `--json` line last, the account of an OOM kill on `memqos:` lines).
fn read_back(
    json: &Path,
    stderr: &Path,
    wall_s: f64,
    status: Option<i32>,
    exe: &Path,
    keep_latencies: bool,
) -> ProcResult {
    let report: Option<Report> = std::fs::read(json).ok().and_then(|b| serde_json::from_slice(&b).ok());
    let stderr = std::fs::read_to_string(stderr).unwrap_or_default();
    let call: Option<CallReport> =
        stderr.lines().rev().find(|l| l.starts_with('{')).and_then(|l| serde_json::from_str(l).ok());
    let oom_kills = call.as_ref().map_or(0, |c| c.events.oom_kill);
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
            Outcome::Failed { exit_code: status, message: format!("no report at {}", json.display()) },
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
        peak_bytes: call.as_ref().and_then(|c| c.peak_bytes),
        oom_kills,
        high_events: call.as_ref().map_or(0, |c| c.events.high),
        explanation,
        armed: call.map(|c| c.armed).filter(|a| a.high_bytes.is_some() || a.waited_ms > 0),
    }
}

/// Ends a session still running at the deadline: every process in its cgroups is killed
/// (`cgroup.kill`, as a stall bound would), what ran is collected, the rest is lost.
fn end_hung(opts: &HostRunnerOptions, l: &mut Live, calls: &mut [CallResult]) {
    if l.plan_loop.fate().is_some() && l.runtime.is_none() && l.call.is_none() {
        return;
    }
    for child in l.cgroup.children().unwrap_or_default() {
        let _ = child.write_string("cgroup.kill", "1");
    }
    if let Some(mut r) = l.runtime.take() {
        let status = r.child.wait().ok().and_then(|s| s.code());
        l.runtime_done = Some(collect(r, status, &opts.exe, true));
    }
    if let Some((j, _, mut r)) = l.call.take() {
        let status = r.child.wait().ok().and_then(|s| s.code());
        let done = collect(r, status, &opts.exe, false);
        if let Some(previous) = calls[j].result.replace(done) {
            calls[j].failed_attempt = Some(previous);
        }
    }
    l.plan_loop.hang();
}

/// The state of every session that has not ended, with the memory files of its cgroups and
/// of the host budget's: what a level that ran past its deadline was waiting on.
fn hang_report(parent: &Cgroup, live: &[Live]) -> String {
    let files = ["memory.current", "memory.high", "memory.max", "memory.events", "memory.pressure", "cgroup.events"];
    let show = |cg: &Cgroup| -> String {
        let mut out = format!("    {}:", cg.path().display());
        for f in files {
            let v = std::fs::read_to_string(cg.path().join(f)).unwrap_or_else(|e| format!("({e})"));
            out.push_str(&format!(" [{f}: {}]", v.split_whitespace().collect::<Vec<_>>().join(" ")));
        }
        let procs = std::fs::read_to_string(cg.path().join("cgroup.procs")).unwrap_or_default();
        out.push_str(&format!(" [procs: {}]", procs.split_whitespace().collect::<Vec<_>>().join(" ")));
        out
    };
    let mut out = format!("agent-host: hung level; the host budget:\n{}\n", show(parent));
    for l in live {
        let running = l.runtime.is_some() || l.call.is_some() || l.plan_loop.fate().is_none();
        if !running {
            continue;
        }
        out.push_str(&format!(
            "  {}: runtime {}, call {:?}, loop {:?}\n",
            l.cgroup.path().display(),
            if l.runtime.is_some() { "running" } else { "ended" },
            l.call.as_ref().map(|(j, attempt, _)| (j, attempt)),
            l.plan_loop
        ));
        for child in l.cgroup.children().unwrap_or_default() {
            out.push_str(&show(&child));
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use memqos_schema::call::{CallEvents, OomAccount};

    /// A killed call's stderr as `memqos run --json` leaves it: the account, then the report
    /// line the writer's own type serializes.
    #[test]
    fn a_calls_report_line_is_read_back_typed() {
        let dir = tempfile::tempdir().unwrap();
        let exe = Path::new("/build/target/release/memqos-lab");
        let report = CallReport {
            cgroup: "/sys/fs/cgroup/memqos-agent-host/s0/tool.7".into(),
            session: "s0".into(),
            tier: "tool".into(),
            status: 137,
            signal: Some(9),
            wall_ms: 800,
            peak_bytes: Some(300 << 20),
            events: CallEvents { high: 5, max: 2, oom_kill: 1 },
            hint_bytes: None,
            kept: false,
            oom: Some(OomAccount {
                killed: 1,
                command_killed: true,
                limit: None,
                others: Vec::new(),
                advice: Vec::new(),
            }),
            daemon_stall_actions: Vec::new(),
            armed: Default::default(),
        };
        let stderr = dir.path().join("call0.stderr");
        let text = format!(
            "memqos: {} was killed: the host ran out of memory\n{}\n",
            exe.display(),
            serde_json::to_string(&report).unwrap()
        );
        std::fs::write(&stderr, text).unwrap();
        let got = read_back(&dir.path().join("missing.json"), &stderr, 1.5, Some(137), exe, false);
        assert_eq!((got.oom_kills, got.high_events, got.peak_bytes), (1, 5, Some(300 << 20)));
        assert_eq!(got.explanation.as_deref(), Some("memqos: memqos-lab was killed: the host ran out of memory"));
        assert!(
            matches!(got.outcome, Outcome::Failed { exit_code: Some(137), .. }),
            "no replay report: {:?}",
            got.outcome
        );
        // No report line (an old `memqos run`, or it died first): nothing counted, no account.
        std::fs::write(&stderr, "memqos: something\n").unwrap();
        let got = read_back(&dir.path().join("missing.json"), &stderr, 1.5, Some(1), exe, false);
        assert_eq!((got.oom_kills, got.high_events, got.peak_bytes, got.explanation), (0, 0, None, None));
    }
}
