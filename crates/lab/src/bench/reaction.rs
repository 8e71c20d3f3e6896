//! `memqos-lab bench reaction`: how fast the daemon throttles a lower tier once a protected
//! cgroup starts reclaiming, for each signal source alone (BPF, PSI, memory.events).
//!
//! Scenario (inside a guest, no swap, a scratch ext4 disk): parent `bench` with
//! memory.max = 256 MiB; `low` (throttle tier) holds ~200 MiB of clean page cache (a file
//! on the scratch disk read from inside it); `prot` (protected tier) is empty. Per run: start
//! the daemon with one source enabled, then a probe process in `prot` allocates anonymous
//! memory in 64 KiB chunks. The parent's limit is hit during one chunk; the kernel then
//! reclaims (low's page cache) in the probe's context.
//!
//! The instant: the probe reads the parent's memory.events `max` after every chunk; the first
//! chunk after which it increased contains the first charge that hit the limit (the kernel
//! counts MEMCG_MAX right before it starts reclaiming for that charge). The instant is the
//! CLOCK_MONOTONIC time taken just before that chunk, so the reported delay is an upper
//! bound: the true crossing is at most one chunk (16 page faults) later. The end: the
//! daemon's CLOCK_MONOTONIC just before its first write to `low/memory.high` (the `mono_ns`
//! of the write in its event log). Both clocks are the guest's CLOCK_MONOTONIC.
//!
//! Periodic sampling is set to 60 s and the headroom guard off, so a reaction can only come
//! from the source's wakeup (the daemon's fast path); the first periodic tick happens at
//! start, before the probe.
//!
//! Size axis (`--sizes`): that many idle managed cgroups (`m0`, `m1`, ..., throttle tier)
//! beside the pair, so the reaction's cost can be compared across tree sizes. Per run, the
//! daemon's read and write system calls (`syscr + syscw` of /proc/PID/io) from the probe's
//! start to the write are recorded: what one pressure event costs it.

mod cpu;
mod guest;
mod result;

use anyhow::{bail, Result};
use clap::Args;
use memqos_policy::size::MIB;
use memqos_vmtest::self_run;
use std::path::PathBuf;
use std::time::Duration;

pub use result::{CpuCost, KernelResult, SourceResult};

const PARENT_MAX: u64 = 256 * MIB;
const CACHE_MB: u64 = 200;
/// Anonymous memory the probe allocates in total (crosses the limit after ~56 MiB).
const PROBE_MB: u64 = 120;
const CHUNK: usize = 64 * 1024;
const STATE: &str = "/run/memqos-bench";
/// A run without a write within this long counts as a miss.
const RUN_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Args)]
pub struct ReactionArgs {
    /// Kernel series to boot: "6.12", "7", "6.12,7" or "all".
    #[arg(long, default_value = "all")]
    kernel: String,
    /// Runs per source (N).
    #[arg(long, default_value_t = 20)]
    runs: usize,
    /// Sources to measure, comma-separated: bpf, psi, events.
    #[arg(long, default_value = "bpf,psi,events")]
    sources: String,
    /// Idle managed cgroups beside the protected/low pair, one series per size.
    #[arg(long, default_value = "0,10,100,1000", value_delimiter = ',')]
    sizes: Vec<usize>,
    /// Managed cgroups (10% protected) for the CPU-cost windows, one series per size.
    #[arg(long, default_value = "100,1000,10000", value_delimiter = ',')]
    cpu_sizes: Vec<usize>,
    /// Where to write reaction.json (created if missing).
    #[arg(long, default_value = "docs/bpf")]
    out: PathBuf,
    /// Print the merged result as JSON on stdout.
    #[arg(long)]
    json: bool,
    #[arg(long, hide = true)]
    in_guest: bool,
    /// Seconds of each CPU-cost window (daemon with 100 cgroups, idle and under fault
    /// load, BPF source on and off); 0 skips the CPU-cost part.
    #[arg(long, default_value_t = 15)]
    cpu_window: u64,
    /// Internal: the allocating probe (run inside `prot`).
    #[arg(long, hide = true)]
    probe: bool,
    /// Internal: the steady fault load (run inside a protected cgroup).
    #[arg(long, hide = true)]
    fault_load: bool,
}

pub fn run(a: ReactionArgs) -> Result<u8> {
    if a.probe {
        return guest::probe();
    }
    if a.fault_load {
        return cpu::fault_load();
    }
    let sources: Vec<String> = a.sources.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
    for s in &sources {
        if !["bpf", "psi", "events"].contains(&s.as_str()) {
            bail!("--sources: unknown source {s:?} (expected bpf, psi, events)");
        }
    }
    if a.runs == 0 {
        bail!("--runs must be at least 1");
    }
    if a.sizes.is_empty() || a.cpu_sizes.iter().any(|&n| n < 10) {
        bail!("--sizes needs at least one size; --cpu-sizes needs at least 10 cgroups each");
    }
    if a.in_guest {
        let mut r = guest::in_guest(&sources, a.runs, &a.sizes)?;
        if a.cpu_window > 0 {
            r.cpu_cost = cpu::cpu_cost(Duration::from_secs(a.cpu_window), &a.cpu_sizes, &mut r.cpu_cost_errors)?;
        }
        let out = std::env::var_os("MEMQOS_RESULTS").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/tmp"));
        std::fs::write(out.join("reaction.json"), serde_json::to_string_pretty(&r)?)?;
        return Ok(0);
    }
    let mut all = Vec::new();
    for kernel in self_run::kernels(&a.kernel)? {
        eprintln!("bench reaction: booting {} ({} runs x {} sources)", kernel.release(), a.runs, sources.len());
        let args = [
            "bench",
            "reaction",
            "--in-guest",
            "--runs",
            &a.runs.to_string(),
            "--sources",
            &sources.join(","),
            "--sizes",
            &join(&a.sizes),
            "--cpu-sizes",
            &join(&a.cpu_sizes),
            "--cpu-window",
            &a.cpu_window.to_string(),
        ]
        .map(String::from);
        // A guest big enough for 10,000 memcgs; an hour covers the default sizes under TCG.
        let run = self_run::run_self(&kernel, &args, |g| {
            g.scratch_mb(512, None).memory_mb(3072).timeout(Duration::from_secs(3600)).stream_console(!a.json)
        })?;
        let text = super::guest_result(&kernel, &run, "reaction.json")?;
        let r: KernelResult = serde_json::from_str(&text)?;
        print_table(&r);
        for c in &r.cpu_cost {
            println!(
                "  daemon CPU, {} cgroups, bpf {}, sampling {} ms, {}: {:.3} % of one core ({:.0} faults/s, {:.1} s)",
                c.cgroups,
                if c.bpf { "on" } else { "off" },
                c.sampling_interval_ms,
                c.load,
                c.cpu_pct,
                c.faults_per_s,
                c.window_s
            );
        }
        all.push(r);
    }
    let path = a.out.join("reaction.json");
    let all = super::keep_earlier_kernels(&path, all);
    let doc = serde_json::json!({
        "benchmark": "memqos bench reaction",
        "scenario": format!("parent memory.max {} MiB, low holds {} MiB page cache, prot allocates {} MiB anon in {} KiB chunks; no swap; sampling 60 s (reactions come from the fast path); headroom guard off; idle managed cgroups beside the pair per size", PARENT_MAX / MIB, CACHE_MB, PROBE_MB, CHUNK / 1024),
        "delay": "CLOCK_MONOTONIC from just before the chunk whose charge first hit the parent's memory.max to just before the daemon's first write of low/memory.high",
        "host_note": "TCG guests (no KVM) on a shared 2-core host: absolute times include emulation overhead and host noise",
        "kernels": all,
        // This invocation's (kernels kept from an earlier file keep no provenance of theirs).
        "provenance": crate::provenance::Provenance::collect(std::path::Path::new("."), &a.kernel),
    });
    super::write_result(&path, &doc)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&doc)?);
    }
    Ok(0)
}

fn join(v: &[usize]) -> String {
    v.iter().map(usize::to_string).collect::<Vec<_>>().join(",")
}

fn print_table(r: &KernelResult) {
    println!("kernel {}", r.kernel);
    println!(
        "  {:<8} {:>7} {:>4} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "source", "cgroups", "N", "misses", "p50 ms", "p99 ms", "max ms", "min ms", "syscalls"
    );
    let f = |v: Option<f64>| v.map(|x| format!("{x:.2}")).unwrap_or_else(|| "-".into());
    for s in &r.sources {
        println!(
            "  {:<8} {:>7} {:>4} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9}",
            s.source,
            s.cgroups + 2,
            s.runs,
            s.misses,
            f(s.p50_ms),
            f(s.p99_ms),
            f(s.max_ms),
            f(s.min_ms),
            s.syscalls_p50.map(|v| format!("{v:.0}")).unwrap_or_else(|| "-".into())
        );
    }
}
