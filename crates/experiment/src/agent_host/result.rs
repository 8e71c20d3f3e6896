//! What an agent-host arm writes: its result file, one per arm, level and run.

use super::session::{CallFate, SessionFate};
use memqos_replay::report::LatencyStats;
use memqos_replay::Outcome;
use serde::{Deserialize, Serialize};

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
    /// memqos arm: every knob write the daemon logged, in order (empty in results from
    /// before it was kept): what was done to a call's cgroup, and why, before it was killed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub daemon_write_log: Vec<ArmWrite>,
}

/// One knob write of the memqos arm's daemon, as much of its event as reading a cgroup's
/// history needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArmWrite {
    /// Seconds after the arm's start (`HostArmResult::started_epoch`).
    pub t_s: f64,
    /// Relative to the host's parent (`s3/tool.1402`).
    pub cgroup: String,
    pub file: String,
    pub value: String,
    /// The reason's kind (`protected_pressure`, `release`, `stall_bound`...); "" for none.
    pub reason: String,
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
    /// From `memqos run --json`, when the call was armed or waited for room (policy.admission).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub armed: Option<memqos_schema::call::Armed>,
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
