//! `memqos-lab bench faults`: the fault campaign of issue 28 in real-kernel guests, one row per
//! fault and kernel in docs/reliability.json, rendered to docs/reliability.md.
//!
//! Scenarios (each in the guest, `guest.rs`; the daemon runs crates/lab/configs/faults.toml):
//! - `sigkill`: a protected cgroup declares its expected peak (root-owned xattr, honoured), so
//!   the daemon caps every low cgroup's memory.high at once; low cgroups are made and removed
//!   at 100/s with names reused, each given its own memory.high value V_k right after its
//!   mkdir. The daemon (with its guardian) is SIGKILLed at a random instant 0.2–3 s after its
//!   launch, --kills times; after each, once the guardian has restored (state lock free,
//!   journal gone or empty), every live low cgroup must hold its own V_k: a cap left is a knob
//!   lost, another cgroup's V a knob restored into the wrong cgroup.
//! - `hostile`: a tenant's oddities below a `**` tier while the daemon runs (a leaf without the
//!   memory controller, a path longer than PATH_MAX, non-UTF-8 and control-character names, a
//!   non-root cgroup declaring 2^64-1 bytes, a root one declaring it too, a control client
//!   trickling bytes); then a normal low cgroup must still be capped.
//! - `state_dir`: state_dir on a small tmpfs, filled mid-run, then read-only; the daemon must
//!   keep running, never hold a knob whose original is not journaled, and journal new knobs
//!   again soon after space (or write access) returns.
//! - `descriptors`: 10,000 cgroups, the daemon at an open-file limit of 1,024 it cannot raise.
//!
//! The soak is `memqos-lab bench churn --duration 3600` (docs/agent/churn.json): its row is
//! rendered here when that file is present.

mod guest;
mod report;
mod result;

use anyhow::{bail, Context, Result};
use clap::Args;
use memqos_vmtest::self_run;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use guest::SCENARIOS;
use report::plain;
pub use report::{render, rows, soak_row, targets, Row, Soak};
pub use result::{
    Check, DescriptorsResult, Doc, HostileResult, KernelResult, Phase, SigkillResult, Spread, StateDirResult,
};

#[derive(Args)]
pub struct FaultsArgs {
    /// Kernel series to boot: "6.12", "7", "6.12,7" or "all".
    #[arg(long, default_value = "7")]
    kernel: String,
    /// SIGKILLs in the sigkill scenario.
    #[arg(long, default_value_t = 100)]
    kills: usize,
    /// Seed of the kill instants (the result records it).
    #[arg(long)]
    seed: Option<u64>,
    /// Scenarios to run (comma-separated): sigkill, hostile, state_dir, descriptors.
    #[arg(long, default_value = "sigkill,hostile,state_dir,descriptors", value_delimiter = ',')]
    scenarios: Vec<String>,
    /// Low cgroups in the descriptors scenario.
    #[arg(long, default_value_t = 10_000)]
    cgroups: usize,
    /// Where the JSON result goes (kernels measured earlier and not in this run are kept).
    #[arg(long, default_value = "docs/reliability.json")]
    out: PathBuf,
    /// The markdown rendered from --out (and the churn soak, if present).
    #[arg(long, default_value = "docs/reliability.md")]
    md: PathBuf,
    /// The churn bench's result, whose run is the soak row.
    #[arg(long, default_value = "docs/agent/churn.json")]
    soak: PathBuf,
    /// Boot nothing: render --md from --out and --soak.
    #[arg(long)]
    render_only: bool,
    #[arg(long, hide = true)]
    in_guest: bool,
}

pub fn run(a: FaultsArgs) -> Result<u8> {
    for s in &a.scenarios {
        if !SCENARIOS.contains(&s.as_str()) {
            bail!("--scenarios {s}: expected some of {}", SCENARIOS.join(", "));
        }
    }
    if a.in_guest {
        let seed = a.seed.unwrap_or(1);
        let r = guest::run(&a.scenarios, a.kills, seed, a.cgroups)?;
        let out = std::env::var_os("MEMQOS_RESULTS").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/tmp"));
        std::fs::write(out.join("faults.json"), serde_json::to_string_pretty(&r)?)?;
        return Ok(0);
    }
    if a.render_only {
        return render_files(&a.out, &a.soak, &a.md).map(|()| 0);
    }
    // A seed from the clock unless given: each campaign draws new instants, and says which.
    let seed = a.seed.unwrap_or_else(|| memqos_daemon::mono_ns() ^ u64::from(std::process::id()));
    let provenance = crate::provenance::Provenance::collect(Path::new("."), &a.kernel);
    let mut fresh = Vec::new();
    for kernel in self_run::kernels(&a.kernel)? {
        eprintln!(
            "bench faults: booting {} ({}; {} kills, seed {seed})",
            kernel.release(),
            a.scenarios.join(","),
            a.kills
        );
        let args = [
            "bench".to_string(),
            "faults".into(),
            "--in-guest".into(),
            "--kills".into(),
            a.kills.to_string(),
            "--seed".into(),
            seed.to_string(),
            "--cgroups".into(),
            a.cgroups.to_string(),
            "--scenarios".into(),
            a.scenarios.join(","),
        ];
        // A kill cycle takes a few seconds under TCG; 10,000 cgroups a few minutes.
        let timeout = Duration::from_secs(900 + 15 * a.kills as u64 + a.cgroups as u64 / 10);
        let run = self_run::run_self(&kernel, &args, |g| g.memory_mb(3072).timeout(timeout).stream_console(true))?;
        let text = super::guest_result(&kernel, &run, "faults.json")?;
        let mut r: KernelResult = serde_json::from_str(&text)?;
        r.provenance = Some(crate::provenance::Provenance {
            kernel: r.kernel.clone(),
            host_load_after: std::fs::read_to_string("/proc/loadavg").ok().map(|s| s.trim().to_string()),
            guest_wall_s: Some(run.wall_secs),
            host_cpu: run.host_cpu,
            ..provenance.clone()
        });
        if let Some(h) = &run.host_cpu {
            eprintln!("host: {}", h.summary());
        }
        for row in rows(&r) {
            println!("{}", plain(&row));
        }
        fresh.push(r);
    }
    if let Some(dir) = a.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let doc = Doc {
        benchmark: "memqos-lab bench faults".into(),
        host_note: "TCG guests (no KVM) on a shared 2-core host: times include emulation overhead and host noise"
            .into(),
        kernels: super::keep_earlier_kernels(&a.out, fresh),
        // The last invocation's; each kernel result carries the one that measured it.
        provenance: Some(provenance),
    };
    std::fs::write(&a.out, serde_json::to_string_pretty(&doc)? + "\n")?;
    eprintln!("wrote {}", a.out.display());
    render_files(&a.out, &a.soak, &a.md)?;
    Ok(0)
}

fn render_files(json: &Path, soak: &Path, md: &Path) -> Result<()> {
    let doc: Doc =
        serde_json::from_str(&std::fs::read_to_string(json).with_context(|| format!("reading {}", json.display()))?)
            .with_context(|| format!("parsing {}", json.display()))?;
    let soak: Option<Soak> = match std::fs::read_to_string(soak) {
        Ok(t) => Some(serde_json::from_str(&t).with_context(|| format!("parsing {}", soak.display()))?),
        Err(_) => None,
    };
    std::fs::write(md, render(&doc, soak.as_ref()))?;
    eprintln!("wrote {}", md.display());
    Ok(())
}
