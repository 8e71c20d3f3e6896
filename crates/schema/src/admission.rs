//! `<state_dir>/admission.json`: what a new cgroup of each throttle tier may charge before the
//! daemon has seen it (`policy.admission`). The daemon replaces it atomically on every tick;
//! `memqos run` reads it before it starts a tool call and arms the call's memory.high at its
//! tier's allowance, so a burst shorter than a sampling interval is throttled by the kernel
//! instead of running the host budget into an OOM kill. The file is also the daemon's liveness
//! for armed calls: `memqos run` lifts its armed ceiling when it goes stale.
//!
//! A tier whose allowance says `wait` has no room for a new call: `memqos run` holds the call
//! back (it has no cgroup and no memory yet, so it cannot be killed) until a tick has room,
//! for at most `wait_limit_ms`. Waiters start one per published tick: the one that takes
//! [`crate::state::ADMISSION_CLAIM_FILE`] for the tick's `seq` starts, the others wait for the next tick.
//!
//! Fields added since version 1 default when absent, so an older file still reads (as "no
//! wait"); readers ignore fields they do not know, so older readers read a newer file.

use serde::{Deserialize, Serialize};

/// The version of this format; a reader ignores a file of another version.
pub const ADMISSION_VERSION: u32 = 1;

/// The extended attribute `memqos run` marks an armed call's cgroup with (the bytes it wrote
/// to memory.high, set before that write): the daemon takes that value as a knob of its own
/// (journaled original `max`), not as an operator's setting.
pub const ARMED_HIGH_XATTR: &str = "user.memqos.armed_high";

/// The published allowances.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Admission {
    pub version: u32,
    /// The daemon's pid.
    pub pid: u32,
    /// The managed root the allowances are for (a reader for another root ignores them).
    pub cgroup_root: String,
    /// Wall-clock time of the computation, ms since the Unix epoch.
    pub computed_unix_ms: u64,
    /// The daemon's sampling interval: the file is rewritten at least this often while it runs.
    pub interval_ms: u64,
    /// One entry per throttle tier, in tier order.
    pub tiers: Vec<TierAllowance>,
    /// Counts the daemon's publications (from 1 in each run of its loop): one waiting call
    /// starts per `seq`.
    #[serde(default)]
    pub seq: u64,
    /// `policy.admission_wait_ms`: how long a call may wait for room; 0: it does not wait.
    #[serde(default)]
    pub wait_limit_ms: u64,
}

/// One throttle tier's allowance for a new cgroup.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TierAllowance {
    pub tier: String,
    /// memory.high for a new cgroup of this tier (never below `policy.admission_floor`).
    pub allowance_bytes: u64,
    /// No room for a new call of this tier now (its share of the room is below the floor, or
    /// the tier is queued behind a parked one): a call should wait before it starts (an
    /// undeclared one: a call that declares its peak goes by `room_bytes`).
    #[serde(default)]
    pub wait: bool,
    /// The whole room under the daemon's guard line (`allowance_bytes` is a share of it): a
    /// call that declares its peak waits until the room covers it. Absent in a file of an
    /// older daemon: the allowance stands in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub room_bytes: Option<u64>,
}

impl Admission {
    /// How old the file may be and still be trusted: three sampling intervals, at least 1 s
    /// (a tick may be late while the daemon writes a large batch).
    pub fn max_age_ms(&self) -> u64 {
        self.interval_ms.saturating_mul(3).max(1_000)
    }

    /// Its age at `now_unix_ms` (0 when computed "in the future": another clock's skew).
    pub fn age_ms(&self, now_unix_ms: u64) -> u64 {
        now_unix_ms.saturating_sub(self.computed_unix_ms)
    }

    /// The allowance of the tier called `tier`.
    pub fn allowance(&self, tier: &str) -> Option<u64> {
        self.tiers.iter().find(|t| t.tier == tier).map(|t| t.allowance_bytes)
    }

    /// The room a call of the tier called `tier` that declares its peak may start on (the
    /// allowance when the file has no room).
    pub fn room(&self, tier: &str) -> Option<u64> {
        self.tiers.iter().find(|t| t.tier == tier).map(|t| t.room_bytes.unwrap_or(t.allowance_bytes))
    }

    /// Whether a new call of the tier called `tier` should wait (false for a tier not listed).
    pub fn wait(&self, tier: &str) -> bool {
        self.tiers.iter().any(|t| t.tier == tier && t.wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_back_and_ages() {
        let a = Admission {
            version: ADMISSION_VERSION,
            pid: 7,
            cgroup_root: "/sys/fs/cgroup/agents".into(),
            computed_unix_ms: 10_000,
            interval_ms: 100,
            tiers: vec![TierAllowance {
                tier: "tool".into(),
                allowance_bytes: 64 << 20,
                wait: true,
                room_bytes: Some(200 << 20),
            }],
            seq: 3,
            wait_limit_ms: 30_000,
        };
        let text = serde_json::to_string(&a).unwrap();
        assert_eq!(serde_json::from_str::<Admission>(&text).unwrap(), a);
        assert_eq!((a.max_age_ms(), a.age_ms(10_500), a.age_ms(9_000)), (1_000, 500, 0));
        assert_eq!(Admission { interval_ms: 500, ..a.clone() }.max_age_ms(), 1_500);
        assert_eq!((a.allowance("tool"), a.allowance("runtime")), (Some(64 << 20), None));
        assert_eq!((a.wait("tool"), a.wait("runtime")), (true, false));
        assert_eq!((a.room("tool"), a.room("runtime")), (Some(200 << 20), None));
    }

    #[test]
    fn a_file_from_before_waiting_reads_as_no_wait() {
        let old = r#"{"version":1,"pid":7,"cgroup_root":"/sys/fs/cgroup/agents","computed_unix_ms":10000,
            "interval_ms":100,"tiers":[{"tier":"tool","allowance_bytes":67108864}]}"#;
        let a: Admission = serde_json::from_str(old).unwrap();
        assert_eq!((a.seq, a.wait_limit_ms, a.wait("tool"), a.allowance("tool")), (0, 0, false, Some(64 << 20)));
        assert_eq!(a.room("tool"), Some(64 << 20), "no room published: the allowance stands in");
    }
}
