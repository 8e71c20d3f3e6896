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

/// The real traces, unless MEMQOS_TRACES points elsewhere.
/// `$MEMQOS_TRACES`, else `shared/traces/agent-haiku` beside the checkout (where CI puts it).
pub fn traces_dir() -> PathBuf {
    std::env::var_os("MEMQOS_TRACES").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces/agent-haiku"),
        PathBuf::from,
    )
}
