//! `resources.json`: one `podman stats` reading per sample (format in
//! traces/README.md in the repository). Parsing is a pure function of the text; every error names
//! the file, the sample and the field.
//!
//! Only `epoch` (Unix seconds) and `mem_usage` are read. `timestamp` is local time without a
//! zone, so it cannot be related to the UTC tool-call times; `summary` is derived data.
//! Unknown fields are ignored: the trace format belongs to another project.

use crate::units::{parse_mem_usage, MemUsageError};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// One reading the replay will follow.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Position in the file's `samples` array (kept for messages and reports, because leading
    /// no-container samples are dropped).
    pub index: usize,
    /// Unix time in seconds.
    pub epoch: f64,
    /// Memory the container used, in bytes.
    pub used_bytes: u64,
    /// The container's limit as podman saw it (the host's memory when unlimited).
    pub limit_bytes: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    /// The task name: the folder holding `resources.json` (`dask__dask-11628`), or the file
    /// stem for a file with another name.
    pub name: String,
    pub path: Option<PathBuf>,
    /// Never empty, epochs non-decreasing.
    pub samples: Vec<Sample>,
    /// Indices of `0B / 0B` samples dropped at the start or end of the trace: podman read
    /// no container there (before it started or after the agent exited), which says nothing
    /// about the agent's memory. 18 of the 55 haiku traces end with one.
    pub dropped_no_container: Vec<usize>,
}

impl Trace {
    /// Seconds from the first to the last replayed sample.
    pub fn duration_s(&self) -> f64 {
        self.samples.last().map_or(0.0, |l| l.epoch - self.samples[0].epoch)
    }

    pub fn max_used_bytes(&self) -> u64 {
        self.samples.iter().map(|s| s.used_bytes).max().unwrap_or(0)
    }
}

/// Errors name the file and, for bad values, the path in it (`samples[17].mem_usage`).
pub type TraceError = crate::InputError;

/// Reads and parses a `resources.json`; the error message carries `path` as given.
pub fn load_trace(path: &Path) -> Result<Trace, TraceError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|error| TraceError::Io { file: file.clone(), error })?;
    let mut trace = parse_trace(&file, &text)?;
    trace.name = trace_name(path);
    trace.path = Some(path.to_owned());
    Ok(trace)
}

/// `dask__dask-11628` for `.../dask__dask-11628/resources.json`.
pub fn trace_name(path: &Path) -> String {
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    if path.file_name().is_some_and(|n| n == "resources.json") {
        if let Some(dir) = path.parent().and_then(|p| p.file_name()) {
            return dir.to_string_lossy().into_owned();
        }
    }
    stem
}

/// Parses the text of a `resources.json`; `file` only labels errors. The returned trace is
/// named after `file`'s stem; [`load_trace`] names it after the task folder.
pub fn parse_trace(file: &str, text: &str) -> Result<Trace, TraceError> {
    let invalid = |at: String, problem: String| TraceError::Invalid { file: file.to_owned(), at, problem };
    let root: Value =
        serde_json::from_str(text).map_err(|e| TraceError::Json { file: file.to_owned(), message: e.to_string() })?;
    let Value::Object(root) = root else {
        return Err(invalid(
            "(top level)".into(),
            format!("expected an object with \"samples\", found {}", kind(&root)),
        ));
    };
    let samples = match root.get("samples") {
        None => return Err(invalid("samples".into(), "missing".into())),
        Some(Value::Array(a)) => a,
        Some(other) => return Err(invalid("samples".into(), format!("expected an array, found {}", kind(other)))),
    };
    if samples.is_empty() {
        return Err(invalid("samples".into(), "empty: nothing to replay".into()));
    }

    let mut all = Vec::with_capacity(samples.len());
    let mut prev_epoch: Option<f64> = None;
    for (i, v) in samples.iter().enumerate() {
        let at = |field: &str| format!("samples[{i}]{field}");
        let Value::Object(obj) = v else {
            return Err(invalid(at(""), format!("expected an object, found {}", kind(v))));
        };
        let epoch = match obj.get("epoch") {
            None => return Err(invalid(at(".epoch"), "missing".into())),
            Some(Value::Number(n)) => match n.as_f64().filter(|e| e.is_finite() && *e >= 0.0) {
                Some(e) => e,
                None => return Err(invalid(at(".epoch"), format!("expected non-negative Unix seconds, found {n}"))),
            },
            Some(other) => return Err(invalid(at(".epoch"), format!("expected Unix seconds, found {}", kind(other)))),
        };
        if let Some(prev) = prev_epoch {
            if epoch < prev {
                return Err(invalid(
                    at(".epoch"),
                    format!("goes backwards: {epoch} comes after {prev} (samples[{}])", i - 1),
                ));
            }
        }
        prev_epoch = Some(epoch);
        let text = match obj.get("mem_usage") {
            None => return Err(invalid(at(".mem_usage"), "missing".into())),
            Some(Value::String(s)) => s,
            Some(other) => {
                return Err(invalid(at(".mem_usage"), format!("expected \"<used> / <limit>\", found {}", kind(other))))
            }
        };
        let usage = parse_mem_usage(text).map_err(|e| invalid(at(".mem_usage"), mem_usage_problem(text, &e)))?;
        all.push((
            Sample { index: i, epoch, used_bytes: usage.used, limit_bytes: usage.limit },
            usage.is_no_container(),
        ));
    }

    // Keep the run between the first and last samples that saw a container.
    let Some(first) = all.iter().position(|(_, gone)| !gone) else {
        return Err(invalid("samples".into(), "every sample is \"0B / 0B\": podman saw no container".into()));
    };
    let last = all.iter().rposition(|(_, gone)| !gone).unwrap_or(first);
    if let Some((s, _)) = all[first..=last].iter().find(|(_, gone)| *gone) {
        return Err(invalid(
            format!("samples[{}].mem_usage", s.index),
            "\"0B / 0B\" (no container) between readings of a running one".into(),
        ));
    }
    let dropped_no_container = all[..first].iter().chain(&all[last + 1..]).map(|(s, _)| s.index).collect();
    let samples = all.drain(first..=last).map(|(s, _)| s).collect();
    let name = Path::new(file).file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    Ok(Trace { name, path: None, samples, dropped_no_container })
}

fn mem_usage_problem(text: &str, e: &MemUsageError) -> String {
    match e.size_error() {
        Some(inner) => format!("cannot parse {text:?}: {inner}"),
        None => format!("cannot parse {text:?}: {e}"),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(epoch: &str, mem: &str) -> String {
        format!(
            r#"{{"timestamp": "2026-02-06T17:47:11.545465", "epoch": {epoch}, "mem_usage": "{mem}", "mem_percent": "0.01%", "cpu_percent": "1%"}}"#
        )
    }

    fn doc(samples: &[String]) -> String {
        format!(r#"{{"samples": [{}], "summary": {{"sample_count": {}}}}}"#, samples.join(","), samples.len())
    }

    fn err(text: &str) -> (String, String) {
        match parse_trace("resources.json", text) {
            Err(TraceError::Invalid { at, problem, .. }) => (at, problem),
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn good_trace() {
        let t = parse_trace(
            "x/resources.json",
            &doc(&[
                sample("100.0", "11.96MB / 134.5GB"),
                sample("101.04", "185.5MB / 134.5GB"),
                sample("102.1", "1.055GB / 134.5GB"),
            ]),
        )
        .unwrap();
        assert_eq!(t.samples.len(), 3);
        assert_eq!(t.samples[1].used_bytes, 185_500_000);
        assert_eq!(t.samples[2].used_bytes, 1_055_000_000);
        assert_eq!(t.samples[0].limit_bytes, 134_500_000_000);
        assert!((t.duration_s() - 2.1).abs() < 1e-9);
        assert_eq!(t.max_used_bytes(), 1_055_000_000);
        assert!(t.dropped_no_container.is_empty());
    }

    #[test]
    fn the_example_error_message() {
        let mut s: Vec<String> = (0..17).map(|i| sample(&format!("{}", 100 + i), "1MB / 2GB")).collect();
        s.push(sample("200", "12.3XB / 134.5GB"));
        let e = parse_trace("resources.json", &doc(&s)).unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"resources.json: samples[17].mem_usage: cannot parse "12.3XB / 134.5GB": unknown unit "XB""#
        );
        assert_eq!(e.at(), Some("samples[17].mem_usage"));
    }

    #[test]
    fn trailing_and_leading_no_container_samples_are_dropped() {
        let t = parse_trace(
            "r.json",
            &doc(&[
                sample("99", "0B / 0B"),
                sample("100", "1MB / 2GB"),
                sample("101", "2MB / 2GB"),
                sample("102", "0B / 0B"),
            ]),
        )
        .unwrap();
        assert_eq!(t.samples.iter().map(|s| s.index).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(t.dropped_no_container, [0, 3]);
    }

    #[test]
    fn malformed_cases() {
        let ok = |e: &str| sample(e, "1MB / 2GB");
        let cases: Vec<(String, &str, &str)> = vec![
            ("[1, 2]".into(), "(top level)", "expected an object"),
            ("{}".into(), "samples", "missing"),
            (r#"{"samples": {}}"#.into(), "samples", "expected an array"),
            (doc(&[]), "samples", "empty"),
            (r#"{"samples": [3]}"#.into(), "samples[0]", "expected an object, found a number"),
            (r#"{"samples": [{"mem_usage": "1MB / 2GB"}]}"#.into(), "samples[0].epoch", "missing"),
            (
                r#"{"samples": [{"epoch": "100", "mem_usage": "1MB / 2GB"}]}"#.into(),
                "samples[0].epoch",
                "found a string",
            ),
            (r#"{"samples": [{"epoch": -1, "mem_usage": "1MB / 2GB"}]}"#.into(), "samples[0].epoch", "non-negative"),
            (r#"{"samples": [{"epoch": 100}]}"#.into(), "samples[0].mem_usage", "missing"),
            (r#"{"samples": [{"epoch": 100, "mem_usage": 5}]}"#.into(), "samples[0].mem_usage", "found a number"),
            (
                doc(&[ok("100"), ok("101"), ok("100.5")]),
                "samples[2].epoch",
                "goes backwards: 100.5 comes after 101 (samples[1])",
            ),
            (
                doc(&[ok("100"), sample("101", "185.5MB")]),
                "samples[1].mem_usage",
                r#"cannot parse "185.5MB": expected "<used> / <limit>""#,
            ),
            (doc(&[sample("100", "abc / 2GB")]), "samples[0].mem_usage", r#"expected a number, found "abc""#),
            (doc(&[sample("100", "1MB / 2")]), "samples[0].mem_usage", r#"missing unit after "2""#),
            (doc(&[ok("100"), sample("101", "0B / 0B"), ok("102")]), "samples[1].mem_usage", "between readings"),
            (doc(&[sample("100", "0B / 0B")]), "samples", "every sample"),
        ];
        for (text, want_at, want_problem) in cases {
            let (at, problem) = err(&text);
            assert_eq!(at, want_at, "{text}");
            assert!(problem.contains(want_problem), "{text}: {problem:?} lacks {want_problem:?}");
        }
    }

    #[test]
    fn truncated_json_is_a_json_error() {
        let text = doc(&[sample("100", "1MB / 2GB")]);
        let e = parse_trace("resources.json", &text[..text.len() / 2]).unwrap_err();
        assert!(matches!(e, TraceError::Json { .. }), "{e:?}");
        assert!(e.to_string().starts_with("resources.json: not valid JSON: EOF"), "{e}");
    }

    #[test]
    fn equal_epochs_are_monotonic() {
        assert!(parse_trace("r", &doc(&[sample("100", "1MB / 2GB"), sample("100", "2MB / 2GB")])).is_ok());
    }

    #[test]
    fn mangled_input_never_panics() {
        let text =
            doc(&[sample("100.5", "11.96MB / 134.5GB"), sample("101.5", "1.055GB / 0B"), sample("102", "0B / 0B")]);
        for i in 0..text.len() {
            let _ = parse_trace("r", &text[..i]);
            for c in ["", "0", ".", "-", "\"", "µ", "}", "/", "e9", " "] {
                let mangled = format!("{}{c}{}", &text[..i], &text[i + 1..]);
                let _ = parse_trace("r", &mangled);
                let _ = crate::tool_calls::parse_utc(&mangled[i.saturating_sub(20)..i + c.len()]);
            }
        }
    }

    #[test]
    fn names() {
        assert_eq!(trace_name(Path::new("/t/dask__dask-11628/resources.json")), "dask__dask-11628");
        assert_eq!(trace_name(Path::new("resources.json")), "resources");
        assert_eq!(trace_name(Path::new("/t/mine.json")), "mine");
    }
}
