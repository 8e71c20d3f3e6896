//! `memqos-lab bench limits`: does cutting many lower cgroups hold the daemon's loop?
//!
//! Writing memory.high below a cgroup's usage makes the writer reclaim the difference unless
//! the kernel honours O_NONBLOCK on the file (docs/results/reliability.md). Scenario, in a
//! guest with swap and zswap: `LOWS` cgroups under `/sys/fs/cgroup/limits-bench`, each
//! holding `--hold-mb` of touched anonymous memory (`memqos-lab workload alloc`), and a
//! protected cgroup `prot`. One round: the daemon's actuator (the real one, journal and
//! event log on tmpfs) applies one batch cutting every low by `--cut-mb`, then at once a
//! second batch with one write to `prot/memory.low` (the next reaction the loop would make).
//! Measured per round, CLOCK_MONOTONIC:
//! - `batch_ms`: how long the cut batch held the loop (apply's return);
//! - `reaction_ms`: from the cut batch's start to the end of the protected write;
//! - `minimal_ms`: a minimal reactor's write of the same file with the same value (open,
//!   write, close on another thread, at the moment the cut batch starts): the floor.
//!
//! Arms, in the same guest, alternating round by round: `before` (limits written on the
//! loop's thread, blocking, as memqos did up to 4de390c) and `after` (the shipped path:
//! O_NONBLOCK, lowering writes on the worker pool). Every round counts.

use anyhow::{bail, Context, Result};
use clap::Args;
use memqos_daemon::actuator::{Actuator, LimitWrites, Request, Target};
use memqos_daemon::events::EventLog;
use memqos_daemon::journal::Journal;
use memqos_vmtest::self_run;
use serde::{Deserialize, Serialize};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const ROOT: &str = "/sys/fs/cgroup/limits-bench";
const STATE: &str = "/run/memqos-limits-bench";

#[derive(Args)]
pub struct LimitsArgs {
    /// Kernel series to boot: "6.12", "7", "6.12,7" or "all".
    #[arg(long, default_value = "all")]
    kernel: String,
    /// Rounds per arm (N).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Lower cgroups cut in one batch.
    #[arg(long, default_value_t = 50)]
    lows: usize,
    /// Anonymous memory each low holds, MiB.
    #[arg(long, default_value_t = 40)]
    hold_mb: u64,
    /// How far below its usage each low is cut, MiB.
    #[arg(long, default_value_t = 24)]
    cut_mb: u64,
    /// Where to write limits.json.
    #[arg(long, default_value = "docs/results/limits.json")]
    out: PathBuf,
    /// Only rewrite the markdown table (limits.md beside --out) from the committed JSON.
    #[arg(long)]
    render_only: bool,
    #[arg(long, hide = true)]
    in_guest: bool,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Round {
    pub arm: String,
    pub batch_ms: f64,
    pub reaction_ms: f64,
    pub minimal_ms: f64,
    /// Cuts whose write had finished when the protected write was made.
    pub cuts_done_before_reaction: usize,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KernelResult {
    pub kernel: String,
    pub lows: usize,
    pub hold_mb: u64,
    pub cut_mb: u64,
    pub rounds: Vec<Round>,
}

impl super::PerKernel for KernelResult {
    fn kernel(&self) -> &str {
        &self.kernel
    }
}

pub fn run(a: LimitsArgs) -> Result<u8> {
    if a.cut_mb >= a.hold_mb || a.lows == 0 || a.rounds == 0 {
        bail!("--cut-mb must be below --hold-mb, and --lows and --rounds positive");
    }
    if a.in_guest {
        let r = in_guest(&a)?;
        let out = std::env::var_os("MEMQOS_RESULTS").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/tmp"));
        std::fs::write(out.join("limits.json"), serde_json::to_string_pretty(&r)?)?;
        return Ok(0);
    }
    if a.render_only {
        return render_file(&a.out).map(|()| 0);
    }
    let mut all = Vec::new();
    for kernel in self_run::kernels(&a.kernel)? {
        eprintln!(
            "bench limits: booting {} ({} lows x {} MiB, cut by {} MiB)",
            kernel.release(),
            a.lows,
            a.hold_mb,
            a.cut_mb
        );
        let args = [
            "bench".to_string(),
            "limits".into(),
            "--in-guest".into(),
            "--rounds".into(),
            a.rounds.to_string(),
            "--lows".into(),
            a.lows.to_string(),
            "--hold-mb".into(),
            a.hold_mb.to_string(),
            "--cut-mb".into(),
            a.cut_mb.to_string(),
        ];
        let swap = a.lows as u64 * a.hold_mb * 2 + 512;
        let run = self_run::run_self(&kernel, &args, |g| {
            g.memory_mb(3072).swap_mb(swap).zswap(true).timeout(Duration::from_secs(1800)).stream_console(true)
        })?;
        let r: KernelResult = serde_json::from_str(&super::guest_result(&kernel, &run, "limits.json")?)?;
        print_summary(&r);
        all.push(r);
    }
    let all = super::keep_earlier_kernels(&a.out, all);
    let doc = serde_json::json!({
        "benchmark": "memqos bench limits",
        "scenario": "lows cgroups each holding hold_mb of touched anonymous memory, swap + zswap on; one batch cuts every low's memory.high by cut_mb below its usage through the daemon's actuator, then one write to a protected cgroup's memory.low; arms before (limits written on the loop's thread, blocking: the path up to 4de390c) and after (O_NONBLOCK, lowering writes on the worker pool) alternate round by round in one guest",
        "times": "CLOCK_MONOTONIC in the guest, ms; TCG guest on a shared 2-core host: compare arms and the minimal reactor within a kernel, not absolute times",
        "kernels": all,
        "provenance": crate::provenance::Provenance::collect(Path::new("."), &a.kernel),
    });
    super::write_result(&a.out, &doc)?;
    render_file(&a.out)?;
    Ok(0)
}

fn print_summary(r: &KernelResult) {
    println!("kernel {}: {} lows x {} MiB cut by {} MiB", r.kernel, r.lows, r.hold_mb, r.cut_mb);
    for arm in ["before", "after"] {
        let of = |f: fn(&Round) -> f64| {
            let mut v: Vec<f64> = r.rounds.iter().filter(|x| x.arm == arm).map(f).collect();
            v.sort_by(|a, b| a.total_cmp(b));
            v
        };
        let (batch, reaction, minimal) = (of(|x| x.batch_ms), of(|x| x.reaction_ms), of(|x| x.minimal_ms));
        let med = median;
        println!(
            "  {arm:<6} N {}  batch p50 {:.1} max {:.1} ms  reaction p50 {:.1} max {:.1} ms  minimal reactor p50 {:.1} max {:.1} ms",
            batch.len(),
            med(&batch),
            max(&batch),
            med(&reaction),
            max(&reaction),
            med(&minimal),
            max(&minimal)
        );
    }
}

/// The lows, each with its holder, and the protected cgroup.
struct Tree {
    lows: Vec<(String, u64)>,
    holders: Vec<Child>,
    prot: (String, u64),
}

fn in_guest(a: &LimitsArgs) -> Result<KernelResult> {
    let root = Path::new(ROOT);
    std::fs::write("/sys/fs/cgroup/cgroup.subtree_control", "+memory").context("enabling memory")?;
    std::fs::create_dir_all(root)?;
    std::fs::write(root.join("cgroup.subtree_control"), "+memory")?;
    let mut rounds = Vec::new();
    for i in 0..a.rounds * 2 {
        let arm = if i % 2 == 0 { "before" } else { "after" };
        let mut tree = fill(a)?;
        let r = one_round(a, &tree, arm);
        for h in tree.holders.iter_mut() {
            let _ = h.kill();
            let _ = h.wait();
        }
        let r = r?;
        eprintln!(
            "round {i} {arm}: batch {:.1} ms, reaction {:.1} ms, minimal {:.1} ms",
            r.batch_ms, r.reaction_ms, r.minimal_ms
        );
        rounds.push(r);
        for (name, _) in tree.lows.iter().chain(std::iter::once(&tree.prot)) {
            let _ = std::fs::remove_dir(root.join(name));
        }
    }
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")?.trim().to_owned();
    Ok(KernelResult { kernel, lows: a.lows, hold_mb: a.hold_mb, cut_mb: a.cut_mb, rounds })
}

/// Makes the cgroups and waits until every low holds its memory.
fn fill(a: &LimitsArgs) -> Result<Tree> {
    let root = Path::new(ROOT);
    let exe = std::env::current_exe()?;
    let mut lows = Vec::new();
    let mut holders = Vec::new();
    for i in 0..a.lows {
        let name = format!("low{i}");
        let dir = root.join(&name);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("memory.high"), "max")?;
        lows.push((name, std::fs::metadata(&dir)?.ino()));
        holders.push(
            Command::new(&exe)
                .args(["workload", "alloc", "--mb", &a.hold_mb.to_string(), "--hold-ms", "600000", "--cgroup"])
                .arg(&dir)
                .spawn()
                .context("starting a holder")?,
        );
    }
    let prot_dir = root.join("prot");
    std::fs::create_dir_all(&prot_dir)?;
    std::fs::write(prot_dir.join("memory.low"), "0")?;
    let prot = ("prot".to_string(), std::fs::metadata(&prot_dir)?.ino());
    let want = a.hold_mb << 20;
    let until = Instant::now() + Duration::from_secs(600);
    for (name, _) in &lows {
        let current = root.join(name).join("memory.current");
        while std::fs::read_to_string(&current)?.trim().parse::<u64>().unwrap_or(0) < want * 9 / 10 {
            if Instant::now() > until {
                bail!("{name} never held {} MiB", a.hold_mb);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(Tree { lows, holders, prot })
}

fn one_round(a: &LimitsArgs, tree: &Tree, arm: &str) -> Result<Round> {
    let root = Path::new(ROOT);
    let state = Path::new(STATE);
    let _ = std::fs::remove_dir_all(state);
    std::fs::create_dir_all(state)?;
    let journal = Journal::open(state, root)?;
    let log = EventLog::open(state, 64 << 20, false);
    let mut act = Actuator::new(memqos_daemon::beneath::Root::open(root)?, journal, log, false);
    act.set_limit_writes(if arm == "before" { LimitWrites::InlineBlocking } else { LimitWrites::Workers });
    let cut = (a.hold_mb - a.cut_mb) << 20;
    let batch: Vec<Request> = tree
        .lows
        .iter()
        .map(|(name, id)| {
            Request::new(Target::Cgroup { path: name.clone(), id: *id }, "memory.high", cut.to_string(), "bench: cut")
        })
        .collect();
    let prot = Target::Cgroup { path: tree.prot.0.clone(), id: tree.prot.1 };
    let low_file = root.join("prot/memory.low");
    // The minimal reactor: the same write, on its own thread, from the same instant.
    let (go_tx, go_rx) = std::sync::mpsc::channel::<Instant>();
    let minimal = std::thread::spawn(move || -> f64 {
        let start = go_rx.recv().unwrap_or_else(|_| Instant::now());
        let _ = std::fs::write(&low_file, "1048576");
        start.elapsed().as_secs_f64() * 1e3
    });
    let start = Instant::now();
    let _ = go_tx.send(start);
    let cut_events = act.apply(batch)?;
    let batch_ms = start.elapsed().as_secs_f64() * 1e3;
    let cuts_done = cut_events.iter().filter(|e| e.file == "memory.high").count();
    act.apply(vec![Request::new(prot, "memory.low", "2097152", "bench: protect")])?;
    let reaction_ms = start.elapsed().as_secs_f64() * 1e3;
    let minimal_ms = minimal.join().unwrap_or(f64::NAN);
    // Everything back before the next round: the actuator waits for the writes in flight.
    act.restore()?;
    Ok(Round { arm: arm.to_string(), batch_ms, reaction_ms, minimal_ms, cuts_done_before_reaction: cuts_done })
}

/// limits.md beside `json`: one row per kernel and arm, from the committed rounds.
fn render_file(json: &Path) -> Result<()> {
    let text = std::fs::read_to_string(json).with_context(|| format!("reading {}", json.display()))?;
    let doc: serde_json::Value = serde_json::from_str(&text).with_context(|| format!("parsing {}", json.display()))?;
    let kernels: Vec<KernelResult> =
        serde_json::from_value(doc["kernels"].clone()).with_context(|| format!("{}: kernels", json.display()))?;
    let md = json.with_extension("md");
    std::fs::write(&md, render(&kernels, &json.display().to_string()))?;
    eprintln!("wrote {}", md.display());
    Ok(())
}

/// The table: per kernel and arm, N rounds, the loop held by the cut batch and the protected
/// write's latency from the batch's start (median and max), the minimal reactor's, and the
/// reaction's median over the minimal reactor's median.
pub fn render(kernels: &[KernelResult], source: &str) -> String {
    let mut out = format!(
        "<!-- generated by `memqos-lab bench limits --render-only` from {source}: do not edit -->\n\n\
         | kernel | lows x hold, cut | arm | N | loop held by the cuts, p50 / max ms | protected write after the cuts, p50 / max ms | minimal reactor, p50 / max ms | reaction / minimal, p50 |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- |\n"
    );
    for k in kernels {
        for arm in ["before", "after"] {
            let rounds: Vec<&Round> = k.rounds.iter().filter(|r| r.arm == arm).collect();
            let b = sorted(rounds.iter().map(|x| x.batch_ms));
            let r = sorted(rounds.iter().map(|x| x.reaction_ms));
            let m = sorted(rounds.iter().map(|x| x.minimal_ms));
            out += &format!(
                "| {} | {} x {} MiB, {} MiB | {arm} | {} | {:.1} / {:.1} | {:.1} / {:.1} | {:.1} / {:.1} | {:.1}x |\n",
                k.kernel,
                k.lows,
                k.hold_mb,
                k.cut_mb,
                rounds.len(),
                median(&b),
                max(&b),
                median(&r),
                max(&r),
                median(&m),
                max(&m),
                median(&r) / median(&m)
            );
        }
    }
    out
}

fn sorted(v: impl Iterator<Item = f64>) -> Vec<f64> {
    let mut v: Vec<f64> = v.collect();
    v.sort_by(|a, b| a.total_cmp(b));
    v
}

fn median(v: &[f64]) -> f64 {
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn max(v: &[f64]) -> f64 {
    v.last().copied().unwrap_or(f64::NAN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_a_row_per_kernel_and_arm_with_medians_of_the_rounds() {
        let round = |arm: &str, b: f64, r: f64, m: f64| Round {
            arm: arm.into(),
            batch_ms: b,
            reaction_ms: r,
            minimal_ms: m,
            cuts_done_before_reaction: 0,
        };
        let k = KernelResult {
            kernel: "7.2".into(),
            lows: 50,
            hold_mb: 40,
            cut_mb: 24,
            rounds: vec![
                round("before", 900.0, 910.0, 2.0),
                round("before", 1100.0, 1120.0, 4.0),
                round("after", 10.0, 12.0, 2.0),
            ],
        };
        let t = render(&[k], "x.json");
        let before =
            "| 7.2 | 50 x 40 MiB, 24 MiB | before | 2 | 1000.0 / 1100.0 | 1015.0 / 1120.0 | 3.0 / 4.0 | 338.3x |";
        assert!(t.contains(before), "{t}");
        assert!(t.contains("| after | 1 | 10.0 / 10.0 | 12.0 / 12.0 | 2.0 / 2.0 | 6.0x |"), "{t}");
    }
}
