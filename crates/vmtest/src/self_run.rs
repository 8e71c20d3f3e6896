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
    let exe = std::env::current_exe().context("locating this program to run it in a guest")?;
    let mut argv = vec![exe.to_string_lossy().into_owned()];
    argv.extend(args.iter().cloned());
    configure(Guest::new(kernel.clone())).run(&argv)
}

/// [`run_self`] on each kernel of `list` in turn, handing each run to `each`; the first error
/// stops.
pub fn run_self_on_each(
    list: &str,
    args: &[String],
    configure: impl Fn(&Kernel, Guest) -> Guest,
    mut each: impl FnMut(&Kernel, GuestRun) -> Result<()>,
) -> Result<()> {
    for kernel in kernels(list)? {
        let run = run_self(&kernel, args, |g| configure(&kernel, g))?;
        each(&kernel, run)?;
    }
    Ok(())
}
