//! The agent-host figures: per kernel, concurrency level and arm, what happened to the
//! sessions and their tool calls; each arm's density (the most concurrent sessions with no
//! agent runtime killed in any run); and the target verdict.

pub use super::report::render_markdown;
use super::runner::{HostArmResult, ProcResult};
use super::session::{CallFate, SessionFate};
use crate::stats::{estimate, Estimate};
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LevelSummary {
    pub kernel: String,
    pub level: usize,
    pub arm: String,
    pub runs: usize,
    pub sessions: usize,
    pub sessions_finished: usize,
    pub runtimes_killed: usize,
    pub runs_with_runtime_killed: usize,
    /// Calls the sessions' traces hold, started, OOM-killed, and never started (lost with
    /// their session's runtime).
    pub calls_planned: usize,
    pub calls_started: usize,
    pub calls_killed: usize,
    pub calls_not_started: usize,
    /// Closed loop (every run of the level): sessions failed by a call killed twice, calls
    /// that finished on their retry, and calls lost with their session (its runtime killed,
    /// or it failed earlier), the call running when it happened included.
    #[serde(default)]
    pub closed_loop: bool,
    #[serde(default)]
    pub sessions_failed: usize,
    #[serde(default)]
    pub calls_retried: usize,
    #[serde(default)]
    pub calls_lost: usize,
    /// Closed loop: sessions still running at the level's deadline (killed by the runner;
    /// lost, like a killed runtime, for the density).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub sessions_hung: usize,
    /// policy.admission: call attempts armed with a ceiling, held at it, made to wait for
    /// room before they started, and waits that ended at `admission_wait_ms`; how long the
    /// waits were (ms).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub calls_armed: usize,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub calls_held: usize,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub calls_waited: usize,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub waits_at_limit: usize,
    /// Call attempts OOM-killed after a wait that ended at `admission_wait_ms` (started into
    /// a host that still had no room for them).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub killed_after_wait_limit: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<Estimate>,
    /// The held queue (`queue_held`): cgroups the daemon froze in line (reason `queued`),
    /// and thaws of them at their tier's stall bound, from the runs' `daemon_write_log`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub calls_queued: usize,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub queue_thaws_at_bound: usize,
    pub parent_oom_kills: u64,
    /// What the sessions' runtimes alone ask of the host: per run, the sum of each session's
    /// runtime peak in its trace's solo run, over the host budget. Near or above 1, the
    /// runtimes' peaks leave no room for tool calls however the calls are scheduled, unless
    /// a runtime is killed or its session ends first. `None` where a run had no budget or no
    /// solo runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_peaks_of_budget: Option<Estimate>,
    /// OOMs triggered at a session's own limit (static-peak), summed; `None` where a run did
    /// not record them.
    #[serde(default)]
    pub session_limit_ooms: Option<u64>,
    /// Each session's runtime p95 growth-step latency over the same trace's alone, same run.
    pub runtime_p95_vs_solo: Option<Estimate>,
    /// Each finished call's wall time over the same call's alone, same run.
    pub call_time_vs_solo: Option<Estimate>,
    /// Per run, seconds from the level's start until its last session ended (a failed or
    /// lost session ends early): what holding calls back costs the whole host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span_s: Option<Estimate>,
    /// static-peak: did the sessions' memory.max sum to at most the budget in every run?
    pub static_limits_fit: Option<bool>,
    /// memqos: knobs restored after every run.
    pub knobs_restored: Option<bool>,
    pub daemon_cpu_s: Option<Estimate>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Density {
    pub kernel: String,
    pub arm: String,
    /// The largest level at and below which no run lost an agent runtime (0: even the
    /// smallest level lost one).
    pub sessions: usize,
    /// The bracket: the highest level run with no runtime killed in any run, and the lowest
    /// level run with one (`None`: none). The density is at least `sessions` and below
    /// `lowest_lost`; with levels in steps of one around it, `sessions` is exact.
    #[serde(default)]
    pub highest_clean: Option<usize>,
    #[serde(default)]
    pub lowest_lost: Option<usize>,
    /// The levels this arm ran.
    #[serde(default)]
    pub levels_run: Vec<usize>,
    /// static-peak: the largest level whose sessions' memory.max fit in the budget in every
    /// run (what admitting sessions by their peak limits allows).
    pub admitted_by_limits: Option<usize>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Verdict {
    pub kernel: String,
    pub target: String,
    pub measured: String,
    pub met: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HostSummary {
    pub levels: Vec<LevelSummary>,
    pub density: Vec<Density>,
    pub targets: Vec<Verdict>,
    /// One plain-language account of an OOM-killed tool call per kernel and arm, as the
    /// agent read it on stderr.
    pub example_explanations: BTreeMap<String, String>,
}

/// Every arm result under `dir`, by kernel, run and position in the run.
pub fn load(dir: &Path) -> Result<Vec<HostArmResult>> {
    let mut out: Vec<HostArmResult> = crate::series::load_results(dir, "a host arm result")?;
    out.sort_by(|a, b| (&a.kernel, a.run, a.order).cmp(&(&b.kernel, b.run, b.order)));
    Ok(out)
}

fn p95(p: &ProcResult) -> Option<f64> {
    p.latency.as_ref().map(|l| l.p95_ms).filter(|v| *v > 0.0)
}

pub fn summarize(results: &[HostArmResult]) -> HostSummary {
    // Solo baselines by (kernel, run, trace).
    let mut solo: BTreeMap<(&str, usize, &str), &HostArmResult> = BTreeMap::new();
    for r in results.iter().filter(|r| r.arm == "solo") {
        for s in &r.sessions {
            solo.insert((&r.kernel, r.run, &s.trace), r);
        }
    }
    let mut groups: BTreeMap<(String, usize, String), Vec<&HostArmResult>> = BTreeMap::new();
    for r in results.iter().filter(|r| r.arm != "solo") {
        groups.entry((r.kernel.clone(), r.level, r.arm.clone())).or_default().push(r);
    }
    let mut levels = Vec::new();
    let mut examples = BTreeMap::new();
    for ((kernel, level, arm), rs) in &groups {
        let mut g = LevelSummary {
            kernel: kernel.clone(),
            level: *level,
            arm: arm.clone(),
            runs: rs.len(),
            sessions: 0,
            sessions_finished: 0,
            runtimes_killed: 0,
            runs_with_runtime_killed: 0,
            calls_planned: 0,
            calls_started: 0,
            calls_killed: 0,
            calls_not_started: 0,
            closed_loop: rs.iter().all(|r| r.closed_loop),
            sessions_failed: 0,
            sessions_hung: 0,
            calls_armed: 0,
            calls_held: 0,
            calls_waited: 0,
            waits_at_limit: 0,
            killed_after_wait_limit: 0,
            wait_ms: None,
            calls_queued: 0,
            queue_thaws_at_bound: 0,
            calls_retried: 0,
            calls_lost: 0,
            parent_oom_kills: 0,
            runtime_peaks_of_budget: None,
            session_limit_ooms: Some(0),
            runtime_p95_vs_solo: None,
            call_time_vs_solo: None,
            span_s: None,
            static_limits_fit: None,
            knobs_restored: None,
            daemon_cpu_s: None,
        };
        let mut p95_ratios = Vec::new();
        let mut call_ratios = Vec::new();
        let mut cpu = Vec::new();
        let mut waits = Vec::new();
        let mut runtime_demand = Vec::new();
        let mut spans = Vec::new();
        for r in rs {
            let last_end = r
                .sessions
                .iter()
                .map(|s| s.start_s + s.runtime.wall_s)
                .fold(None, |m: Option<f64>, e| Some(m.map_or(e, |m| m.max(e))));
            spans.extend(last_end);
            let mut killed_here = 0;
            // The sessions' solo runtime peaks summed; `None` once a session has none.
            let mut solo_peaks = Some(0u64);
            for s in &r.sessions {
                g.sessions += 1;
                g.session_limit_ooms = g.session_limit_ooms.zip(s.own_limit_ooms).map(|(a, b)| a + b);
                // Closed loop: a session whose runtime finished may still have failed a call.
                let finished = match s.fate {
                    Some(f) => f == SessionFate::Finished,
                    None => matches!(s.runtime.outcome, memqos_replay::Outcome::Finished),
                };
                if finished {
                    g.sessions_finished += 1;
                }
                if s.runtime.oom_killed() {
                    killed_here += 1;
                }
                if s.fate == Some(SessionFate::Failed) {
                    g.sessions_failed += 1;
                }
                if s.fate == Some(SessionFate::Hung) {
                    g.sessions_hung += 1;
                }
                let alone = solo.get(&(kernel.as_str(), r.run, s.trace.as_str())).and_then(|a| a.sessions.first());
                solo_peaks = solo_peaks.zip(alone.and_then(|a| a.runtime.peak_bytes)).map(|(sum, p)| sum + p);
                if let (Some(a), Some(mine)) = (alone.and_then(|a| p95(&a.runtime)), p95(&s.runtime)) {
                    p95_ratios.push(mine / a);
                }
                for c in &s.calls {
                    g.calls_planned += 1;
                    match c.fate {
                        Some(CallFate::FinishedOnRetry) => g.calls_retried += 1,
                        Some(CallFate::Lost) => g.calls_lost += 1,
                        _ => {}
                    }
                    for p in [&c.failed_attempt, &c.result].into_iter().flatten() {
                        let Some(a) = p.armed.as_ref() else { continue };
                        g.calls_armed += usize::from(a.high_bytes.is_some());
                        g.calls_held += usize::from(a.held);
                        if a.waited_ms > 0 {
                            let at_limit = a.wait_ended.as_deref() == Some("limit");
                            g.calls_waited += 1;
                            g.waits_at_limit += usize::from(at_limit);
                            g.killed_after_wait_limit += usize::from(at_limit && p.oom_killed());
                            waits.push(a.waited_ms as f64);
                        }
                    }
                    // A retried call was started (and killed) once before its last attempt.
                    if let Some(p) = &c.failed_attempt {
                        g.calls_started += 1;
                        if p.oom_killed() {
                            g.calls_killed += 1;
                        }
                    }
                    match &c.result {
                        None => g.calls_not_started += 1,
                        Some(p) => {
                            g.calls_started += 1;
                            if p.oom_killed() {
                                g.calls_killed += 1;
                                if let Some(text) = &p.explanation {
                                    examples.entry(format!("{kernel} {arm}")).or_insert_with(|| text.clone());
                                }
                            } else if matches!(p.outcome, memqos_replay::Outcome::Finished) {
                                let same = alone.and_then(|a| a.calls.iter().find(|x| x.index == c.index));
                                if let Some(base) = same.and_then(|x| x.result.as_ref()) {
                                    if base.wall_s > 0.0 {
                                        call_ratios.push(p.wall_s / base.wall_s);
                                    }
                                }
                            }
                        }
                    }
                }
            }
            if let (Some(peaks), Some(budget)) = (solo_peaks, r.host_budget_bytes.filter(|b| *b > 0)) {
                runtime_demand.push(peaks as f64 / budget as f64);
            }
            g.runtimes_killed += killed_here;
            if killed_here > 0 {
                g.runs_with_runtime_killed += 1;
            }
            g.parent_oom_kills += r.parent_oom_kills;
            let (queued, thaws) = queue_counts(&r.daemon_write_log);
            g.calls_queued += queued;
            g.queue_thaws_at_bound += thaws;
            if arm == "static-peak" {
                let sum: u64 = r.sessions.iter().filter_map(|s| s.memory_max).sum();
                let fits = r.host_budget_bytes.is_some_and(|b| sum <= b);
                g.static_limits_fit = Some(g.static_limits_fit.unwrap_or(true) && fits);
            }
            if let Some(ok) = r.knobs_restored {
                g.knobs_restored = Some(g.knobs_restored.unwrap_or(true) && ok);
            }
            if let Some(c) = r.daemon_cpu_s {
                cpu.push(c);
            }
        }
        g.runtime_p95_vs_solo = estimate(&p95_ratios);
        g.call_time_vs_solo = estimate(&call_ratios);
        g.span_s = estimate(&spans);
        g.daemon_cpu_s = estimate(&cpu);
        g.wait_ms = estimate(&waits);
        g.runtime_peaks_of_budget = estimate(&runtime_demand);
        levels.push(g);
    }
    let density = density(&levels);
    let targets = verdicts(&density, &levels);
    HostSummary { levels, density, targets, example_explanations: examples }
}

/// Cgroups frozen in line by the held queue, and queue freezes ended by the stall bound (a
/// thaw with reason `stall_bound` of a cgroup the queue froze).
fn queue_counts(log: &[super::result::ArmWrite]) -> (usize, usize) {
    let freeze = log.iter().filter(|w| w.file == "cgroup.freeze");
    let queued: BTreeSet<&str> =
        freeze.clone().filter(|w| w.value == "1" && w.reason == "queued").map(|w| w.cgroup.as_str()).collect();
    let thaws =
        freeze.filter(|w| w.value == "0" && w.reason == "stall_bound" && queued.contains(w.cgroup.as_str())).count();
    (queued.len(), thaws)
}

fn density(levels: &[LevelSummary]) -> Vec<Density> {
    let keys: BTreeSet<(String, String)> = levels.iter().map(|l| (l.kernel.clone(), l.arm.clone())).collect();
    keys.into_iter()
        .map(|(kernel, arm)| {
            let mut mine: Vec<&LevelSummary> = levels.iter().filter(|l| l.kernel == kernel && l.arm == arm).collect();
            mine.sort_by_key(|l| l.level);
            // A hung session is lost as surely as one whose runtime was killed.
            let lost = |l: &&LevelSummary| l.runtimes_killed + l.sessions_hung > 0;
            let sessions = mine.iter().take_while(|l| !lost(l)).last().map_or(0, |l| l.level);
            let highest_clean = mine.iter().filter(|l| !lost(l)).map(|l| l.level).max();
            let lowest_lost = mine.iter().find(|l| lost(l)).map(|l| l.level);
            let admitted_by_limits = (arm == "static-peak")
                .then(|| mine.iter().take_while(|l| l.static_limits_fit == Some(true)).last().map_or(0, |l| l.level));
            let levels_run = mine.iter().map(|l| l.level).collect();
            Density { kernel, arm, sessions, highest_clean, lowest_lost, levels_run, admitted_by_limits }
        })
        .collect()
}

/// The density bracket as text: `9` when exact, `9–11` when levels between were not run,
/// `≥ 12` when no level run lost a runtime; a level above the density that held again
/// (`highest_clean` over `lowest_lost`) is named, since the density counts from below.
pub fn bracket(d: &Density) -> String {
    let mut out = match d.lowest_lost {
        Some(lost) if lost == d.sessions + 1 => d.sessions.to_string(),
        Some(lost) => format!("{}–{}", d.sessions, lost - 1),
        None => format!("≥ {} (the largest level run)", d.sessions),
    };
    if let (Some(clean), Some(lost)) = (d.highest_clean, d.lowest_lost) {
        if clean > lost {
            out.push_str(&format!(" (a runtime lost at {lost}, none at {clean})"));
        }
    }
    out
}

/// The levels an arm should run next to narrow its bracket to one session: those between its
/// density and the lowest level that lost a runtime not run yet, or, where no level lost one,
/// the `above` levels over the largest run.
pub fn next_levels(d: &Density, above: usize) -> Vec<usize> {
    let hi = match d.lowest_lost {
        Some(lost) => lost,
        None => d.levels_run.iter().copied().max().unwrap_or(d.sessions) + above + 1,
    };
    (d.sessions + 1..hi).filter(|l| !d.levels_run.contains(l)).collect()
}

/// The target: memqos runs at least 1.5x the sessions static peak limits run, with
/// no runtime killed (measured densities: the generous reading for static-peak, whose limits
/// do not stop the host's own OOM killer when they are overcommitted).
fn verdicts(density: &[Density], levels: &[LevelSummary]) -> Vec<Verdict> {
    let kernels: BTreeSet<&str> = density.iter().map(|d| d.kernel.as_str()).collect();
    let mut out = Vec::new();
    for k in kernels {
        let of = |arm: &str| density.iter().find(|d| d.kernel == k && d.arm == arm);
        if let (Some(m), Some(st)) = (of("memqos"), of("static-peak")) {
            let max_level = levels.iter().filter(|l| l.kernel == k).map(|l| l.level).max().unwrap_or(0);
            let capped = if m.sessions == max_level { " (the largest level run: a lower bound)" } else { "" };
            let min_level = levels.iter().filter(|l| l.kernel == k).map(|l| l.level).min().unwrap_or(0);
            let ratio = if st.sessions > 0 {
                format!("{:.2}x", m.sessions as f64 / st.sessions as f64)
            } else {
                format!("static-peak lost a runtime already at the smallest level run ({min_level})")
            };
            out.push(Verdict {
                kernel: k.to_string(),
                target: "memqos runs ≥ 1.5x the sessions of static peak limits with 0 runtimes killed".into(),
                measured: format!(
                    "memqos {}{capped}, static-peak {} measured ({} admitted by its limits): {ratio}",
                    m.sessions,
                    st.sessions,
                    st.admitted_by_limits.unwrap_or(0),
                ),
                met: if st.sessions > 0 { m.sessions as f64 / st.sessions as f64 >= 1.5 } else { m.sessions > 0 },
            });
        }
        let restored: Vec<&LevelSummary> = levels.iter().filter(|l| l.kernel == k && l.arm == "memqos").collect();
        if !restored.is_empty() {
            let all = restored.iter().all(|l| l.knobs_restored == Some(true));
            out.push(Verdict {
                kernel: k.to_string(),
                target: "memqos: every knob restored after every run".into(),
                measured: format!(
                    "{} of {} levels restored in every run",
                    restored.iter().filter(|l| l.knobs_restored == Some(true)).count(),
                    restored.len()
                ),
                met: all,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::runner::{CallResult, SessionResult};
    use super::*;
    use memqos_replay::Outcome;

    fn proc(killed: bool, wall_s: f64, p95: f64) -> ProcResult {
        ProcResult {
            outcome: if killed { Outcome::Killed { signal: 9 } } else { Outcome::Finished },
            status: Some(if killed { 4 } else { 0 }),
            wall_s,
            schedule_s: Some(1.0),
            completion_s: None,
            latencies_ms: Vec::new(),
            latency: Some(memqos_replay::report::LatencyStats {
                count: 3,
                p50_ms: p95,
                p95_ms: p95,
                p99_ms: p95,
                max_ms: p95,
                mean_ms: p95,
            }),
            peak_bytes: None,
            oom_kills: u64::from(killed),
            high_events: 0,
            explanation: killed.then(|| "memqos: killed".to_string()),
            armed: None,
        }
    }

    fn session(trace: &str, runtime_killed: bool, call_killed: bool, max: Option<u64>) -> SessionResult {
        SessionResult {
            name: "s0".into(),
            trace: trace.into(),
            start_s: 0.0,
            memory_max: max,
            own_limit_ooms: Some(0),
            runtime: proc(runtime_killed, 10.0, 4.0),
            calls: vec![CallResult {
                index: 0,
                tools: "Bash".into(),
                planned_peak_bytes: 1,
                due_s: 1.0,
                started_s: (!runtime_killed).then_some(1.0),
                result: (!runtime_killed).then(|| proc(call_killed, 2.0, 1.0)),
                failed_attempt: None,
                fate: None,
            }],
            fate: None,
            runtime_paused_s: None,
        }
    }

    fn arm(arm: &str, level: usize, sessions: Vec<SessionResult>) -> HostArmResult {
        HostArmResult {
            kernel: "7.2".into(),
            run: 1,
            level,
            arm: arm.into(),
            order: 0,
            speed: 25.0,
            host_budget_bytes: Some(100),
            started_epoch: 0.0,
            sessions,
            parent_oom_kills: 0,
            parent_peak_bytes: None,
            parent_current: Vec::new(),
            knobs_restored: (arm == "memqos").then_some(true),
            daemon_cpu_s: None,
            daemon_writes: None,
            daemon_stall_actions: None,
            recursiveprot: true,
            cpu_controller: None,
            closed_loop: false,
            daemon_write_log: Vec::new(),
        }
    }

    #[test]
    fn armed_held_and_waiting_attempts_are_counted_with_their_waits() {
        use memqos_schema::call::Armed;
        let armed = |held: bool, waited_ms: u64, ended: Option<&str>| Armed {
            high_bytes: Some(64 << 20),
            held,
            waited_ms,
            wait_ended: ended.map(str::to_string),
            ..Default::default()
        };
        let mut s = session("a", false, false, None);
        // A retried call: its first attempt waited until the limit and was held; the retry
        // waited for room.
        s.calls[0].failed_attempt =
            Some(ProcResult { armed: Some(armed(true, 1200, Some("limit"))), ..proc(true, 2.0, 1.0) });
        s.calls[0].result.as_mut().unwrap().armed = Some(armed(false, 300, Some("room")));
        let plain = session("a", false, false, None);
        let out =
            summarize(&[arm("solo", 1, vec![session("a", false, false, None)]), arm("memqos", 2, vec![s, plain])]);
        let l = out.levels.iter().find(|l| l.arm == "memqos").unwrap();
        assert_eq!((l.calls_armed, l.calls_held, l.calls_waited, l.waits_at_limit), (2, 1, 2, 1));
        assert_eq!(l.killed_after_wait_limit, 1, "the first attempt: killed after waiting until the limit");
        let w = l.wait_ms.as_ref().unwrap();
        assert_eq!((w.n, w.min, w.max), (2, 300.0, 1200.0));
        // Without admission the summary keeps its exact form.
        let none = summarize(&[arm("none", 2, vec![session("a", false, false, None)])]);
        let text = serde_json::to_string(&none.levels[0]).unwrap();
        assert!(!text.contains("calls_armed") && !text.contains("wait_ms"), "{text}");
    }

    #[test]
    fn queued_calls_and_their_thaws_at_the_bound_come_from_the_daemons_writes() {
        use super::super::result::ArmWrite;
        let w = |cgroup: &str, value: &str, reason: &str| ArmWrite {
            t_s: 1.0,
            cgroup: cgroup.into(),
            file: "cgroup.freeze".into(),
            value: value.into(),
            reason: reason.into(),
        };
        let mut m = arm("memqos", 2, vec![session("a", false, false, None)]);
        m.daemon_write_log = vec![
            w("s1/tool.2", "1", "queued"),
            w("s1/tool.2", "0", "relieved"),
            w("s1/tool.2", "1", "queued"),
            w("s2/tool.3", "1", "queued"),
            w("s2/tool.3", "0", "stall_bound"),
            // Frozen by escalation, thawed at a bound: not the queue's.
            w("s3/tool.4", "1", "stalled"),
            w("s3/tool.4", "0", "stall_bound"),
            ArmWrite { file: "memory.high".into(), ..w("s4/tool.5", "1", "queued") },
        ];
        let out = summarize(&[arm("solo", 1, vec![session("a", false, false, None)]), m]);
        let l = out.levels.iter().find(|l| l.arm == "memqos").unwrap();
        assert_eq!((l.calls_queued, l.queue_thaws_at_bound), (2, 1));
    }

    #[test]
    fn the_runtimes_demand_is_their_solo_peaks_summed_over_the_budget() {
        let with_peak = |trace: &str, peak: u64| {
            let mut s = session(trace, false, false, None);
            s.runtime.peak_bytes = Some(peak);
            s
        };
        // The level's own runtimes peaked lower (one was killed): the demand reads the solo
        // runs, what the traces ask whatever the arm did.
        let level = |a: &str| arm(a, 3, vec![with_peak("a", 5), with_peak("a", 30), session("b", true, false, None)]);
        let out = summarize(&[
            arm("solo", 1, vec![with_peak("a", 30)]),
            arm("solo", 1, vec![with_peak("b", 20)]),
            level("none"),
        ]);
        let l = out.levels.iter().find(|l| l.arm == "none").unwrap();
        assert_eq!(l.runtime_peaks_of_budget.as_ref().map(|e| (e.n, e.median)), Some((1, 0.8)), "(30 + 30 + 20) / 100");
        // A trace with no solo run: not computed, rather than a sum that leaves it out.
        let out = summarize(&[arm("solo", 1, vec![with_peak("a", 30)]), level("none")]);
        assert!(out.levels[0].runtime_peaks_of_budget.is_none());
    }

    #[test]
    fn density_is_the_level_below_the_first_lost_runtime_and_the_target_compares_it() {
        let solo = arm("solo", 1, vec![session("a", false, false, None)]);
        let ok = |a: &str, n: usize| arm(a, n, (0..n).map(|_| session("a", false, false, Some(40))).collect());
        let lost = |a: &str, n: usize| {
            let mut v: Vec<SessionResult> = (0..n - 1).map(|_| session("a", false, true, Some(40))).collect();
            v.push(session("a", true, false, Some(40)));
            arm(a, n, v)
        };
        let results = vec![
            solo,
            ok("static-peak", 2),
            lost("static-peak", 4),
            ok("memqos", 2),
            ok("memqos", 4),
            lost("memqos", 6),
        ];
        let s = summarize(&results);
        let d = |a: &str| s.density.iter().find(|d| d.arm == a).unwrap().clone();
        assert_eq!(d("static-peak").sessions, 2);
        assert_eq!(d("static-peak").admitted_by_limits, Some(2), "2 x 40 fits in 100, 4 x 40 does not");
        assert_eq!(d("memqos").sessions, 4);
        let v = s.targets.iter().find(|v| v.target.contains("1.5x")).unwrap();
        assert!(v.met, "{}", v.measured);
        let l4 = s.levels.iter().find(|l| l.arm == "static-peak" && l.level == 4).unwrap();
        assert_eq!((l4.runtimes_killed, l4.calls_killed, l4.calls_not_started), (1, 3, 1));
        // Same trace alone had p95 4 ms: a runtime at 4 ms is 1.0x.
        assert_eq!(l4.runtime_p95_vs_solo.unwrap().median, 1.0);
        assert!(s.example_explanations.contains_key("7.2 static-peak"));
        let md = render_markdown(&s, "d", &[]);
        assert!(md.contains("| 4 | static-peak | 1 | 3/4 | 1 (1) | 3/3 | 1 | 0 (0) |"), "{md}");
    }

    /// A closed-loop session: a call finished on its retry, then the runtime was killed with
    /// two calls left (`lost_with_runtime`), or a call failed twice (`failed`).
    fn closed(trace: &str, how: SessionFate) -> SessionResult {
        let mut s = session(trace, how == SessionFate::RuntimeKilled, false, Some(40));
        let call = |fate: CallFate, first: Option<ProcResult>, last: Option<ProcResult>| CallResult {
            index: 0,
            tools: "Bash".into(),
            planned_peak_bytes: 1,
            due_s: 1.0,
            started_s: last.as_ref().map(|_| 1.0),
            result: last,
            failed_attempt: first,
            fate: Some(fate),
        };
        s.calls = match how {
            SessionFate::RuntimeKilled => vec![
                call(CallFate::FinishedOnRetry, Some(proc(true, 1.0, 1.0)), Some(proc(false, 2.0, 1.0))),
                call(CallFate::Lost, None, Some(proc(true, 0.5, 1.0))),
                call(CallFate::Lost, None, None),
            ],
            _ => vec![
                call(CallFate::Failed, Some(proc(true, 1.0, 1.0)), Some(proc(true, 1.0, 1.0))),
                call(CallFate::Lost, None, None),
            ],
        };
        s.fate = Some(how);
        s
    }

    #[test]
    fn closed_loop_sessions_count_retries_failures_and_the_calls_lost_with_them() {
        let mut a = arm("none", 2, vec![closed("a", SessionFate::RuntimeKilled), closed("a", SessionFate::Failed)]);
        a.closed_loop = true;
        let s = summarize(&[a]);
        let l = &s.levels[0];
        assert!(l.closed_loop);
        assert_eq!((l.sessions_failed, l.runtimes_killed, l.calls_retried, l.calls_lost), (1, 1, 1, 3));
        // Every attempt counts as started and, if killed, as killed: 2 + 1 + 2 started, of
        // which the first call's first attempt, the lost running call and both failed attempts.
        assert_eq!((l.calls_started, l.calls_killed), (5, 4));
        let md = render_markdown(&s, "d", &[]);
        assert!(md.contains("| 7.2 | 2 | none | 1/2 | 1 | 3/5 |"), "{md}");
        assert!(md.contains("| 2 | none | 1 | 0/2 | 1 (1) | 4/5 | 3 |"), "the lost column counts lost calls: {md}");
    }

    #[test]
    fn the_span_is_each_runs_last_session_end_from_the_levels_start() {
        // Run 1: sessions from 0 s and 3 s, 10 s each: the last ends at 13 s. Run 2: one session.
        let late = SessionResult { start_s: 3.0, ..session("a", false, false, None) };
        let one = HostArmResult { closed_loop: true, ..arm("memqos", 2, vec![session("a", false, false, None), late]) };
        let two =
            HostArmResult { run: 2, closed_loop: true, ..arm("memqos", 2, vec![session("a", false, false, None)]) };
        let s = summarize(&[one, two]);
        let span = s.levels[0].span_s.as_ref().unwrap();
        assert_eq!((span.n, span.median, span.min, span.max), (2, 11.5, 10.0, 13.0));
        let md = render_markdown(&s, "d", &[]);
        assert!(md.contains("| 12 [10–13] |"), "{md}");
    }

    #[test]
    fn the_density_bracket_is_the_highest_level_without_a_lost_runtime_and_the_lowest_with_one() {
        let ok = |a: &str, n: usize| arm(a, n, (0..n).map(|_| session("a", false, false, None)).collect());
        let lost = |a: &str, n: usize| arm(a, n, vec![session("a", true, false, None)]);
        // Coarse: none held at 9, lost at 12; memqos held at 12 (the largest run).
        let coarse = [ok("none", 6), ok("none", 9), lost("none", 12), ok("memqos", 9), ok("memqos", 12)];
        let s = summarize(&coarse);
        let d = |s: &HostSummary, a: &str| s.density.iter().find(|d| d.arm == a).unwrap().clone();
        let none = d(&s, "none");
        assert_eq!((none.sessions, none.highest_clean, none.lowest_lost), (9, Some(9), Some(12)));
        assert_eq!(bracket(&none), "9–11");
        assert_eq!(next_levels(&none, 2), [10, 11]);
        let memqos = d(&s, "memqos");
        assert_eq!(bracket(&memqos), "≥ 12 (the largest level run)");
        assert_eq!(next_levels(&memqos, 2), [13, 14]);
        // The refined pass: none held at 10 and lost at 11, so its density is 10 exactly.
        let mut refined = coarse.to_vec();
        refined.extend([ok("none", 10), lost("none", 11)]);
        let none = d(&summarize(&refined), "none");
        assert_eq!((none.sessions, none.lowest_lost, bracket(&none)), (10, Some(11), "10".to_string()));
        assert!(next_levels(&none, 2).is_empty(), "nothing left to narrow");
        // Not monotone: a level above the first loss that held again is named.
        let mut odd = refined.clone();
        odd.push(ok("none", 13));
        assert_eq!(bracket(&d(&summarize(&odd), "none")), "10 (a runtime lost at 11, none at 13)");
    }

    #[test]
    fn a_hung_session_is_lost_for_the_density_and_named_in_the_report() {
        let ok = |n: usize| arm("memqos", n, (0..n).map(|_| session("a", false, false, None)).collect());
        let mut hung: Vec<SessionResult> = (0..5).map(|_| session("a", false, false, None)).collect();
        hung[4].fate = Some(SessionFate::Hung);
        let results =
            vec![arm("solo", 1, vec![session("a", false, false, None)]), ok(3), arm("memqos", 5, hung), ok(7)];
        let s = summarize(&results);
        let d = s.density.iter().find(|d| d.arm == "memqos").unwrap();
        assert_eq!((d.sessions, d.lowest_lost), (3, Some(5)), "no runtime was OOM-killed, yet level 5 lost one");
        let l5 = s.levels.iter().find(|l| l.level == 5).unwrap();
        assert_eq!((l5.sessions_hung, l5.runtimes_killed, l5.sessions_finished), (1, 0, 4));
        // Older summaries (no hang anywhere) keep their exact form.
        assert!(!serde_json::to_string(&s.levels[0]).unwrap().contains("sessions_hung"));
        let mut closed_loop = s.clone();
        closed_loop.levels.iter_mut().for_each(|l| l.closed_loop = true);
        let md = render_markdown(&closed_loop, "d", &[]);
        assert!(md.contains("(hung: killed by the runner") && md.contains("memqos at 5: 1 of 5"), "{md}");
    }

    #[test]
    fn a_tie_misses_the_target() {
        let ok = |a: &str, n: usize| arm(a, n, (0..n).map(|_| session("a", false, false, Some(10))).collect());
        let s = summarize(&[ok("static-peak", 4), ok("memqos", 4)]);
        let v = s.targets.iter().find(|v| v.target.contains("1.5x")).unwrap();
        assert!(!v.met && v.measured.contains("lower bound"), "{}", v.measured);
    }

    #[test]
    fn a_static_arm_that_loses_a_runtime_at_the_smallest_level_is_named_not_divided_by() {
        let ok = |a: &str, n: usize| arm(a, n, (0..n).map(|_| session("a", false, false, Some(10))).collect());
        let lost = arm("static-peak", 3, vec![session("a", true, false, Some(10))]);
        let s = summarize(&[lost, ok("memqos", 3)]);
        let v = s.targets.iter().find(|v| v.target.contains("1.5x")).unwrap();
        assert!(v.met && v.measured.contains("lost a runtime already at the smallest level run (3)"), "{}", v.measured);
    }
}
