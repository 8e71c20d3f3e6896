//! The in-guest side of an experiment: for each run, every arm (each trace alone, then each
//! policy with all tasks together) in a rotated order, so slow drift of the host (TCG shares
//! two cores with everything else) spreads over all arms instead of biasing one.
//!
//! An arm: fresh parent cgroup with the scenario's memory.max, one child per task, the
//! policy's knobs (or the daemon), every task started at once as `memqos-lab replay`, memory
//! sampled every 50 ms, then everything torn down. Each arm's result is written as JSON the
//! moment it ends, so an interrupted experiment keeps what it measured.
mod measure;
mod result;

use measure::run_tasks;

pub use measure::{parse_stress_metrics, parse_write_events};
pub use result::{ArmResult, DecisionMark, SwapFigures, TaskResult, Timeline};

use crate::kube;
use crate::oomd::OomdProcess;
use crate::scenario::{ParentMax, Policy, Scenario, Tier, Variant, Workload};
use crate::series::daemon::{knobs_at_defaults, ArmDaemon};
use crate::series::{epoch_now, kernel_release, remove_tree};
use anyhow::{bail, Context, Result};
use memqos_cgroupfs::{Cgroup, Limit};
use memqos_policy::size::MIB;
use memqos_policy::{EXPECTED_PEAK_XATTR, WORKLOAD_XATTR};
use memqos_replay::Outcome;
use memqos_schema::state::TIER_PEAKS_FILE;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const PARENT: &str = "/sys/fs/cgroup/memqos-exp";
pub(crate) const STATE_DIR: &str = "/run/memqos-exp/state";
/// The memqos arm's learned peaks (`memqos_learns_peak`): beside, not in, STATE_DIR, which is
/// wiped at each daemon start, so what run 1 learns serves the later runs of the guest boot.
pub const HISTORY_FILE: &str = "/run/memqos-exp/history.json";
/// The tier's recent peaks (`memqos_learns_tier_peak`), kept between memqos arms: copied out of
/// STATE_DIR when an arm's daemon stops and into the next one's before it starts
/// (`ArmDaemon::start_carrying`).
pub const TIER_PEAKS_KEPT: &str = "/run/memqos-exp/tier-peaks.json";
const WORK_DIR: &str = "/run/memqos-exp/work";
const OOMD_DIR: &str = "/run/memqos-exp/oomd";
const SAMPLE_EVERY: Duration = Duration::from_millis(50);

pub struct RunnerOptions {
    pub scenario: Scenario,
    pub traces_dir: PathBuf,
    pub runs: usize,
    /// Number of the first run (1 unless a series is run in chunks): runs are numbered
    /// `first_run..first_run + runs`, and the arm order rotates by that number.
    pub first_run: usize,
    pub out_dir: PathBuf,
    /// The memqos-lab binary (for `memqos-lab replay` and `memqos-lab daemon`).
    pub exe: PathBuf,
    /// What the host recorded about the series (`$MEMQOS_PROVENANCE`), stamped into every result.
    pub provenance: Option<crate::provenance::Provenance>,
}

/// One arm to run.
#[derive(Clone, Debug, PartialEq)]
enum Arm {
    Solo(String),
    Policy(Policy),
}

impl Arm {
    fn label(&self) -> String {
        match self {
            Arm::Solo(task) => format!("solo:{task}"),
            Arm::Policy(p) => p.name().to_string(),
        }
    }
}

fn arms(s: &Scenario, v: &Variant) -> Vec<Arm> {
    let mut arms = Vec::new();
    if s.solo && s.workload == Workload::StressNg {
        // The cover letter's sides run the same command: each still gets its own baseline.
        arms.extend(v.tasks().into_iter().map(|(name, _, _)| Arm::Solo(name)));
    } else if s.solo {
        // Each distinct trace once: two lows replaying the same trace share a solo baseline.
        let mut traces_seen = Vec::new();
        for (name, _, trace) in v.tasks() {
            if !traces_seen.contains(&trace) {
                traces_seen.push(trace);
                arms.push(Arm::Solo(name));
            }
        }
    }
    arms.extend(s.policies.iter().map(|p| Arm::Policy(*p)));
    arms
}

pub fn trace_path(traces_dir: &Path, trace: &str) -> PathBuf {
    traces_dir.join(trace).join("resources.json")
}

/// What the variant's tasks need at their peaks (trace max + baseline), summed.
pub fn peak_demand(s: &Scenario, v: &Variant, traces_dir: &Path) -> Result<u64> {
    let mut total = 0;
    for (_, _, trace) in v.tasks() {
        let path = trace_path(traces_dir, &trace);
        let t =
            memqos_replay::trace::load_trace(&path).with_context(|| format!("variant {}: trace {trace}", v.name))?;
        total += t.max_used_bytes() + s.baseline_mb * MIB;
    }
    Ok(total)
}

/// The parent's memory.max in bytes; `u64::MAX` for none (`"max"`).
pub fn parent_max_bytes(s: &Scenario, v: &Variant, traces_dir: &Path) -> Result<u64> {
    Ok(match s.parent_max {
        ParentMax::Bytes(b) => b,
        ParentMax::Unlimited => u64::MAX,
        ParentMax::ShareOfDemand(share) => {
            let bytes = (peak_demand(s, v, traces_dir)? as f64 * share) as u64;
            bytes / MIB * MIB
        }
    })
}

/// Runs every run of every variant; returns how many arm results were written.
pub fn run_all(opts: &RunnerOptions) -> Result<usize> {
    let kernel = kernel_release()?;
    let s = &opts.scenario;
    for v in s.variants.iter().filter(|_| s.workload == Workload::Replay) {
        for (_, _, trace) in v.tasks() {
            let p = trace_path(&opts.traces_dir, &trace);
            memqos_replay::trace::load_trace(&p).with_context(|| format!("variant {}: trace {trace}", v.name))?;
        }
    }
    if s.memqos_learns_tier_peak {
        // The guest's first memqos arm is first sight, whatever ran in this guest before.
        let _ = std::fs::remove_file(TIER_PEAKS_KEPT);
    }
    let total: usize = s.variants.iter().map(|v| arms(s, v).len()).sum::<usize>() * opts.runs;
    let started = Instant::now();
    let mut done = 0;
    let mut written = 0;
    for v in &s.variants {
        let parent_max = parent_max_bytes(s, v, &opts.traces_dir)?;
        let dir = opts.out_dir.join(&v.name);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let arms = arms(s, v);
        let last = opts.first_run + opts.runs - 1;
        for run in opts.first_run..=last {
            // Rotate the order each run: arm k runs in position (k + run - 1) mod n.
            let n = arms.len();
            let order: Vec<usize> = (0..n).map(|i| (i + run - 1) % n).collect();
            for (pos, &k) in order.iter().enumerate() {
                let arm = &arms[k];
                let eta = if done > 0 {
                    let per = started.elapsed().as_secs_f64() / done as f64;
                    format!(", eta {}", fmt_secs(per * (total - done) as f64))
                } else {
                    String::new()
                };
                println!(
                    "progress: {}/{} {} run {run}/{last} arm {} ({}/{total}), elapsed {}{eta}",
                    s.name,
                    v.name,
                    kernel,
                    arm.label(),
                    done + 1,
                    fmt_secs(started.elapsed().as_secs_f64())
                );
                let result = run_arm(opts, v, arm, run, pos, parent_max, &kernel)
                    .with_context(|| format!("{}/{} run {run} arm {}", s.name, v.name, arm.label()))?;
                println!("  {}", one_line(&result));
                let file = dir.join(format!("run{run:02}-{}.json", arm.label().replace(':', "-")));
                std::fs::write(&file, serde_json::to_vec(&result)?)
                    .with_context(|| format!("writing {}", file.display()))?;
                written += 1;
                done += 1;
            }
        }
    }
    Ok(written)
}

fn fmt_secs(s: f64) -> String {
    if s >= 60.0 {
        format!("{}m{:02}s", (s / 60.0) as u64, (s % 60.0) as u64)
    } else {
        format!("{s:.0}s")
    }
}

fn one_line(r: &ArmResult) -> String {
    let tasks: Vec<String> = r
        .tasks
        .iter()
        .map(|t| {
            let p95 = t.latency.map(|l| format!(" p95 {:.1}ms", l.p95_ms)).unwrap_or_default();
            // stress-ng's figure is its throughput, not its time (a fixed -t).
            let ops = t.bogo_ops_per_s.map(|o| format!(" {o:.0} ops/s")).unwrap_or_default();
            format!("{} {} {:.2}s{p95}{ops}", t.name, short_outcome(&t.outcome), t.wall_s)
        })
        .collect();
    format!("{}: {} | oom_kill {} | writes {}", r.arm, tasks.join(", "), r.parent_oom_kills, r.decisions.len())
}

pub fn short_outcome(o: &Outcome) -> &'static str {
    match o {
        Outcome::Finished => "ok",
        Outcome::OomKilled { .. } => "OOM",
        Outcome::Killed { .. } => "killed",
        Outcome::Failed { .. } => "failed",
    }
}

fn run_arm(
    opts: &RunnerOptions,
    v: &Variant,
    arm: &Arm,
    run: usize,
    order: usize,
    parent_max: u64,
    kernel: &str,
) -> Result<ArmResult> {
    let s = &opts.scenario;
    let all_tasks = v.tasks();
    let tasks: Vec<_> = match arm {
        Arm::Solo(name) => all_tasks.iter().filter(|t| &t.0 == name).cloned().collect(),
        Arm::Policy(_) => all_tasks.clone(),
    };
    // The systemd-oomd arm's tree is systemd's: slices the runner writes as unit files, the
    // task cgroups inside the tier slices.
    let systemd = match arm {
        Arm::Policy(Policy::SystemdOomd) => Some(s.systemd_oomd.expect("validated")),
        _ => None,
    };
    let parent = Cgroup::new(if systemd.is_some() { crate::systemd_oomd::PARENT } else { PARENT });
    let mut static_writes = Vec::new();
    match systemd {
        Some(settings) => {
            crate::systemd_oomd::ensure_running(&settings)?;
            static_writes = crate::systemd_oomd::set_up(&settings, Some(parent_max).filter(|&b| b != u64::MAX))?;
        }
        None => {
            remove_tree(&parent)?;
            parent.create()?;
        }
    }
    let set_up_epoch = epoch_now();
    let result = (|| -> Result<ArmResult> {
        // The cpu controller only where it is the point: enabling it changes scheduling (the
        // children become separate fair-share entities) even at default weights.
        if systemd.is_some() {
            // systemd enabled memory below the slices; the limit is the slice's MemoryMax.
        } else if s.cpu_controller || *arm == Arm::Policy(Policy::CpuWeight) {
            // Under systemd as PID 1 the root enables cpu for its children only while a unit
            // needs it: ask for it there first (the harness's own init enables it at boot).
            let root = Cgroup::new("/sys/fs/cgroup");
            if !root.read_string("cgroup.subtree_control").unwrap_or_default().split_whitespace().any(|c| c == "cpu") {
                root.enable_controllers(&["cpu"]).context("enabling the cpu controller at the cgroup root")?;
            }
            parent.enable_controllers(&["memory", "cpu"])?;
        } else {
            parent.enable_controllers(&["memory"])?;
        }
        if parent_max != u64::MAX && systemd.is_none() {
            parent.set_limit("memory.max", Limit::Bytes(parent_max))?;
        }
        let mut cgroups = Vec::new();
        let mut oom_score_adj = vec![None; tasks.len()];
        for (i, (name, tier, trace)) in tasks.iter().enumerate() {
            let cg = match systemd {
                Some(_) => crate::systemd_oomd::tier_cgroup(*tier).child(name),
                None => parent.child(name),
            };
            cg.create()?;
            if s.memqos_learns_peak && *arm == Arm::Policy(Policy::Memqos) {
                // The trace is the workload: the same trace in a later run is the same work.
                // Not a decision mark: it names the task, it sets no knob.
                cg.set_xattr(WORKLOAD_XATTR, trace)?;
            }
            match arm {
                Arm::Policy(Policy::StaticMax) => {
                    cg.set_limit("memory.max", Limit::Bytes(parent_max / all_tasks.len() as u64))?
                }
                Arm::Policy(Policy::StaticHigh) if *tier == Tier::Low => {
                    cg.set_limit("memory.high", Limit::Bytes(s.static_high.expect("validated")))?
                }
                Arm::Policy(Policy::CpuWeight) => {
                    cg.write_string("cpu.weight", if *tier == Tier::High { "10000" } else { "1" })?
                }
                Arm::Policy(Policy::KubeMemoryqos) => {
                    let sizes = replayed_sizes(opts, trace)?;
                    let guaranteed = *tier == Tier::High;
                    let request = kube::request(&sizes, guaranteed);
                    let knobs =
                        if guaranteed { kube::guaranteed(request) } else { kube::burstable(request, parent_max) };
                    let why = if guaranteed {
                        "kubelet: Guaranteed pod, request = limit = peak + 10%"
                    } else {
                        "kubelet: Burstable pod, request = median usage, no limit"
                    };
                    for (file, value) in [
                        ("memory.min", knobs.memory_min),
                        ("memory.low", knobs.memory_low),
                        ("memory.high", knobs.memory_high),
                        ("memory.max", knobs.memory_max),
                    ] {
                        if let Some(b) = value {
                            cg.set_limit(file, Limit::Bytes(b))?;
                            static_writes.push(DecisionMark {
                                t_s: 0.0,
                                cgroup: name.clone(),
                                file: file.into(),
                                value: b.to_string(),
                                reason: why.into(),
                            });
                        }
                    }
                    oom_score_adj[i] = Some(knobs.oom_score_adj);
                    static_writes.push(DecisionMark {
                        t_s: 0.0,
                        cgroup: name.clone(),
                        file: "oom_score_adj".into(),
                        value: knobs.oom_score_adj.to_string(),
                        reason: why.into(),
                    });
                }
                Arm::Policy(Policy::StaticAdj) => {
                    let template = s.memqos_config.as_deref().expect("validated");
                    if let Some(adj) = crate::static_arms::adj_for(template, name).map_err(anyhow::Error::msg)? {
                        oom_score_adj[i] = Some(adj);
                        static_writes.push(DecisionMark {
                            t_s: 0.0,
                            cgroup: name.clone(),
                            file: "oom_score_adj".into(),
                            value: adj.to_string(),
                            reason: "static-adj: the memqos config's value for this tier, no daemon".into(),
                        });
                    }
                }
                Arm::Policy(Policy::StaticReserve) => {
                    // The same size the kube arm requests and memqos is told when it declares.
                    let high_reserve = kube::request(&replayed_sizes(opts, &v.high)?, true);
                    let r = crate::static_arms::reserve(parent_max, high_reserve, v.low.len())
                        .map_err(anyhow::Error::msg)?;
                    let (file, bytes, why) = match tier {
                        Tier::High => ("memory.min", r.high_min, "static-reserve: the protected task's peak + 10%"),
                        Tier::Low => ("memory.max", r.low_max, "static-reserve: an equal share of the rest"),
                    };
                    cg.set_limit(file, Limit::Bytes(bytes))?;
                    static_writes.push(DecisionMark {
                        t_s: 0.0,
                        cgroup: name.clone(),
                        file: file.into(),
                        value: bytes.to_string(),
                        reason: why.into(),
                    });
                }
                Arm::Policy(Policy::Memqos) if s.memqos_declares_peak && *tier == Tier::High => {
                    let peak = kube::request(&replayed_sizes(opts, trace)?, true);
                    cg.set_xattr(EXPECTED_PEAK_XATTR, &peak.to_string())?;
                    static_writes.push(DecisionMark {
                        t_s: 0.0,
                        cgroup: name.clone(),
                        file: EXPECTED_PEAK_XATTR.into(),
                        value: peak.to_string(),
                        reason: "declared: the protected task's replayed peak + 10% (the kube arm's request)".into(),
                    });
                }
                _ => {}
            }
            cgroups.push(cg);
        }
        let daemon = match arm {
            Arm::Policy(Policy::Memqos) => {
                let template = s.memqos_config.as_deref().expect("validated");
                let config =
                    crate::scenario::render_memqos_config(template, &parent.path().display().to_string(), STATE_DIR);
                let carried: &[(&Path, &str)] =
                    if s.memqos_learns_tier_peak { &[(Path::new(TIER_PEAKS_KEPT), TIER_PEAKS_FILE)] } else { &[] };
                Some(ArmDaemon::start_carrying(&opts.exe, Path::new(STATE_DIR), &config, carried)?)
            }
            _ => None,
        };
        let mut oomd = match arm {
            Arm::Policy(Policy::Oomd) => {
                let template = s.oomd_config.as_deref().expect("validated");
                let parent_rel = PARENT.trim_start_matches("/sys/fs/cgroup/");
                let ruleset = crate::oomd::render(template, parent_rel, parent_max);
                crate::oomd::validate(&ruleset).map_err(|e| anyhow::anyhow!("oomd_config: {e}"))?;
                Some(OomdProcess::start(&ruleset, Path::new(OOMD_DIR), parent_rel, s.oomd_interval_s)?)
            }
            _ => None,
        };
        let outcome = run_tasks(opts, &tasks, &cgroups, &oom_score_adj, &parent, oomd.as_mut());
        let oomd_kills = match oomd {
            Some(o) => {
                let end = outcome.as_ref().map(|o| o.3).unwrap_or(0.0);
                let (mut kills, ran) = o.stop(end)?;
                if !ran {
                    bail!("oomd exited before the tasks ended: see {OOMD_DIR}/oomd.log");
                }
                let mut marks = outcome.as_ref().map(|o| o.4.clone()).unwrap_or_default();
                marks.append(&mut kills);
                marks
            }
            None => Vec::new(),
        };
        let systemd_kills = match (&systemd, &outcome) {
            (Some(_), Ok(o)) => crate::systemd_oomd::kills_since(set_up_epoch, o.0)?,
            _ => Vec::new(),
        };
        let (decisions, knobs_restored, daemon_cpu_s) = match daemon {
            Some(d) => {
                let stopped = d.stop()?;
                // Task cgroups are gone by now (removed as their tasks ended); what must hold is
                // that the daemon exited cleanly and left no journal of unrestored knobs, and
                // that any cgroup still there is back to max / 0 / 0.
                let restored =
                    !stopped.journal_left && cgroups.iter().all(|cg| !cg.exists() || knobs_at_defaults(cg, false));
                // The knob writes it logged, with absolute `t_s`.
                (parse_write_events(&stopped.log), Some(restored && stopped.clean_exit), stopped.cpu_s)
            }
            None => (Vec::new(), None, None),
        };
        let (started_epoch, task_results, timeline, _, _) = outcome?;
        let decisions = static_writes
            .into_iter()
            .chain(decisions.into_iter().map(|mut d| {
                d.t_s -= started_epoch;
                d
            }))
            .chain(oomd_kills)
            .chain(systemd_kills)
            .collect();
        Ok(ArmResult {
            scenario: s.name.clone(),
            variant: v.name.clone(),
            kernel: kernel.to_string(),
            run,
            arm: arm.label(),
            workload: s.workload,
            order,
            speed: s.speed,
            baseline_mb: s.baseline_mb,
            parent_max_bytes: parent_max,
            started_epoch,
            tasks: task_results,
            parent_oom_kills: parent.memory_events()?.oom_kill,
            timeline,
            decisions,
            knobs_restored,
            daemon_cpu_s,
            swap_mb: s.swap_mb,
            zswap: s.zswap,
            provenance: opts.provenance.clone().map(|mut p| {
                p.kernel = kernel.to_string();
                p
            }),
            timing: match arm {
                // A run is not thrown away for its description: an unreadable one says so.
                Arm::Policy(p) => Some(s.timing(*p).unwrap_or_else(|e| format!("{p}: intervals unreadable: {e}"))),
                Arm::Solo(_) => None,
            },
            // The history lives as long as the guest: its first run of a variant learns.
            // Tier peaks: only the guest's first memqos arm (first variant, first run) had
            // none; later variants start from the peaks of the ones before.
            learning_run: run == opts.first_run
                && (s.memqos_learns_peak || (s.memqos_learns_tier_peak && v.name == s.variants[0].name)),
        })
    })();
    let cleanup = match systemd {
        Some(_) => crate::systemd_oomd::tear_down(),
        None => remove_tree(&parent),
    };
    let r = result?;
    cleanup?;
    Ok(r)
}

/// The sizes `trace` is replayed at in this scenario: each sample plus the baseline.
fn replayed_sizes(opts: &RunnerOptions, trace: &str) -> Result<Vec<u64>> {
    let t = memqos_replay::trace::load_trace(&trace_path(&opts.traces_dir, trace))?;
    Ok(t.samples.iter().map(|x| x.used_bytes + opts.scenario.baseline_mb * MIB).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn solo_arms_cover_each_distinct_trace_once() {
        let s = crate::scenario::Scenario::parse(
            "t",
            Path::new("t.toml"),
            "description=\"d\"\nparent_max=\"1G\"\nspeed=1\npolicies=[\"none\"]\n[[variant]]\nname=\"v\"\nhigh=\"a\"\nlow=[\"b\",\"b\",\"c\"]\n",
            &|_| Ok(String::new()),
        )
        .unwrap();
        let labels: Vec<String> = arms(&s, &s.variants[0]).iter().map(Arm::label).collect();
        assert_eq!(labels, ["solo:high", "solo:low1", "solo:low3", "none"]);
    }
}
