//! Peaks of past lifetimes per workload key: the memory behind `learn_peak` reservations.
//!
//! A cgroup names its workload in `user.memqos.workload` (a command, a deployment). When a
//! protected cgroup of a `learn_peak` tier ends, the daemon records its lifetime peak under
//! that key; a later cgroup with the same key and no declaration of its own gets the learned
//! expectation as its expected peak (`learn`).
//!
//! History is keyed only by that explicit key, never by cgroup path or id. Paths are reused
//! (`<session>/tool.<pid>`, a container runtime's pod names), ids are recycled inodes: keyed by
//! them, what one workload taught would be applied to an unrelated cgroup that happens to get
//! the same name, and it would reserve room for (and cap its neighbours at) a peak that is not
//! its own. A key is a statement by whoever made the cgroup that it runs the same workload.
//!
//! Pure: the caller gives the clock (seconds since the epoch) and does the file I/O.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// Lifetimes remembered per key.
pub const LIFETIMES: usize = 5;
/// Keys remembered; the least recently seen goes first.
pub const MAX_KEYS: usize = 4096;
/// The file format this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// One key's record.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Peak bytes of the last [`LIFETIMES`] lifetimes, oldest first.
    pub peaks: VecDeque<u64>,
    /// When a lifetime was last recorded (seconds since the epoch).
    pub last_seen: u64,
}

impl Entry {
    /// The learned expectation: the largest recorded peak. Not a mean or a recent value: a
    /// lifetime cut short (OOM-killed, cancelled, throttled until it gave up) records less
    /// than the workload needs, and reserving for that would cap the neighbours too loosely
    /// exactly when it matters. The maximum over a few recent lifetimes is robust to those
    /// while still forgetting an old outlier after [`LIFETIMES`] new ones.
    pub fn expectation(&self) -> Option<u64> {
        self.peaks.iter().copied().max()
    }
}

/// All keys' records.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct History {
    entries: BTreeMap<String, Entry>,
}

/// The file's shape.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    version: u32,
    workloads: BTreeMap<String, Entry>,
}

impl History {
    /// Records a lifetime of `key` that peaked at `peak_bytes`, seen ended at `now_s`.
    /// A new key beyond [`MAX_KEYS`] evicts the least recently seen one (ties: the smallest
    /// key, so the outcome does not depend on map order).
    pub fn record(&mut self, key: &str, peak_bytes: u64, now_s: u64) {
        if !self.entries.contains_key(key) && self.entries.len() >= MAX_KEYS {
            let oldest = self.entries.iter().min_by_key(|(k, e)| (e.last_seen, *k)).map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.entries.remove(&k);
            }
        }
        let e = self.entries.entry(key.to_owned()).or_default();
        e.peaks.push_back(peak_bytes);
        while e.peaks.len() > LIFETIMES {
            e.peaks.pop_front();
        }
        e.last_seen = e.last_seen.max(now_s);
    }

    /// `key`'s record, if any lifetime of it was recorded.
    pub fn get(&self, key: &str) -> Option<&Entry> {
        self.entries.get(key).filter(|e| !e.peaks.is_empty())
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The file's text (JSON, with the format version).
    pub fn to_json(&self) -> String {
        let file = File { version: FORMAT_VERSION, workloads: self.entries.clone() };
        serde_json::to_string_pretty(&file).expect("plain data serializes")
    }

    /// Parses a file's text. Err: not JSON of this shape, another format version, or a key
    /// this build would not accept (the file was edited by hand or by another tool).
    pub fn from_json(text: &str) -> Result<History, String> {
        let v: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        match v.get("version").and_then(serde_json::Value::as_u64) {
            Some(n) if n == u64::from(FORMAT_VERSION) => {}
            Some(n) => return Err(format!("format version {n}, this memqos reads version {FORMAT_VERSION}")),
            None => return Err("no format version (\"version\")".into()),
        }
        let file: File = serde_json::from_value(v).map_err(|e| e.to_string())?;
        let mut entries = file.workloads;
        for (k, e) in &mut entries {
            // Keys of delegated users carry their owner (`uid1000:KEY`, see observe::owned_key).
            let given = k
                .split_once(':')
                .filter(|(owner, _)| owner.strip_prefix("uid").is_some_and(|n| n.parse::<u32>().is_ok()))
                .map_or(k.as_str(), |(_, key)| key);
            memqos_policy::check_workload_key(given).map_err(|m| format!("workload {k:?}: {m}"))?;
            while e.peaks.len() > LIFETIMES {
                e.peaks.pop_front();
            }
        }
        let mut h = History { entries };
        // A file from a build with a larger bound keeps the most recently seen keys.
        while h.entries.len() > MAX_KEYS {
            let oldest = h.entries.iter().min_by_key(|(k, e)| (e.last_seen, *k)).map(|(k, _)| k.clone());
            h.entries.remove(&oldest.expect("non-empty"));
        }
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: u64 = 1 << 20;

    #[test]
    fn the_expectation_is_the_largest_of_the_last_five_lifetimes() {
        let mut h = History::default();
        assert!(h.get("pytest").is_none());
        h.record("pytest", 300 * M, 10);
        h.record("pytest", 200 * M, 11); // cut short: the larger one still stands
        assert_eq!(h.get("pytest").unwrap().expectation(), Some(300 * M));
        for (i, p) in [100, 120, 110, 90].into_iter().enumerate() {
            h.record("pytest", p * M, 12 + i as u64);
        }
        // 300M was six lifetimes ago: forgotten.
        let e = h.get("pytest").unwrap();
        assert_eq!(e.peaks, [200 * M, 100 * M, 120 * M, 110 * M, 90 * M]);
        assert_eq!(e.expectation(), Some(200 * M));
        assert_eq!(e.last_seen, 15);
        assert!(h.get("other").is_none(), "keys do not mix");
    }

    #[test]
    fn a_new_key_beyond_the_bound_evicts_the_least_recently_seen() {
        let mut h = History::default();
        for i in 0..MAX_KEYS {
            h.record(&format!("k{i}"), M, 1000 + i as u64);
        }
        h.record("k0", 2 * M, 5000); // seen again: now the most recent
        h.record("new", M, 6000);
        assert_eq!(h.len(), MAX_KEYS);
        assert!(h.get("k1").is_none(), "k1 was the least recently seen");
        assert!(h.get("k0").is_some() && h.get("k2").is_some() && h.get("new").is_some());
        h.record("k2", M, 7000); // a known key evicts nothing
        assert_eq!(h.len(), MAX_KEYS);
    }

    #[test]
    fn the_file_round_trips_with_its_version() {
        let mut h = History::default();
        h.record("deploy/web", 512 * M, 42);
        h.record("cargo test", M, 43);
        let text = h.to_json();
        assert!(text.contains("\"version\": 1"), "{text}");
        assert_eq!(History::from_json(&text).unwrap(), h);
        assert!(History::from_json("{\"version\": 1, \"workloads\": {}}").unwrap().is_empty());
    }

    #[test]
    fn a_bad_file_is_an_error_that_says_why() {
        for (text, says) in [
            ("", "EOF"),
            ("not json", "expected"),
            ("{\"workloads\": {}}", "no format version"),
            ("{\"version\": 2, \"workloads\": {}}", "format version 2, this memqos reads version 1"),
            ("{\"version\": 1}", "missing field `workloads`"),
            ("{\"version\": 1, \"workloads\": {\"a\": {\"peaks\": [\"x\"], \"last_seen\": 1}}}", "invalid type"),
            ("{\"version\": 1, \"workloads\": {\"\": {\"peaks\": [1], \"last_seen\": 1}}}", "must not be empty"),
            ("{\"version\": 1, \"workloads\": {\"a\\nb\": {\"peaks\": [1], \"last_seen\": 1}}}", "control character"),
            ("{\"version\": 1, \"workloads\": {}, \"extra\": 1}", "unknown field"),
        ] {
            match History::from_json(text) {
                Err(e) => assert!(e.contains(says), "{text:?}: {e}"),
                Ok(h) => panic!("{text:?} parsed: {h:?}"),
            }
        }
    }

    #[test]
    fn an_overlong_record_keeps_its_last_five() {
        let text = "{\"version\": 1, \"workloads\": {\"a\": {\"peaks\": [9, 1, 2, 3, 4, 5], \"last_seen\": 1}}}";
        let h = History::from_json(text).unwrap();
        assert_eq!(h.get("a").unwrap().expectation(), Some(5));
    }
}
