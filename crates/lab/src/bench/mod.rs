//! `memqos-lab bench`: figures with medians and spread, never pass/fail.

pub mod churn;
pub mod faults;
pub mod reaction;
pub mod run;
pub mod stats;

/// A per-kernel result of a bench that writes one JSON file for every kernel it measured.
pub(crate) trait PerKernel: serde::Serialize + serde::de::DeserializeOwned {
    fn kernel(&self) -> &str;
}

/// `fresh` plus the kernels of the earlier file at `path` that this run did not measure, in
/// kernel order: running `--kernel 6.12` and then `--kernel 7` builds the same file as
/// `--kernel all`. An unreadable or older-format file contributes nothing.
pub(crate) fn keep_earlier_kernels<T: PerKernel>(path: &std::path::Path, fresh: Vec<T>) -> Vec<T> {
    let earlier: Vec<T> = std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|old| serde_json::from_value(old["kernels"].clone()).ok())
        .unwrap_or_default();
    let mut all: Vec<T> = earlier.into_iter().filter(|k| !fresh.iter().any(|n| n.kernel() == k.kernel())).collect();
    all.extend(fresh);
    all.sort_by(|a, b| a.kernel().cmp(b.kernel()));
    all
}
