//! Running this very program inside guests: "for each kernel: ensure it, boot a guest, run
//! myself with these arguments". Every command that measures in guests (demo, experiments,
//! benches, the dirty-page reproducer) goes through here.

use crate::guest::{Guest, GuestRun};
use crate::kernels::{self, Kernel, Series};
use anyhow::{Context, Result};

/// The kernels of a series list ("6.12", "7", "6.12,7" or "all"), each downloaded once and
/// cached.
pub fn kernels(list: &str) -> Result<Vec<Kernel>> {
    Series::parse_list(list)?.into_iter().map(kernels::ensure).collect()
}

/// Boots `kernel` in a guest set up by `configure` (memory, disks, timeout, environment) and
/// runs the current executable with `args` in it. The guest's results directory is
/// `$MEMQOS_RESULTS` inside and `GuestRun::results_dir` outside.
pub fn run_self(kernel: &Kernel, args: &[String], configure: impl FnOnce(Guest) -> Guest) -> Result<GuestRun> {
    let exe = guest_exe()?;
    let mut argv = vec![exe.to_string_lossy().into_owned()];
    argv.extend(args.iter().cloned());
    configure(Guest::new(kernel.clone())).run(&argv)
}

/// The path a guest runs this program from. Normally the executable's own path; if that
/// file was replaced or removed since this process started (a `cargo build` during a long
/// experiment), the path would run another build, or nothing ("exec: ... (deleted): not
/// found" in the guest, as happened to an experiment series), so the running image is
/// copied once from /proc/self/exe into the cache and that copy is used for the rest of
/// the run.
fn guest_exe() -> Result<std::path::PathBuf> {
    static SNAPSHOT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    if let Some(p) = SNAPSHOT.get() {
        return Ok(p.clone());
    }
    let exe = std::env::current_exe().context("locating this program to run it in a guest")?;
    if !exe.to_string_lossy().ends_with(" (deleted)") {
        return Ok(exe);
    }
    let dir = crate::cache::cache_dir().join("exe");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let copy = dir.join(format!("memqos-{}", std::process::id()));
    std::fs::copy("/proc/self/exe", &copy).with_context(|| {
        format!("{} was replaced while running; copying the running image to {}", exe.display(), copy.display())
    })?;
    eprintln!(
        "note: {} was replaced while this run went on; guests now run the copy of this build at {} (remove it after the run)",
        exe.display(),
        copy.display()
    );
    Ok(SNAPSHOT.get_or_init(|| copy).clone())
}
