//! The in-guest side of an experiment: for each run, every arm (each trace alone, then each
//! policy with all tasks together) in a rotated order, so slow drift of the host (TCG shares
//! two cores with everything else) spreads over all arms instead of biasing one.
//!
//! An arm: fresh parent cgroup with the scenario's memory.max, one child per task, the
//! policy's knobs (or the daemon), every task started at once as `memqos-lab replay`, memory
//! sampled every 50 ms, then everything torn down. Each arm's result is written as JSON the
//! moment it ends, so an interrupted experiment keeps what it measured.

use crate::kube;
use crate::oomd::OomdProcess;
use crate::scenario::{ParentMax, Policy, Scenario, Tier, Variant, Workload};
use anyhow::{bail, Context, Result};
use memqos_cgroupfs::{Cgroup, Limit, MemoryEvents};
use memqos_lab::daemon_process::DaemonProcess;
use memqos_policy::size::MIB;
use memqos_policy::{EXPECTED_PEAK_XATTR, WORKLOAD_XATTR};
use memqos_replay::report::{LatencyStats, Report};
use memqos_replay::Outcome;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const PARENT: &str = "/sys/fs/cgroup/memqos-exp";
pub(crate) const STATE_DIR: &str = "/run/memqos-exp/state";
/// The memqos arm's learned peaks (`memqos_learns_peak`): beside, not in, STATE_DIR, which is
/// wiped at each daemon start, so what run 1 learns serves the later runs of the guest boot.
pub const HISTORY_FILE: &str = "/run/memqos-exp/history.json";
const WORK_DIR: &str = "/run/memqos-exp/work";
const OOMD_DIR: &str = "/run/memqos-exp/oomd";
const SAMPLE_EVERY: Duration = Duration::from_millis(50);

/// One arm of one run: what it set up and what every task did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ArmResult {
    pub scenario: String,
    pub variant: String,
    pub kernel: String,
    /// 1-based run number.
    pub run: usize,
    /// `solo:<task>` or a policy name.
    pub arm: String,
    /// What the tasks ran (trace replays unless said otherwise).
    #[serde(default)]
    pub workload: Workload,
    /// Position of this arm within its run (the order rotates from run to run).
    pub order: usize,
    pub speed: f64,
    pub baseline_mb: u64,
    pub parent_max_bytes: u64,
    /// Unix time the tasks were started (the guest clock, as the daemon's event `ts`).
    pub started_epoch: f64,
    pub tasks: Vec<TaskResult>,
    /// memory.events oom_kill of the parent at the end.
    pub parent_oom_kills: u64,
    pub timeline: Timeline,
    /// Knob writes the daemon made (memqos arm), the knobs a static arm set (kube-memoryqos),
    /// or the kills oomd logged (oomd arm: file "kill").
    pub decisions: Vec<DecisionMark>,
    /// After the daemon stopped: did it exit cleanly with no unrestored journal, and were the
    /// knobs of any cgroup still present back to their defaults?
    pub knobs_restored: Option<bool>,
    /// memqos arm: CPU time the daemon used (user + system, s) from its start to just before
    /// it was stopped.
    #[serde(default)]
    pub daemon_cpu_s: Option<f64>,
    /// The guest's swap disk (MiB) and whether zswap was in front of it; `None`: swapless.
    #[serde(default)]
    pub swap_mb: Option<u64>,
    #[serde(default)]
    pub zswap: bool,
    /// The commit, config digests, speed, kernel and host load of the series (runs made
    /// before it was recorded have none; docs/experiments/builds.toml says their build).
    #[serde(default)]
    pub provenance: Option<crate::provenance::Provenance>,
    /// How often the arm looked and how long it waited before acting, as run
    /// ([`Scenario::timing`]). `None` in results from before it was recorded.
    #[serde(default)]
    pub timing: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskResult {
    pub name: String,
    pub tier: Tier,
    pub trace: String,
    pub outcome: Outcome,
    /// Spawn to exit of `memqos-lab replay` (includes the baseline allocation).
    pub wall_s: f64,
    /// The replay's own clock, t=0 to the last step (finished runs only).
    pub completion_s: Option<f64>,
    pub schedule_s: Option<f64>,
    /// Latency of every growth step, in order.
    pub latencies_ms: Vec<f64>,
    pub latency: Option<LatencyStats>,
    pub peak_rss_bytes: Option<u64>,
    /// memory.events of the task's cgroup at the end (the cgroup is fresh, so totals = this arm).
    pub events: MemoryEvents,
    /// stress-ng tasks: total bogo ops and bogo ops per second of wall time, from its YAML.
    #[serde(default)]
    pub bogo_ops: Option<f64>,
    #[serde(default)]
    pub bogo_ops_per_s: Option<f64>,
    /// What the task's cgroup swapped, read when it ended (absent in results from before it
    /// was recorded).
    #[serde(default)]
    pub swap: Option<SwapFigures>,
}

/// A cgroup's swap at its end: memory.swap.peak (pages in swap, zswap's included, at the
/// most), and pages swapped out to a disk (memory.stat `pswpout`, Linux 6.15+) and into
/// zswap (`zswpout`). Each `None` where the kernel has no such file or key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct SwapFigures {
    pub peak_bytes: Option<u64>,
    pub pswpout: Option<u64>,
    pub zswpout: Option<u64>,
}

impl SwapFigures {
    pub fn read(cg: &Cgroup) -> SwapFigures {
        let stat = cg.memory_stat().unwrap_or_default();
        let key = |k: &str| stat.iter().find(|(name, _)| name == k).map(|(_, v)| *v);
        let peak = cg.read_string("memory.swap.peak").ok().and_then(|t| t.trim().parse().ok());
        SwapFigures { peak_bytes: peak, pswpout: key("pswpout"), zswpout: key("zswpout") }
    }

    /// Pages swapped out to disk and to zswap, in bytes (4 KiB pages); `None` if neither is
    /// counted.
    pub fn swapped_out_bytes(&self) -> Option<u64> {
        match (self.pswpout, self.zswpout) {
            (None, None) => None,
            (a, b) => Some((a.unwrap_or(0) + b.unwrap_or(0)) * 4096),
        }
    }
}

/// Memory over time, sampled every 50 ms from the start of the tasks.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Timeline {
    pub t_s: Vec<f64>,
    pub parent_current: Vec<u64>,
    /// memory.current per task cgroup; a series ends when its task ends (the cgroup is removed
    /// then), so it may be shorter than `t_s`.
    pub current: BTreeMap<String, Vec<u64>>,
    /// memory.high per task cgroup; `None` = max.
    pub high: BTreeMap<String, Vec<Option<u64>>>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DecisionMark {
    /// Seconds since the tasks were started.
    pub t_s: f64,
    pub cgroup: String,
    pub file: String,
    pub value: String,
    pub reason: String,
}

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
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").context("reading the kernel release")?;
    let kernel = kernel.trim().to_string();
    let s = &opts.scenario;
    for v in s.variants.iter().filter(|_| s.workload == Workload::Replay) {
        for (_, _, trace) in v.tasks() {
            let p = trace_path(&opts.traces_dir, &trace);
            memqos_replay::trace::load_trace(&p).with_context(|| format!("variant {}: trace {trace}", v.name))?;
        }
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

pub(crate) fn epoch_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
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
            Arm::Policy(Policy::Memqos) => Some(Daemon::start(opts, &parent)?),
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
                let (log, stopped_ok, cpu_s) = d.stop()?;
                // Task cgroups are gone by now (removed as their tasks ended); what must hold is
                // that the daemon exited cleanly and left no journal of unrestored knobs, and
                // that any cgroup still there is back to max / 0 / 0.
                let journal_left = Path::new(STATE_DIR).join(memqos_schema::state::JOURNAL_FILE).exists();
                let restored = !journal_left
                    && cgroups.iter().all(|cg| {
                        !cg.exists()
                            || (cg.limit("memory.high").map(|l| l == Limit::Max).unwrap_or(false)
                                && cg.limit("memory.low").map(|l| l == Limit::Bytes(0)).unwrap_or(false)
                                && cg.limit("memory.min").map(|l| l == Limit::Bytes(0)).unwrap_or(false))
                    });
                (log, Some(restored && stopped_ok), cpu_s)
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

/// Start time (Unix), the tasks' results, the timeline, when the last task ended (s since the
/// start) and the kills oomd logged while they ran.
type TaskRun = (f64, Vec<TaskResult>, Timeline, f64, Vec<DecisionMark>);

fn run_tasks(
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
    for (((name, _, trace), cg), adj) in tasks.iter().zip(cgroups).zip(oom_score_adj) {
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
                .args(&s.stress_args)
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
    while children.iter().any(|(_, end)| end.is_none()) {
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
                let _ = cgroups[i].remove();
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
            },
        };
        results.push(r);
    }
    for (r, swap) in results.iter_mut().zip(final_swap) {
        r.swap = swap;
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

/// Removes `root` and every cgroup below it, deepest first, waiting for exiting tasks to
/// leave them (the experiments' task cgroups, and the agent host's sessions and their calls).
pub(crate) fn remove_tree(root: &Cgroup) -> Result<()> {
    let t0 = Instant::now();
    while root.exists() {
        let mut all = root.descendants().unwrap_or_default();
        all.sort_by_key(|c| std::cmp::Reverse(c.path().components().count()));
        for c in all {
            let _ = c.remove();
        }
        if root.remove().is_ok() || !root.exists() {
            break;
        }
        if t0.elapsed() > Duration::from_secs(20) {
            bail!("cannot remove {} after 20 s: tasks still inside?", root.path().display());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

struct Daemon(DaemonProcess);

impl Daemon {
    fn start(opts: &RunnerOptions, parent: &Cgroup) -> Result<Daemon> {
        let _ = std::fs::remove_dir_all(STATE_DIR);
        std::fs::create_dir_all(STATE_DIR)?;
        let text = opts.scenario.memqos_config.as_deref().expect("validated");
        let text = crate::scenario::render_memqos_config(text, &parent.path().display().to_string(), STATE_DIR);
        let config = Path::new(STATE_DIR).join("memqos.toml");
        std::fs::write(&config, text)?;
        DaemonProcess::start(&opts.exe, &config, Path::new(STATE_DIR), &[], Stdio::null()).map(Daemon)
    }

    /// SIGTERM, wait, and the knob writes it logged (with absolute `t_s`).
    fn stop(self) -> Result<(Vec<DecisionMark>, bool, Option<f64>)> {
        let cpu_s = self.0.cpu_seconds();
        let (status, log) = self.0.stop()?;
        Ok((parse_write_events(&log), status.success(), cpu_s))
    }
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
