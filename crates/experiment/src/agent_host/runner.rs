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

use super::drive::drive;
pub use super::result::{ArmWrite, CallResult, HostArmResult, ProcResult, SessionResult};
use super::scenario::{HostPolicy, HostScenario};
use super::split::{resources_json, split, SessionPlan};
use crate::series::daemon::{knobs_at_defaults, ArmDaemon};
use crate::series::{kernel_release, remove_tree};
use anyhow::{bail, Context, Result};
use memqos_cgroupfs::{Cgroup, Limit};
use memqos_schema::events::{self, LogLine, WriteEvent};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

pub(super) const PARENT: &str = "/sys/fs/cgroup/memqos-agent-host";
/// The memqos arm's state directory; every arm's `memqos run` is pointed at it (without a
/// daemon publishing allowances there, nothing is armed).
pub(super) const STATE_DIR: &str = "/run/memqos-agent-host/state";
pub(super) const WORK_DIR: &str = "/run/memqos-agent-host/work";

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
    let kernel = kernel_release()?;
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
pub(super) struct Session<'a> {
    pub(super) trace: String,
    pub(super) plan: &'a SessionPlan,
    pub(super) solo_peak: Option<u64>,
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
        let mut daemon_write_log = Vec::new();
        let (knobs_restored, daemon_cpu_s, daemon_writes, daemon_stall_actions) = match daemon {
            Some(d) => {
                let stopped = d.stop()?;
                // A cgroup that vanishes between the listing and the read is no knob left set.
                let cgs = parent.descendants().unwrap_or_default();
                let clean = cgs.iter().all(|cg| knobs_at_defaults(cg, true));
                let lines = events::parse(&stopped.log);
                let DaemonActions { writes, stall_actions } = DaemonActions::count(&lines);
                let started = run.as_ref().map_or(0.0, |(epoch, _, _)| *epoch);
                daemon_write_log = write_log(&lines, started);
                let restored = stopped.clean_exit && !stopped.journal_left && clean;
                (Some(restored), stopped.cpu_s, Some(writes), Some(stall_actions))
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
            daemon_write_log,
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
    fn count(lines: &[LogLine]) -> DaemonActions {
        let writes: Vec<&WriteEvent> = events::writes(lines).map(|(_, w)| w).collect();
        DaemonActions { writes: writes.len(), stall_actions: writes.iter().filter(|w| w.is_stall_action()).count() }
    }
}

/// The daemon's knob writes among `lines`, timed from `started_epoch`.
fn write_log(lines: &[LogLine], started_epoch: f64) -> Vec<ArmWrite> {
    events::writes(lines)
        .map(|(ts, w)| ArmWrite {
            t_s: ts - started_epoch,
            cgroup: w.cgroup.clone(),
            file: w.file.clone(),
            value: w.value.clone(),
            reason: w.reason.as_ref().map_or_else(String::new, |r| r.kind().to_string()),
        })
        .collect()
}

/// `oom` of a cgroup's memory.events.local (0 if unreadable).
fn local_ooms(cg: &Cgroup) -> u64 {
    let text = std::fs::read_to_string(cg.path().join("memory.events.local")).unwrap_or_default();
    text.lines().find_map(|l| l.strip_prefix("oom ")).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

fn start_daemon(s: &HostScenario, exe: &Path) -> Result<ArmDaemon> {
    let config = s.daemon_config(PARENT, STATE_DIR).map_err(|e| anyhow::anyhow!(e))?;
    ArmDaemon::start(exe, Path::new(STATE_DIR), &config)
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
    fn the_write_log_keeps_every_write_in_order_timed_from_the_start() {
        let log = write_log(&events::parse(LOG), 1795599100.0);
        let got: Vec<(f64, &str, &str, &str)> =
            log.iter().map(|w| (w.t_s, w.cgroup.as_str(), w.file.as_str(), w.reason.as_str())).collect();
        assert_eq!(
            got,
            [
                (1.5, "s1/tool-low.901", "memory.high", "protected_pressure"),
                (11.5, "s1/tool-low.901", "memory.high", "stall_bound"),
                (20.5, "s2/tool-low.902", "cgroup.kill", "stall_bound"),
                (21.5, "s3/tool-low.903", "cgroup.kill", "stall_bound"),
            ]
        );
        assert_eq!(log[1].value, "362807296");
        assert!(write_log(&[], 0.0).is_empty());
    }

    #[test]
    fn stall_bound_relieves_and_kills_that_happened_are_counted() {
        assert_eq!(DaemonActions::count(&events::parse(LOG)), DaemonActions { writes: 4, stall_actions: 2 });
        assert_eq!(DaemonActions::count(&[]), DaemonActions { writes: 0, stall_actions: 0 });
    }
}
