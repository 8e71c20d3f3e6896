//! What both experiment pipelines do the same way: the isolation/OOM scenarios ([`crate::runner`],
//! [`crate::summary`]) and the agent host ([`crate::agent_host`]) each run a series of arms in
//! a guest and summarize the arm results it leaves. Shared here:
//!
//! - [`guest`]: the host side of a series: the in-guest command line, the provenance recorded
//!   for it (commit, config digests, speed, host load), its results copied out of the guest;
//!   inside the guest, the scenario and results directory the host passed in;
//! - [`daemon`]: the memqos arm's daemon (its config in a fresh state directory, started,
//!   stopped, and whether it left every knob restored);
//! - [`figures`]: estimates as the reports and the docs print them;
//! - the arm's cgroup tree torn down ([`remove_tree`]), the clock results are stamped with
//!   ([`epoch_now`]), the guest's kernel ([`kernel_release`]), and an arm result tree read
//!   back ([`load_results`]).

pub mod daemon;
pub(crate) mod figures;
pub mod guest;

use anyhow::{bail, Context, Result};
use memqos_cgroupfs::Cgroup;
use serde::de::DeserializeOwned;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The running kernel's release (`7.2.0`), which every arm result records.
pub(crate) fn kernel_release() -> Result<String> {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").context("reading the kernel release")?;
    Ok(kernel.trim().to_string())
}

pub(crate) fn epoch_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// Removes `root` and every cgroup below it, deepest first, waiting for exiting tasks to
/// leave them (the experiments' task cgroups, and the agent host's sessions and their calls).
pub(crate) fn remove_tree(root: &Cgroup) -> Result<()> {
    remove_tree_within(root, Duration::from_secs(20), Duration::from_millis(50))
}

/// [`remove_tree`] trying every `pause` for at most `bound`: a reaped task can still hold its
/// cgroup for a moment (its exit is not finished in the kernel), so an rmdir right after
/// wait() can fail with EBUSY.
pub(crate) fn remove_tree_within(root: &Cgroup, bound: Duration, pause: Duration) -> Result<()> {
    let t0 = Instant::now();
    while root.exists() {
        let mut all = root.descendants().unwrap_or_default();
        all.sort_by_key(|c| std::cmp::Reverse(c.path().components().count()));
        for c in all {
            let _ = c.remove();
        }
        if root.remove().is_ok() || !root.exists() {
            break;
        }
        if t0.elapsed() > bound {
            bail!("cannot remove {} after {} s: tasks still inside?", root.path().display(), bound.as_secs_f64());
        }
        std::thread::sleep(pause);
    }
    Ok(())
}

/// Reads every `*.json` under `dir` as an arm result `T` (`what` names it in the error for a
/// file that is not one). The provenance files beside them are `.txt` so they are skipped.
pub fn load_results<T: DeserializeOwned>(dir: &Path, what: &str) -> Result<Vec<T>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "json") {
                let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
                let r: T = serde_json::from_slice(&bytes).with_context(|| format!("{}: not {what}", path.display()))?;
                out.push(r);
            }
        }
    }
    Ok(out)
}
