//! `memqos-lab workload`: small, deterministic memory workloads for tests and demos.
//! (The trace replayer, `memqos-lab replay`, is the realistic workload.)

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use memqos_cgroupfs::Cgroup;
use memqos_policy::size::MIB;
use memqos_replay::memory::Memory;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Subcommand)]
pub enum WorkloadCmd {
    /// Allocate and touch anonymous memory, then hold it.
    Alloc(AllocArgs),
    /// Follow a memory profile: grow or shrink resident anonymous memory to each phase's
    /// size, stay there for its duration; prints its lateness behind schedule as JSON.
    Phases(PhasesArgs),
    /// Write a file so that its page cache is charged to the cgroup, then exit.
    Pagecache(PagecacheArgs),
}

#[derive(Args)]
pub struct AllocArgs {
    /// MiB of anonymous memory to allocate and touch.
    #[arg(long)]
    mb: u64,
    /// Join this cgroup (directory path) before allocating.
    #[arg(long)]
    cgroup: Option<PathBuf>,
    /// Keep the memory this many milliseconds after touching it.
    #[arg(long, default_value_t = 0)]
    hold_ms: u64,
}

#[derive(Args)]
pub struct PhasesArgs {
    /// Comma-separated `MiB:milliseconds` phases, e.g. "64:2000,256:3000,64:1000". Growth
    /// ramps linearly over the phase; shrinking is immediate.
    #[arg(long)]
    phases: String,
    #[arg(long)]
    cgroup: Option<PathBuf>,
}

#[derive(Args)]
pub struct PagecacheArgs {
    #[arg(long)]
    mb: u64,
    #[arg(long)]
    file: PathBuf,
    #[arg(long)]
    cgroup: Option<PathBuf>,
}

pub fn run(cmd: WorkloadCmd) -> Result<u8> {
    match cmd {
        WorkloadCmd::Alloc(a) => alloc(a),
        WorkloadCmd::Pagecache(p) => pagecache(p),
        WorkloadCmd::Phases(p) => phases(p),
    }
}

fn join(cgroup: &Option<PathBuf>) -> Result<()> {
    if let Some(path) = cgroup {
        Cgroup::new(path).add_proc(std::process::id())?;
    }
    Ok(())
}

fn alloc(a: AllocArgs) -> Result<u8> {
    join(&a.cgroup)?;
    let len = (a.mb as usize) << 20;
    let start = Instant::now();
    // One mapping, every page touched with a distinct stamp (never the zero page, never merged).
    let mut mem = Memory::new(len);
    mem.set_target(len as u64)?;
    let touched = start.elapsed();
    std::thread::sleep(Duration::from_millis(a.hold_ms));
    println!("{}", serde_json::json!({"workload": "alloc", "mb": a.mb, "touch_ms": touched.as_millis() as u64}));
    std::io::stdout().flush()?;
    drop(mem);
    Ok(0)
}

fn pagecache(p: PagecacheArgs) -> Result<u8> {
    join(&p.cgroup)?;
    let mut f = std::fs::File::create(&p.file).with_context(|| format!("creating {}", p.file.display()))?;
    let chunk = vec![0x5au8; 1 << 20];
    for _ in 0..p.mb {
        f.write_all(&chunk).with_context(|| format!("writing {}", p.file.display()))?;
    }
    f.sync_all()?; // clean pages are reclaimable: what memory.low/min protection is about
    Ok(0)
}

/// Parses "64:2000,256:3000" into (MiB, ms) pairs; errors name the phase.
fn parse_phases(spec: &str) -> Result<Vec<(u64, u64)>> {
    spec.split(',')
        .enumerate()
        .map(|(i, p)| {
            let (mb, ms) = p.trim().split_once(':').with_context(|| format!("phase {i} {p:?}: expected MiB:ms"))?;
            Ok((
                mb.parse().with_context(|| format!("phase {i} {p:?}: bad MiB {mb:?}"))?,
                ms.parse().with_context(|| format!("phase {i} {p:?}: bad duration {ms:?}"))?,
            ))
        })
        .collect()
}

/// What `memqos-lab workload phases` prints when it is done (one JSON line).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PhasesReport {
    /// Wall time from start to the end of the last phase.
    pub elapsed_ms: u64,
    /// The profile's length: what `elapsed_ms` is when nothing holds the workload back.
    pub nominal_ms: u64,
    /// How far the workload fell behind its schedule at worst: for each 1 MiB chunk, the time
    /// it was touched minus the time it was due. A delay in the middle of the profile shows
    /// here even when a later idle phase absorbs it and `elapsed_ms` stays nominal.
    pub max_late_ms: u64,
}

fn phases(a: PhasesArgs) -> Result<u8> {
    let plan = parse_phases(&a.phases)?;
    join(&a.cgroup)?;
    let start = Instant::now();
    // 1 MiB mappings, so shrinking returns whole chunks.
    let mut mem = Memory::new(MIB as usize);
    let mut phase_start = Duration::ZERO;
    let mut max_late = Duration::ZERO;
    let nominal: u64 = plan.iter().map(|(_, ms)| ms).sum();
    for (mb, ms) in plan {
        let dur = Duration::from_millis(ms);
        let held_mb = mem.held() / MIB;
        if mb <= held_mb {
            mem.set_target(mb * MIB)?;
        } else {
            // Ramp: chunk k of the growth is due at k/n of the phase; if allocation is slow
            // (throttled) the phase simply runs long: that delay is what we measure.
            let n = mb - held_mb;
            for k in 0..n {
                let due = phase_start + dur.mul_f64(k as f64 / n as f64);
                if let Some(wait) = due.checked_sub(start.elapsed()) {
                    std::thread::sleep(wait);
                }
                mem.set_target((held_mb + k + 1) * MIB)?;
                max_late = max_late.max(start.elapsed().saturating_sub(due));
            }
        }
        phase_start += dur;
        if let Some(wait) = phase_start.checked_sub(start.elapsed()) {
            std::thread::sleep(wait);
        }
        phase_start = phase_start.max(start.elapsed());
    }
    let report = PhasesReport {
        elapsed_ms: start.elapsed().as_millis() as u64,
        nominal_ms: nominal,
        max_late_ms: max_late.as_millis() as u64,
    };
    println!("{}", serde_json::to_string(&report)?);
    std::io::stdout().flush()?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_parse_and_errors_name_the_phase() {
        assert_eq!(parse_phases("64:2000, 256:10").unwrap(), vec![(64, 2000), (256, 10)]);
        let e = format!("{:#}", parse_phases("64:2000,x:1").unwrap_err());
        assert!(e.contains("phase 1") && e.contains("\"x\""), "{e}");
        assert!(parse_phases("64").is_err());
    }
}
