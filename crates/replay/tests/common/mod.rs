//! Synthetic traces for the integration tests.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// Writes `<dir>/<name>/resources.json` with one sample per `(seconds, used MB)` point,
/// starting at a realistic epoch, and returns its path.
pub fn write_trace(dir: &Path, name: &str, points: &[(f64, f64)]) -> PathBuf {
    let samples: Vec<String> = points
        .iter()
        .map(|(t, mb)| {
            format!(
                r#"{{"timestamp": "2026-02-06T17:47:11.545465", "epoch": {}, "mem_usage": "{mb}MB / 134.5GB", "mem_percent": "0.1%", "cpu_percent": "5%"}}"#,
                1_770_428_831.5 + t
            )
        })
        .collect();
    let folder = dir.join(name);
    std::fs::create_dir_all(&folder).unwrap();
    let path = folder.join("resources.json");
    std::fs::write(&path, format!(r#"{{"samples": [{}], "summary": {{}}}}"#, samples.join(",\n"))).unwrap();
    path
}

/// The real traces: the repository's `traces/agent-haiku`, unless MEMQOS_TRACES points elsewhere.
pub fn traces_dir() -> PathBuf {
    memqos_replay::traces_dir::resolve(None).unwrap_or_else(|e| panic!("{e}"))
}

/// The repository's own trace set, whatever MEMQOS_TRACES says.
pub fn repo_traces_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").join(memqos_replay::traces_dir::IN_REPO)
}
