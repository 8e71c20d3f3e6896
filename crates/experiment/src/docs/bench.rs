//! The benches' tables: `memqos run` overhead, reaction delays, stats backends, knob churn.

use super::{kernel_rank, short_kernel};
use anyhow::{Context, Result};
use std::fmt::Write as _;
use std::path::Path;

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
pub(super) fn render_run_overhead(root: &Path) -> Result<String> {
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
pub(super) fn render_reaction(root: &Path, kernel: &str) -> Result<String> {
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
pub(super) fn render_reaction_targets(root: &Path) -> Result<String> {
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
pub(super) fn render_stats_bench(root: &Path) -> Result<String> {
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
pub(super) fn render_run_arms(root: &Path) -> Result<String> {
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
pub(super) fn render_churn(root: &Path) -> Result<String> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
