//! The files of a daemon's state directory (`--state-dir`, `state_dir` in the config).

/// The default state directory: boot-scoped (tmpfs), because what it holds is: a journal of
/// another boot is never restored (cgroup ids and pids are reused), and the journal's fsync
/// and the event log cost no disk I/O on the reaction path there.
pub const DEFAULT_STATE_DIR: &str = "/run/memqos";
/// Where what must outlive a boot goes when the state directory is the default one: the
/// learned history ([`HISTORY_FILE`], [`TIER_PEAKS_FILE`]).
pub const DEFAULT_HISTORY_DIR: &str = "/var/lib/memqos";

/// The journal of original knob values, restored on stop, by the guardian or at the next
/// start (`memqos restore`).
pub const JOURNAL_FILE: &str = "journal.json";
/// The status snapshot, replaced atomically about once a second ([`crate::status`]).
pub const STATUS_FILE: &str = "status.json";
/// The status snapshot being written, renamed over [`STATUS_FILE`] when complete.
pub const STATUS_TMP_FILE: &str = "status.json.tmp";
/// The event log ([`crate::events`]), JSON lines.
pub const EVENTS_FILE: &str = "events.jsonl";
/// The event log's previous part, once [`EVENTS_FILE`] reached its size bound.
pub const ROTATED_FILE: &str = "events.jsonl.1";
/// The state lock: one daemon (or `memqos restore`) per state directory.
pub const LOCK_FILE: &str = "lock";
/// Touched (its mtime) at most every few seconds while the loop completes iterations: what
/// `memqos status --live-within` and the DaemonSet's liveness probe look at.
pub const HEARTBEAT_FILE: &str = "heartbeat";
/// How often the heartbeat is touched at most, in seconds.
pub const HEARTBEAT_EVERY_S: u64 = 5;
/// The control socket `memqos explain` asks.
pub const SOCKET_FILE: &str = "control.sock";
/// Learned peaks per workload key, unless `history_file` names another place
/// (`Config::history_path`).
pub const HISTORY_FILE: &str = "history.json";
/// Recent lifetime peaks per `learn_peak` tier (the tier's own expectation source, after a
/// workload key's history).
pub const TIER_PEAKS_FILE: &str = "tier-peaks.json";
/// The allowances for new cgroups of throttle tiers (`policy.admission`,
/// [`crate::admission`]), replaced atomically on every tick and removed when the daemon stops.
pub const ADMISSION_FILE: &str = "admission.json";
/// The allowance file being written, renamed over [`ADMISSION_FILE`] when complete.
pub const ADMISSION_TMP_FILE: &str = "admission.json.tmp";
/// `"<seq> <pid> <taken> <taken before> <taken two before>\n"`: the tick of
/// [`ADMISSION_FILE`] a `memqos run` last started a call on, the daemon that published it,
/// and the bytes calls took from that tick's room and the two before it (the ledger of
/// `memqos_agent::wait`, taken under an exclusive `flock`): an undeclared waiter starts only
/// on a tick no call started on, a declared call only if its declaration fits beside what
/// the ledger holds. Removed with the allowances.
pub const ADMISSION_CLAIM_FILE: &str = "admission.claim";
