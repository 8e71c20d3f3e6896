//! What a replay produced: per-step records, how it ended, and the summary derived from
//! them; the JSON report and the human text.

use memqos_cgroupfs::MemoryEvents;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::time::Duration;

/// One replayed step, as measured by the workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    /// Position in the schedule (0-based).
    pub step: usize,
    /// Index of the sample in the trace file.
    pub sample: usize,
    /// When the step was due, from the start of the replay.
    pub t_sched_ms: f64,
    /// When the step started.
    pub t_actual_ms: f64,
    /// `t_actual_ms - t_sched_ms`, never negative: how far behind schedule the step started.
    /// A step that is behind does not sleep, so later steps catch up.
    pub lag_ms: f64,
    /// What the step grew or shrank to (trace `used` + baseline).
    pub target_bytes: u64,
    /// What the workload held after the step: the target rounded up to a page.
    pub held_bytes: u64,
    /// VmRSS of the workload after the step (`None` if not read). Below `held_bytes` when
    /// pages were swapped out, above it by the program's own memory.
    pub rss_bytes: Option<u64>,
    pub grown: u64,
    pub shrunk: u64,
    /// Time to map and touch this step's growth: page faults, memcg charging, and any
    /// direct reclaim or memory.high throttling they ran into. 0 if the step did not grow.
    pub latency_us: u64,
    /// Time to unmap this step's shrink. 0 if the step did not shrink.
    pub release_us: u64,
    pub in_tool_call: bool,
    /// Tool calls overlapping the step (see `schedule`), e.g. `Bash` or `Read+Grep`.
    pub tool: Option<String>,
}

/// How the workload ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Outcome {
    /// Every step replayed.
    Finished,
    /// Killed by `signal` (SIGKILL) while the cgroup's memory.events oom_kill went up.
    OomKilled { signal: i32 },
    /// Killed by a signal with no OOM kill counted (Ctrl-C, SIGTERM, a global OOM kill
    /// when no cgroup was given, ...).
    Killed { signal: i32 },
    /// The workload stopped on an error (mmap failed, could not join the cgroup, ...).
    /// `exit_code` is `None` for an in-process replay.
    Failed { exit_code: Option<i32>, message: String },
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Finished => f.write_str("finished"),
            Outcome::OomKilled { signal } => write!(f, "OOM-killed (signal {signal})"),
            Outcome::Killed { signal } => write!(f, "killed by signal {signal}"),
            Outcome::Failed { exit_code: Some(c), message } => write!(f, "failed (exit code {c}): {message}"),
            Outcome::Failed { exit_code: None, message } => write!(f, "failed: {message}"),
        }
    }
}

/// Decides how a worker ended from its wait status, what it reported, and the cgroup's
/// oom_kill counter. An OOM kill is claimed only with evidence: SIGKILL *and* an oom_kill
/// increase in the worker's cgroup. (The counter is hierarchical and counts every process
/// in the cgroup, so with several workers in one cgroup, a SIGKILL from elsewhere during
/// another worker's OOM kill would be misread; memqos experiments give each workload its
/// own cgroup.)
pub fn decide_outcome(
    exit_code: Option<i32>,
    signal: Option<i32>,
    finished: bool,
    error: Option<&str>,
    oom_kill_delta: Option<u64>,
) -> Outcome {
    match (signal, exit_code) {
        (Some(sig), _) if sig == libc::SIGKILL && oom_kill_delta.unwrap_or(0) > 0 => Outcome::OomKilled { signal: sig },
        (Some(sig), _) => Outcome::Killed { signal: sig },
        (None, Some(0)) if finished => Outcome::Finished,
        (None, code) => Outcome::Failed {
            exit_code: code,
            message: match (error, code) {
                (Some(e), _) => e.to_owned(),
                (None, Some(0)) => "worker exited before finishing the trace".to_owned(),
                (None, Some(c)) => format!("worker exited with code {c} without saying why"),
                (None, None) => "worker ended without an exit code or signal".to_owned(),
            },
        },
    }
}

/// The raw result of a run, in-process or supervised; [`Report::new`] adds the context.
#[derive(Debug, Clone, PartialEq)]
pub struct RunData {
    pub steps: Vec<StepRecord>,
    pub outcome: Outcome,
    /// From the replay's t=0 (after the baseline) to the end of the last step; only when the
    /// worker said it finished.
    pub completion: Option<Duration>,
    /// Supervisor's view: spawn to reap (includes start-up and the baseline).
    pub wall: Option<Duration>,
    pub baseline_alloc: Option<Duration>,
    /// VmHWM of the workload at the end; `None` if it died before it could say.
    pub vm_hwm_bytes: Option<u64>,
    pub oom_kill_delta: Option<u64>,
    pub memory_events_delta: Option<MemoryEvents>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LatencyStats {
    pub count: usize,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub mean_ms: f64,
}

impl LatencyStats {
    /// Nearest-rank percentiles of `values_ms`; `None` when empty.
    pub fn of(values_ms: &[f64]) -> Option<LatencyStats> {
        let mut v: Vec<f64> = values_ms.to_vec();
        v.sort_by(f64::total_cmp);
        Some(LatencyStats {
            count: v.len(),
            p50_ms: percentile(&v, 50.0)?,
            p95_ms: percentile(&v, 95.0)?,
            p99_ms: percentile(&v, 99.0)?,
            max_ms: *v.last()?,
            mean_ms: v.iter().sum::<f64>() / v.len() as f64,
        })
    }
}

/// Nearest-rank percentile of ascending `sorted`: the smallest value with at least `p`% of
/// the values at or below it. Always one of the values (no interpolation), so a p99 of 60
/// growth steps is the maximum, which is what 60 samples can say. (The seed's script took
/// `sorted[int(n * p)]`, one rank higher on exact multiples; it also forced p95 to the max
/// below 20 values.) `p` is clamped to (0, 100].
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let n = sorted.len();
    let rank = ((p.clamp(0.0, 100.0) / 100.0) * n as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, n) - 1])
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub outcome: Outcome,
    /// Replay time from t=0 to the end of the last step (`None` unless finished).
    pub completion_s: Option<f64>,
    /// What `completion_s` would be with every step on time.
    pub schedule_s: f64,
    pub wall_s: Option<f64>,
    pub baseline_alloc_ms: Option<f64>,
    /// Steps replayed (all of them when finished).
    pub steps: usize,
    pub steps_planned: usize,
    /// Growth steps: the ones `latency` is computed over, as in the seed experiment.
    pub latency: Option<LatencyStats>,
    /// The same, split by tool-call marking.
    pub latency_in_tool_calls: Option<LatencyStats>,
    pub latency_outside_tool_calls: Option<LatencyStats>,
    pub max_lag_ms: f64,
    /// Steps that started more than 1 ms late (sleep overshoot stays below that).
    pub late_steps: usize,
    /// VmHWM at the end (the workload's own peak RSS, including the program itself).
    pub peak_rss_bytes: Option<u64>,
    /// Largest VmRSS seen after a step.
    pub peak_step_rss_bytes: Option<u64>,
    /// Largest amount held by the workload's own accounting.
    pub peak_held_bytes: u64,
    pub oom_kill_delta: Option<u64>,
    pub memory_events_delta: Option<MemoryEvents>,
}

/// Where a run came from, for the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReportContext {
    pub trace: String,
    pub trace_path: Option<String>,
    pub trace_samples: usize,
    pub trace_duration_s: f64,
    pub trace_max_used_bytes: u64,
    /// Indices of `0B / 0B` samples left out (see `trace::Trace`).
    pub dropped_no_container: Vec<usize>,
    pub tool_calls: Option<String>,
    pub speed: f64,
    pub baseline_bytes: u64,
    pub chunk_bytes: u64,
    /// The page fill's compression ratio (`memory::PageFill`); None: stamp and zeros (also
    /// every report written before the fill existed).
    #[serde(default)]
    pub compression_ratio: Option<f64>,
    pub cgroup: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    #[serde(flatten)]
    pub context: ReportContext,
    /// Always "used + baseline" for now; in the JSON so readers need not know the code.
    pub target_rule: String,
    pub summary: Summary,
    pub steps: Vec<StepRecord>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl Report {
    pub fn new(context: ReportContext, schedule_s: f64, steps_planned: usize, run: RunData) -> Report {
        let growth = |filter: &dyn Fn(&StepRecord) -> bool| {
            let v: Vec<f64> =
                run.steps.iter().filter(|s| s.grown > 0 && filter(s)).map(|s| s.latency_us as f64 / 1e3).collect();
            LatencyStats::of(&v)
        };
        let summary = Summary {
            completion_s: run.completion.map(|d| d.as_secs_f64()),
            schedule_s,
            wall_s: run.wall.map(|d| d.as_secs_f64()),
            baseline_alloc_ms: run.baseline_alloc.map(ms),
            steps: run.steps.len(),
            steps_planned,
            latency: growth(&|_| true),
            latency_in_tool_calls: growth(&|s| s.in_tool_call),
            latency_outside_tool_calls: growth(&|s| !s.in_tool_call),
            max_lag_ms: run.steps.iter().map(|s| s.lag_ms).fold(0.0, f64::max),
            late_steps: run.steps.iter().filter(|s| s.lag_ms > 1.0).count(),
            peak_rss_bytes: run.vm_hwm_bytes,
            peak_step_rss_bytes: run.steps.iter().filter_map(|s| s.rss_bytes).max(),
            peak_held_bytes: run.steps.iter().map(|s| s.held_bytes).max().unwrap_or(0),
            oom_kill_delta: run.oom_kill_delta,
            memory_events_delta: run.memory_events_delta,
            outcome: run.outcome,
        };
        Report { context, target_rule: "used + baseline".into(), summary, steps: run.steps }
    }

    /// The human summary (several lines, newline-terminated).
    pub fn render_text(&self) -> String {
        let c = &self.context;
        let s = &self.summary;
        let mut out = String::new();
        let _ = write!(out, "replay {} at {}x, baseline {}: {}", c.trace, c.speed, mib(c.baseline_bytes), s.outcome);
        match s.completion_s {
            Some(t) => {
                let _ = writeln!(out, " in {t:.3} s (schedule {:.3} s)", s.schedule_s);
            }
            None => {
                let _ = writeln!(out, " after {}/{} steps", s.steps, s.steps_planned);
            }
        }
        match &s.latency {
            Some(l) => {
                let _ = writeln!(
                    out,
                    "  allocation latency over {} growth steps: p50 {:.2} ms, p95 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
                    l.count, l.p50_ms, l.p95_ms, l.p99_ms, l.max_ms
                );
            }
            None => out.push_str("  no growth steps, no allocation latency\n"),
        }
        let _ = write!(out, "  peak held {}", mb(s.peak_held_bytes));
        if let Some(hwm) = s.peak_rss_bytes {
            let _ = write!(out, ", peak RSS (VmHWM) {}", mb(hwm));
        }
        let _ = writeln!(out, "; {} steps started > 1 ms late, max lag {:.2} ms", s.late_steps, s.max_lag_ms);
        if let Some(cg) = &c.cgroup {
            let _ = write!(out, "  cgroup {cg}: ");
            match &s.memory_events_delta {
                Some(d) => {
                    let _ = writeln!(
                        out,
                        "memory.events +high {} +max {} +oom {} +oom_kill {}",
                        d.high, d.max, d.oom, d.oom_kill
                    );
                }
                None => out.push_str("memory.events unreadable after the run\n"),
            }
        }
        out
    }
}

fn mb(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

fn mib(bytes: u64) -> String {
    format!("{} MiB", bytes as f64 / (1u64 << 20) as f64)
}

/// Progress lines every 10 % of the steps.
#[derive(Debug, Clone)]
pub struct Progress {
    total: usize,
    next_decile: usize,
}

impl Progress {
    pub fn new(total_steps: usize) -> Progress {
        Progress { total: total_steps, next_decile: 1 }
    }

    /// The line to print after `rec`, if it crosses the next 10 % mark.
    pub fn line(&mut self, rec: &StepRecord) -> Option<String> {
        let done = rec.step + 1;
        if self.total == 0 || done * 10 < self.next_decile * self.total {
            return None;
        }
        let pct = done * 100 / self.total;
        while self.next_decile <= 10 && self.next_decile * self.total <= done * 10 {
            self.next_decile += 1;
        }
        Some(format!(
            "replay: {pct:3}% ({done}/{}) t={:.2} s target {} rss {} lag {:.1} ms",
            self.total,
            rec.t_actual_ms / 1e3,
            mb(rec.target_bytes),
            rec.rss_bytes.map_or_else(|| "?".to_owned(), mb),
            rec.lag_ms
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), Some(50.0));
        assert_eq!(percentile(&v, 95.0), Some(95.0));
        assert_eq!(percentile(&v, 99.0), Some(99.0));
        assert_eq!(percentile(&v, 100.0), Some(100.0));
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
        assert_eq!(percentile(&[], 50.0), None);
        // The reaction bench's cases (it had its own copy of this function).
        let twenty: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(percentile(&twenty, 50.0), Some(10.0));
        assert_eq!(percentile(&twenty, 99.0), Some(20.0));
        assert_eq!(percentile(&[3.0], 99.0), Some(3.0));
        let ten: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(percentile(&ten, 50.0), Some(5.0));
        assert_eq!(percentile(&ten, 95.0), Some(10.0));
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 25.0), Some(1.0));
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 26.0), Some(2.0));
    }

    #[test]
    fn stats_sort_their_input() {
        let l = LatencyStats::of(&[3.0, 1.0, 2.0, 10.0]).unwrap();
        assert_eq!((l.count, l.p50_ms, l.max_ms, l.mean_ms), (4, 2.0, 10.0, 4.0));
        assert!(LatencyStats::of(&[]).is_none());
    }

    #[test]
    fn outcomes() {
        let kill = libc::SIGKILL;
        assert_eq!(decide_outcome(Some(0), None, true, None, Some(0)), Outcome::Finished);
        assert_eq!(decide_outcome(None, Some(kill), false, None, Some(1)), Outcome::OomKilled { signal: kill });
        // SIGKILL without an oom_kill increase, or without a cgroup to tell: not an OOM kill.
        assert_eq!(decide_outcome(None, Some(kill), false, None, Some(0)), Outcome::Killed { signal: kill });
        assert_eq!(decide_outcome(None, Some(kill), false, None, None), Outcome::Killed { signal: kill });
        assert_eq!(
            decide_outcome(None, Some(libc::SIGTERM), false, None, Some(3)),
            Outcome::Killed { signal: libc::SIGTERM }
        );
        assert_eq!(
            decide_outcome(Some(1), None, false, Some("mmap failed"), None),
            Outcome::Failed { exit_code: Some(1), message: "mmap failed".into() }
        );
        assert!(matches!(decide_outcome(Some(0), None, false, None, None), Outcome::Failed { exit_code: Some(0), .. }));
        assert!(matches!(decide_outcome(Some(3), None, false, None, None), Outcome::Failed { exit_code: Some(3), .. }));
    }

    #[test]
    fn outcome_json() {
        assert_eq!(serde_json::to_string(&Outcome::Finished).unwrap(), r#"{"kind":"finished"}"#);
        assert_eq!(
            serde_json::to_string(&Outcome::OomKilled { signal: 9 }).unwrap(),
            r#"{"kind":"oom_killed","signal":9}"#
        );
    }

    fn rec(step: usize, grown: u64, latency_us: u64, tool: Option<&str>) -> StepRecord {
        StepRecord {
            step,
            sample: step,
            t_sched_ms: step as f64,
            t_actual_ms: step as f64 + 0.5,
            lag_ms: if step == 2 { 3.0 } else { 0.5 },
            target_bytes: 1 << 20,
            held_bytes: (step as u64 + 1) << 20,
            rss_bytes: Some((step as u64 + 2) << 20),
            grown,
            shrunk: 0,
            latency_us,
            release_us: 0,
            in_tool_call: tool.is_some(),
            tool: tool.map(String::from),
        }
    }

    #[test]
    fn summary_uses_growth_steps_only() {
        let steps =
            vec![rec(0, 1, 1000, None), rec(1, 0, 0, None), rec(2, 1, 3000, Some("Bash")), rec(3, 1, 2000, None)];
        let run = RunData {
            steps,
            outcome: Outcome::Finished,
            completion: Some(Duration::from_millis(1500)),
            wall: None,
            baseline_alloc: None,
            vm_hwm_bytes: Some(9 << 20),
            oom_kill_delta: None,
            memory_events_delta: None,
        };
        let ctx = ReportContext {
            trace: "t".into(),
            trace_path: None,
            trace_samples: 4,
            trace_duration_s: 3.0,
            trace_max_used_bytes: 1,
            dropped_no_container: vec![],
            tool_calls: None,
            speed: 2.0,
            baseline_bytes: 0,
            chunk_bytes: 1 << 20,
            compression_ratio: None,
            cgroup: None,
        };
        let r = Report::new(ctx, 1.5, 4, run);
        let l = r.summary.latency.unwrap();
        assert_eq!((l.count, l.p50_ms, l.max_ms), (3, 2.0, 3.0));
        assert_eq!(r.summary.latency_in_tool_calls.unwrap().count, 1);
        assert_eq!(r.summary.latency_outside_tool_calls.unwrap().count, 2);
        assert_eq!((r.summary.late_steps, r.summary.max_lag_ms), (1, 3.0));
        assert_eq!(r.summary.peak_held_bytes, 4 << 20);
        assert_eq!(r.summary.peak_step_rss_bytes, Some(5 << 20));
        let json: serde_json::Value = serde_json::to_value(&r).unwrap();
        assert_eq!(json["trace"], "t");
        assert_eq!(json["steps"].as_array().unwrap().len(), 4);
        assert_eq!(json["summary"]["outcome"]["kind"], "finished");
        let text = r.render_text();
        assert!(text.contains("finished in 1.500 s"), "{text}");
        assert!(text.contains("p50 2.00 ms"), "{text}");
    }

    #[test]
    fn progress_every_ten_percent() {
        let mut p = Progress::new(95);
        let lines: Vec<usize> = (0..95).filter(|&i| p.line(&rec(i, 0, 0, None)).is_some()).collect();
        assert_eq!(lines.len(), 10);
        assert_eq!(lines.last(), Some(&94));
        let mut small = Progress::new(3);
        let n = (0..3).filter(|&i| small.line(&rec(i, 0, 0, None)).is_some()).count();
        assert_eq!(n, 3);
    }
}
