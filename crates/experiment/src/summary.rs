//! From per-arm JSON results to the summary (medians with 95% intervals over runs, paired
//! ratios against the solo and none arms of the same run) and the markdown report.

use crate::avoidability::{ParkDeadline, Proof};
use crate::kills::{task_kills, userspace_kills, KillBounds};
use crate::runner::{ArmResult, SwapFigures, TaskResult};
use crate::scenario::{Tier, Workload};
use crate::stats::{estimate, fisher_exact, Estimate, KILLED};
use anyhow::{Context, Result};
use memqos_replay::Outcome;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
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

/// A number, or "killed" for a killed run's +infinity.
fn num(x: f64, digits: usize, unit: &str) -> String {
    if x == KILLED {
        "killed".into()
    } else {
        format!("{x:.digits$}{unit}")
    }
}

/// How many of the runs were killed, where any were.
fn killed_note(e: &Estimate) -> String {
    if e.killed > 0 {
        format!(" ({} of {} killed)", e.killed, e.n)
    } else {
        String::new()
    }
}

pub(crate) fn est(e: &Option<Estimate>, digits: usize) -> String {
    match e {
        Some(e) if e.n > 1 => format!(
            "{} [{}–{}]{}",
            num(e.median, digits, ""),
            num(e.ci_low, digits, ""),
            num(e.ci_high, digits, ""),
            killed_note(e)
        ),
        Some(e) => format!("{}{}", num(e.median, digits, ""), killed_note(e)),
        None => "–".into(),
    }
}

pub(crate) fn ratio(e: &Option<Estimate>) -> String {
    match e {
        Some(e) if e.n > 1 => {
            format!("{} [{}–{}]{}", num(e.median, 2, "x"), num(e.ci_low, 2, ""), num(e.ci_high, 2, ""), killed_note(e))
        }
        Some(e) => format!("{}{}", num(e.median, 2, "x"), killed_note(e)),
        None => "–".into(),
    }
}

/// The median alone, as a ratio ("1.05x", "killed").
pub(crate) fn ratio_median(e: &Option<Estimate>) -> String {
    e.map(|e| num(e.median, 2, "x")).unwrap_or_else(|| "–".into())
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
        // `oom-cpu` has the targets of `oom`, `sweep-tight-declared` and `-learned` those of
        // `sweep-tight`.
        let base =
            ["-cpu", "-declared", "-learned"].iter().find_map(|x| g.scenario.strip_suffix(x)).unwrap_or(&g.scenario);
        if g.workload == Workload::StressNg {
            push(
                "memqos: no OOM kill in any run",
                format!("{} of {} runs with an OOM kill ({} kills)", m.runs_with_oom_kill, m.runs, m.oom_kills),
                m.runs_with_oom_kill == 0,
            );
            let h = med(&m.high_ops_vs_solo);
            push(
                "RFC demo: memqos high side ≥ 0.95x its solo throughput (bogo-ops/s)",
                format!(
                    "high {} of solo; low {} of solo, {} of none",
                    ratio(&m.high_ops_vs_solo),
                    ratio(&m.low_ops_vs_solo),
                    ratio(&m.low_ops_vs_none)
                ),
                h.is_some_and(|h| h >= 0.95),
            );
            continue;
        }
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
            if let (Some(bound), Some(avoidable)) = (m.kill_bound, m.avoidable_kills) {
                push(
                    "memqos: no avoidable kill (kills above the clairvoyant bound)",
                    format!(
                        "{} kills, bound {}, {} avoidable in {} of {} runs",
                        m.task_kills,
                        bound,
                        avoidable,
                        m.runs_with_avoidable_kill.unwrap_or(0),
                        m.runs
                    ),
                    avoidable == 0,
                );
            }
        }
        // "Same or better": memqos's median within or below the peer's interval.
        let within = |mine: &Option<Estimate>, theirs: &Option<Estimate>| match (mine, theirs) {
            (Some(m), Some(t)) => m.median <= t.ci_high,
            _ => false,
        };
        // Issue 16: against Kubernetes MemoryQoS's knobs in the same runs.
        if let Some(k) = arm("kube-memoryqos") {
            if k.task_kills > 0 {
                push(
                    "vs kube-memoryqos: no OOM kill where it has one",
                    format!("memqos {} kills in {} runs; kube-memoryqos {} kills", m.task_kills, m.runs, k.task_kills),
                    m.task_kills == 0,
                );
            }
            push(
                "vs kube-memoryqos: high P95 vs solo no worse (memqos median ≤ its interval)",
                format!("memqos {} vs kube-memoryqos {}", ratio(&m.high_p95_vs_solo), ratio(&k.high_p95_vs_solo)),
                within(&m.high_p95_vs_solo, &k.high_p95_vs_solo),
            );
        }
        // Issue 16: against the userspace OOM killers a user would run instead, in the same runs.
        for peer in ["oomd", "systemd-oomd"] {
            let Some(o) = arm(peer) else { continue };
            push(
                &format!("vs {peer}: high completion vs solo same or better (memqos median ≤ {peer}'s interval)"),
                format!("memqos {} vs {peer} {}", ratio(&m.high_wall_vs_solo), ratio(&o.high_wall_vs_solo)),
                within(&m.high_wall_vs_solo, &o.high_wall_vs_solo),
            );
            push(
                &format!("vs {peer}: high P95 vs solo same or better (memqos median ≤ {peer}'s interval)"),
                format!("memqos {} vs {peer} {}", ratio(&m.high_p95_vs_solo), ratio(&o.high_p95_vs_solo)),
                within(&m.high_p95_vs_solo, &o.high_p95_vs_solo),
            );
            if o.task_kills > 0 {
                push(
                    &format!("vs {peer}: every low task finishes where {peer} kills"),
                    format!(
                        "memqos: {} of {} lows finished; {peer}: {} kills ({} by {peer}), {} of {} lows finished",
                        m.low_finished, m.low_started, o.task_kills, o.userspace_kills, o.low_finished, o.low_started
                    ),
                    m.low_finished == m.low_started,
                );
            }
        }
        // Issue 18, work conservation: where none killed nothing, memqos should not have cost
        // the lows more than 5% (there was nothing to prevent).
        if let Some(n) = arm("none") {
            if n.task_kills == 0 && g.workload == Workload::Replay && base != "overhead" {
                if let Some(l) = m.low_wall_vs_none {
                    push(
                        "work conservation: lows within 1.05x of none where none has no kill",
                        ratio(&m.low_wall_vs_none),
                        l.median <= 1.05,
                    );
                }
            }
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
        if base == "sweep-tight" {
            let w = med(&m.high_wall_vs_solo);
            push(
                "tight sweep: protected finishes in every run at ≤ 1.10x solo",
                format!("{} of {} runs, {}", m.high_finished, m.runs, ratio(&m.high_wall_vs_solo)),
                m.high_finished == m.runs && w.is_some_and(|w| w <= 1.10),
            );
            // The bound's kills are the lows that no policy could save (or the protected task).
            if let Some(bound) = m.kill_bound {
                let allowed = (m.low_started as u64).saturating_sub(bound);
                push(
                    "tight sweep: ≥ 90% of the low tasks the bound allows finish",
                    format!("{} of {} allowed", m.low_finished, allowed),
                    allowed == 0 || m.low_finished as f64 >= 0.9 * allowed as f64,
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
         solo or none arm of the same run, then summarized. Times are wall times of `memqos-lab replay` (spawn to exit, \
         baseline allocation included); latencies are per growth step of the protected (high) task. Every run \
         counts: a run whose task was killed enters that task's medians as \"killed\" (worse than any time), \
         so a median is \"killed\" when most runs were, and \"(k of n killed)\" says how many were; a ratio \
         against a none run whose own task was killed has nothing to compare with and is left out (n says how \
         many runs a figure has).\n"
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
    render_kills(&mut s, groups);
    render_margins(&mut s, groups);
    for g in groups {
        let _ = writeln!(s, "\n## {} / {} on {}\n", g.scenario, g.variant, g.kernel);
        let _ = writeln!(
            s,
            "Parent memory.max {} MiB ({}), speed {}x, tasks: {}. Build: {}.\n",
            g.parent_max_mb,
            match g.concurrent_peak_mb {
                Some(p) => format!("the tasks' unpaused concurrent peak {p} MiB"),
                None => "no concurrent peak computed".into(),
            },
            g.speed,
            g.traces.join(", "),
            g.build.as_deref().unwrap_or("not recorded"),
        );
        if !g.timing.is_empty() {
            let _ = writeln!(s, "Each arm's intervals, as its runs recorded them:\n");
            for t in g.timing.values() {
                let _ = writeln!(s, "- {t}");
            }
            let _ = writeln!(s);
        }
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
        if g.arms.iter().any(|a| a.high_ops_per_s.is_some() || a.low_ops_per_s.is_some()) {
            let _ = writeln!(
                s,
                "\nThroughput (stress-ng bogo-ops/s, real time), each side against its own solo run and the none arm \
                 of the same run:\n\n| arm | high ops/s | high/solo | high/none | low ops/s | low/solo | low/none | \
                 OOM kills |\n|---|---|---|---|---|---|---|---|"
            );
            for a in &g.arms {
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} | {} | {} | {} |",
                    a.arm,
                    est(&a.high_ops_per_s, 0),
                    ratio(&a.high_ops_vs_solo),
                    ratio(&a.high_ops_vs_none),
                    est(&a.low_ops_per_s, 0),
                    ratio(&a.low_ops_vs_solo),
                    ratio(&a.low_ops_vs_none),
                    a.oom_kills,
                );
            }
        }
        let swapped = |e: &Option<Estimate>| e.is_some_and(|e| e.max > 0.0);
        if g.arms.iter().any(|a| swapped(&a.high_swap_peak_mb) || swapped(&a.low_swap_peak_mb)) {
            let _ = writeln!(
                s,
                "\nSwap (MiB, medians over runs; lows summed): each cgroup's memory.swap.peak, and the pages it swapped \
                 out to disk and to zswap (memory.stat pswpout + zswpout; pswpout needs Linux 6.15+):\n\n\
                 | arm | high swap peak | high swapped out | lows swap peak | lows swapped out |\n|---|---|---|---|---|"
            );
            for a in &g.arms {
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} |",
                    a.arm,
                    est(&a.high_swap_peak_mb, 0),
                    est(&a.high_swapped_out_mb, 0),
                    est(&a.low_swap_peak_mb, 0),
                    est(&a.low_swapped_out_mb, 0),
                );
            }
        }
        let prefix = format!("{}-{}-{}", g.scenario, g.variant, g.kernel);
        for p in plots.iter().filter(|p| p.starts_with(&prefix)) {
            let _ = writeln!(s, "\n![{p}]({p})");
        }
    }
    s
}

/// Kills against the clairvoyant bound, and both halves of the priority trade-off (the
/// protected task's time vs solo, the seed's priority ratio), for every policy arm.
fn render_kills(s: &mut String, groups: &[GroupSummary]) {
    let _ = writeln!(s, "\n## Kills, the clairvoyant bound, and the priority trade-off\n");
    let _ = writeln!(
        s,
        "Kills: tasks killed for memory, summed over runs: by the kernel's OOM killer, or by the arm's userspace killer, oomd or systemd-oomd (in parentheses). Bound: the fewest kills any policy could achieve on the same \
         traces and limit if it could pause any low task at any instant but never take back memory a task holds \
         (docs/experiments.md, \"Kill avoidability\"), summed over runs; \"exact\" where a schedule with that many kills \
         exists, else a lower bound. Avoidable: kills above the bound (per run, summed). Park by: the latest moment, as a \
         share of the protected task's run, at which letting every task run unpaused and then parking every low task \
         where it stands still avoids every kill (\"never\": no parking needed). Priority ratio: the seed's \
         mean low-task completion / protected completion (runs where the protected task finished; a run with a killed \
         low counts as killed).\n"
    );
    let _ = writeln!(
        s,
        "| scenario | kernel | arm | runs | kills | bound | avoidable (runs) | park by | high/solo | priority ratio | lows finished |\n|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for g in groups {
        for a in g.arms.iter().filter(|a| !a.arm.starts_with("solo:")) {
            let bound = match (a.kill_bound, a.kill_bound_exact) {
                (Some(b), Some(true)) => format!("{b} (exact)"),
                (Some(b), _) => format!("≥ {b}"),
                (None, _) => "–".into(),
            };
            let avoidable = match (a.avoidable_kills, a.runs_with_avoidable_kill) {
                (Some(k), Some(r)) => format!("{k} ({r})"),
                _ => "–".into(),
            };
            let park = match a.park_deadline {
                Some(ParkDeadline::Never) => "never".to_string(),
                Some(ParkDeadline::At { share, .. }) => format!("{:.0}%", share * 100.0),
                None => "–".into(),
            };
            let _ = writeln!(
                s,
                "| {}/{} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                g.scenario,
                g.variant,
                g.kernel,
                a.arm,
                a.runs,
                if a.userspace_kills > 0 {
                    format!("{} ({} by {})", a.task_kills, a.userspace_kills, a.arm)
                } else {
                    a.task_kills.to_string()
                },
                bound,
                avoidable,
                park,
                ratio(&a.high_wall_vs_solo),
                ratio(&a.priority_ratio),
                if a.low_started > 0 { format!("{}/{}", a.low_finished, a.low_started) } else { "–".into() },
            );
        }
    }
}

/// Each group's margin (what its traces hold at once unpaused, against the parent's limit),
/// whether its kill outcome flips from run to run, and each arm's runs with a kill against
/// memqos's with the exact test's p-value.
fn render_margins(s: &mut String, groups: &[GroupSummary]) {
    let _ = writeln!(s, "\n## Margins and kill tests\n");
    let _ = writeln!(
        s,
        "Concurrent peak: the most the tasks' traces (+ baseline) hold at once when every task starts at t = 0 and \
         none is paused, against the parent's memory.max; margin = limit − peak (negative: the traces do not fit \
         unpaused). Runs with a kill: runs in which any task was killed for memory; protected killed: runs in which \
         the protected task was. p: two-sided Fisher exact test of those run counts against the memqos arm of \
         the same runs (runs are the independent unit; kills within a run are not). **flips**: some arm killed in \
         some of its runs and not in others, so one series' kill count is a draw, not the arm's rate.\n"
    );
    let _ = writeln!(
        s,
        "| scenario | kernel | limit MiB | concurrent peak MiB | margin MiB | outcome | arm | runs with a kill | p vs memqos | protected killed | p vs memqos |\n|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for g in groups.iter().filter(|g| g.workload == Workload::Replay) {
        let limit = if g.parent_max_mb >= (u64::MAX >> 20) { "max".to_string() } else { g.parent_max_mb.to_string() };
        let (peak, margin) = match g.concurrent_peak_mb {
            Some(p) if limit != "max" => (p.to_string(), (g.parent_max_mb as i64 - p as i64).to_string()),
            Some(p) => (p.to_string(), "–".into()),
            None => ("–".into(), "–".into()),
        };
        for a in g.arms.iter().filter(|a| !a.arm.starts_with("solo:")) {
            let p = |x: Option<f64>| x.map(|p| format!("{p:.3}")).unwrap_or_else(|| "–".into());
            let _ = writeln!(
                s,
                "| {}/{} | {} | {} | {} | {} | {} | {} | {} of {} | {} | {} of {} | {} |",
                g.scenario,
                g.variant,
                g.kernel,
                limit,
                peak,
                margin,
                if g.outcome_flips { "**flips**" } else { "stable" },
                a.arm,
                a.runs_with_kill,
                a.runs,
                p(a.kill_runs_p_vs_memqos),
                a.runs_high_killed,
                a.runs,
                p(a.high_killed_p_vs_memqos),
            );
        }
    }
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
        }
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
