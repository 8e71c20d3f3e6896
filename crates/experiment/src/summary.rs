//! From per-arm JSON results to the summary (medians with 95% intervals over runs, paired
//! ratios against the solo and none arms of the same run) and the markdown report.

use crate::runner::{ArmResult, TaskResult};
use crate::scenario::Tier;
use crate::stats::{estimate, Estimate};
use anyhow::{Context, Result};
use memqos_replay::Outcome;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// One arm (policy or solo) of one scenario variant on one kernel, over all its runs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ArmSummary {
    pub arm: String,
    pub runs: usize,
    /// Runs in which any task was OOM-killed, and the kills counted by the parent.
    pub runs_with_oom_kill: usize,
    pub oom_kills: u64,
    pub high_finished: usize,
    /// The protected task: wall time and growth-step latency percentiles.
    pub high_wall_s: Option<Estimate>,
    pub high_p50_ms: Option<Estimate>,
    pub high_p95_ms: Option<Estimate>,
    pub high_p99_ms: Option<Estimate>,
    pub high_max_ms: Option<Estimate>,
    /// Per-run ratios against the solo run and the none arm of the same run.
    pub high_wall_vs_solo: Option<Estimate>,
    pub high_p50_vs_solo: Option<Estimate>,
    pub high_p95_vs_solo: Option<Estimate>,
    pub high_p95_vs_none: Option<Estimate>,
    pub high_wall_vs_none: Option<Estimate>,
    pub high_p50_vs_none: Option<Estimate>,
    /// Low-tier tasks: how many finished out of how many started, their mean wall time per run.
    pub low_finished: usize,
    pub low_started: usize,
    pub low_wall_s: Option<Estimate>,
    pub low_wall_vs_none: Option<Estimate>,
    /// The seed's "priority ratio": mean low wall time / high wall time.
    pub priority_ratio: Option<Estimate>,
    pub daemon_writes: Option<Estimate>,
    /// memqos arm: the daemon's CPU time over the arm's duration (its longest task), in % of
    /// one CPU. Runs recorded before this was measured have none.
    #[serde(default)]
    pub daemon_cpu_pct: Option<Estimate>,
    /// Highest parent memory.current seen in the run (50 ms samples), MiB: how close the arm
    /// came to the parent's limit.
    pub parent_peak_mb: Option<Estimate>,
    /// memqos arm: runs after which every knob was back to its original value.
    pub knobs_restored_runs: Option<usize>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GroupSummary {
    pub scenario: String,
    pub variant: String,
    pub kernel: String,
    pub parent_max_mb: u64,
    pub speed: f64,
    pub traces: Vec<String>,
    pub arms: Vec<ArmSummary>,
}

/// Reads every `*.json` under `dir` that is an arm result.
pub fn load_results(dir: &Path) -> Result<Vec<ArmResult>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "json") {
                let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
                let r: ArmResult =
                    serde_json::from_slice(&bytes).with_context(|| format!("{}: not an arm result", path.display()))?;
                out.push(r);
            }
        }
    }
    Ok(out)
}

fn task<'a>(r: &'a ArmResult, tier: Tier) -> impl Iterator<Item = &'a TaskResult> {
    r.tasks.iter().filter(move |t| t.tier == tier)
}

fn high(r: &ArmResult) -> Option<&TaskResult> {
    task(r, Tier::High).next()
}

fn finished(t: &TaskResult) -> bool {
    matches!(t.outcome, Outcome::Finished)
}

/// Mean wall time of the low tasks of a run, if they all finished.
fn low_mean_wall(r: &ArmResult) -> Option<f64> {
    let lows: Vec<&TaskResult> = task(r, Tier::Low).collect();
    (!lows.is_empty() && lows.iter().all(|t| finished(t)))
        .then(|| lows.iter().map(|t| t.wall_s).sum::<f64>() / lows.len() as f64)
}

pub fn summarize(results: &[ArmResult]) -> Vec<GroupSummary> {
    let mut groups: BTreeMap<(String, String, String), Vec<&ArmResult>> = BTreeMap::new();
    for r in results {
        groups.entry((r.scenario.clone(), r.variant.clone(), r.kernel.clone())).or_default().push(r);
    }
    let mut out = Vec::new();
    for ((scenario, variant, kernel), rs) in groups {
        // by arm, then by run
        let mut by_arm: BTreeMap<&str, BTreeMap<usize, &ArmResult>> = BTreeMap::new();
        for r in &rs {
            by_arm.entry(r.arm.as_str()).or_default().insert(r.run, r);
        }
        let solo_high = by_arm.get("solo:high").cloned().unwrap_or_default();
        let none = by_arm.get("none").cloned().unwrap_or_default();
        let mut arms = Vec::new();
        for (arm, runs) in &by_arm {
            let highs: Vec<(usize, &TaskResult)> = runs.iter().filter_map(|(k, r)| high(r).map(|h| (*k, h))).collect();
            let fin: Vec<(usize, &TaskResult)> = highs.iter().filter(|(_, h)| finished(h)).cloned().collect();
            let pick = |f: &dyn Fn(&TaskResult) -> Option<f64>| -> Option<Estimate> {
                estimate(&fin.iter().filter_map(|(_, h)| f(h)).collect::<Vec<_>>())
            };
            let ratio_to =
                |base: &BTreeMap<usize, &ArmResult>, f: &dyn Fn(&TaskResult) -> Option<f64>| -> Option<Estimate> {
                    let v: Vec<f64> = fin
                        .iter()
                        .filter_map(|(k, h)| {
                            let b = base.get(k).and_then(|r| high(r)).filter(|b| finished(b))?;
                            Some(f(h)? / f(b)?)
                        })
                        .collect();
                    estimate(&v)
                };
            let wall = |t: &TaskResult| Some(t.wall_s);
            let p50 = |t: &TaskResult| t.latency.map(|l| l.p50_ms);
            let p95 = |t: &TaskResult| t.latency.map(|l| l.p95_ms);
            let is_policy = !arm.starts_with("solo:");
            let low_started: usize = runs.values().map(|r| task(r, Tier::Low).count()).sum();
            let low_finished: usize = runs.values().map(|r| task(r, Tier::Low).filter(|t| finished(t)).count()).sum();
            let low_walls: Vec<f64> = runs.values().filter_map(|r| low_mean_wall(r)).collect();
            let low_vs_none: Vec<f64> =
                runs.iter().filter_map(|(k, r)| Some(low_mean_wall(r)? / low_mean_wall(none.get(k)?)?)).collect();
            let prio: Vec<f64> = runs
                .values()
                .filter_map(|r| Some(low_mean_wall(r)? / high(r).filter(|h| finished(h))?.wall_s))
                .collect();
            let writes: Vec<f64> = runs.values().map(|r| r.decisions.len() as f64).collect();
            let daemon_cpu: Vec<f64> = runs
                .values()
                .filter_map(|r| {
                    let span = r.tasks.iter().map(|t| t.wall_s).fold(0.0, f64::max);
                    r.daemon_cpu_s.filter(|_| span > 0.0).map(|c| c / span * 100.0)
                })
                .collect();
            let parent_peaks: Vec<f64> = runs
                .values()
                .filter_map(|r| r.timeline.parent_current.iter().max().map(|&b| (b >> 20) as f64))
                .collect();
            arms.push(ArmSummary {
                arm: arm.to_string(),
                runs: runs.len(),
                runs_with_oom_kill: runs
                    .values()
                    .filter(|r| {
                        r.parent_oom_kills > 0 || r.tasks.iter().any(|t| matches!(t.outcome, Outcome::OomKilled { .. }))
                    })
                    .count(),
                oom_kills: runs.values().map(|r| r.parent_oom_kills).sum(),
                high_finished: fin.len(),
                high_wall_s: pick(&wall),
                high_p50_ms: pick(&p50),
                high_p95_ms: pick(&p95),
                high_p99_ms: pick(&|t| t.latency.map(|l| l.p99_ms)),
                high_max_ms: pick(&|t| t.latency.map(|l| l.max_ms)),
                high_wall_vs_solo: if is_policy { ratio_to(&solo_high, &wall) } else { None },
                high_p50_vs_solo: if is_policy { ratio_to(&solo_high, &p50) } else { None },
                high_p95_vs_solo: if is_policy { ratio_to(&solo_high, &p95) } else { None },
                high_p95_vs_none: if is_policy && *arm != "none" { ratio_to(&none, &p95) } else { None },
                high_wall_vs_none: if is_policy && *arm != "none" { ratio_to(&none, &wall) } else { None },
                high_p50_vs_none: if is_policy && *arm != "none" { ratio_to(&none, &p50) } else { None },
                low_finished,
                low_started,
                low_wall_s: estimate(&low_walls),
                low_wall_vs_none: if *arm != "none" { estimate(&low_vs_none) } else { None },
                priority_ratio: estimate(&prio),
                daemon_writes: if *arm == "memqos" { estimate(&writes) } else { None },
                daemon_cpu_pct: estimate(&daemon_cpu),
                parent_peak_mb: estimate(&parent_peaks),
                knobs_restored_runs: (*arm == "memqos")
                    .then(|| runs.values().filter(|r| r.knobs_restored == Some(true)).count()),
            });
        }
        // Report order: solo arms, then none, static-max, static-high, memqos.
        let rank = |a: &str| match a {
            "none" => 10,
            "static-max" => 11,
            "static-high" => 12,
            "memqos" => 13,
            "cpu-weight" => 14,
            _ => 0,
        };
        arms.sort_by_key(|a| (rank(&a.arm), a.arm.clone()));
        let first = rs[0];
        let mut traces: Vec<String> = rs
            .iter()
            .find(|r| !r.arm.starts_with("solo:"))
            .unwrap_or(&first)
            .tasks
            .iter()
            .map(|t| format!("{}={}", t.name, t.trace))
            .collect();
        traces.dedup();
        out.push(GroupSummary {
            scenario,
            variant,
            kernel,
            parent_max_mb: first.parent_max_bytes >> 20,
            speed: first.speed,
            traces,
            arms,
        });
    }
    out
}

fn est(e: &Option<Estimate>, digits: usize) -> String {
    match e {
        Some(e) if e.n > 1 => format!("{:.*} [{:.*}–{:.*}]", digits, e.median, digits, e.ci_low, digits, e.ci_high),
        Some(e) => format!("{:.*}", digits, e.median),
        None => "–".into(),
    }
}

fn ratio(e: &Option<Estimate>) -> String {
    match e {
        Some(e) if e.n > 1 => format!("{:.2}x [{:.2}–{:.2}]", e.median, e.ci_low, e.ci_high),
        Some(e) => format!("{:.2}x", e.median),
        None => "–".into(),
    }
}

/// A target's verdict for the report and the closing note.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Verdict {
    pub scenario: String,
    pub variant: String,
    pub kernel: String,
    pub target: String,
    pub measured: String,
    pub met: bool,
}

/// The targets, checked against the memqos arm of each group.
pub fn verdicts(groups: &[GroupSummary]) -> Vec<Verdict> {
    let mut v = Vec::new();
    for g in groups {
        let arm = |name: &str| g.arms.iter().find(|a| a.arm == name);
        let Some(m) = arm("memqos") else { continue };
        let mut push = |target: &str, measured: String, met: bool| {
            v.push(Verdict {
                scenario: g.scenario.clone(),
                variant: g.variant.clone(),
                kernel: g.kernel.clone(),
                target: target.into(),
                measured,
                met,
            })
        };
        let med = |e: &Option<Estimate>| e.map(|e| e.median);
        // `oom-cpu` has the targets of `oom`, and so on.
        let base = g.scenario.strip_suffix("-cpu").unwrap_or(&g.scenario);
        if base != "overhead" {
            push(
                "memqos: no OOM kill in any run",
                format!("{} of {} runs with an OOM kill ({} kills)", m.runs_with_oom_kill, m.runs, m.oom_kills),
                m.runs_with_oom_kill == 0,
            );
            push(
                "memqos: the protected task finishes in every run",
                format!("{} of {} runs", m.high_finished, m.runs),
                m.high_finished == m.runs,
            );
            push(
                "memqos: every low-priority task finishes",
                format!("{} of {} finished", m.low_finished, m.low_started),
                m.low_finished == m.low_started,
            );
            let w = med(&m.high_wall_vs_solo);
            push("memqos: high completion ≤ 1.05x solo", ratio(&m.high_wall_vs_solo), w.is_some_and(|w| w <= 1.05));
            let p = med(&m.high_p95_vs_solo);
            push("memqos: high P95 latency ≤ 1.2x solo", ratio(&m.high_p95_vs_solo), p.is_some_and(|p| p <= 1.2));
        }
        if base == "oom" {
            if let Some(n) = arm("none") {
                push(
                    "none shows OOM kills (the seed's baseline)",
                    format!("{} of {} runs with an OOM kill", n.runs_with_oom_kill, n.runs),
                    n.runs_with_oom_kill > 0,
                );
            }
        }
        if base == "contention" {
            let p = med(&m.high_p95_vs_none);
            push("memqos: high P95 ≥ 50% below none", ratio(&m.high_p95_vs_none), p.is_some_and(|p| p <= 0.5));
        }
        if base == "overhead" {
            let p = med(&m.high_p50_vs_none);
            push(
                "overhead: P50 latency within 1% of daemon-off",
                ratio(&m.high_p50_vs_none),
                p.is_some_and(|p| (p - 1.0).abs() <= 0.01),
            );
            let w = med(&m.high_wall_vs_none);
            push(
                "overhead: completion within 1% of daemon-off",
                ratio(&m.high_wall_vs_none),
                w.is_some_and(|w| (w - 1.0).abs() <= 0.01),
            );
        }
    }
    v
}

pub fn render_markdown(groups: &[GroupSummary], verdicts: &[Verdict], plots: &[String]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# memqos isolation experiments: results\n");
    let _ = writeln!(
        s,
        "Generated by `bash scripts/experiments.sh` (see docs/experiments.md for the method). Every figure is the \
         median over runs with its 95% bootstrap interval in brackets; ratios are computed per run against the \
         solo or none arm of the same run, then summarized. Times are wall times of `memqos replay` (spawn to exit, \
         baseline allocation included); latencies are per growth step of the protected (high) task.\n"
    );
    let _ = writeln!(s, "## Targets\n");
    let _ = writeln!(s, "| scenario | kernel | target | measured | met |\n|---|---|---|---|---|");
    for v in verdicts {
        let _ = writeln!(
            s,
            "| {}/{} | {} | {} | {} | {} |",
            v.scenario,
            v.variant,
            v.kernel,
            v.target,
            v.measured,
            if v.met { "yes" } else { "**no**" }
        );
    }
    for g in groups {
        let _ = writeln!(s, "\n## {} / {} on {}\n", g.scenario, g.variant, g.kernel);
        let _ = writeln!(
            s,
            "Parent memory.max {} MiB, speed {}x, tasks: {}.\n",
            g.parent_max_mb,
            g.speed,
            g.traces.join(", ")
        );
        let _ = writeln!(
            s,
            "| arm | runs | runs w/ OOM kill | high time s | high/solo | high P50 ms | high P95 ms | P95/solo | P95/none | lows finished | low time s | low/none | low/high | parent peak MiB | daemon writes | daemon CPU % |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        for a in &g.arms {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                a.arm,
                a.runs,
                a.runs_with_oom_kill,
                est(&a.high_wall_s, 2),
                ratio(&a.high_wall_vs_solo),
                est(&a.high_p50_ms, 2),
                est(&a.high_p95_ms, 1),
                ratio(&a.high_p95_vs_solo),
                ratio(&a.high_p95_vs_none),
                if a.low_started > 0 { format!("{}/{}", a.low_finished, a.low_started) } else { "–".into() },
                est(&a.low_wall_s, 2),
                ratio(&a.low_wall_vs_none),
                ratio(&a.priority_ratio),
                est(&a.parent_peak_mb, 0),
                est(&a.daemon_writes, 0),
                est(&a.daemon_cpu_pct, 1),
            );
        }
        let prefix = format!("{}-{}-{}", g.scenario, g.variant, g.kernel);
        for p in plots.iter().filter(|p| p.starts_with(&prefix)) {
            let _ = writeln!(s, "\n![{p}]({p})");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::Timeline;
    use memqos_cgroupfs::MemoryEvents;
    use memqos_replay::report::LatencyStats;

    fn task(name: &str, tier: Tier, wall: f64, p95: f64, outcome: Outcome) -> TaskResult {
        TaskResult {
            name: name.into(),
            tier,
            trace: "t".into(),
            outcome,
            wall_s: wall,
            completion_s: Some(wall),
            schedule_s: Some(1.0),
            latencies_ms: vec![1.0, p95],
            latency: Some(LatencyStats { count: 2, p50_ms: 1.0, p95_ms: p95, p99_ms: p95, max_ms: p95, mean_ms: 1.0 }),
            peak_rss_bytes: None,
            events: MemoryEvents::default(),
        }
    }

    fn arm(arm: &str, run: usize, tasks: Vec<TaskResult>, kills: u64) -> ArmResult {
        ArmResult {
            scenario: "oom".into(),
            variant: "v".into(),
            kernel: "7.2".into(),
            run,
            arm: arm.into(),
            order: 0,
            speed: 50.0,
            baseline_mb: 100,
            parent_max_bytes: 1100 << 20,
            started_epoch: 0.0,
            tasks,
            parent_oom_kills: kills,
            timeline: Timeline::default(),
            decisions: vec![],
            knobs_restored: (arm == "memqos").then_some(true),
            daemon_cpu_s: None,
        }
    }

    #[test]
    fn ratios_are_paired_by_run_and_targets_are_checked() {
        let mut rs = Vec::new();
        for run in 1..=5 {
            let k = run as f64 * 0.1; // drift shared by all arms of a run
            rs.push(arm("solo:high", run, vec![task("high", Tier::High, 2.0 + k, 10.0, Outcome::Finished)], 0));
            rs.push(arm(
                "none",
                run,
                vec![
                    task("high", Tier::High, 3.0 + k, 40.0, Outcome::Finished),
                    task("low1", Tier::Low, 2.0, 5.0, Outcome::OomKilled { signal: 9 }),
                ],
                1,
            ));
            rs.push(arm(
                "memqos",
                run,
                vec![
                    task("high", Tier::High, 2.0 + k, 11.0, Outcome::Finished),
                    task("low1", Tier::Low, 6.0, 5.0, Outcome::Finished),
                ],
                0,
            ));
        }
        let g = summarize(&rs);
        assert_eq!(g.len(), 1);
        let m = g[0].arms.iter().find(|a| a.arm == "memqos").unwrap();
        assert_eq!(m.high_wall_vs_solo.unwrap().median, 1.0);
        assert!((m.high_p95_vs_solo.unwrap().median - 1.1).abs() < 1e-9);
        assert!((m.high_p95_vs_none.unwrap().median - 11.0 / 40.0).abs() < 1e-9);
        assert_eq!((m.low_finished, m.low_started), (5, 5));
        assert_eq!(m.knobs_restored_runs, Some(5));
        let n = g[0].arms.iter().find(|a| a.arm == "none").unwrap();
        assert_eq!(n.runs_with_oom_kill, 5);
        assert_eq!(n.low_wall_s, None, "lows that were killed have no completion time");
        let v = verdicts(&g);
        let met = |t: &str| v.iter().find(|x| x.target.starts_with(t)).unwrap().met;
        assert!(met("memqos: no OOM kill"));
        assert!(met("memqos: high completion"));
        assert!(met("memqos: high P95 latency ≤ 1.2x"));
        assert!(met("none shows OOM kills"));
        let md = render_markdown(&g, &v, &[]);
        assert!(md.contains("| memqos | 5 | 0 |"), "{md}");
        // A policy that lets an OOM kill happen fails the target.
        rs.push(arm("memqos", 6, vec![task("high", Tier::High, 2.0, 11.0, Outcome::Finished)], 1));
        let v = verdicts(&summarize(&rs));
        assert!(!v.iter().find(|x| x.target.starts_with("memqos: no OOM kill")).unwrap().met);
    }
}
