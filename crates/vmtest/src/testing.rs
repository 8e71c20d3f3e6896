//! Running `cargo test` tests inside guests (see [`crate::guest_test!`]).

use crate::guest::Guest;
use crate::kernels::{self, Series};
use std::path::PathBuf;
use std::time::Duration;

/// True inside a memqos guest (set by the guest's job script).
pub fn in_guest() -> bool {
    std::env::var_os("MEMQOS_IN_GUEST").is_some()
}

/// The writable results directory shared with the host (inside a guest).
pub fn results_dir() -> Option<PathBuf> {
    std::env::var_os("MEMQOS_RESULTS").map(PathBuf::from)
}

/// Kernel series under test: `MEMQOS_TEST_KERNELS` ("6.12,7" by default, or "all").
pub fn test_series() -> Vec<Series> {
    let spec = std::env::var("MEMQOS_TEST_KERNELS").unwrap_or_else(|_| "6.12,7".into());
    Series::parse_list(&spec).unwrap_or_else(|e| panic!("MEMQOS_TEST_KERNELS={spec:?}: {e:#}"))
}

/// What [`skip`] prints; the host side looks for it.
const SKIP_MARK: &str = "MEMQOS-GUEST-TEST-SKIPPED:";

/// Ends a guest test early because this kernel cannot run it, saying so. The run then fails
/// on the host unless `MEMQOS_ALLOW_SKIP=1`: CI must not pass a test that ran nothing.
pub fn skip(why: &str) {
    println!("{SKIP_MARK} {why}");
}

fn skips_allowed() -> bool {
    std::env::var("MEMQOS_ALLOW_SKIP").is_ok_and(|v| v == "1")
}

/// Re-runs the current test binary inside a guest for each series under test, filtered to
/// exactly `test_path`, and panics with the guest's console if any run fails. A missing
/// kernel or qemu is a failure, not a skip: CI must not pass without having booted a kernel.
///
/// The series run at once, each in a guest that may share the host (`MEMQOS_VM_SLOTS`, see
/// [`crate::guest::shared_slots`]); a test whose assertions involve a delay or a rate makes
/// its guest exclusive in `configure` (`.exclusive(true)`), and then runs alone.
pub fn run_test_in_guests(test_path: &str, configure: impl Fn(Guest) -> Guest + Sync) {
    let exe = std::env::current_exe().expect("current test binary");
    let configure = &configure;
    let exe = &exe;
    let failures: Vec<String> = std::thread::scope(|scope| {
        let runs: Vec<_> = test_series()
            .into_iter()
            .map(|series| scope.spawn(move || run_on(series, exe, test_path, configure)))
            .collect();
        runs.into_iter().filter_map(|r| r.join().expect("guest runner thread panicked")).collect()
    });
    if !failures.is_empty() {
        panic!("{test_path} failed in {} guest(s):\n{}", failures.len(), failures.join("\n"));
    }
}

/// One series' guest run of `test_path`; `Some(why)` when it failed or skipped.
fn run_on(
    series: Series,
    exe: &std::path::Path,
    test_path: &str,
    configure: &impl Fn(Guest) -> Guest,
) -> Option<String> {
    let kernel = match kernels::ensure(series) {
        Ok(k) => k,
        Err(e) => return Some(format!("--- kernel {series}: {e:#}")),
    };
    let guest = configure(Guest::new(kernel.clone()).timeout(Duration::from_secs(900)).exclusive(false));
    let argv = vec![
        exe.to_string_lossy().into_owned(),
        "--exact".into(),
        test_path.into(),
        "--nocapture".into(),
        "--test-threads=1".into(),
    ];
    let run = match guest.run(&argv) {
        Ok(run) => run,
        Err(e) => return Some(format!("--- kernel {}: {e:#}", kernel.release())),
    };
    eprintln!(
        "guest {} ({:?}{}): {test_path} exit {} (boot {:.1} s, total {:.1} s)",
        kernel.release(),
        run.accel,
        if guest.exclusive { ", alone" } else { "" },
        run.exit_code,
        run.boot_secs,
        run.wall_secs
    );
    // Measured figures the test chose to report (lines starting "RESULT").
    for line in run.console.lines().filter(|l| l.contains("RESULT")) {
        eprintln!("  [{}] {}", kernel.release(), line.trim_start_matches(|c: char| c != 'R'));
    }
    let ran = run.console.contains("1 passed") || run.console.contains("1 failed");
    let skipped = run.console.lines().find(|l| l.contains(SKIP_MARK));
    if let (Some(line), false) = (skipped, skips_allowed()) {
        return Some(format!(
            "--- kernel {}: the test skipped ({}); set MEMQOS_ALLOW_SKIP=1 to accept skips",
            kernel.release(),
            line.trim()
        ));
    }
    if !run.success() || !ran {
        return Some(format!(
            "--- kernel {} exit {} (results in {}) ---\n{}",
            kernel.release(),
            run.exit_code,
            run.results_dir.display(),
            run.console
        ));
    }
    if std::env::var_os("MEMQOS_KEEP_RUNS").is_none() {
        let _ = std::fs::remove_dir_all(&run.results_dir);
    }
    None
}
