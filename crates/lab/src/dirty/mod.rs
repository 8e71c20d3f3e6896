//! `memqos-lab experiment dirty-noisy-neighbour`: the dirty-page noisy-neighbour reproducer
//! (the dirty_ratio / dirty_min RFC, docs/references.md; issue 7) run in real-kernel guests, stock and
//! with memqos's per-tier `dirty.max` / `dirty.min`, side by side. See docs/dirty-isolation.md.

mod guest;
mod report;
mod trace;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use memqos_vmtest::{kernels, self_run, Series};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

pub use guest::GuestReport;
pub use report::Report;

/// The guest's scratch disk: 256 MiB (ext4, or xfs with `--fs xfs`), writes throttled to
/// 256 KB/s by QEMU.
pub const SCRATCH_MB: u64 = 256;
pub const DISK_WRITE_BPS: u64 = 262_144;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// No memqos: the kernel's own dirty throttling.
    Stock,
    /// The memqos daemon with the victim tier's dirty.min and the noisy tier's dirty.max.
    Memqos,
}

/// The scratch disk's file system.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Fs {
    #[default]
    Ext4,
    Xfs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PolicyChoice {
    Stock,
    Memqos,
    Both,
}

/// Phase lengths and rates; the defaults are the issue's.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Settings {
    pub runs: u32,
    pub solo_secs: u64,
    pub fill_secs: u64,
    pub contended_secs: u64,
    pub victim_rate_kib: u64,
    /// Scratch file system mounted with lazytime (timestamps kept in memory; on ext4 before
    /// 7.x the i_version bump still journals the inode on every write, see
    /// docs/dirty-isolation.md).
    pub lazytime: bool,
    /// Reports from before issue 31 have no `fs`: they ran on ext4.
    #[serde(default)]
    pub fs: Fs,
    /// io.max `wbps` of the victim's and the noisy cgroup (bytes/s), `None` = unlimited.
    #[serde(default)]
    pub victim_wbps: Option<u64>,
    #[serde(default)]
    pub noisy_wbps: Option<u64>,
    /// The scratch disk's queue/max_sectors_kb (largest request), `None` = the kernel's.
    #[serde(default)]
    pub max_sectors_kb: Option<u64>,
}

impl Settings {
    /// Arm label beside the policy: file system and io.max, when not the defaults.
    pub fn variant(&self) -> String {
        let mut v = Vec::new();
        if self.fs != Fs::Ext4 {
            v.push(format!("{:?}", self.fs).to_lowercase());
        }
        if !self.lazytime {
            v.push("no-lazytime".to_string());
        }
        if self.victim_wbps.is_some() || self.noisy_wbps.is_some() {
            let k = |w: Option<u64>| w.map_or("max".to_string(), |b| format!("{}K", b / 1024));
            v.push(format!("io.max wbps victim {} noisy {}", k(self.victim_wbps), k(self.noisy_wbps)));
        }
        if let Some(kb) = self.max_sectors_kb {
            v.push(format!("max_sectors_kb {kb}"));
        }
        v.join(", ")
    }
}

#[derive(Args, Debug)]
pub struct ExperimentArgs {
    /// Iterations per kernel and policy (one guest boot runs them all).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub runs: u32,
    /// Kernel series: "6.12", "7", "6.12,7" or "all".
    #[arg(long, default_value = "all")]
    pub kernel: String,
    /// Which policies to run.
    #[arg(long, value_enum, default_value_t = PolicyChoice::Both)]
    pub policy: PolicyChoice,
    /// Seconds the victim runs alone.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(2..=120))]
    pub solo_secs: u64,
    /// Seconds the noisy writer runs before the victim starts (it fills the dirty pool).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=60))]
    pub fill_secs: u64,
    /// Seconds the victim runs next to the noisy writer.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(2..=120))]
    pub contended_secs: u64,
    /// Mount the scratch ext4 without lazytime: every write() then updates mtime through the
    /// ext4 journal and also stalls on jbd2 commits (seconds on this disk), alone or not.
    #[arg(long)]
    pub no_lazytime: bool,
    /// The scratch disk's file system.
    #[arg(long, value_enum, default_value_t = Fs::Ext4)]
    pub fs: Fs,
    /// io.max write bandwidth for the victim's cgroup, bytes/s (set before each run, as an
    /// operator would; the journal's own writes come from the root cgroup and are not limited).
    #[arg(long, value_name = "BYTES_PER_SEC", value_parser = clap::value_parser!(u64).range(4096..))]
    pub victim_wbps: Option<u64>,
    /// io.max write bandwidth for the noisy cgroup, bytes/s.
    #[arg(long, value_name = "BYTES_PER_SEC", value_parser = clap::value_parser!(u64).range(4096..))]
    pub noisy_wbps: Option<u64>,
    /// Cap the scratch disk's request size (queue/max_sectors_kb): a journal write queued
    /// behind one large data request waits for all of it.
    #[arg(long, value_name = "KIB", value_parser = clap::value_parser!(u64).range(4..))]
    pub max_sectors_kb: Option<u64>,
    /// Print the full report (every iteration and sample) as JSON on stdout.
    #[arg(long, conflicts_with = "markdown")]
    pub json: bool,
    /// Print the summary and target tables as Markdown (docs/dirty/README.md embeds them).
    #[arg(long)]
    pub markdown: bool,
    /// Also write the full JSON report to this file.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Build the report from guest reports saved by earlier runs (each guest leaves
    /// dirty-<policy>.json in its results directory) instead of booting guests.
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub from: Vec<PathBuf>,
    /// Inside a guest: run one policy's iterations and write a GuestReport to this file (a
    /// relative path is in the guest's results directory, $MEMQOS_RESULTS).
    #[arg(long, hide = true, value_name = "FILE")]
    pub in_guest: Option<PathBuf>,
}

/// What `run_experiment` needs; `ExperimentArgs` converts into it.
#[derive(Clone, Debug)]
pub struct ExperimentOpts {
    pub kernels: Vec<Series>,
    pub policies: Vec<Policy>,
    pub settings: Settings,
    /// Echo the guests' progress lines to stderr.
    pub progress: bool,
}

impl ExperimentArgs {
    fn settings(&self) -> Settings {
        Settings {
            runs: self.runs,
            solo_secs: self.solo_secs,
            fill_secs: self.fill_secs,
            contended_secs: self.contended_secs,
            victim_rate_kib: 500,
            lazytime: !self.no_lazytime,
            fs: self.fs,
            victim_wbps: self.victim_wbps,
            noisy_wbps: self.noisy_wbps,
            max_sectors_kb: self.max_sectors_kb,
        }
    }
}

/// The CLI entry: `memqos-lab experiment dirty-noisy-neighbour ...`.
pub fn run_cli(args: ExperimentArgs) -> Result<u8> {
    if let Some(out) = &args.in_guest {
        let policy = match args.policy {
            PolicyChoice::Stock => Policy::Stock,
            PolicyChoice::Memqos => Policy::Memqos,
            PolicyChoice::Both => bail!("--in-guest runs one policy: pass --policy stock or --policy memqos"),
        };
        let out = memqos_vmtest::results_dir().map_or_else(|| out.clone(), |dir| dir.join(out));
        // Written after every iteration, so a guest that times out still leaves what it measured.
        let save = |report: &GuestReport| -> Result<()> {
            std::fs::write(&out, serde_json::to_string(report)?).with_context(|| format!("writing {}", out.display()))
        };
        guest::run(&args.settings(), policy, save)?;
        return Ok(0);
    }
    let report = if args.from.is_empty() {
        run_experiment(&cli_opts(&args)?)?
    } else {
        let mut runs = Vec::new();
        for path in &args.from {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            runs.push(
                serde_json::from_str::<GuestReport>(&text).with_context(|| format!("parsing {}", path.display()))?,
            );
        }
        report::build(runs)
    };
    if let Some(out) = &args.out {
        if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        // Where the file came from (issue 29); `--from` rebuilds keep the rebuilding checkout's.
        let mut doc = serde_json::to_value(&report)?;
        doc["provenance"] =
            serde_json::to_value(crate::provenance::Provenance::collect(std::path::Path::new("."), &args.kernel))?;
        std::fs::write(out, serde_json::to_string_pretty(&doc)?)
            .with_context(|| format!("writing {}", out.display()))?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else if args.markdown {
        print!("{}", report::render_markdown(&report));
    } else {
        print!("{}", report::render(&report));
    }
    Ok(0)
}

fn cli_opts(args: &ExperimentArgs) -> Result<ExperimentOpts> {
    let policies = match args.policy {
        PolicyChoice::Stock => vec![Policy::Stock],
        PolicyChoice::Memqos => vec![Policy::Memqos],
        PolicyChoice::Both => vec![Policy::Stock, Policy::Memqos],
    };
    Ok(ExperimentOpts {
        kernels: Series::parse_list(&args.kernel)?,
        policies,
        settings: args.settings(),
        progress: !args.json,
    })
}

/// Boots one guest per kernel and policy, runs `settings.runs` iterations in each, and
/// returns every measurement with per-kernel/policy summaries.
pub fn run_experiment(opts: &ExperimentOpts) -> Result<Report> {
    let mut runs = Vec::new();
    for &series in &opts.kernels {
        let kernel = kernels::ensure(series)?;
        for &policy in &opts.policies {
            if opts.progress {
                eprintln!(
                    "== kernel {} policy {policy:?} {}: {} iterations ==",
                    kernel.release(),
                    opts.settings.variant(),
                    opts.settings.runs
                );
            }
            let s = &opts.settings;
            // Measured under TCG on a loaded 2-core host: up to ~2x the phases plus a drain of
            // up to 90 s per iteration; a timeout loses the whole guest, so be generous.
            let per_iteration = 2 * (s.solo_secs + s.fill_secs + s.contended_secs) + 150;
            let name = format!("dirty-{policy:?}.json").to_lowercase();
            let policy_arg = format!("{policy:?}").to_lowercase();
            let mut args: Vec<String> = ["experiment", "dirty-noisy-neighbour", "--policy", &policy_arg]
                .into_iter()
                .map(String::from)
                .collect();
            for (flag, v) in [
                ("--runs", u64::from(s.runs)),
                ("--solo-secs", s.solo_secs),
                ("--fill-secs", s.fill_secs),
                ("--contended-secs", s.contended_secs),
            ] {
                args.extend([flag.to_string(), v.to_string()]);
            }
            if !s.lazytime {
                args.push("--no-lazytime".into());
            }
            args.extend(["--fs".to_string(), format!("{:?}", s.fs).to_lowercase()]);
            for (flag, v) in [
                ("--victim-wbps", s.victim_wbps),
                ("--noisy-wbps", s.noisy_wbps),
                ("--max-sectors-kb", s.max_sectors_kb),
            ] {
                if let Some(v) = v {
                    args.extend([flag.to_string(), v.to_string()]);
                }
            }
            // Relative: the guest writes it into its results directory.
            args.extend(["--in-guest".to_string(), name.clone()]);
            let run = self_run::run_self(&kernel, &args, |g| {
                g.scratch_mb(SCRATCH_MB, Some(DISK_WRITE_BPS))
                    .timeout(Duration::from_secs(120 + per_iteration * s.runs as u64))
                    .stream_console(false)
            })?;
            if opts.progress {
                for line in run.console.lines().filter(|l| l.starts_with("dirty-noisy-neighbour:")) {
                    eprintln!("  {line}");
                }
            }
            if !run.success() {
                let tail: Vec<&str> = run.console.lines().rev().take(30).collect();
                bail!(
                    "the experiment failed in the guest on {} ({policy:?}), exit {}; results in {}; last console lines:\n{}",
                    kernel.release(),
                    run.exit_code,
                    run.results_dir.display(),
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                );
            }
            let path = run.results_dir.join(&name);
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading the guest's report {}", path.display()))?;
            let mut r: GuestReport =
                serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
            r.kernel = kernel.release();
            if opts.progress {
                eprintln!("  guest report: {}", path.display());
            }
            runs.push(r);
        }
    }
    Ok(report::build(runs))
}
