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
        libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
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
    println!(
        "{}",
        serde_json::json!({"workload": "alloc", "mb": a.mb, "touch_ms": touched.as_millis() as u64})
    );
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
