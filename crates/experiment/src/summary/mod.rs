//! From per-arm JSON results to the summary (medians with 95% intervals over runs, paired
//! ratios against the solo and none arms of the same run) and the markdown report.
mod report;
mod verdicts;

pub(crate) use crate::series::figures::{est, ratio, ratio_median};
pub use report::render_markdown;
pub use verdicts::{verdicts, Verdict};

use crate::avoidability::{ParkDeadline, Proof};
use crate::kills::{task_kills, userspace_kills, KillBounds};
use crate::runner::{ArmResult, SwapFigures, TaskResult};
use crate::scenario::{Tier, Workload};
use crate::stats::{estimate, fisher_exact, Estimate, KILLED};
use anyhow::Result;
use memqos_replay::Outcome;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

const MIB: f64 = (1u64 << 20) as f64;

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
    /// Tasks killed for memory (by the kernel's OOM killer or a userspace one), summed over runs.
    #[serde(default)]
    pub task_kills: u64,
    /// Of those, the tasks a userspace killer (oomd, systemd-oomd) SIGKILLed.
    #[serde(default)]
    pub userspace_kills: u64,
    /// stress-ng scenarios (the RFC cover letter's demo): each side's bogo-ops/s, and per-run
    /// ratios against its own solo run and against the none arm of the same run.
    #[serde(default)]
    pub high_ops_per_s: Option<Estimate>,
    #[serde(default)]
    pub low_ops_per_s: Option<Estimate>,
    #[serde(default)]
    pub high_ops_vs_solo: Option<Estimate>,
    #[serde(default)]
    pub low_ops_vs_solo: Option<Estimate>,
    #[serde(default)]
    pub high_ops_vs_none: Option<Estimate>,
    #[serde(default)]
    pub low_ops_vs_none: Option<Estimate>,
    /// The clairvoyant bound (the fewest kills any pausing policy could achieve on these
    /// traces, see avoidability.rs), summed over runs; `None` where it was not computed.
    #[serde(default)]
    pub kill_bound: Option<u64>,
    /// Whether the bound is exact (a schedule with that many kills exists), not only a lower
    /// bound from the relaxed search.
    #[serde(default)]
    pub kill_bound_exact: Option<bool>,
    /// Kills above the bound, summed over runs (each run: max(0, kills - bound)).
    #[serde(default)]
    pub avoidable_kills: Option<u64>,
    #[serde(default)]
    pub runs_with_avoidable_kill: Option<usize>,
    /// The latest moment parking every low task where it stands still avoids every kill
    /// (avoidability.rs, `ParkDeadline`); a property of the traces and limit, not of the arm.
    #[serde(default)]
    pub park_deadline: Option<ParkDeadline>,
    /// Swap, per run: the protected task's cgroup's memory.swap.peak and pages swapped out
    /// (disk + zswap), and the same summed over the low tasks, MiB. `None` without figures.
    #[serde(default)]
    pub high_swap_peak_mb: Option<Estimate>,
    #[serde(default)]
    pub low_swap_peak_mb: Option<Estimate>,
    #[serde(default)]
    pub high_swapped_out_mb: Option<Estimate>,
    #[serde(default)]
    pub low_swapped_out_mb: Option<Estimate>,
    /// Runs in which any task was killed for memory (kernel or userspace killer), and runs in
    /// which the protected task was: the unit the exact tests compare (kills within one run
    /// are not independent).
    #[serde(default)]
    pub runs_with_kill: usize,
    #[serde(default)]
    pub runs_high_killed: usize,
    /// Two-sided Fisher exact test of `runs_with_kill` (and of `runs_high_killed`) of this arm
    /// against the memqos arm of the same runs; `None` for memqos itself and solo arms.
    #[serde(default)]
    pub kill_runs_p_vs_memqos: Option<f64>,
    #[serde(default)]
    pub high_killed_p_vs_memqos: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GroupSummary {
    pub scenario: String,
    pub variant: String,
    pub kernel: String,
    pub parent_max_mb: u64,
    pub speed: f64,
    #[serde(default)]
    pub workload: Workload,
    pub traces: Vec<String>,
    pub arms: Vec<ArmSummary>,
    /// What the tasks hold at once at most when every one runs unpaused from t = 0 (their
    /// traces + baseline, MiB), against `parent_max_mb`: the scenario's margin.
    #[serde(default)]
    pub concurrent_peak_mb: Option<u64>,
    /// Some arm killed in some of its runs and not in others: the kill outcome flips with
    /// run-to-run noise, and one series' count is not the arm's.
    #[serde(default)]
    pub outcome_flips: bool,
    /// The build the runs recorded (`provenance`), where they all recorded the same one;
    /// "mixed: ..." where they differ; for runs from before it was recorded, the report step
    /// fills in what `builds.toml` beside the runs says, else `None`.
    #[serde(default)]
    pub build: Option<String>,
    /// Each arm's intervals as its runs recorded them ([`crate::scenario::Scenario::timing`]),
    /// by arm; "mixed: ..." where runs differ. Empty for runs from before they were recorded.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub timing: BTreeMap<String, String>,
}

/// Reads every `*.json` under `dir` that is an arm result.
pub fn load_results(dir: &Path) -> Result<Vec<ArmResult>> {
    crate::series::load_results(dir, "an arm result")
}

fn task(r: &ArmResult, tier: Tier) -> impl Iterator<Item = &TaskResult> {
    r.tasks.iter().filter(move |t| t.tier == tier)
}

fn high(r: &ArmResult) -> Option<&TaskResult> {
    task(r, Tier::High).next()
}

fn finished(t: &TaskResult) -> bool {
    matches!(t.outcome, Outcome::Finished)
}

/// Mean wall time of the low tasks of a run; [`KILLED`] if any of them was killed (the run
/// counts, as the worst); `None` without low tasks.
fn low_mean_wall(r: &ArmResult) -> Option<f64> {
    let lows: Vec<&TaskResult> = task(r, Tier::Low).collect();
    if lows.is_empty() {
        return None;
    }
    Some(if lows.iter().all(|t| finished(t)) {
        lows.iter().map(|t| t.wall_s).sum::<f64>() / lows.len() as f64
    } else {
        KILLED
    })
}

/// A task's figure, or [`KILLED`] if the task did not finish: every run counts.
fn or_killed(t: &TaskResult, f: &dyn Fn(&TaskResult) -> Option<f64>) -> Option<f64> {
    if finished(t) {
        f(t)
    } else {
        Some(KILLED)
    }
}

/// `x / base` where the base run finished: a killed task over a finished base stays killed;
/// a killed base gives no ratio (nothing to compare against), which the estimate's `n` shows.
fn ratio_of(x: f64, base: f64) -> Option<f64> {
    (base.is_finite() && base > 0.0).then(|| if x == KILLED { KILLED } else { x / base })
}

/// [`summarize_with`] without kill bounds.
pub fn summarize(results: &[ArmResult]) -> Vec<GroupSummary> {
    summarize_with(results, &KillBounds::default())
}

/// Every group's arms over their runs; `bounds` supplies each run's kill bound.
pub fn summarize_with(results: &[ArmResult], bounds: &KillBounds) -> Vec<GroupSummary> {
    let mut groups: BTreeMap<(String, String, String), Vec<&ArmResult>> = BTreeMap::new();
    for r in results {
        // A learning run is first sight: not pooled with the runs that had its history.
        let variant = if r.learning_run { format!("{} (learning run)", r.variant) } else { r.variant.clone() };
        groups.entry((r.scenario.clone(), variant, r.kernel.clone())).or_default().push(r);
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
            let fin_count = highs.iter().filter(|(_, h)| finished(h)).count();
            // Every run of the protected task, a killed one as KILLED (not dropped).
            let pick = |f: &dyn Fn(&TaskResult) -> Option<f64>| -> Option<Estimate> {
                estimate(&highs.iter().filter_map(|(_, h)| or_killed(h, f)).collect::<Vec<_>>())
            };
            let ratio_to =
                |base: &BTreeMap<usize, &ArmResult>, f: &dyn Fn(&TaskResult) -> Option<f64>| -> Option<Estimate> {
                    let v: Vec<f64> = highs
                        .iter()
                        .filter_map(|(k, h)| {
                            let b = base.get(k).and_then(|r| high(r))?;
                            ratio_of(or_killed(h, f)?, or_killed(b, f)?)
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
                runs.iter().filter_map(|(k, r)| ratio_of(low_mean_wall(r)?, low_mean_wall(none.get(k)?)?)).collect();
            // Lows over the protected task: runs where the protected task finished (its time
            // is the denominator); killed lows count as KILLED.
            let prio: Vec<f64> = runs
                .values()
                .filter_map(|r| ratio_of(low_mean_wall(r)?, high(r).filter(|h| finished(h))?.wall_s))
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
            let run_bounds: Option<Vec<(u64, u64, bool)>> = runs
                .values()
                .map(|r| bounds.for_run(r).map(|b| (task_kills(r), b.kills as u64, b.proof == Proof::Parking)))
                .collect();
            // Throughput (stress-ng): a side's ops/s in this arm over the same side's in `base`.
            let ops = |r: &ArmResult, tier: Tier| -> Option<f64> {
                let v: Vec<f64> = task(r, tier).filter_map(|t| t.bogo_ops_per_s).collect();
                (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
            };
            let solo_low = by_arm.get("solo:low1").cloned().unwrap_or_default();
            let ops_ratio = |base: &BTreeMap<usize, &ArmResult>, tier: Tier, base_tier: Tier| -> Option<Estimate> {
                let v: Vec<f64> =
                    // A base with no bogo op completed has no ratio (not infinity).
                    runs.iter()
                        .filter_map(|(k, r)| Some(ops(r, tier)? / ops(base.get(k)?, base_tier).filter(|b| *b > 0.0)?))
                        .collect();
                estimate(&v)
            };
            let is_none = *arm == "none";
            // Per run: one figure for the protected task, the sum over the lows.
            let swap = |tier: Tier, f: &dyn Fn(&SwapFigures) -> Option<u64>| -> Option<Estimate> {
                let v: Vec<f64> = runs
                    .values()
                    .filter_map(|r| {
                        let xs: Vec<u64> = task(r, tier).filter_map(|t| t.swap.as_ref().and_then(f)).collect();
                        (!xs.is_empty()).then(|| xs.iter().sum::<u64>() as f64 / MIB)
                    })
                    .collect();
                estimate(&v)
            };
            arms.push(ArmSummary {
                high_swap_peak_mb: swap(Tier::High, &|x| x.peak_bytes),
                low_swap_peak_mb: swap(Tier::Low, &|x| x.peak_bytes),
                high_swapped_out_mb: swap(Tier::High, &|x| x.swapped_out_bytes()),
                low_swapped_out_mb: swap(Tier::Low, &|x| x.swapped_out_bytes()),
                high_ops_per_s: estimate(&runs.values().filter_map(|r| ops(r, Tier::High)).collect::<Vec<_>>()),
                low_ops_per_s: estimate(&runs.values().filter_map(|r| ops(r, Tier::Low)).collect::<Vec<_>>()),
                high_ops_vs_solo: if is_policy { ops_ratio(&solo_high, Tier::High, Tier::High) } else { None },
                low_ops_vs_solo: if is_policy { ops_ratio(&solo_low, Tier::Low, Tier::Low) } else { None },
                high_ops_vs_none: if is_policy && !is_none { ops_ratio(&none, Tier::High, Tier::High) } else { None },
                low_ops_vs_none: if is_policy && !is_none { ops_ratio(&none, Tier::Low, Tier::Low) } else { None },
                arm: arm.to_string(),
                runs: runs.len(),
                runs_with_oom_kill: runs
                    .values()
                    .filter(|r| {
                        r.parent_oom_kills > 0 || r.tasks.iter().any(|t| matches!(t.outcome, Outcome::OomKilled { .. }))
                    })
                    .count(),
                oom_kills: runs.values().map(|r| r.parent_oom_kills).sum(),
                high_finished: fin_count,
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
                task_kills: runs.values().map(|r| task_kills(r)).sum(),
                userspace_kills: runs.values().map(|r| userspace_kills(r)).sum(),
                kill_bound: run_bounds.as_ref().map(|v| v.iter().map(|b| b.1).sum()),
                kill_bound_exact: run_bounds.as_ref().map(|v| v.iter().all(|b| b.2)),
                avoidable_kills: run_bounds.as_ref().map(|v| v.iter().map(|b| b.0.saturating_sub(b.1)).sum()),
                runs_with_avoidable_kill: run_bounds.as_ref().map(|v| v.iter().filter(|b| b.0 > b.1).count()),
                park_deadline: runs.values().next().and_then(|r| bounds.park_deadline(r)),
                runs_with_kill: runs.values().filter(|r| task_kills(r) > 0).count(),
                runs_high_killed: highs.iter().filter(|(_, h)| !finished(h)).count(),
                kill_runs_p_vs_memqos: None,
                high_killed_p_vs_memqos: None,
            });
        }
        // Report order: solo arms, then none, static-max, static-high, memqos.
        let rank = |a: &str| match a {
            "none" => 10,
            "static-max" => 11,
            "static-high" => 12,
            "memqos" => 13,
            "cpu-weight" => 14,
            "kube-memoryqos" => 15,
            "oomd" => 16,
            "systemd-oomd" => 17,
            "static-adj" => 18,
            "static-reserve" => 19,
            _ => 0,
        };
        arms.sort_by_key(|a| (rank(&a.arm), a.arm.clone()));
        // Kill counts against memqos's, runs as the unit (two-sided Fisher exact test).
        if let Some(m) = arms.iter().find(|a| a.arm == "memqos").cloned() {
            for a in arms.iter_mut().filter(|a| a.arm != "memqos" && !a.arm.starts_with("solo:")) {
                let n = a.runs;
                let test = |x: usize, y: usize| fisher_exact(x as u64, (n - x) as u64, y as u64, (m.runs - y) as u64);
                a.kill_runs_p_vs_memqos = Some(test(a.runs_with_kill, m.runs_with_kill));
                a.high_killed_p_vs_memqos = Some(test(a.runs_high_killed, m.runs_high_killed));
            }
        }
        let outcome_flips = arms
            .iter()
            .filter(|a| !a.arm.starts_with("solo:"))
            .any(|a| a.runs_with_kill > 0 && a.runs_with_kill < a.runs);
        let mut builds: Vec<String> = rs.iter().filter_map(|r| r.provenance.as_ref().and_then(|p| p.build())).collect();
        builds.sort();
        builds.dedup();
        let build = match builds.len() {
            0 => None,
            1 => Some(builds.remove(0)),
            _ => Some(format!("mixed: {}", builds.join(", "))),
        };
        let mut timing: BTreeMap<String, String> = BTreeMap::new();
        for r in rs.iter() {
            if let Some(t) = &r.timing {
                match timing.get_mut(&r.arm) {
                    Some(seen) if seen != t && !seen.starts_with("mixed: ") => *seen = format!("mixed: {seen} / {t}"),
                    Some(_) => {}
                    None => {
                        timing.insert(r.arm.clone(), t.clone());
                    }
                }
            }
        }
        let first = rs[0];
        let concurrent_peak_mb =
            rs.iter().find(|r| !r.arm.starts_with("solo:")).and_then(|r| bounds.concurrent_peak(r)).map(|b| b >> 20);
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
            workload: first.workload,
            traces,
            arms,
            concurrent_peak_mb,
            outcome_flips,
            build,
            timing,
        });
    }
    out
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
            bogo_ops: None,
            bogo_ops_per_s: None,
            swap: None,
            anon_thp_peak_bytes: None,
        }
    }

    fn arm(arm: &str, run: usize, tasks: Vec<TaskResult>, kills: u64) -> ArmResult {
        ArmResult {
            scenario: "oom".into(),
            variant: "v".into(),
            kernel: "7.2".into(),
            run,
            arm: arm.into(),
            workload: Default::default(),
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
            swap_mb: None,
            zswap: false,
            provenance: None,
            timing: None,
            learning_run: false,
        }
    }

    #[test]
    fn a_learning_run_is_summarized_apart_from_the_runs_with_history() {
        let run = |n: usize, learning: bool| {
            let tasks = || vec![task("high", Tier::High, 2.0, 10.0, Outcome::Finished)];
            [arm("solo:high", n, tasks(), 0), arm("none", n, tasks(), 0), arm("memqos", n, tasks(), 0)].map(|mut r| {
                r.learning_run = learning;
                r
            })
        };
        let results: Vec<ArmResult> = [run(1, true), run(2, false), run(3, false)].into_iter().flatten().collect();
        let groups = summarize(&results);
        let runs = |variant: &str| {
            let g = groups.iter().find(|g| g.variant == variant).unwrap_or_else(|| panic!("no {variant}"));
            g.arms.iter().find(|a| a.arm == "memqos").unwrap().runs
        };
        assert_eq!((runs("v (learning run)"), runs("v")), (1, 2));
        assert_eq!(groups.len(), 2);
    }

    #[test]
    fn kills_are_counted_against_the_bound_of_the_runs_traces() {
        // The seed's oom traces under 1100 MiB: the bound is 0 (parking suffices), so a
        // memqos run that lost a low task has one avoidable kill.
        let traces = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../traces/agent-haiku");
        let with_trace = |mut t: TaskResult, trace: &str| {
            t.trace = trace.into();
            t
        };
        let (h, l) = ("dask__dask-11628", "sigmavirus24__github3.py-673");
        let rs = vec![
            arm("solo:high", 1, vec![with_trace(task("high", Tier::High, 2.0, 10.0, Outcome::Finished), h)], 0),
            arm(
                "memqos",
                1,
                vec![
                    with_trace(task("high", Tier::High, 2.0, 10.0, Outcome::Finished), h),
                    with_trace(task("low1", Tier::Low, 3.0, 5.0, Outcome::OomKilled { signal: 9 }), l),
                    with_trace(task("low2", Tier::Low, 3.0, 5.0, Outcome::Finished), l),
                ],
                1,
            ),
        ];
        let bounds = KillBounds::compute(&rs, &traces).unwrap();
        let g = summarize_with(&rs, &bounds);
        let m = g[0].arms.iter().find(|a| a.arm == "memqos").unwrap();
        assert_eq!((m.task_kills, m.kill_bound, m.kill_bound_exact), (1, Some(0), Some(true)));
        assert_eq!((m.avoidable_kills, m.runs_with_avoidable_kill), (Some(1), Some(1)));
        assert_eq!(m.park_deadline, Some(ParkDeadline::Never));
        let v = verdicts(&g);
        assert!(!v.iter().find(|x| x.target.contains("no avoidable kill")).unwrap().met);
        assert!(render_markdown(&g, &v, &[]).contains("| oom/v | 7.2 | memqos | 1 | 1 | 0 (exact) | 1 (1) | never |"));
        // Without traces there is no bound, and the report says so rather than guessing.
        let m = summarize(&rs)[0].arms.iter().find(|a| a.arm == "memqos").cloned().unwrap();
        assert_eq!((m.kill_bound, m.avoidable_kills), (None, None));
        // The same traces and limit with a swap disk: the swapless model does not apply, even
        // with a swapless run of them beside it in the same results.
        let mut swapped = rs.clone();
        for r in &mut swapped {
            r.scenario = "oom-swap".into();
            r.swap_mb = Some(1024);
        }
        let all: Vec<ArmResult> = rs.iter().cloned().chain(swapped).collect();
        let bounds = KillBounds::compute(&all, &traces).unwrap();
        let swap_memqos = all.iter().find(|r| r.scenario == "oom-swap" && r.arm == "memqos").unwrap();
        assert!(bounds.for_run(swap_memqos).is_none());
        assert!(bounds.for_run(&rs[1]).is_some());
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
        // A killed low is not dropped: every none run's lows count, as killed.
        let lows = n.low_wall_s.unwrap();
        assert_eq!((lows.n, lows.killed, lows.median), (5, 5, KILLED));
        assert_eq!(n.low_wall_vs_none, None, "none is not compared with itself");
        assert_eq!((n.runs_with_kill, m.runs_with_kill), (5, 0));
        assert!((n.kill_runs_p_vs_memqos.unwrap() - 2.0 / 252.0).abs() < 1e-12, "{n:?}");
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

    #[test]
    fn a_killed_protected_task_counts_as_killed_not_dropped() {
        // none loses the protected task in runs 1-3 of 5; its survivors ran at 1.05x solo.
        let mut rs = Vec::new();
        for run in 1..=5 {
            rs.push(arm("solo:high", run, vec![task("high", Tier::High, 10.0, 10.0, Outcome::Finished)], 0));
            let outcome = if run <= 3 { Outcome::OomKilled { signal: 9 } } else { Outcome::Finished };
            rs.push(arm("none", run, vec![task("high", Tier::High, 10.5, 12.0, outcome)], (run <= 3) as u64));
            rs.push(arm("memqos", run, vec![task("high", Tier::High, 10.4, 12.0, Outcome::Finished)], 0));
        }
        let g = summarize(&rs);
        let n = g[0].arms.iter().find(|a| a.arm == "none").unwrap();
        let w = n.high_wall_vs_solo.unwrap();
        assert_eq!((w.n, w.killed, w.median), (5, 3, KILLED), "dropping the killed runs would say 1.05x");
        assert_eq!(ratio(&n.high_wall_vs_solo), "killed [1.05–killed] (3 of 5 killed)");
        assert_eq!((n.high_finished, n.runs_high_killed), (2, 3));
        // Against none, only the runs where none's protected task finished have a ratio.
        let m = g[0].arms.iter().find(|a| a.arm == "memqos").unwrap();
        assert!((m.high_wall_vs_none.unwrap().median - 10.4 / 10.5).abs() < 1e-9);
        assert_eq!(m.high_wall_vs_none.unwrap().n, 2, "no ratio against a killed none run");
        assert!((n.high_killed_p_vs_memqos.unwrap() - 1.0 / 6.0).abs() < 1e-12);
        assert!(g[0].outcome_flips, "none killed in 3 of 5 runs");
        assert!(verdicts(&g).iter().find(|v| v.target.starts_with("memqos: high completion")).unwrap().met);
    }

    #[test]
    fn oomd_kills_count_as_kills_and_memqos_is_checked_against_oomd() {
        let mut rs = Vec::new();
        for run in 1..=3 {
            rs.push(arm("solo:high", run, vec![task("high", Tier::High, 2.0, 10.0, Outcome::Finished)], 0));
            rs.push(arm(
                "oomd",
                run,
                vec![
                    task("high", Tier::High, 2.2, 12.0, Outcome::Finished),
                    task("low1", Tier::Low, 1.0, 5.0, Outcome::Killed { signal: 9 }),
                ],
                0,
            ));
            rs.push(arm(
                "memqos",
                run,
                vec![
                    task("high", Tier::High, 2.1, 11.0, Outcome::Finished),
                    task("low1", Tier::Low, 3.0, 5.0, Outcome::Finished),
                ],
                0,
            ));
        }
        let g = summarize(&rs);
        let o = g[0].arms.iter().find(|a| a.arm == "oomd").unwrap();
        assert_eq!((o.task_kills, o.userspace_kills, o.runs_with_oom_kill), (3, 3, 0));
        let v = verdicts(&g);
        let met = |t: &str| v.iter().find(|x| x.target.starts_with(t)).unwrap_or_else(|| panic!("{t}")).met;
        assert!(met("vs oomd: high completion"));
        assert!(met("vs oomd: high P95"));
        assert!(met("vs oomd: every low task finishes"));
        let md = render_markdown(&g, &v, &[]);
        assert!(md.contains("| oomd | 3 | 3 (3 by oomd) |"));
        assert!(!md.contains("intervals"), "runs that recorded no intervals get no line");
        // An arm's recorded intervals get a line each in its group; runs that differ say so.
        for r in rs.iter_mut() {
            r.timing = Some(format!("{}: every {} s", r.arm, if r.arm == "oomd" && r.run == 3 { 5 } else { 1 }));
        }
        let g = summarize(&rs);
        assert_eq!(g[0].timing["memqos"], "memqos: every 1 s");
        assert_eq!(g[0].timing["oomd"], "mixed: oomd: every 1 s / oomd: every 5 s");
        let md = render_markdown(&g, &v, &[]);
        assert!(md.contains("intervals, as its runs recorded them:\n\n- memqos: every 1 s\n- mixed: oomd"), "{md}");
        // memqos slower than oomd's whole interval misses the completion target.
        for r in rs.iter_mut().filter(|r| r.arm == "memqos") {
            r.tasks[0].wall_s = 3.0;
        }
        assert!(
            !verdicts(&summarize(&rs)).iter().find(|x| x.target.starts_with("vs oomd: high completion")).unwrap().met
        );
    }

    #[test]
    fn stress_ng_throughput_is_paired_with_each_sides_solo_and_none() {
        let with_ops = |mut t: TaskResult, ops: f64| {
            t.bogo_ops_per_s = Some(ops);
            t
        };
        let mut rs = Vec::new();
        for run in 1..=3 {
            let k = run as f64; // drift shared by a run
            rs.push(arm(
                "solo:high",
                run,
                vec![with_ops(task("high", Tier::High, 30.0, 1.0, Outcome::Finished), 100.0 * k)],
                0,
            ));
            rs.push(arm(
                "solo:low1",
                run,
                vec![with_ops(task("low1", Tier::Low, 30.0, 1.0, Outcome::Finished), 80.0 * k)],
                0,
            ));
            let pair = |h: f64, l: f64| {
                vec![
                    with_ops(task("high", Tier::High, 30.0, 1.0, Outcome::Finished), h * k),
                    with_ops(task("low1", Tier::Low, 30.0, 1.0, Outcome::Finished), l * k),
                ]
            };
            rs.push(arm("none", run, pair(50.0, 40.0), 0));
            rs.push(arm("memqos", run, pair(97.0, 8.0), 0));
        }
        for r in &mut rs {
            r.workload = Workload::StressNg;
        }
        let g = summarize(&rs);
        let m = g[0].arms.iter().find(|a| a.arm == "memqos").unwrap();
        let close = |e: Option<Estimate>, x: f64| (e.unwrap().median - x).abs() < 1e-9;
        assert!(close(m.high_ops_vs_solo, 0.97));
        assert!(close(m.low_ops_vs_solo, 0.1));
        assert!(close(m.high_ops_vs_none, 97.0 / 50.0));
        assert!(close(m.low_ops_vs_none, 0.2));
        let v = verdicts(&g);
        assert!(v.iter().find(|x| x.target.starts_with("RFC demo")).unwrap().met);
        let md = render_markdown(&g, &v, &[]);
        assert!(md.contains("| memqos | 194 [97–291] | 0.97x [0.97–0.97] | 1.94x [1.94–1.94] |"), "{md}");
        // Trace targets (wall time and step latency vs solo) mean nothing for a fixed-length
        // stress-ng run and are not checked there.
        assert!(!v.iter().any(|x| x.target.contains("P95 latency")), "{v:?}");
    }

    #[test]
    fn swap_is_summed_over_the_lows_per_run_and_shown_where_any_arm_swapped() {
        let with_swap = |name: &str, tier: Tier, peak_mib: u64, out_pages: u64| {
            let mut t = task(name, tier, 10.0, 5.0, Outcome::Finished);
            t.swap = Some(SwapFigures { peak_bytes: Some(peak_mib << 20), pswpout: Some(out_pages), zswpout: None });
            t
        };
        let results = vec![
            arm("none", 1, vec![with_swap("high", Tier::High, 10, 0), with_swap("low1", Tier::Low, 30, 256)], 0),
            arm(
                "memqos",
                1,
                vec![
                    with_swap("high", Tier::High, 0, 0),
                    with_swap("low1", Tier::Low, 50, 512),
                    with_swap("low2", Tier::Low, 70, 512),
                ],
                0,
            ),
        ];
        let g = &summarize(&results)[0];
        let m = g.arms.iter().find(|a| a.arm == "memqos").unwrap();
        assert_eq!(m.low_swap_peak_mb.unwrap().median, 120.0);
        assert_eq!(m.low_swapped_out_mb.unwrap().median, 4.0, "1024 pages of 4 KiB");
        assert_eq!(m.high_swap_peak_mb.unwrap().median, 0.0);
        let md = render_markdown(&summarize(&results), &[], &[]);
        assert!(md.contains("| memqos | 0 | 0 | 120 | 4 |"), "{md}");
        // No swap anywhere: no swap table.
        let dry = vec![arm("none", 1, vec![with_swap("high", Tier::High, 0, 0)], 0)];
        assert!(!render_markdown(&summarize(&dry), &[], &[]).contains("Swap (MiB"));
    }
}
