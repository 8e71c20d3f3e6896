//! What `memqos run --json` prints on stderr after a call (one line): its exit, time, peak,
//! memory events, the account of an OOM kill and the daemon's stall actions on it. The agent
//! writes it; the agent-host experiment reads it back.

use crate::KnobFile;
use serde::{Deserialize, Serialize};

/// The extended attribute `memqos run` sets on the cgroups it makes: [`MADE_CALL`] on a tool
/// call's, [`MADE_SESSION`] on a session's it created (never on one that existed). The daemon
/// removes only cgroups that carry it, once empty, unlocked and idle for
/// `policy.remove_leftovers_after_ms`: a cgroup someone else made, or a session an operator
/// made for `memqos run` to use, is never removed.
pub const MADE_BY_RUN_XATTR: &str = "user.memqos.made_by_run";
/// [`MADE_BY_RUN_XATTR`] of a tool call's cgroup.
pub const MADE_CALL: &str = "call";
/// [`MADE_BY_RUN_XATTR`] of a session's cgroup.
pub const MADE_SESSION: &str = "session";

/// The call's memory.events counters (the cgroup is new, so totals are the call's own).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallEvents {
    /// Times it went over memory.high and was throttled.
    pub high: u64,
    /// Times it hit a memory.max (its own or an ancestor's).
    pub max: u64,
    /// Processes of the call killed by the OOM killer.
    pub oom_kill: u64,
}

/// One cgroup holding memory, for the account.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Holder {
    pub cgroup: String,
    pub bytes: u64,
}

/// The limit that was reached.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LimitHit {
    /// Path of the cgroup whose memory.max was reached.
    pub cgroup: String,
    /// What that cgroup is to the call: "this call", "its session", "the managed root", or
    /// "an ancestor of the managed root".
    pub role: String,
    /// Its memory.max, None if unlimited (then its memory.high is not an OOM source either,
    /// so this only happens when the file changed since).
    pub max_bytes: Option<u64>,
}

/// Why the call lost a process to the OOM killer, and what to try.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OomAccount {
    /// Processes of the call the OOM killer killed.
    pub killed: u64,
    /// The command itself died of SIGKILL (else only one of its processes did).
    pub command_killed: bool,
    /// None: no cgroup limit was reached: the host ran out of memory.
    pub limit: Option<LimitHit>,
    /// The largest other holders under the limiting cgroup (or the managed root), now.
    pub others: Vec<Holder>,
    /// Suggestions, most useful first.
    pub advice: Vec<String>,
}

/// What `memqos run --json` prints (one line on stderr) and the text report is made from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CallReport {
    pub cgroup: String,
    pub session: String,
    pub tier: String,
    /// The exit status memqos run returns: the code, or 128 + signal.
    pub status: u8,
    /// The signal that ended the command, if one did.
    pub signal: Option<i32>,
    pub wall_ms: u64,
    /// memory.peak of the call's cgroup (Linux 5.19+).
    pub peak_bytes: Option<u64>,
    pub events: CallEvents,
    /// The size the call declared with `--hint SIZE`.
    pub hint_bytes: Option<u64>,
    /// Processes of the call still ran when the command exited, so its cgroup was left in
    /// place (a later `memqos run` in the session removes it once they are gone).
    pub kept: bool,
    pub oom: Option<OomAccount>,
    /// What the memqos daemon did because the call stalled at its memory.high (from its event
    /// log; only when `memqos run` knows the daemon's config).
    pub daemon_stall_actions: Vec<StallAction>,
    /// The memory ceiling `memqos run` armed on the call before it started (the daemon's
    /// published allowance for its tier), or why none was.
    #[serde(default)]
    pub armed: Armed,
}

/// The armed ceiling of a call (`policy.admission`, docs/agent-hosts.md).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Armed {
    /// memory.high written on the call's cgroup before the command started; None: none was.
    pub high_bytes: Option<u64>,
    /// Why none was armed (no daemon allowance, a stale one, ...); None when armed.
    pub skipped: Option<String>,
    /// The call went over memory.high while armed (memory.events `high` rose): it was held at
    /// its ceiling, or at a lower one the daemon set, instead of charging on into the host
    /// budget.
    pub held: bool,
    /// Why `memqos run` lifted the ceiling to `max` itself while the call ran (the daemon's
    /// liveness went stale); None when it did not.
    pub lifted: Option<String>,
    /// How long the call waited for room before it started (its tier's allowance said
    /// `wait`); 0, and absent from the JSON, when it did not.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub waited_ms: u64,
    /// Why the wait ended: "room" (a tick had room for it), "limit" (`admission_wait_ms`
    /// passed), "daemon gone" (started as without a daemon), "no claim" (the claim file could
    /// not be taken); absent when it did not wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ended: Option<String>,
    /// The peak the call declared (`--expect`), which its wait and its ceiling covered when
    /// the room allowed; absent when it declared none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub declared_bytes: Option<u64>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One stall action the daemon took on the call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StallAction {
    /// The file written: memory.high (relieved) or cgroup.kill.
    pub file: String,
    pub value: String,
    /// The daemon's reason, in words.
    pub why: String,
}

impl StallAction {
    /// The call was killed (else its memory.high was raised).
    pub fn is_kill(&self) -> bool {
        KnobFile::from_name(&self.file) == Some(KnobFile::CgroupKill)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_reads_back_as_written() {
        let r = CallReport {
            cgroup: "/sys/fs/cgroup/agents/s0/tool.7".into(),
            session: "s0".into(),
            tier: "tool".into(),
            status: 137,
            signal: Some(9),
            wall_ms: 1200,
            peak_bytes: Some(400 << 20),
            events: CallEvents { high: 4, max: 9, oom_kill: 1 },
            hint_bytes: None,
            kept: false,
            oom: Some(OomAccount {
                killed: 1,
                command_killed: true,
                limit: Some(LimitHit {
                    cgroup: "/sys/fs/cgroup/agents/s0".into(),
                    role: "its session".into(),
                    max_bytes: Some(1 << 30),
                }),
                others: vec![Holder { cgroup: "runtime".into(), bytes: 300 << 20 }],
                advice: vec!["run it with less memory".into()],
            }),
            daemon_stall_actions: vec![StallAction {
                file: "cgroup.kill".into(),
                value: "1".into(),
                why: "stalled".into(),
            }],
            armed: Armed { high_bytes: Some(64 << 20), skipped: None, held: true, lifted: None, ..Default::default() },
        };
        let line = serde_json::to_string(&r).unwrap();
        assert_eq!(serde_json::from_str::<CallReport>(&line).unwrap(), r);
        assert!(r.daemon_stall_actions[0].is_kill());
        // A report from before armed ceilings reads as not armed.
        let mut old: serde_json::Value = serde_json::from_str(&line).unwrap();
        old.as_object_mut().unwrap().remove("armed");
        assert_eq!(serde_json::from_value::<CallReport>(old).unwrap().armed, Armed::default());
        // Not waiting adds nothing to the JSON; a wait reads back.
        assert!(!line.contains("waited_ms") && !line.contains("wait_ended"), "{line}");
        let waited = CallReport {
            armed: Armed { waited_ms: 1_200, wait_ended: Some("room".into()), ..r.armed.clone() },
            ..r.clone()
        };
        let line = serde_json::to_string(&waited).unwrap();
        assert_eq!(serde_json::from_str::<CallReport>(&line).unwrap(), waited);
    }
}
