//! The tables of the experiments' runs: a [`Spec`] names the scenarios and arms, its columns
//! what each row shows.

use super::{kernel_rank, short_kernel, Sources};
use crate::summary::{est, ratio, ratio_median, ArmSummary, GroupSummary};
use std::fmt::Write as _;

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
pub(super) struct Spec {
    scenarios: &'static [&'static str],
    kernel: Option<&'static str>,
    arms: &'static [&'static str],
    cols: &'static [Col],
}

const PEER_ARMS: &[&str] =
    &["none", "memqos", "static-adj", "static-reserve", "kube-memoryqos", "oomd", "systemd-oomd"];

/// The sweeps' arms, in the docs' usual order (baselines first, memqos last).
const SWEEP_ARMS: &[&str] = &["none", "static-max", "static-adj", "static-reserve", "kube-memoryqos", "memqos"];

pub(super) fn spec(name: &str) -> Option<Spec> {
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
    // Issue 30's table spans scenarios and names each; the others are one scenario each.
    let scenario_kill_cols = &[
        Scenario,
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
    let kill_cols = &scenario_kill_cols[1..];
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
            // issue 29's baselines (static-adj, static-reserve) included
            arms: &["none", "static-max", "static-high", "static-adj", "static-reserve", "memqos"],
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
            // Issue 29.3's baselines where a series ran them (a series without an arm has no
            // row for it).
            arms: &["none", "memqos", "cpu-weight", "static-adj", "static-reserve"],
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
        // The same demo with the CPU weights of memqos-experiment-cpu.toml (issue 30.4), its
        // side-by-side without them (none and memqos only, as rfc-demo-cpu), with the weights
        // and freeze_thrashing, and the high side beside a neighbour that only computes or
        // that works memory and fits (the lab's ceiling for any memory controller).
        "rfc-demo-cpu" => Spec {
            scenarios: &[
                "rfc-demo-reduced",
                "rfc-demo-cpu",
                "rfc-demo-thrash",
                "rfc-demo-cpu-neighbour",
                "rfc-demo-vm-neighbour",
            ],
            kernel: None,
            arms: &["solo:high", "solo:low1", "none", "memqos"],
            cols: &[Scenario, Kernel, Build, Arm, HighOps, HighOpsSolo, LowOps, LowOpsSolo, LowOpsNone, Kills],
        },
        "realtime" => Spec {
            scenarios: &[
                "oom-realtime",
                "sweep-tight-dask-realtime",
                "oom-systemd-realtime",
                "sweep-tight-realtime",
                "sweep-tight-systemd-realtime",
            ],
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
                Variant,
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
        // Every arm a series ran (issue 29.3's baselines where they exist); a series without
        // an arm has no row for it.
        "sweep" => Spec { scenarios: &["sweep"], kernel: None, arms: SWEEP_ARMS, cols: kill_cols },
        "sweep-tight" => Spec { scenarios: &["sweep-tight"], kernel: None, arms: SWEEP_ARMS, cols: kill_cols },
        "sweep-tight-declared" => {
            Spec { scenarios: &["sweep-tight-declared"], kernel: None, arms: SWEEP_ARMS, cols: kill_cols }
        }
        "sweep-declared" => Spec { scenarios: &["sweep-declared"], kernel: None, arms: SWEEP_ARMS, cols: kill_cols },
        // Issue 30: nothing declared, at first sight (without and with first_sight_growth),
        // with history (a learned series' first run in each guest is its own "(learning
        // run)" variant), with the tier's recent peaks, and with zswap (seven arms; two arms
        // without and with first_sight_growth).
        "expectations" => Spec {
            scenarios: &[
                "sweep-tight-first-sight",
                "sweep-tight-first-sight-growth",
                "sweep-tight-first-sight-growth-drawn",
                "sweep-tight-learned",
                "sweep-tight-tier-learned",
                "sweep-tight-zswap",
                "sweep-tight-zswap-reduced",
                "sweep-tight-zswap-growth",
                "sweep-first-sight",
                "sweep-first-sight-growth",
                "sweep-learned",
                "sweep-tier-learned",
                "sweep-zswap",
            ],
            kernel: None,
            arms: &["none", "memqos"],
            cols: scenario_kill_cols,
        },
        // Issue 30: a declared peak with zswap, the lows parked (park_with_swap) and sharing
        // the room (today's default with swap): the protected task's tail against the lows' time.
        "zswap-declared" => Spec {
            scenarios: &[
                "sweep-tight-zswap-declared",
                "sweep-tight-zswap-declared-shares",
                "sweep-tight-zswap-declared-shares-cpu",
            ],
            kernel: None,
            arms: &["none", "memqos"],
            cols: &[
                Scenario,
                Kernel,
                Variant,
                Build,
                Arm,
                RunsWithKill,
                LowsFinished,
                HighSoloCi,
                P95SoloCi,
                P95NoneCi,
                LowsNoneCi,
            ],
        },
        _ => return None,
    })
}

pub(super) fn groups_of<'a>(src: &'a Sources, scenarios: &[&str], kernel: Option<&str>) -> Vec<&'a GroupSummary> {
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

pub(super) fn render_spec(src: &Sources, s: &Spec) -> String {
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
