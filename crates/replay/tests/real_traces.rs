//! Every real agent trace parses (or fails with a located error, never a panic), and the
//! two traces of the seed experiment schedule as the experiment describes.
//!
//! The traces ship with the repository (`traces/agent-haiku`, GPL-2.0 data from
//! yunwei37/agentcgroup, see traces/README.md); MEMQOS_TRACES points the test at another set.

mod common;

use memqos_replay::trace::{load_trace, TraceError};
use memqos_replay::{prepare, ScheduleOptions, ToolCallsSource};
use std::path::PathBuf;

fn task_dirs() -> Vec<PathBuf> {
    let dir = common::traces_dir();
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut dirs: Vec<PathBuf> =
        entries.map(|e| e.unwrap().path()).filter(|p| p.join("resources.json").is_file()).collect();
    dirs.sort();
    assert!(!dirs.is_empty(), "{}: no */resources.json", dir.display());
    dirs
}

#[test]
fn every_real_trace_parses_or_says_where_it_is_broken() {
    let dirs = task_dirs();
    let mut problems = Vec::new();
    let mut dropped = 0;
    for dir in &dirs {
        let path = dir.join("resources.json");
        match load_trace(&path) {
            Ok(t) => {
                assert_eq!(t.name, dir.file_name().unwrap().to_string_lossy());
                assert!(t.samples.windows(2).all(|w| w[0].epoch <= w[1].epoch));
                dropped += t.dropped_no_container.len();
            }
            // A data problem: fine for this test as long as the error is located.
            Err(e @ (TraceError::Invalid { .. } | TraceError::Json { .. })) => {
                let msg = e.to_string();
                assert!(msg.starts_with(&path.display().to_string()), "{msg}");
                problems.push(msg);
            }
            Err(e) => panic!("{}: unexpected error kind: {e}", path.display()),
        }
    }
    for p in &problems {
        eprintln!("data problem: {p}");
    }
    eprintln!(
        "{} traces, {} malformed, {dropped} trailing/leading \"0B / 0B\" samples dropped",
        dirs.len(),
        problems.len()
    );
    // As of the 55 haiku traces none is malformed; a new one that is shows up above.
    assert!(problems.len() < dirs.len(), "no trace parses");
}

#[test]
fn every_real_trace_schedules_with_its_tool_calls() {
    let dirs = task_dirs();
    let opts = ScheduleOptions { speed: 50.0, baseline_bytes: 100 << 20 };
    let (mut with_calls, mut marked) = (0, 0);
    for dir in &dirs {
        let Ok(p) = prepare(&dir.join("resources.json"), ToolCallsSource::Auto, &opts) else {
            continue; // reported by the test above
        };
        assert_eq!(p.schedule.steps.len(), p.trace.samples.len());
        assert_eq!(p.schedule.steps[0].t_sched.as_nanos(), 0);
        let expect_s = p.trace.duration_s() / 50.0;
        assert!((p.schedule.duration().as_secs_f64() - expect_s).abs() < 1e-6);
        if p.tool_calls_path.is_some() {
            with_calls += 1;
            marked += p.schedule.steps.iter().filter(|s| s.tool.is_some()).count();
        } else {
            assert!(!dir.join("tool_calls.json").exists());
        }
    }
    assert!(with_calls > 0 && marked > 0, "{with_calls} traces with tool calls, {marked} marked steps");
}

#[test]
fn the_seed_experiment_traces() {
    // The repository's own set: the figures below belong to these two traces.
    let dir = common::repo_traces_dir();
    let opts = ScheduleOptions { speed: 50.0, baseline_bytes: 100 << 20 };

    let high = prepare(&dir.join("dask__dask-11628/resources.json"), ToolCallsSource::Auto, &opts).unwrap();
    assert_eq!(high.trace.name, "dask__dask-11628");
    assert_eq!(high.trace.samples.len(), 95);
    assert_eq!(high.trace.max_used_bytes(), 320_900_000);
    assert!((high.trace.duration_s() - 98.338).abs() < 0.01);
    assert!((high.schedule_s() - 1.9668).abs() < 0.001, "{}", high.schedule_s());
    assert_eq!(high.schedule.peak_target_bytes(), 320_900_000 + (100 << 20));
    assert_eq!(high.tool_calls.as_ref().map(Vec::len), Some(26));

    // The low trace ends with a "0B / 0B" reading taken after the container exited.
    let low = prepare(&dir.join("sigmavirus24__github3.py-673/resources.json"), ToolCallsSource::Auto, &opts).unwrap();
    assert_eq!(low.trace.samples.len(), 99);
    assert_eq!(low.trace.dropped_no_container, [99]);
    assert_eq!(low.trace.max_used_bytes(), 305_500_000);
}

#[test]
fn a_damaged_real_trace_gets_a_located_error() {
    let text = std::fs::read_to_string(common::repo_traces_dir().join("dask__dask-11628/resources.json")).unwrap();
    let parse = |t: &str| memqos_replay::trace::parse_trace("resources.json", t).unwrap_err().to_string();

    // Sample 17's unit mangled.
    let mut n = 0;
    let mangled: String = text
        .split_inclusive("MB / ")
        .map(|part| {
            n += 1;
            if n == 18 {
                part.replace("MB / ", "XB / ")
            } else {
                part.to_owned()
            }
        })
        .collect();
    let e = parse(&mangled);
    assert!(e.starts_with("resources.json: samples[17].mem_usage: cannot parse \""), "{e}");
    assert!(e.ends_with("unknown unit \"XB\""), "{e}");

    // Cut off mid-file, as an interrupted copy would be.
    let e = parse(&text[..text.len() * 2 / 3]);
    assert!(e.starts_with("resources.json: not valid JSON: EOF while parsing"), "{e}");

    // Two samples swapped.
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut v2 = v.clone();
    v2["samples"].as_array_mut().unwrap().swap(40, 41);
    let e = parse(&v2.to_string());
    assert!(e.starts_with("resources.json: samples[41].epoch: goes backwards"), "{e}");

    // A field dropped.
    let mut v3 = v;
    v3["samples"][60].as_object_mut().unwrap().remove("epoch");
    assert_eq!(parse(&v3.to_string()), "resources.json: samples[60].epoch: missing");
}
