//! Tables in the docs generated from committed data, so no figure in them is typed by hand.
//!
//! A generated region of a doc is
//!
//! ```text
//! <!-- generated: NAME (memqos-docs, from docs/experiments/summary.json) -->
//! ...
//! <!-- end generated: NAME -->
//! ```
//!
//! and [`update`] rewrites every such region from `docs/experiments/summary.json` (itself
//! rebuilt from the runs by the report step) and `docs/experiments/builds.toml` (which build
//! made each series). `scripts/docs.sh` runs both; the `docs_match_the_committed_data` test
//! fails when a region differs from what the data gives.

use crate::scenario::Workload;
use crate::stats::KILLED;
use crate::summary::{est, ratio, ratio_median, ArmSummary, GroupSummary, Verdict};
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// The docs that may hold generated regions (relative to the checkout).
pub const DOCS: &[&str] =
    &["README.md", "docs/experiments.md", "docs/agent-hosts.md", "docs/bpf-signals.md", "docs/stats.md"];

/// What the tables are made from.
pub struct Sources {
    pub groups: Vec<GroupSummary>,
    pub verdicts: Vec<Verdict>,
    /// `scenario/kernel` -> build, for series whose runs do not record it themselves.
    pub builds: BTreeMap<String, String>,
    /// The checkout, for data files read by one table only.
    pub root: std::path::PathBuf,
}

#[derive(serde::Deserialize)]
struct SummaryFile {
    groups: Vec<GroupSummary>,
    targets: Vec<Verdict>,
}

#[derive(serde::Deserialize)]
struct BuildsFile {
    series: BTreeMap<String, String>,
}

/// `out/builds.toml`'s series -> build map; empty without the file.
pub fn builds(out: &Path) -> Result<BTreeMap<String, String>> {
    let path = out.join("builds.toml");
    if !path.exists() {
        return Ok(BTreeMap::new());
    }
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let b: BuildsFile = toml::from_str(&text).with_context(|| format!("{}", path.display()))?;
    Ok(b.series)
}

impl Sources {
    pub fn load(root: &Path) -> Result<Sources> {
        let path = root.join("docs/experiments/summary.json");
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let s: SummaryFile = serde_json::from_str(&text).with_context(|| format!("{}", path.display()))?;
        let builds = builds(&root.join("docs/experiments"))?;
        Ok(Sources { groups: s.groups, verdicts: s.targets, builds, root: root.to_path_buf() })
    }

    fn build(&self, g: &GroupSummary) -> String {
        if let Some(b) = &g.build {
            return b.clone();
        }
        self.builds.get(&format!("{}/{}", g.scenario, g.kernel)).cloned().unwrap_or_else(|| "not recorded".into())
    }
}

/// "7.2.13+deb14-amd64" -> "7.2.13".
fn short_kernel(k: &str) -> &str {
    k.split('+').next().unwrap_or(k)
}

#[derive(Clone, Copy)]
enum Col {
    Scenario,
    Variant,
    Kernel,
    Build,
    Arm,
    ProtectedFinished,
    HighSolo,
    HighSoloCi,
    P95Solo,
    P95SoloCi,
    P95NoneCi,
    LowsFinished,
    Kills,
    RunsWithKill,
    KillRunsP,
    HighKilledP,
    Avoidable,
    ParkBy,
    LowsNone,
    LowsNoneCi,
    Prio,
    ParentPeak,
    HighSwappedOut,
    LowsSwappedOut,
    HighOps,
    HighOpsSolo,
    LowOps,
    LowOpsSolo,
    LowOpsNone,
    CompletionVsOff,
    P50VsOff,
    DaemonCpu,
}

impl Col {
    fn header(self) -> &'static str {
        match self {
            Col::Scenario => "scenario",
            Col::Variant => "variant (limit)",
            Col::Kernel => "kernel",
            Col::Build => "build",
            Col::Arm => "arm",
            Col::ProtectedFinished => "protected finished",
            Col::HighSolo | Col::HighSoloCi => "high/solo",
            Col::P95Solo | Col::P95SoloCi => "P95/solo",
            Col::P95NoneCi => "P95/none",
            Col::LowsFinished => "lows finished",
            Col::Kills => "kills (by a userspace killer)",
            Col::RunsWithKill => "runs with a kill",
            Col::KillRunsP => "runs with a kill (p vs memqos)",
            Col::HighKilledP => "protected killed (p vs memqos)",
            Col::Avoidable => "avoidable kills (bound)",
            Col::ParkBy => "park by",
            Col::LowsNone | Col::LowsNoneCi => "lows/none",
            Col::Prio => "priority ratio",
            Col::ParentPeak => "parent peak MiB",
            Col::HighSwappedOut => "high swapped out MiB",
            Col::LowsSwappedOut => "lows swapped out MiB",
            Col::HighOps => "high ops/s",
            Col::HighOpsSolo => "high vs solo (runs' range)",
            Col::LowOps => "low ops/s",
            Col::LowOpsSolo => "low vs solo",
            Col::LowOpsNone => "low vs none",
            Col::CompletionVsOff => "completion, daemon on/off",
            Col::P50VsOff => "P50, daemon on/off",
            Col::DaemonCpu => "daemon CPU, % of one CPU",
        }
    }

    fn cell(self, src: &Sources, g: &GroupSummary, a: &ArmSummary) -> String {
        let p = |x: Option<f64>| x.map(|p| format!(", p = {p:.3}")).unwrap_or_default();
        let median0 = |e: &Option<crate::stats::Estimate>| e.map(|e| format!("{:.0}", e.median)).unwrap_or("–".into());
        match self {
            Col::Scenario => g.scenario.clone(),
            Col::Variant => format!("{} ({} MiB)", g.variant, g.parent_max_mb),
            Col::Kernel => short_kernel(&g.kernel).to_string(),
            Col::Build => src.build(g),
            Col::Arm => a.arm.clone(),
            Col::ProtectedFinished => format!("{} of {}", a.high_finished, a.runs),
            Col::HighSolo => ratio_median(&a.high_wall_vs_solo),
            Col::HighSoloCi => ratio(&a.high_wall_vs_solo),
            Col::P95Solo => ratio_median(&a.high_p95_vs_solo),
            Col::P95SoloCi => ratio(&a.high_p95_vs_solo),
            Col::P95NoneCi => ratio(&a.high_p95_vs_none),
            Col::LowsFinished => format!("{}/{}", a.low_finished, a.low_started),
            Col::Kills if a.userspace_kills > 0 => format!("{} ({})", a.task_kills, a.userspace_kills),
            Col::Kills => a.task_kills.to_string(),
            Col::RunsWithKill => format!("{} of {} ({} kills)", a.runs_with_kill, a.runs, a.task_kills),
            Col::KillRunsP => format!("{} of {}{}", a.runs_with_kill, a.runs, p(a.kill_runs_p_vs_memqos)),
            Col::HighKilledP => format!("{} of {}{}", a.runs_high_killed, a.runs, p(a.high_killed_p_vs_memqos)),
            Col::Avoidable => match (a.avoidable_kills, a.kill_bound) {
                (Some(k), Some(b)) => format!("{k} ({b})"),
                _ => "–".into(),
            },
            Col::ParkBy => match a.park_deadline {
                Some(crate::avoidability::ParkDeadline::Never) => "never".into(),
                Some(crate::avoidability::ParkDeadline::At { share, .. }) => format!("{:.0}%", share * 100.0),
                None => "–".into(),
            },
            Col::LowsNone if a.arm == "none" => "–".into(),
            Col::LowsNone => ratio_median(&a.low_wall_vs_none),
            Col::LowsNoneCi => ratio(&a.low_wall_vs_none),
            Col::Prio => ratio_median(&a.priority_ratio),
            Col::ParentPeak => median0(&a.parent_peak_mb),
            Col::HighSwappedOut => median0(&a.high_swapped_out_mb),
            Col::LowsSwappedOut => median0(&a.low_swapped_out_mb),
            Col::HighOps => est(&a.high_ops_per_s, 0),
            Col::HighOpsSolo => match a.high_ops_vs_solo {
                Some(e) => format!("{} ({:.2}–{:.2})", ratio(&a.high_ops_vs_solo), e.min, e.max),
                None => "–".into(),
            },
            Col::LowOps => est(&a.low_ops_per_s, 0),
            Col::LowOpsSolo => ratio(&a.low_ops_vs_solo),
            Col::LowOpsNone => ratio(&a.low_ops_vs_none),
            Col::CompletionVsOff => ratio(&a.high_wall_vs_none),
            Col::P50VsOff => ratio(&a.high_p50_vs_none),
            Col::DaemonCpu => est(&a.daemon_cpu_pct, 1),
        }
    }
}

/// Rows: every group of `scenarios` (in that order, 7.x before 6.12), every arm of `arms`
/// present (in that order).
struct Spec {
    scenarios: &'static [&'static str],
    kernel: Option<&'static str>,
    arms: &'static [&'static str],
    cols: &'static [Col],
}

const PEER_ARMS: &[&str] =
    &["none", "memqos", "static-adj", "static-reserve", "kube-memoryqos", "oomd", "systemd-oomd"];

fn spec(name: &str) -> Option<Spec> {
    use Col::*;
    let peers = &[
        Scenario,
        Kernel,
        Build,
        Arm,
        ProtectedFinished,
        HighSolo,
        P95Solo,
        LowsFinished,
        Kills,
        KillRunsP,
        LowsNone,
        Prio,
    ];
    let kill_cols = &[
        Kernel,
        Variant,
        Build,
        Arm,
        RunsWithKill,
        Avoidable,
        ProtectedFinished,
        LowsFinished,
        HighSoloCi,
        LowsNoneCi,
    ];
    Some(match name {
        "peers" => Spec {
            scenarios: &["oom", "oom-systemd", "contention", "contention-systemd"],
            kernel: None,
            arms: PEER_ARMS,
            cols: peers,
        },
        "peers-swap" => Spec {
            scenarios: &["oom-swap", "oom-zswap", "contention-swap", "contention-zswap"],
            kernel: None,
            arms: PEER_ARMS,
            cols: &[
                Scenario,
                Kernel,
                Build,
                Arm,
                ProtectedFinished,
                HighSolo,
                P95Solo,
                LowsFinished,
                Kills,
                LowsNone,
                Prio,
                HighSwappedOut,
                LowsSwappedOut,
            ],
        },
        "oom-7.2" => Spec {
            scenarios: &["oom"],
            kernel: Some("7.2"),
            arms: &["none", "kube-memoryqos", "oomd", "memqos"],
            cols: &[Arm, ProtectedFinished, HighSoloCi, P95SoloCi, LowsFinished, Kills, KillRunsP, HighKilledP, Prio],
        },
        "seed" => Spec {
            scenarios: &["oom", "contention", "isolation"],
            kernel: None,
            arms: &["none", "static-max", "static-high", "memqos"],
            cols: &[Scenario, Kernel, Build, Arm, KillRunsP, HighSoloCi, P95SoloCi, P95NoneCi, LowsNoneCi, ParentPeak],
        },
        "overhead" => Spec {
            scenarios: &["overhead"],
            kernel: None,
            arms: &["memqos"],
            cols: &[Kernel, Build, CompletionVsOff, P50VsOff, DaemonCpu],
        },
        "cpu-weight" => Spec {
            scenarios: &["contention", "isolation"],
            kernel: Some("7.2"),
            arms: &["none", "memqos", "cpu-weight"],
            cols: &[Scenario, Build, Arm, HighSoloCi, P95SoloCi, P95NoneCi],
        },
        "cpu" => Spec {
            scenarios: &["contention-cpu", "isolation-cpu", "oom-cpu"],
            kernel: None,
            arms: &["none", "memqos", "cpu-weight"],
            cols: &[
                Kernel,
                Scenario,
                Build,
                Arm,
                RunsWithKill,
                HighSoloCi,
                P95SoloCi,
                P95NoneCi,
                LowsNoneCi,
                DaemonCpu,
            ],
        },
        "avoidability" => Spec {
            scenarios: &["oom", "oom-cpu", "sweep", "sweep-tight"],
            kernel: None,
            arms: &["none", "static-max", "memqos"],
            cols: &[Scenario, Variant, Kernel, Build, Arm, ParkBy, RunsWithKill, Avoidable],
        },
        "rfc-demo" => Spec {
            scenarios: &["rfc-demo"],
            kernel: None,
            arms: &["solo:high", "solo:low1", "none", "memqos", "oomd"],
            cols: &[Kernel, Build, Arm, HighOps, HighOpsSolo, LowOps, LowOpsSolo, LowOpsNone, Kills],
        },
        "realtime" => Spec {
            scenarios: &["oom-realtime", "sweep-tight-dask-realtime", "oom-systemd-realtime", "sweep-tight-realtime"],
            kernel: None,
            arms: &[
                "none",
                "static-max",
                "static-high",
                "static-adj",
                "static-reserve",
                "kube-memoryqos",
                "oomd",
                "systemd-oomd",
                "memqos",
            ],
            cols: &[
                Scenario,
                Kernel,
                Build,
                Arm,
                ProtectedFinished,
                HighSoloCi,
                P95SoloCi,
                LowsFinished,
                Kills,
                KillRunsP,
                HighKilledP,
            ],
        },
        "sweep" => Spec { scenarios: &["sweep"], kernel: None, arms: &["none", "memqos"], cols: kill_cols },
        "sweep-tight" => Spec { scenarios: &["sweep-tight"], kernel: None, arms: &["none", "memqos"], cols: kill_cols },
        "sweep-tight-declared" => {
            Spec { scenarios: &["sweep-tight-declared"], kernel: None, arms: &["none", "memqos"], cols: kill_cols }
        }
        "sweep-declared" => {
            Spec { scenarios: &["sweep-declared"], kernel: None, arms: &["none", "memqos"], cols: kill_cols }
        }
        _ => return None,
    })
}

/// 7.x series before 6.12, as the docs read.
fn kernel_rank(k: &str) -> u32 {
    if k.starts_with("6.") {
        1
    } else {
        0
    }
}

fn groups_of<'a>(src: &'a Sources, scenarios: &[&str], kernel: Option<&str>) -> Vec<&'a GroupSummary> {
    let mut v: Vec<&GroupSummary> = src
        .groups
        .iter()
        .filter(|g| scenarios.contains(&g.scenario.as_str()))
        .filter(|g| kernel.is_none_or(|k| g.kernel.starts_with(k)))
        .collect();
    let pos = |s: &str| scenarios.iter().position(|x| *x == s).unwrap_or(usize::MAX);
    v.sort_by_key(|g| (pos(&g.scenario), kernel_rank(&g.kernel), g.variant.clone()));
    v
}

fn render_spec(src: &Sources, s: &Spec) -> String {
    let mut out = String::new();
    let header: Vec<&str> = s.cols.iter().map(|c| c.header()).collect();
    let _ = writeln!(out, "| {} |", header.join(" | "));
    let _ = writeln!(out, "|{}", " --- |".repeat(header.len()));
    for g in groups_of(src, s.scenarios, s.kernel) {
        for arm in s.arms {
            let Some(a) = g.arms.iter().find(|a| a.arm == *arm) else { continue };
            let cells: Vec<String> = s.cols.iter().map(|c| c.cell(src, g, a)).collect();
            let _ = writeln!(out, "| {} |", cells.join(" | "));
        }
    }
    out
}

/// An arm's place in a ranking: fewer runs with the protected task killed first, then fewer
/// runs with any kill, then the protected task's median time against solo (killed last).
fn rank_key(a: &ArmSummary) -> (f64, f64, f64) {
    let runs = a.runs.max(1) as f64;
    let high = a.high_wall_vs_solo.map_or(KILLED, |e| e.median);
    (a.runs_high_killed as f64 / runs, a.runs_with_kill as f64 / runs, high)
}

/// The arms both scenarios ran, in rank order ([`rank_key`]).
fn ranking<'a>(g: &'a GroupSummary, arms: &[&str]) -> Vec<&'a ArmSummary> {
    let mut v: Vec<&ArmSummary> = g.arms.iter().filter(|a| arms.contains(&a.arm.as_str())).collect();
    v.sort_by(|a, b| rank_key(a).partial_cmp(&rank_key(b)).unwrap_or(std::cmp::Ordering::Equal));
    v
}

/// Whether the arms rank the same at the traces' own speed as in the compressed scenario, per
/// kernel where both ran: issue 29's "does the ranking hold at 1x".
fn render_ranking(src: &Sources, compressed: &str, realtime: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "| kernel | speed | build | runs | ranking (best first) |");
    let _ = writeln!(out, "| --- | --- | --- | --- | --- |");
    let mut verdicts = Vec::new();
    for slow in groups_of(src, &[realtime], None) {
        let Some(fast) = groups_of(src, &[compressed], None)
            .into_iter()
            .find(|g| g.kernel == slow.kernel && g.variant == slow.variant)
        else {
            continue;
        };
        // Only arms that are not solo runs and that both ran can be compared.
        let common: Vec<&str> = slow
            .arms
            .iter()
            .map(|a| a.arm.as_str())
            .filter(|a| !a.starts_with("solo") && fast.arms.iter().any(|f| f.arm == *a))
            .collect();
        let mut orders = Vec::new();
        for g in [fast, slow] {
            let order = ranking(g, &common);
            let names: Vec<String> = order
                .iter()
                .map(|a| {
                    let killed = if a.runs_high_killed > 0 {
                        format!(", protected killed in {} of {}", a.runs_high_killed, a.runs)
                    } else {
                        String::new()
                    };
                    format!("{} ({}{killed})", a.arm, ratio_median(&a.high_wall_vs_solo))
                })
                .collect();
            let runs = order.first().map_or(0, |a| a.runs);
            let _ = writeln!(
                out,
                "| {} | {}x | {} | {runs} | {} |",
                short_kernel(&g.kernel),
                g.speed,
                src.build(g),
                names.join(" > ")
            );
            orders.push(order.iter().map(|a| a.arm.clone()).collect::<Vec<_>>());
        }
        // An order is not a difference: say which arms lose the protected task significantly
        // more often than memqos (two-sided Fisher exact test, p < 0.05) at each speed.
        let significant = |g: &GroupSummary| -> String {
            let arms: Vec<&str> = g
                .arms
                .iter()
                .filter(|a| common.contains(&a.arm.as_str()))
                .filter(|a| a.high_killed_p_vs_memqos.is_some_and(|p| p < 0.05))
                .map(|a| a.arm.as_str())
                .collect();
            if arms.is_empty() {
                "no arm".into()
            } else {
                arms.join(", ")
            }
        };
        let tested = format!(
            " Arms that lose the protected task significantly more often than memqos (p < 0.05): {} compressed, {} at 1x.",
            significant(fast),
            significant(slow)
        );
        let moved: Vec<&String> = orders[1].iter().zip(&orders[0]).filter(|(s, f)| s != f).map(|(s, _)| s).collect();
        verdicts.push(if moved.is_empty() {
            format!("{}: the ranking holds at 1x.{tested}", short_kernel(&slow.kernel))
        } else {
            format!(
                "{}: the ranking does not hold at 1x; arms in other places: {}. memqos is {} of {} at 1x and {} of {} compressed.{tested}",
                short_kernel(&slow.kernel),
                moved.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "),
                orders[1].iter().position(|a| a == "memqos").map_or(0, |i| i + 1),
                orders[1].len(),
                orders[0].iter().position(|a| a == "memqos").map_or(0, |i| i + 1),
                orders[0].len()
            )
        });
    }
    if verdicts.is_empty() {
        let _ = writeln!(out, "\nNo run of {realtime} yet.");
    }
    for v in verdicts {
        let _ = writeln!(out, "\n{v}");
    }
    out
}

/// Each replay scenario's margin and whether its kill outcome flips from run to run.
fn render_margins(src: &Sources) -> String {
    let mut out = String::from(
        "| scenario | kernel | build | limit MiB | concurrent peak MiB | margin MiB | kill outcome |\n| --- | --- | --- | --- | --- | --- | --- |\n",
    );
    let mut gs: Vec<&GroupSummary> = src.groups.iter().filter(|g| g.workload == Workload::Replay).collect();
    gs.sort_by_key(|g| (g.scenario.clone(), g.variant.clone(), kernel_rank(&g.kernel)));
    for g in gs {
        let Some(peak) = g.concurrent_peak_mb else { continue };
        let flips: Vec<String> = g
            .arms
            .iter()
            .filter(|a| !a.arm.starts_with("solo:") && a.runs_with_kill > 0 && a.runs_with_kill < a.runs)
            .map(|a| format!("{} {} of {}", a.arm, a.runs_with_kill, a.runs))
            .collect();
        let _ = writeln!(
            out,
            "| {}/{} | {} | {} | {} | {} | {} | {} |",
            g.scenario,
            g.variant,
            short_kernel(&g.kernel),
            src.build(g),
            g.parent_max_mb,
            peak,
            g.parent_max_mb as i64 - peak as i64,
            if flips.is_empty() { "stable".to_string() } else { format!("**flips**: {}", flips.join(", ")) }
        );
    }
    out
}

/// The memqos arm's verdicts, one row per group: the issue's own targets as columns.
fn render_targets(src: &Sources, peers: bool) -> String {
    let cols: &[(&str, &str)] = if peers {
        &[
            ("vs oomd: completion", "vs oomd: high completion"),
            ("vs oomd: P95", "vs oomd: high P95"),
            ("vs oomd: lows finish where it kills", "vs oomd: every low task"),
            ("vs systemd-oomd: completion", "vs systemd-oomd: high completion"),
            ("vs systemd-oomd: P95", "vs systemd-oomd: high P95"),
            ("vs kube: no kill where it has one", "vs kube-memoryqos: no OOM kill"),
            ("vs kube: P95 no worse", "vs kube-memoryqos: high P95"),
        ]
    } else {
        &[
            ("no OOM kill", "memqos: no OOM kill"),
            ("protected finishes", "memqos: the protected task finishes"),
            ("lows finish", "memqos: every low-priority task finishes"),
            ("high ≤ 1.05x solo", "memqos: high completion ≤ 1.05x"),
            ("P95 ≤ 1.2x solo", "memqos: high P95 latency ≤ 1.2x"),
            ("no avoidable kill", "memqos: no avoidable kill"),
            ("other", ""),
        ]
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| scenario | kernel | build | {} |\n|{}",
        cols.iter().map(|c| c.0).collect::<Vec<_>>().join(" | "),
        " --- |".repeat(cols.len() + 3)
    );
    let mut keys: Vec<(&str, &str, &str)> =
        src.verdicts.iter().map(|v| (v.scenario.as_str(), v.variant.as_str(), v.kernel.as_str())).collect();
    keys.dedup();
    keys.sort_by_key(|k| (k.0.to_string(), k.1.to_string(), kernel_rank(k.2)));
    keys.dedup();
    let cell = |v: &Verdict| format!("{} ({})", if v.met { "met" } else { "**missed**" }, v.measured);
    for (scenario, variant, kernel) in keys {
        let vs: Vec<&Verdict> = src
            .verdicts
            .iter()
            .filter(|v| v.scenario == scenario && v.variant == variant && v.kernel == kernel)
            .collect();
        let known: Vec<&str> = cols.iter().map(|c| c.1).filter(|p| !p.is_empty()).collect();
        let cells: Vec<String> = cols
            .iter()
            .map(|(_, prefix)| {
                let hits: Vec<String> = if prefix.is_empty() {
                    // Targets of one scenario kind (overhead, contention's "50% below none",
                    // the tight sweep's, the RFC demo's) and none's kills.
                    vs.iter()
                        .filter(|v| !known.iter().any(|k| v.target.starts_with(k)) && !v.target.starts_with("vs "))
                        .map(|v| format!("{}: {}", v.target, cell(v)))
                        .collect()
                } else {
                    vs.iter().filter(|v| v.target.starts_with(prefix)).map(|v| cell(v)).collect()
                };
                if hits.is_empty() {
                    "–".into()
                } else {
                    hits.join("; ")
                }
            })
            .collect();
        if peers && cells.iter().all(|c| c == "–") {
            continue;
        }
        let g = src.groups.iter().find(|g| g.scenario == scenario && g.variant == variant && g.kernel == kernel);
        let build = g.map(|g| src.build(g)).unwrap_or_else(|| "not recorded".into());
        let _ = writeln!(out, "| {scenario}/{variant} | {} | {build} | {} |", short_kernel(kernel), cells.join(" | "));
    }
    out
}

/// Every target the memqos arm missed, one line each: the README lists them beside its claims.
fn render_missed(src: &Sources) -> String {
    let mut v: Vec<&Verdict> = src.verdicts.iter().filter(|v| !v.met).collect();
    v.sort_by_key(|v| (v.scenario.clone(), v.variant.clone(), kernel_rank(&v.kernel)));
    let mut out = String::new();
    for x in v {
        let g = src.groups.iter().find(|g| g.scenario == x.scenario && g.variant == x.variant && g.kernel == x.kernel);
        let _ = writeln!(
            out,
            "- {}/{} on {} (build {}): {} — {}",
            x.scenario,
            x.variant,
            short_kernel(&x.kernel),
            g.map(|g| src.build(g)).unwrap_or_else(|| "not recorded".into()),
            x.target,
            x.measured
        );
    }
    let total = src.verdicts.len();
    let missed = out.lines().count();
    format!("{missed} of {total} target verdicts missed:\n\n{out}")
}

#[derive(serde::Deserialize)]
struct Quantiles {
    p10: f64,
    p50: f64,
    p90: f64,
    p99: f64,
}

#[derive(serde::Deserialize)]
struct OverheadKernel {
    kernel: String,
    added_p50_ms: f64,
    added_lean_p50_ms: f64,
    added_paired: Quantiles,
    arms: Vec<(String, Quantiles)>,
}

#[derive(serde::Deserialize)]
struct Overhead {
    kernels: Vec<OverheadKernel>,
}

/// The agent-host issue's target for `memqos run`: at most this much added per call (p50).
const TARGET_MS: f64 = 5.0;

/// `memqos run`'s added time per call, from docs/agent/run-overhead.json (`memqos-lab bench run`).
fn render_run_overhead(root: &Path) -> Result<String> {
    let path = root.join("docs/agent/run-overhead.json");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let o: Overhead = serde_json::from_str(&text).with_context(|| format!("{}", path.display()))?;
    let mut out = String::new();
    for k in &o.kernels {
        let plain = k.arms.iter().find(|a| a.0 == "plain").map(|a| a.1.p50);
        let _ = writeln!(
            out,
            "- `memqos run` overhead ({} TCG guest, `docs/agent/run-overhead.json`): +{:.0} ms p50 per call for \
             `memqos run` (paired p90 +{:.0} ms), +{:.0} ms for `memqos-run`, against {} for a plain exec; the \
             target ({TARGET_MS} ms added p50) is {}.",
            short_kernel(&k.kernel),
            k.added_p50_ms,
            k.added_paired.p90,
            k.added_lean_p50_ms,
            plain.map(|p| format!("{p:.0} ms")).unwrap_or_else(|| "–".into()),
            if k.added_p50_ms <= TARGET_MS { "met" } else { "**missed**" },
        );
    }
    Ok(out)
}

/// memqos against none, runs with a kill, wherever either arm had one: the exact test and
/// whether the outcome flips, one line per series.
fn render_kill_tests(src: &Sources) -> String {
    let mut out = String::new();
    let mut gs: Vec<&GroupSummary> = src.groups.iter().collect();
    gs.sort_by_key(|g| (g.scenario.clone(), g.variant.clone(), kernel_rank(&g.kernel)));
    for g in gs {
        let arm = |n: &str| g.arms.iter().find(|a| a.arm == n);
        let (Some(m), Some(n)) = (arm("memqos"), arm("none")) else { continue };
        if m.runs_with_kill == 0 && n.runs_with_kill == 0 {
            continue;
        }
        let _ = writeln!(
            out,
            "- {}/{} on {} (build {}): memqos {} of {} runs with a kill, none {} of {} (p = {:.3}){}",
            g.scenario,
            g.variant,
            short_kernel(&g.kernel),
            src.build(g),
            m.runs_with_kill,
            m.runs,
            n.runs_with_kill,
            n.runs,
            n.kill_runs_p_vs_memqos.unwrap_or(f64::NAN),
            if g.outcome_flips { "; the outcome flips from run to run" } else { "" }
        );
    }
    out
}

fn agent_host(root: &Path) -> Result<crate::agent_host::summary::HostSummary> {
    let path = root.join("docs/agent-host/summary.json");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{}", path.display()))
}

/// Median [min–max] of a per-session ratio.
fn range(e: &Option<crate::stats::Estimate>) -> String {
    e.map(|e| format!("{:.2}x [{:.2}–{:.2}]", e.median, e.min, e.max)).unwrap_or_else(|| "–".into())
}

/// The agent-host experiment's levels on one kernel (`kernel` is a release prefix).
fn render_agent_levels(root: &Path, kernel: &str) -> Result<String> {
    let h = agent_host(root)?;
    let mut out = String::from(
        "| sessions | arm | sessions finished | runtimes killed (runs) | calls OOM-killed / started | OOM kills under the host (OOM events at a session's own limit) | runtime p95 vs solo | call time vs solo |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    let rank = |a: &str| ["none", "static-peak", "memqos"].iter().position(|x| *x == a).unwrap_or(9);
    let mut ls: Vec<_> = h.levels.iter().filter(|l| l.kernel.starts_with(kernel)).collect();
    ls.sort_by_key(|l| (l.level, rank(&l.arm), l.arm.clone()));
    for l in ls {
        let _ = writeln!(
            out,
            "| {} | {} | {}/{} | {} ({}) | {}/{} | {} ({}) | {} | {} |",
            l.level,
            l.arm,
            l.sessions_finished,
            l.sessions,
            l.runtimes_killed,
            l.runs_with_runtime_killed,
            l.calls_killed,
            l.calls_started,
            l.parent_oom_kills,
            l.session_limit_ooms.map(|x| x.to_string()).unwrap_or_else(|| "–".into()),
            range(&l.runtime_p95_vs_solo),
            range(&l.call_time_vs_solo),
        );
    }
    Ok(out)
}

/// Each arm's density with the bracket the levels run allow, and the ratios the brackets
/// support: a density of 9 where the next level run is 12 says "9 to 11", not 9.
fn render_agent_density(root: &Path) -> Result<String> {
    let h = agent_host(root)?;
    let mut out = String::new();
    let mut kernels: Vec<&str> = h.density.iter().map(|d| d.kernel.as_str()).collect();
    kernels.sort_by_key(|k| (kernel_rank(k), k.to_string()));
    kernels.dedup();
    for k in kernels {
        let mut levels: Vec<usize> = h.levels.iter().filter(|l| l.kernel == k).map(|l| l.level).collect();
        levels.sort_unstable();
        levels.dedup();
        // (lowest, highest) density consistent with the levels run; `None` high: unbounded.
        let bracket =
            |d: usize| -> (usize, Option<usize>) { (d, levels.iter().find(|&&l| l > d).map(|&next| next - 1)) };
        let show = |(lo, hi): (usize, Option<usize>)| match hi {
            Some(h) if h == lo => lo.to_string(),
            Some(h) => format!("{lo}–{h}"),
            None => format!("≥ {lo} (the largest level run)"),
        };
        // A summary that records each arm's own levels (per-arm `--levels`, `--refine`) gives
        // the bracket itself; older ones ran every arm at the same levels.
        let get = |arm: &str| {
            h.density.iter().find(|d| d.kernel == k && d.arm == arm).map(|d| match d.levels_run.is_empty() {
                true => bracket(d.sessions),
                false => (d.sessions, d.lowest_lost.map(|l| l - 1)),
            })
        };
        let mut parts = Vec::new();
        for arm in ["memqos", "none", "static-peak"] {
            if let Some(b) = get(arm) {
                parts.push(format!("{arm} {}", show(b)));
            }
        }
        let mut ratios = Vec::new();
        if let Some((m_lo, _)) = get("memqos") {
            for peer in ["none", "static-peak"] {
                match get(peer) {
                    Some((_, Some(p_hi))) if p_hi > 0 => {
                        ratios.push(format!("memqos/{peer} ≥ {m_lo}/{p_hi} = {:.2}x", m_lo as f64 / p_hi as f64))
                    }
                    Some((_, Some(_))) => ratios.push(format!("{peer} lost a runtime at every level run")),
                    Some((_, None)) => ratios.push(format!("memqos/{peer}: no bound (both at the largest level)")),
                    None => {}
                }
            }
        }
        let _ = writeln!(out, "- {}: density {}; {}.", short_kernel(k), parts.join(", "), ratios.join(", "));
    }
    Ok(out)
}

/// One source's reaction figures from docs/bpf/reaction.json (`memqos-lab bench reaction`).
#[derive(serde::Deserialize)]
struct ReactionSource {
    cgroups: usize,
    source: String,
    misses: usize,
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
    max_ms: Option<f64>,
    syscalls_p50: Option<f64>,
    #[serde(default)]
    reasons: Vec<String>,
}

#[derive(serde::Deserialize)]
struct ReactionKernel {
    kernel: String,
    sources: Vec<ReactionSource>,
}

#[derive(serde::Deserialize)]
struct Reaction {
    kernels: Vec<ReactionKernel>,
}

/// The reaction bench's target: the BPF source's p99 delay at most this, at every tree size.
const REACTION_P99_TARGET_MS: f64 = 10.0;

fn reaction(root: &Path) -> Result<Reaction> {
    let path = root.join("docs/bpf/reaction.json");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{}", path.display()))
}

/// The reaction delays per tree size and source on one kernel. "cgroups" counts the
/// protected and the low cgroup beside the idle ones the bench adds.
fn render_reaction(root: &Path, kernel: &str) -> Result<String> {
    let r = reaction(root)?;
    let mut out = String::from(
        "| cgroups | source | misses | p50 ms | p99 ms | max ms | syscalls (median) | what triggered the write |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    let ms = |x: Option<f64>| match x {
        Some(v) if v >= 100.0 => format!("{v:.0}"),
        Some(v) => format!("{v:.1}"),
        None => "–".into(),
    };
    for k in r.kernels.iter().filter(|k| k.kernel.starts_with(kernel)) {
        for s in &k.sources {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                s.cgroups + 2,
                s.source,
                s.misses,
                ms(s.p50_ms),
                ms(s.p99_ms),
                ms(s.max_ms),
                s.syscalls_p50.map(|x| format!("{x:.0}")).unwrap_or_else(|| "–".into()),
                if s.reasons.is_empty() { "(no reaction)".to_string() } else { s.reasons.join("; ") },
            );
        }
    }
    Ok(out)
}

/// The reaction targets, computed: BPF p99 within the target at every size, and the BPF
/// path's system calls per reaction not growing with the tree (beyond the smallest, which has
/// fewer throttle candidates to read).
fn render_reaction_targets(root: &Path) -> Result<String> {
    let r = reaction(root)?;
    let mut out = String::new();
    let mut kernels: Vec<&ReactionKernel> = r.kernels.iter().collect();
    kernels.sort_by_key(|k| kernel_rank(&k.kernel));
    for k in kernels {
        let bpf: Vec<&ReactionSource> = k.sources.iter().filter(|s| s.source == "bpf").collect();
        let p99s: Vec<String> = bpf.iter().map(|s| format!("{} at {}", ms_or_dash(s.p99_ms), s.cgroups + 2)).collect();
        let met = bpf.iter().all(|s| s.misses == 0 && s.p99_ms.is_some_and(|p| p <= REACTION_P99_TARGET_MS));
        let with_idle: Vec<f64> = bpf.iter().filter(|s| s.cgroups > 0).filter_map(|s| s.syscalls_p50).collect();
        let flat = with_idle.windows(2).all(|w| w[1] <= w[0]);
        let _ = writeln!(
            out,
            "- {}: BPF p99 ≤ {REACTION_P99_TARGET_MS} ms at every size: {} (ms at cgroups: {}); system calls per \
             reaction not growing with the tree: {} ({}).",
            short_kernel(&k.kernel),
            if met { "met" } else { "**missed**" },
            p99s.join(", "),
            if with_idle.len() < 2 {
                "not measured (one size with idle cgroups)"
            } else if flat {
                "met"
            } else {
                "**missed**"
            },
            bpf.iter()
                .map(|s| format!(
                    "{} at {}",
                    s.syscalls_p50.map(|x| format!("{x:.0}")).unwrap_or("–".into()),
                    s.cgroups + 2
                ))
                .collect::<Vec<_>>()
                .join(", "),
        );
    }
    Ok(out)
}

fn ms_or_dash(x: Option<f64>) -> String {
    x.map(|v| format!("{v:.1}")).unwrap_or_else(|| "–".into())
}

/// `x` with three significant digits, as C's and Python's `%.3g` print it (the stats tables
/// used that format when a script printed them).
fn g3(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    // Rust's {:e} rounds to the digits asked for, so the exponent is that of the rounded value.
    let sci = format!("{x:.2e}");
    let (mantissa, exp) = sci.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("an integer exponent");
    let trim = |s: String| if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s };
    if (-4..3).contains(&exp) {
        trim(format!("{:.*}", (2 - exp).max(0) as usize, x))
    } else {
        format!("{}e{}{:02}", trim(mantissa.to_string()), if exp < 0 { '-' } else { '+' }, exp.abs())
    }
}

/// 1234567 -> "1,234,567".
fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[derive(serde::Deserialize)]
struct BenchTotal {
    wall_s: f64,
    user_s: f64,
    sys_s: f64,
}

#[derive(serde::Deserialize)]
struct BenchSeries {
    method: String,
    #[serde(default)]
    unavailable: Option<String>,
    #[serde(default)]
    total: Option<BenchTotal>,
    #[serde(default)]
    per_op_us_median: Option<f64>,
    #[serde(default)]
    per_op_us_min: Option<f64>,
    #[serde(default)]
    per_op_us_max: Option<f64>,
    #[serde(default)]
    speedup_vs_control: Option<f64>,
}

#[derive(serde::Deserialize)]
struct BenchTree {
    size: u64,
    iterations: u64,
    series: Vec<BenchSeries>,
}

#[derive(serde::Deserialize)]
struct StatsBench {
    kernel: String,
    machine: String,
    cpus: u64,
    mode: String,
    single_target: String,
    iterations: u64,
    batches: u64,
    single: Vec<BenchSeries>,
    trees: Vec<BenchTree>,
}

/// `memqos-lab bench stats`' results, every docs/stats/stats-bench-*.json: 7.x guests first, then
/// 6.12, then the rest (the host).
fn render_stats_bench(root: &Path) -> Result<String> {
    let dir = root.join("docs/stats");
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("stats-bench-")))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    let rank = |p: &std::path::PathBuf| {
        let n = p.file_name().unwrap_or_default().to_string_lossy().into_owned();
        (
            if n.starts_with("stats-bench-7.") {
                0
            } else if n.starts_with("stats-bench-6.12") {
                1
            } else {
                2
            },
            n,
        )
    };
    files.sort_by_key(rank);
    let row = |s: &BenchSeries, ms: bool| -> Option<String> {
        if s.unavailable.is_some() {
            return None;
        }
        let t = s.total.as_ref()?;
        let (k, unit) = if ms { (1000.0, "ms") } else { (1.0, "µs") };
        Some(format!(
            "| {} | {} {unit} ({}–{}) | {:.2} / {:.2} / {:.2} | {:.1}x |",
            s.method,
            g3(s.per_op_us_median? / k),
            g3(s.per_op_us_min? / k),
            g3(s.per_op_us_max? / k),
            t.wall_s,
            t.user_s,
            t.sys_s,
            s.speedup_vs_control?
        ))
    };
    let mut out = String::new();
    for f in files {
        let text = std::fs::read_to_string(&f).with_context(|| format!("reading {}", f.display()))?;
        let r: StatsBench = serde_json::from_str(&text).with_context(|| format!("{}", f.display()))?;
        let _ = writeln!(out, "**{}** ({}; {}, {} CPUs)\n", r.kernel, r.mode, r.machine, r.cpus);
        let _ = writeln!(
            out,
            "One cgroup ({}), n = {} per method in {} batches:\n",
            r.single_target,
            thousands(r.iterations),
            r.batches
        );
        out.push_str(
            "| method | per read, median (min–max over batches) | wall / user / sys (s, all n) | vs control |\n",
        );
        out.push_str("| --- | --- | --- | --- |\n");
        for s in &r.single {
            if let Some(l) = row(s, false) {
                let _ = writeln!(out, "{l}");
            }
        }
        out.push('\n');
        for t in &r.trees {
            let _ = writeln!(
                out,
                "Tree of {} cgroups, {} snapshots per method:\n",
                thousands(t.size),
                thousands(t.iterations)
            );
            out.push_str(
                "| method | per snapshot, median (min–max) | wall / user / sys (s, all snapshots) | vs control |\n",
            );
            out.push_str("| --- | --- | --- | --- |\n");
            for s in &t.series {
                if let Some(l) = row(s, true) {
                    let _ = writeln!(out, "{l}");
                }
            }
            out.push('\n');
        }
    }
    // The region's end marker follows on its own line.
    Ok(out.trim_end().to_string() + "\n")
}

/// What each arm of `memqos-lab bench run` cost per call, with the arms' names as the doc reads.
fn render_run_arms(root: &Path) -> Result<String> {
    let path = root.join("docs/agent/run-overhead.json");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let o: Overhead = serde_json::from_str(&text).with_context(|| format!("{}", path.display()))?;
    let label = |a: &str| match a {
        "plain" => "plain `/bin/true`".to_string(),
        "binary" => "`memqos --version`".to_string(),
        "run" => "`memqos run -- /bin/true` (clone3 into the cgroup)".to_string(),
        "run-fork" => "the same, fork and migrate".to_string(),
        "lean-binary" => "`memqos-run --version`".to_string(),
        "lean-run" => "`memqos-run -- /bin/true`".to_string(),
        other => other.to_string(),
    };
    let mut out = String::new();
    for k in &o.kernels {
        let _ = writeln!(
            out,
            "{}:\n\n| arm | p10 ms | p50 ms | p90 ms | p99 ms |\n|---|---|---|---|---|",
            short_kernel(&k.kernel)
        );
        for (arm, q) in &k.arms {
            let _ = writeln!(out, "| {} | {:.1} | {:.1} | {:.1} | {:.1} |", label(arm), q.p10, q.p50, q.p90, q.p99);
        }
    }
    Ok(out)
}

#[derive(serde::Deserialize)]
struct ChurnKnob {
    n: u64,
    misses: u64,
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
    max_ms: Option<f64>,
}

#[derive(serde::Deserialize)]
struct ChurnKernel {
    kernel: String,
    cpu_weight: ChurnKnob,
    oom_score_adj: ChurnKnob,
}

#[derive(serde::Deserialize)]
struct Churn {
    kernels: Vec<ChurnKernel>,
}

/// The churn bench's target: a new call cgroup's knobs written within this, p99.
const CHURN_P99_TARGET_MS: f64 = 100.0;

/// How soon a new tool-call cgroup got its tier's knobs under churn (docs/agent/churn.json).
fn render_churn(root: &Path) -> Result<String> {
    let path = root.join("docs/agent/churn.json");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let c: Churn = serde_json::from_str(&text).with_context(|| format!("{}", path.display()))?;
    let ms = |x: Option<f64>| x.map(|v| format!("{v:.1} ms")).unwrap_or_else(|| "–".into());
    let mut out = String::new();
    for k in &c.kernels {
        let _ = writeln!(
            out,
            "{}:\n\n| | n | misses | p50 | p99 | max |\n| --- | --- | --- | --- | --- | --- |",
            short_kernel(&k.kernel)
        );
        for (name, x) in [("cpu.weight written", &k.cpu_weight), ("oom_score_adj written", &k.oom_score_adj)] {
            let _ = writeln!(
                out,
                "| {name} | {} | {} | {} | {} | {} |",
                thousands(x.n),
                x.misses,
                ms(x.p50_ms),
                ms(x.p99_ms),
                ms(x.max_ms)
            );
        }
        let met = [&k.cpu_weight, &k.oom_score_adj]
            .iter()
            .all(|x| x.misses == 0 && x.p99_ms.is_some_and(|p| p <= CHURN_P99_TARGET_MS));
        let _ = writeln!(
            out,
            "\nTarget p99 ≤ {CHURN_P99_TARGET_MS} ms from creation to the tier's knobs, no miss: {}.",
            if met { "met" } else { "**missed**" }
        );
    }
    Ok(out)
}

/// The body of the generated region `name`.
pub fn render(name: &str, src: &Sources) -> Result<String> {
    Ok(match name {
        "missed-targets" => render_missed(src),
        "run-arms" => render_run_arms(&src.root)?,
        "churn" => render_churn(&src.root)?,
        "stats-bench" => render_stats_bench(&src.root)?,
        "reaction-7" => render_reaction(&src.root, "7.")?,
        "reaction-6.12" => render_reaction(&src.root, "6.12")?,
        "reaction-targets" => render_reaction_targets(&src.root)?,
        "agent-host-7" => render_agent_levels(&src.root, "7.")?,
        "agent-host-6.12" => render_agent_levels(&src.root, "6.12")?,
        "agent-density" => render_agent_density(&src.root)?,
        "kill-tests" => render_kill_tests(src),
        "realtime-ranking" => render_ranking(src, "oom", "oom-realtime"),
        "realtime-ranking-tight" => render_ranking(src, "sweep-tight", "sweep-tight-dask-realtime"),
        "run-overhead" => render_run_overhead(&src.root)?,
        "margins" => render_margins(src),
        "targets" => render_targets(src, false),
        "peer-targets" => render_targets(src, true),
        _ => match spec(name) {
            Some(s) => render_spec(src, &s),
            None => bail!("no generated table named {name:?}"),
        },
    })
}

const START: &str = "<!-- generated: ";
const END: &str = "<!-- end generated: ";

/// The names of the generated regions of `doc`, in order.
pub fn regions(doc: &str) -> Vec<String> {
    doc.lines()
        .filter_map(|l| l.strip_prefix(START))
        .filter_map(|rest| rest.split(' ').next())
        .map(str::to_string)
        .collect()
}

/// `doc` with region `name`'s body replaced by `body`; an error if the markers are missing.
pub fn splice(doc: &str, name: &str, body: &str) -> Result<String> {
    let start = doc
        .lines()
        .scan(0usize, |pos, l| {
            let at = *pos;
            *pos += l.len() + 1;
            Some((at, l))
        })
        .find(|(_, l)| l.strip_prefix(START).is_some_and(|r| r.split(' ').next() == Some(name)))
        .map(|(at, l)| at + l.len() + 1)
        .with_context(|| format!("no \"{START}{name} ...\" line"))?;
    let end_marker = format!("{END}{name} -->");
    let end = doc[start..].find(&end_marker).map(|i| start + i).with_context(|| format!("no \"{end_marker}\""))?;
    Ok(format!("{}{}{}", &doc[..start], body, &doc[end..]))
}

/// Rewrites (or, with `write` false, only checks) every generated region of every doc in
/// [`DOCS`] under `root`; returns the regions that were (or would be) changed, as `doc: name`.
pub fn update(root: &Path, write: bool) -> Result<Vec<String>> {
    let src = Sources::load(root)?;
    let mut stale = Vec::new();
    for doc in DOCS {
        let path = root.join(doc);
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let mut new = text.clone();
        for name in regions(&text) {
            let body = render(&name, &src).with_context(|| doc.to_string())?;
            new = splice(&new, &name, &body).with_context(|| doc.to_string())?;
            if splice(&text, &name, &body)? != text {
                stale.push(format!("{doc}: {name}"));
            }
        }
        if write && new != text {
            std::fs::write(&path, new).with_context(|| format!("writing {}", path.display()))?;
        }
    }
    Ok(stale)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arm(name: &str, runs: usize, high_killed: usize, high_vs_solo: f64) -> ArmSummary {
        let mut a: ArmSummary = serde_json::from_value(serde_json::json!({
            "arm": name, "runs": runs, "runs_with_oom_kill": high_killed, "oom_kills": high_killed,
            "high_finished": runs - high_killed, "low_finished": 0, "low_started": 0,
            "runs_with_kill": high_killed, "runs_high_killed": high_killed,
        }))
        .unwrap();
        a.high_wall_vs_solo = Some(crate::stats::Estimate {
            n: runs,
            median: high_vs_solo,
            ci_low: high_vs_solo,
            ci_high: high_vs_solo,
            min: high_vs_solo,
            max: high_vs_solo,
            killed: high_killed,
        });
        a
    }

    fn group(scenario: &str, speed: f64, arms: Vec<ArmSummary>) -> GroupSummary {
        let mut g: GroupSummary = serde_json::from_value(serde_json::json!({
            "scenario": scenario, "variant": "seed", "kernel": "7.2.13+deb14-amd64",
            "parent_max_mb": 1100, "speed": speed, "traces": [], "arms": [],
        }))
        .unwrap();
        g.arms = arms;
        g
    }

    #[test]
    fn the_ranking_at_1x_is_compared_with_the_compressed_one() {
        let sources = |slow: Vec<ArmSummary>| Sources {
            groups: vec![
                group("oom", 10.0, vec![arm("none", 3, 2, KILLED), arm("memqos", 3, 0, 1.1), arm("oomd", 3, 0, 1.3)]),
                group("oom-realtime", 1.0, slow),
            ],
            verdicts: vec![],
            builds: BTreeMap::new(),
            root: std::path::PathBuf::new(),
        };
        let same = render_ranking(
            &sources(vec![arm("memqos", 3, 0, 1.0), arm("oomd", 3, 0, 1.2), arm("none", 3, 1, 1.1)]),
            "oom",
            "oom-realtime",
        );
        assert!(same.contains("the ranking holds at 1x"), "{same}");
        assert!(same.contains("memqos (1.10x) > oomd (1.30x) > none (killed, protected killed in 2 of 3)"), "{same}");
        // oomd's protected task outlives memqos's at 1x: it moves up, memqos down.
        let moved = render_ranking(
            &sources(vec![arm("memqos", 3, 1, 1.0), arm("oomd", 3, 0, 1.2), arm("none", 3, 1, 1.1)]),
            "oom",
            "oom-realtime",
        );
        assert!(moved.contains("does not hold at 1x; arms in other places: oomd, memqos"), "{moved}");
        assert!(moved.contains("memqos is 2 of 3 at 1x and 1 of 3 compressed"), "{moved}");
    }

    #[test]
    fn g3_prints_like_printf_g() {
        // Python: [f"{x:.3g}" for x in ...]
        let cases = [
            (297.83585, "298"),
            (90.90313455, "90.9"),
            (0.0311, "0.0311"),
            (57.0, "57"),
            (13.0, "13"),
            (1.95, "1.95"),
            (999.6, "1e+03"),
            (1234.0, "1.23e+03"),
            (0.00001234, "1.23e-05"),
            (0.1, "0.1"),
        ];
        for (x, want) in cases {
            assert_eq!(g3(x), want, "{x}");
        }
        assert_eq!(thousands(1_000_000), "1,000,000");
        assert_eq!(thousands(200), "200");
    }

    #[test]
    fn regions_are_found_and_spliced() {
        let doc = "a\n<!-- generated: t1 (from x) -->\nold\n<!-- end generated: t1 -->\nb\n";
        assert_eq!(regions(doc), vec!["t1"]);
        let new = splice(doc, "t1", "new\n").unwrap();
        assert_eq!(new, "a\n<!-- generated: t1 (from x) -->\nnew\n<!-- end generated: t1 -->\nb\n");
        assert!(splice(doc, "t2", "x").is_err());
        assert!(splice("<!-- generated: t1 -->\nno end\n", "t1", "x").is_err());
    }

    /// The docs' generated tables are what the committed summary gives: a hand edit of a
    /// table, or a summary rebuilt without `scripts/docs.sh`, fails here.
    #[test]
    fn agent_density_brackets_come_from_each_arms_own_levels_when_recorded() {
        use crate::agent_host::summary::{Density, HostSummary};
        let d = |arm: &str, sessions: usize, lowest_lost: Option<usize>, levels_run: Vec<usize>| Density {
            kernel: "7.2.13+deb14-amd64".into(),
            arm: arm.into(),
            sessions,
            highest_clean: Some(sessions),
            lowest_lost,
            levels_run,
            admitted_by_limits: None,
        };
        // none refined to 10–11 (lost at 11), memqos held at 14, its largest level.
        let h = HostSummary {
            levels: Vec::new(),
            density: vec![d("none", 10, Some(11), vec![9, 10, 11, 12]), d("memqos", 14, None, vec![12, 13, 14])],
            targets: Vec::new(),
            example_explanations: Default::default(),
        };
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("docs/agent-host")).unwrap();
        std::fs::write(dir.path().join("docs/agent-host/summary.json"), serde_json::to_string(&h).unwrap()).unwrap();
        assert_eq!(
            render_agent_density(dir.path()).unwrap(),
            "- 7.2.13: density memqos ≥ 14 (the largest level run), none 10; memqos/none ≥ 14/10 = 1.40x.\n"
        );
    }

    #[test]
    fn docs_match_the_committed_data() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let stale = update(&root, false).unwrap();
        assert!(
            stale.is_empty(),
            "generated doc tables differ from the committed data (run bash scripts/docs.sh): {stale:?}"
        );
        // The check can fail: a changed figure in a copy of a region is caught.
        let src = Sources::load(&root).unwrap();
        let body = render("oom-7.2", &src).unwrap();
        let doc =
            format!("<!-- generated: oom-7.2 -->\n{}<!-- end generated: oom-7.2 -->\n", body.replacen('1', "2", 1));
        assert_ne!(splice(&doc, "oom-7.2", &body).unwrap(), doc);
    }
}
