//! The files of a daemon's state directory (`--state-dir`, `state_dir` in the config).

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
/// The control socket `memqos explain` asks.
pub const SOCKET_FILE: &str = "control.sock";
/// Learned peaks per workload key, unless `history_file` names another place. The policy
/// crate spells the default itself (it cannot depend on this one); a test below keeps the
/// two equal.
pub const HISTORY_FILE: &str = "history.json";

#[cfg(test)]
mod tests {
    use super::*;
    use memqos_policy::Config;
    use std::path::Path;

    #[test]
    fn the_configs_default_history_file_is_this_one() {
        let text = "cgroup_root = \"/sys/fs/cgroup/qos\"\n[[tier]]\nname = \"a\"\nmatch = [\"x\"]\n";
        let cfg = Config::from_str(text, "memqos.toml").unwrap();
        let dir = Path::new("/var/lib/memqos");
        assert_eq!(cfg.history_path(dir), dir.join(HISTORY_FILE));
    }
}
