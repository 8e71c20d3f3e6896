//! What the experiments' runs say across groups: rankings, margins, the targets and the kill tests.

use super::spec::groups_of;
use super::{kernel_rank, short_kernel, Sources};
use crate::scenario::Workload;
use crate::stats::KILLED;
use crate::summary::{ratio_median, ArmSummary, GroupSummary, Verdict};
use std::collections::BTreeSet;
use std::fmt::Write as _;

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
pub(super) fn render_ranking(src: &Sources, compressed: &str, realtime: &str) -> String {
    // A scenario of several variants (triples) ranks each on its own: name it in every row.
    let variants = groups_of(src, &[realtime], None).iter().map(|g| g.variant.clone()).collect::<BTreeSet<_>>();
    let by_variant = variants.len() > 1;
    let mut out = String::new();
    if by_variant {
        let _ = writeln!(out, "| kernel | variant | speed | build | runs | ranking (best first) |");
        let _ = writeln!(out, "| --- | --- | --- | --- | --- | --- |");
    } else {
        let _ = writeln!(out, "| kernel | speed | build | runs | ranking (best first) |");
        let _ = writeln!(out, "| --- | --- | --- | --- | --- |");
    }
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
            let variant = if by_variant { format!(" {} |", g.variant) } else { String::new() };
            let _ = writeln!(
                out,
                "| {} |{variant} {}x | {} | {runs} | {} |",
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
        let what = if by_variant {
            format!("{} {}", short_kernel(&slow.kernel), slow.variant)
        } else {
            short_kernel(&slow.kernel).to_string()
        };
        verdicts.push(if moved.is_empty() {
            format!("{what}: the ranking holds at 1x.{tested}")
        } else {
            format!(
                "{what}: the ranking does not hold at 1x; arms in other places: {}. memqos is {} of {} at 1x and {} of {} compressed.{tested}",
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

/// A scenario's kills pooled over its variants (triples), per kernel and arm, fewest first:
/// where each variant has only a few runs, the pooled counts are what its prose can read.
pub(super) fn render_kills_pooled(src: &Sources, scenario: &str) -> String {
    #[derive(Default)]
    struct Pooled {
        runs: usize,
        protected_lost: usize,
        runs_with_kill: usize,
        kills: u64,
        variants: usize,
    }
    // In order of first appearance: kernels as groups_of sorts them, arms as the series has them.
    fn entry<'v, T: Default>(v: &'v mut Vec<(String, T)>, key: &str) -> &'v mut T {
        let i = v.iter().position(|(k, _)| k == key).unwrap_or_else(|| {
            v.push((key.to_owned(), T::default()));
            v.len() - 1
        });
        &mut v[i].1
    }
    let mut by_kernel: Vec<(String, Vec<(String, Pooled)>)> = Vec::new();
    for g in groups_of(src, &[scenario], None) {
        let arms = entry(&mut by_kernel, &g.kernel);
        for a in g.arms.iter().filter(|a| !a.arm.starts_with("solo")) {
            let p = entry(arms, &a.arm);
            p.runs += a.runs;
            p.protected_lost += a.runs_high_killed;
            p.runs_with_kill += a.runs_with_kill;
            p.kills += a.task_kills;
            p.variants += 1;
        }
    }
    let mut out = String::new();
    if by_kernel.is_empty() {
        let _ = writeln!(out, "No run of {scenario} yet.");
        return out;
    }
    let _ = writeln!(out, "| kernel | arm | variants | runs | protected task lost | runs with a kill | tasks killed (of them low tasks) |");
    let _ = writeln!(out, "| --- | --- | --- | --- | --- | --- | --- |");
    for (kernel, mut arms) in by_kernel {
        arms.sort_by_key(|(name, p)| (p.kills, p.protected_lost, name.clone()));
        for (name, p) in arms {
            let lows = p.kills.saturating_sub(p.protected_lost as u64);
            let _ = writeln!(
                out,
                "| {} | {name} | {} | {} | {} of {} | {} of {} | {} ({lows}) |",
                short_kernel(&kernel),
                p.variants,
                p.runs,
                p.protected_lost,
                p.runs,
                p.runs_with_kill,
                p.runs,
                p.kills
            );
        }
    }
    out
}

/// Each replay scenario's margin and whether its kill outcome flips from run to run.
pub(super) fn render_margins(src: &Sources) -> String {
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
pub(super) fn render_targets(src: &Sources, peers: bool) -> String {
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

/// Every target the memqos arm missed, one line each: docs/results/evidence.md lists them beside its claims.
pub(super) fn render_missed(src: &Sources) -> String {
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

/// memqos against none, runs with a kill, wherever either arm had one: the exact test and
/// whether the outcome flips, one line per series.
pub(super) fn render_kill_tests(src: &Sources) -> String {
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

/// Which build made each committed series, with its runs, speed, the host's load around its
/// guests and the share of the host's CPU other work and steal took during them (from the
/// provenance files beside the runs; "not recorded" and "–" before they held them).
pub(super) fn render_series_builds(src: &Sources) -> String {
    let mut out = String::from(
        "| scenario | kernel | speed | runs | build | host load (1 min) before → after each guest | other host work / steal, share of host CPU during each guest |\n| --- | --- | --- | --- | --- | --- | --- |\n",
    );
    let mut seen = BTreeSet::new();
    let mut gs: Vec<&GroupSummary> = src.groups.iter().collect();
    gs.sort_by_key(|g| (g.scenario.clone(), kernel_rank(&g.kernel), g.variant.clone()));
    for g in gs {
        if !seen.insert((g.scenario.clone(), g.kernel.clone())) {
            continue;
        }
        // Variants of one scenario and kernel run in the same guests.
        let runs = src
            .groups
            .iter()
            .filter(|o| o.scenario == g.scenario && o.kernel == g.kernel)
            .flat_map(|o| o.arms.iter().map(|a| a.runs))
            .max()
            .unwrap_or(0);
        let dir = src.root.join("docs/experiments/runs").join(&g.scenario).join(&g.kernel);
        let loads = host_loads(&dir);
        let _ = writeln!(
            out,
            "| {} | {} | {}x | {runs} | {} | {} | {} |",
            g.scenario,
            short_kernel(&g.kernel),
            g.speed,
            src.build(g),
            if loads.is_empty() { "not recorded".to_string() } else { loads.join("; ") },
            host_cpu_shares(&dir)
        );
    }
    out
}

/// "0.09 → 1.74" for each guest of the series in `dir`, in run order: from its provenance
/// file, or for series from before provenance, its `host-load*.txt` (the same two lines of
/// /proc/loadavg as text).
fn host_loads(dir: &std::path::Path) -> Vec<String> {
    let first = |l: &str| l.split_whitespace().next().unwrap_or("?").to_owned();
    let mut loads: Vec<String> = provenances(dir)
        .iter()
        .map(|p| format!("{} → {}", first(&p.host_load_before), p.host_load_after.as_deref().map_or("?".into(), first)))
        .collect();
    if loads.is_empty() {
        loads = guest_files(dir, "host-load")
            .iter()
            .filter_map(|f| {
                let text = std::fs::read_to_string(f).ok()?;
                let after_colon = |tag: &str| {
                    text.lines().find(|l| l.contains(tag)).and_then(|l| l.split_once(':')).map(|(_, v)| first(v))
                };
                Some(format!("{} → {}", after_colon("before")?, after_colon("after")?))
            })
            .collect();
    }
    loads
}

/// "12% / 0%" (other host work / steal, as shares of the host's CPU) for each guest of the
/// series in `dir`, in run order; "–" for a guest whose provenance does not say (every series
/// from before it was recorded), and "–" alone when none does.
fn host_cpu_shares(dir: &std::path::Path) -> String {
    let pct = |s: Option<f64>| s.map_or("?".to_string(), |s| format!("{:.0}%", s * 100.0));
    let shares: Vec<String> = provenances(dir)
        .iter()
        .map(|p| p.host_cpu.map_or("–".into(), |h| format!("{} / {}", pct(h.other_share()), pct(h.steal_share()))))
        .collect();
    if shares.iter().all(|s| s == "–") {
        "–".into()
    } else {
        shares.join("; ")
    }
}

/// The provenance of each guest of the series in `dir` that has a readable one, in run order.
fn provenances(dir: &std::path::Path) -> Vec<crate::provenance::Provenance> {
    guest_files(dir, "provenance")
        .iter()
        .filter_map(|f| serde_json::from_str(&std::fs::read_to_string(f).ok()?).ok())
        .collect()
}

/// The files in `dir` named `prefix*`, one per guest, in run order.
fn guest_files(dir: &std::path::Path, prefix: &str) -> Vec<std::path::PathBuf> {
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(prefix)))
        .collect();
    // The first guest's file has no run range in its name (runs from 1); later ones do.
    files.sort_by_key(|p| (p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.contains("-runs")), p.clone()));
    files
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

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
    fn kills_are_pooled_over_a_scenarios_variants_fewest_first() {
        let with_kills = |name: &str, runs: usize, high_killed: usize, kills: u64| {
            let mut a = arm(name, runs, high_killed, 1.0);
            a.runs_with_kill = runs;
            a.task_kills = kills;
            a
        };
        let variant = |v: &str, arms: Vec<ArmSummary>| {
            let mut g = group("sweep-tight-realtime", 1.0, arms);
            g.variant = v.into();
            g
        };
        let src = Sources {
            groups: vec![
                variant(
                    "a+b+c",
                    vec![with_kills("none", 2, 2, 3), with_kills("memqos", 2, 0, 2), arm("solo:high", 2, 0, 1.0)],
                ),
                variant("d+e+f", vec![with_kills("none", 3, 1, 4), with_kills("memqos", 3, 0, 3)]),
            ],
            verdicts: vec![],
            builds: BTreeMap::new(),
            root: std::path::PathBuf::new(),
        };
        let text = render_kills_pooled(&src, "sweep-tight-realtime");
        let rows: Vec<&str> = text.lines().skip(2).collect();
        assert_eq!(
            rows,
            [
                "| 7.2.13 | memqos | 2 | 5 | 0 of 5 | 5 of 5 | 5 (5) |",
                "| 7.2.13 | none | 2 | 5 | 3 of 5 | 5 of 5 | 7 (4) |",
            ],
            "{text}"
        );
        assert_eq!(render_kills_pooled(&src, "oom-realtime"), "No run of oom-realtime yet.\n");
    }

    #[test]
    fn host_loads_come_from_provenance_or_the_older_text_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = |before: &str, after: &str| {
            serde_json::json!({"commit": null, "dirty": null, "scenario_sha256": null, "daemon_config_sha256": null,
                "speed": 1.0, "kernel": "7.2", "host_load_before": before, "host_load_after": after})
        };
        let write = |name: &str, v: serde_json::Value| std::fs::write(dir.path().join(name), v.to_string()).unwrap();
        write("provenance-runs02-02.txt", p("4.92 1 1 1/2 3", "3.00 1 1 1/2 3"));
        write("provenance.txt", p("1.05 1 1 1/2 3", "4.74 1 1 1/2 3"));
        assert_eq!(host_loads(dir.path()), ["1.05 → 4.74", "4.92 → 3.00"]);
        // No guest recorded the host's CPU (every series before it was): one dash.
        assert_eq!(host_cpu_shares(dir.path()), "–");
        // The second guest did: 24 s of other work in 100 s on 2 cores, 2 s stolen.
        let mut measured = p("4.92 1 1 1/2 3", "3.00 1 1 1/2 3");
        measured["host_cpu"] = serde_json::json!({"wall_s": 100.0, "cores": 2, "busy_s": 190.0, "steal_s": 2.0,
            "guest_s": 165.0, "own_s": 1.0, "other_s": 24.0});
        write("provenance-runs02-02.txt", measured);
        assert_eq!(host_cpu_shares(dir.path()), "–; 12% / 1%");
        let old = tempfile::tempdir().unwrap();
        std::fs::write(
            old.path().join("host-load.txt"),
            "host /proc/loadavg before the guest: 0.91 0.83 0.99 1/81 12961\nhost /proc/loadavg after the guest:  0.72 0.75 0.89 1/80 13163\nguest wall time: 403.0 s\n",
        )
        .unwrap();
        assert_eq!(host_loads(old.path()), ["0.91 → 0.72"]);
        assert_eq!(host_cpu_shares(old.path()), "–");
        assert!(host_loads(&old.path().join("absent")).is_empty());
    }
}
