//! `memqos workload`: small, deterministic memory workloads for tests and demos.
//! (The trace replayer, `memqos replay`, is the realistic workload.)

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use memqos_cgroupfs::Cgroup;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Subcommand)]
pub enum WorkloadCmd {
    /// Allocate and touch anonymous memory, then hold it.
    Alloc(AllocArgs),
    /// Follow a memory profile: grow or shrink resident anonymous memory to each phase's
    /// size, stay there for its duration; prints the completion time as JSON.
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
    // SAFETY: anonymous private mapping, checked for MAP_FAILED; pages touched through a
    // raw pointer within [ptr, ptr+len).
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        bail!("mmap of {} MiB failed: {}", a.mb, std::io::Error::last_os_error());
    }
    let page = 4096;
    for off in (0..len).step_by(page) {
        // Distinct non-zero bytes so no page can be deduplicated or zero-filled lazily.
        unsafe { *(ptr as *mut u8).add(off) = (off / page) as u8 | 1 };
    }
    let touched = start.elapsed();
    std::thread::sleep(Duration::from_millis(a.hold_ms));
    println!("{}", serde_json::json!({"workload": "alloc", "mb": a.mb, "touch_ms": touched.as_millis() as u64}));
    std::io::stdout().flush()?;
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

/// Resident anonymous memory held in 1 MiB mappings, so shrinking returns whole chunks.
struct Chunks(Vec<*mut libc::c_void>);

impl Chunks {
    fn grow_one(&mut self) -> Result<()> {
        const LEN: usize = 1 << 20;
        // SAFETY: anonymous private mapping, checked; touched within bounds.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                LEN,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            bail!("mmap: {}", std::io::Error::last_os_error());
        }
        for off in (0..LEN).step_by(4096) {
            unsafe { *(p as *mut u8).add(off) = (self.0.len() as u8) | 1 };
        }
        self.0.push(p);
        Ok(())
    }

    fn shrink_to(&mut self, mb: usize) {
        while self.0.len() > mb {
            let p = self.0.pop().expect("non-empty");
            unsafe { libc::munmap(p, 1 << 20) };
        }
    }
}

fn phases(a: PhasesArgs) -> Result<u8> {
    let plan = parse_phases(&a.phases)?;
    join(&a.cgroup)?;
    let start = Instant::now();
    let mut mem = Chunks(Vec::new());
    let mut phase_start = Duration::ZERO;
    for (mb, ms) in plan {
        let mb = mb as usize;
        let dur = Duration::from_millis(ms);
        if mb <= mem.0.len() {
            mem.shrink_to(mb);
        } else {
            // Ramp: chunk k of the growth is due at k/n of the phase; if allocation is slow
            // (throttled) the phase simply runs long: that delay is what we measure.
            let from = mem.0.len();
            let n = mb - from;
            for k in 0..n {
                let due = phase_start + dur.mul_f64(k as f64 / n as f64);
                if let Some(wait) = due.checked_sub(start.elapsed()) {
                    std::thread::sleep(wait);
                }
                mem.grow_one()?;
            }
        }
        phase_start += dur;
        if let Some(wait) = phase_start.checked_sub(start.elapsed()) {
            std::thread::sleep(wait);
        }
        phase_start = phase_start.max(start.elapsed());
    }
    println!("{}", serde_json::json!({"workload": "phases", "elapsed_ms": start.elapsed().as_millis() as u64}));
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

    #[test]
    fn phases_follow_the_profile_on_the_host() {
        let mut m = Chunks(Vec::new());
        for _ in 0..8 {
            m.grow_one().unwrap();
        }
        m.shrink_to(3);
        assert_eq!(m.0.len(), 3);
    }
}
