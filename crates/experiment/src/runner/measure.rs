//! An arm's measurement: the tasks started at once and sampled until they end, their
//! results, and the daemon's writes read back from its event log.

use super::result::stat_value;
use super::{trace_path, DecisionMark, RunnerOptions, SwapFigures, TaskResult, Timeline, SAMPLE_EVERY, WORK_DIR};
use crate::oomd::OomdProcess;
use crate::scenario::{Tier, Workload};
use crate::series::{epoch_now, remove_tree_within};
use anyhow::{bail, Context, Result};
use memqos_cgroupfs::{Cgroup, Limit, MemoryEvents};
use memqos_replay::report::Report;
use memqos_replay::Outcome;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Start time (Unix), the tasks' results, the timeline, when the last task ended (s since the
/// start) and the kills oomd logged while they ran.
type TaskRun = (f64, Vec<TaskResult>, Timeline, f64, Vec<DecisionMark>);

pub(super) fn run_tasks(
    opts: &RunnerOptions,
    tasks: &[(String, Tier, String)],
    cgroups: &[Cgroup],
    oom_score_adj: &[Option<i32>],
    parent: &Cgroup,
    mut oomd: Option<&mut OomdProcess>,
) -> Result<TaskRun> {
    let s = &opts.scenario;
    std::fs::create_dir_all(WORK_DIR)?;
    let started_epoch = epoch_now();
    let t0 = Instant::now();
    let mut children: Vec<(Child, Option<f64>)> = Vec::new();
    let mut statuses: Vec<Option<std::process::ExitStatus>> = vec![None; tasks.len()];
    for (((name, tier, trace), cg), adj) in tasks.iter().zip(cgroups).zip(oom_score_adj) {
        let json = Path::new(WORK_DIR).join(format!("{name}.json"));
        let _ = std::fs::remove_file(&json);
        let _ = std::fs::remove_file(json.with_extension("yaml"));
        // oom_score_adj is per process and inherited: set it in a shell that then becomes the
        // replay, so the replay and its worker carry it from their first allocation.
        let mut command = match adj {
            Some(adj) => {
                let mut c = Command::new("/bin/sh");
                c.args(["-c", &format!("echo {adj} > /proc/self/oom_score_adj && exec \"$0\" \"$@\"")]).arg(&opts.exe);
                c
            }
            None => Command::new(&opts.exe),
        };
        let child = match s.workload {
            Workload::Replay => command
                .arg("replay")
                .arg(trace_path(&opts.traces_dir, trace))
                .args(["--speed", &s.speed.to_string(), "--baseline-mb", &s.baseline_mb.to_string()])
                .args(["--compression-ratio", &s.compression_ratio.to_string(), "-q", "--cgroup"])
                .arg(cg.path())
                .arg("--json")
                .arg(&json)
                .stdout(Stdio::null())
                .spawn()
                .with_context(|| format!("starting memqos-lab replay for {name}")),
            // The shell joins the task's cgroup, then becomes stress-ng, so every stressor
            // process it forks is charged there from its first page.
            // stress-ng refuses to start in a read-only directory (the guest's root is the
            // host's, read-only): its temp path is the work directory.
            Workload::StressNg => Command::new("/bin/sh")
                .args(["-c", "echo $$ > \"$0/cgroup.procs\" && exec stress-ng \"$@\""])
                .arg(cg.path())
                .current_dir(WORK_DIR)
                .args(["--temp-path", WORK_DIR])
                .args(s.stress_args_for(*tier))
                .arg("--yaml")
                .arg(json.with_extension("yaml"))
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(json.with_extension("log"))?)
                .spawn()
                .with_context(|| format!("starting stress-ng for {name}")),
        };
        match child {
            Ok(c) => children.push((c, None)),
            Err(e) => {
                for (c, _) in &mut children {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                return Err(e);
            }
        }
    }
    let mut timeline = Timeline::default();
    let mut final_events: Vec<Option<MemoryEvents>> = vec![None; children.len()];
    let mut final_swap: Vec<Option<SwapFigures>> = vec![None; children.len()];
    let mut oomd_kills = Vec::new();
    let deadline = Duration::from_secs(900);
    // stress-ng only: a memory.stat read per task every 5 s (not every sample: under TCG a
    // read costs the guest more than the figure is worth at 50 ms).
    let mut anon_thp_peak: Vec<Option<u64>> = vec![None; children.len()];
    let mut next_thp_sample = Instant::now();
    while children.iter().any(|(_, end)| end.is_none()) {
        if s.workload == Workload::StressNg && Instant::now() >= next_thp_sample {
            next_thp_sample += Duration::from_secs(5);
            // Only running tasks: an ended task's cgroup is gone.
            for ((cg, _), peak) in
                cgroups.iter().zip(&children).zip(&mut anon_thp_peak).filter(|((_, (_, end)), _)| end.is_none())
            {
                if let Some(thp) = cg.memory_stat().ok().and_then(|st| stat_value(&st, "anon_thp")) {
                    *peak = (*peak).max(Some(thp));
                }
            }
        }
        timeline.t_s.push(t0.elapsed().as_secs_f64());
        timeline.parent_current.push(parent.memory_current().unwrap_or(0));
        if let Some(o) = oomd.as_deref_mut() {
            oomd_kills.extend(o.poll(t0.elapsed().as_secs_f64()));
        }
        for (((name, _, _), cg), (_, end)) in tasks.iter().zip(cgroups).zip(&children) {
            if end.is_some() {
                continue;
            }
            timeline.current.entry(name.clone()).or_default().push(cg.memory_current().unwrap_or(0));
            let high = match cg.limit("memory.high") {
                Ok(Limit::Bytes(b)) => Some(b),
                _ => None,
            };
            timeline.high.entry(name.clone()).or_default().push(high);
        }
        for (i, (c, end)) in children.iter_mut().enumerate() {
            if end.is_none() {
                let Some(status) = c.try_wait()? else { continue };
                statuses[i] = Some(status);
                *end = Some(t0.elapsed().as_secs_f64());
                // A finished agent's sandbox goes away, and with it its claim to protection.
                final_events[i] = Some(cgroups[i].memory_events()?);
                final_swap[i] = Some(SwapFigures::read(&cgroups[i]));
                // Gone before the arm's daemon stops: a `learn_peak` daemon does not record
                // a lifetime that still looks populated at its stop. In steps of 5 ms, since
                // the other tasks are being timed meanwhile.
                let _ = remove_tree_within(&cgroups[i], Duration::from_secs(2), Duration::from_millis(5));
            }
        }
        if t0.elapsed() > deadline {
            for (c, _) in &mut children {
                let _ = c.kill();
                let _ = c.wait();
            }
            bail!("tasks still running after {} s", deadline.as_secs());
        }
        std::thread::sleep(SAMPLE_EVERY);
    }
    let mut results = Vec::new();
    for ((((name, tier, trace), (_, end)), events), status) in
        tasks.iter().zip(&children).zip(final_events).zip(statuses)
    {
        let json = Path::new(WORK_DIR).join(format!("{name}.json"));
        let events = events.expect("read when the task ended");
        let wall_s = end.expect("every child ended");
        if s.workload == Workload::StressNg {
            let status = status.expect("read when the task ended");
            results.push(stress_result(name, *tier, trace, status, wall_s, events, &json.with_extension("yaml")));
            continue;
        }
        let report: Option<Report> = std::fs::read(&json).ok().and_then(|b| serde_json::from_slice(&b).ok());
        let r = match report {
            Some(rep) => TaskResult {
                name: name.clone(),
                tier: *tier,
                trace: trace.clone(),
                outcome: rep.summary.outcome.clone(),
                wall_s,
                completion_s: rep.summary.completion_s,
                schedule_s: Some(rep.summary.schedule_s),
                latencies_ms: rep.steps.iter().filter(|st| st.grown > 0).map(|st| st.latency_us as f64 / 1e3).collect(),
                latency: rep.summary.latency,
                peak_rss_bytes: rep.summary.peak_rss_bytes,
                events,
                bogo_ops: None,
                bogo_ops_per_s: None,
                swap: None,
                anon_thp_peak_bytes: None,
            },
            None => TaskResult {
                name: name.clone(),
                tier: *tier,
                trace: trace.clone(),
                outcome: Outcome::Failed { exit_code: None, message: format!("no report at {}", json.display()) },
                wall_s,
                completion_s: None,
                schedule_s: None,
                latencies_ms: Vec::new(),
                latency: None,
                peak_rss_bytes: None,
                events,
                bogo_ops: None,
                bogo_ops_per_s: None,
                swap: None,
                anon_thp_peak_bytes: None,
            },
        };
        results.push(r);
    }
    for ((r, swap), thp) in results.iter_mut().zip(final_swap).zip(anon_thp_peak) {
        r.swap = swap;
        r.anon_thp_peak_bytes = thp;
    }
    Ok((started_epoch, results, timeline, t0.elapsed().as_secs_f64(), oomd_kills))
}

/// A stress-ng task's result: its exit status (stress-ng restarts a stressor the OOM killer
/// took, so OOM kills show in memory.events, not in the status) and its YAML metrics.
fn stress_result(
    name: &str,
    tier: Tier,
    label: &str,
    status: std::process::ExitStatus,
    wall_s: f64,
    events: MemoryEvents,
    yaml: &Path,
) -> TaskResult {
    use std::os::unix::process::ExitStatusExt;
    let text = std::fs::read_to_string(yaml).unwrap_or_default();
    let (ops, ops_per_s) = parse_stress_metrics(&text);
    let outcome = match (status.code(), status.signal()) {
        (Some(0), _) if ops_per_s.is_some() => Outcome::Finished,
        (_, Some(sig)) if events.oom_kill > 0 => Outcome::OomKilled { signal: sig },
        (_, Some(sig)) => Outcome::Killed { signal: sig },
        (code, _) => Outcome::Failed {
            exit_code: code,
            message: format!(
                "stress-ng exited with {status}: {}",
                std::fs::read_to_string(yaml.with_extension("log"))
                    .unwrap_or_default()
                    .lines()
                    .rev()
                    .take(3)
                    .collect::<Vec<_>>()
                    .join(" | ")
            ),
        },
    };
    TaskResult {
        name: name.to_string(),
        tier,
        trace: label.to_string(),
        outcome,
        wall_s,
        completion_s: None,
        schedule_s: None,
        latencies_ms: Vec::new(),
        latency: None,
        peak_rss_bytes: None,
        events,
        bogo_ops: ops,
        bogo_ops_per_s: ops_per_s,
        swap: None,
        anon_thp_peak_bytes: None,
    }
}

/// Bogo ops and bogo ops/s (real time) summed over the stressors of stress-ng's `--yaml`.
pub fn parse_stress_metrics(yaml: &str) -> (Option<f64>, Option<f64>) {
    let field = |key: &str| -> Option<f64> {
        let v: Vec<f64> = yaml.lines().filter_map(|l| l.trim().strip_prefix(key)?.trim().parse().ok()).collect();
        (!v.is_empty()).then(|| v.iter().sum())
    };
    (field("bogo-ops:"), field("bogo-ops-per-second-real-time:"))
}
/// The daemon's `write` events from events.jsonl; `t_s` is its Unix-time `ts`.
pub fn parse_write_events(log: &str) -> Vec<DecisionMark> {
    let lines = memqos_schema::events::parse(log);
    memqos_schema::events::writes(&lines)
        .map(|(ts, w)| DecisionMark {
            t_s: ts,
            cgroup: w.cgroup.clone(),
            file: w.file.clone(),
            value: w.value.clone(),
            reason: w.why.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn write_events_are_read_from_the_daemon_log() {
        // As the daemon writes them (`memqos_schema::events`).
        let log = r#"{"event":"started","pid":1,"cgroup_root":"/sys/fs/cgroup/memqos-exp","config":"/run/memqos-exp/memqos.toml","dry_run":false,"ts":10.0}
{"event":"write","cgroup":"low1","cgroup_id":11,"file":"memory.high","value":"314572800","previous":"max","outcome":"ok","reason":{"kind":"headroom_guard","parent_usage_bytes":900,"limit_bytes":1000,"headroom_bytes":100,"guard_bytes":200},"why":"guard","dry_run":false,"mono_ns":1,"mono_done_ns":2,"ts":12.5}
not json
{"event":"write","cgroup":"high","cgroup_id":12,"file":"memory.low","value":"123","previous":"0","outcome":"ok","reason":{"kind":"working_set","peak_bytes":123,"window_ms":60000},"why":"working set peak 123 over 60 s","dry_run":false,"mono_ns":3,"mono_done_ns":4,"ts":13.0}"#;
        let w = parse_write_events(log);
        assert_eq!(w.len(), 2);
        assert_eq!((w[0].cgroup.as_str(), w[0].value.as_str(), w[0].t_s), ("low1", "314572800", 12.5));
        assert_eq!(w[1].value, "123");
        assert_eq!(w[1].reason, "working set peak 123 over 60 s");
    }

    #[test]
    fn stress_ng_metrics_are_read_from_its_yaml() {
        let yaml = "metrics:\n    - stressor: vm\n      bogo-ops: 81412\n      bogo-ops-per-second-usr-sys-time: 45515.7\n      bogo-ops-per-second-real-time: 40521.867834\n";
        assert_eq!(parse_stress_metrics(yaml), (Some(81412.0), Some(40521.867834)));
        assert_eq!(parse_stress_metrics("---\n"), (None, None));
    }
}
