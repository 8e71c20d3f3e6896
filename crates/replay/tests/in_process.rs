//! End to end in this process, on the host, no cgroup: a small synthetic trace replayed fast,
//! checking that resident memory really followed the targets. One test in this binary, so
//! no other test's allocations move VmRSS while it measures.

mod common;

use memqos_replay::engine::read_status_field;
use memqos_replay::report::Report;
use memqos_replay::{prepare, worker, EngineOptions, Outcome, ScheduleOptions, ToolCallsSource};

#[test]
fn rss_follows_the_trace() {
    let dir = tempfile::tempdir().unwrap();
    // 0.2 s of trace per sample at 20x: a step every 10 ms.
    let mb = [5.0, 60.0, 60.0, 20.5, 90.0, 0.0, 35.0, 120.0, 10.0];
    let points: Vec<(f64, f64)> = mb.iter().enumerate().map(|(i, &m)| (i as f64 * 0.2, m)).collect();
    let path = common::write_trace(dir.path(), "synthetic", &points);
    let calls = dir.path().join("synthetic/tool_calls.json");
    std::fs::write(
        &calls,
        r#"[{"timestamp": "2026-02-07T01:47:12.0Z", "end_timestamp": "2026-02-07T01:47:12.05Z", "tool": "Bash"}]"#,
    )
    .unwrap();
    let baseline = 16u64 << 20;
    let prepared =
        prepare(&path, ToolCallsSource::Auto, &ScheduleOptions { speed: 20.0, baseline_bytes: baseline }).unwrap();
    assert_eq!(prepared.tool_calls_path.as_deref(), Some(calls.as_path()));

    let rss_before = read_status_field("VmRSS").unwrap();
    let engine = EngineOptions { chunk_bytes: 1 << 20, read_rss: true, pause_file: None, fill: None };
    let run = worker::run_in_process(&prepared.schedule, &engine, |_| {});
    assert_eq!(run.outcome, Outcome::Finished);
    assert_eq!(run.steps.len(), mb.len());

    let page = 4096u64;
    let slack = 8u64 << 20; // allocator and stack noise of this process, THP rounding
    for (rec, &m) in run.steps.iter().zip(&mb) {
        let target = (m * 1e6) as u64 + baseline;
        assert_eq!(rec.target_bytes, target);
        assert!(rec.held_bytes >= target && rec.held_bytes - target < page, "{rec:?}");
        let rss = rec.rss_bytes.unwrap();
        let expect = rss_before + rec.held_bytes;
        assert!(rss.abs_diff(expect) < slack, "step {}: VmRSS {rss} vs {expect} expected", rec.step);
        assert!(rec.lag_ms >= 0.0 && rec.t_actual_ms >= rec.t_sched_ms);
    }
    // Growth and shrink bookkeeping.
    assert!(run.steps[1].grown > 0 && run.steps[1].latency_us > 0 && run.steps[1].shrunk == 0);
    assert_eq!(run.steps[2].grown + run.steps[2].shrunk, 0);
    assert!(run.steps[3].shrunk > 0 && run.steps[3].grown == 0);
    // The tool call (01:47:12.00-12.05 UTC, 0.5 s into the trace) lies between samples 2 and 3.
    let tools: Vec<Option<&str>> = run.steps.iter().map(|s| s.tool.as_deref()).collect();
    assert_eq!(tools[3], Some("Bash"));
    assert_eq!(tools.iter().filter(|t| t.is_some()).count(), 1);

    // 1.6 s of trace at 20x: 80 ms if on time.
    let completion = run.completion.unwrap().as_secs_f64();
    assert!((0.08..2.0).contains(&completion), "{completion}");
    let hwm = run.vm_hwm_bytes.unwrap();
    assert!(hwm >= 120_000_000 + baseline, "VmHWM {hwm}");

    let ctx = prepared.report_context(&engine, None);
    let report = Report::new(ctx, prepared.schedule_s(), prepared.schedule.steps.len(), run);
    let json: serde_json::Value = serde_json::from_str(&serde_json::to_string_pretty(&report).unwrap()).unwrap();
    assert_eq!(json["trace"], "synthetic");
    assert_eq!(json["speed"], 20.0);
    assert_eq!(json["baseline_bytes"], baseline);
    assert_eq!(json["steps"].as_array().unwrap().len(), mb.len());
    assert_eq!(json["summary"]["steps"], mb.len());
    assert_eq!(json["summary"]["outcome"]["kind"], "finished");
    // Growth steps: 0 (from the baseline), 1, 4, 6, 7.
    assert_eq!(json["summary"]["latency"]["count"], 5);
    assert_eq!(json["steps"][3]["in_tool_call"], true);
    let peak_held = json["summary"]["peak_held_bytes"].as_u64().unwrap();
    assert!(peak_held >= 120_000_000 + baseline && peak_held - (120_000_000 + baseline) < page);
}
