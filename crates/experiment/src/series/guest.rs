//! The host side of a series in a guest, for both pipelines: the in-guest command line, the
//! provenance recorded for the series, and its results copied out of the guest; inside the
//! guest, the scenario and results directory the host passed in.

use crate::provenance::{sha256_hex, Provenance};
use anyhow::{Context, Result};
use memqos_vmtest::GuestRun;
use std::path::{Path, PathBuf};

/// `memqos-lab <command> --in-guest --runs N --first-run F --traces DIR`: what the guest runs.
pub(crate) fn in_guest_args(command: &[&str], runs: usize, first_run: usize, traces: &Path) -> Vec<String> {
    let mut args: Vec<String> = command.iter().map(|a| a.to_string()).collect();
    args.extend(
        [
            "--in-guest",
            "--runs",
            &runs.to_string(),
            "--first-run",
            &first_run.to_string(),
            "--traces",
            &traces.to_string_lossy(),
        ]
        .map(String::from),
    );
    args
}

/// What a series records about itself before its guest starts: the checkout's commit, the
/// kernel, the digests of the scenario file and the configs its arms run, and the speed.
pub(crate) fn provenance(
    kernel: &str,
    scenario: &[u8],
    daemon_config: Option<&str>,
    oomd_config: Option<&str>,
    speed: f64,
) -> Result<Provenance> {
    let mut p = Provenance::collect(Path::new("."), kernel);
    p.scenario_sha256 = Some(sha256_hex(scenario)?);
    p.daemon_config_sha256 = daemon_config.map(|c| sha256_hex(c.as_bytes())).transpose()?;
    p.oomd_config_sha256 = oomd_config.map(|c| sha256_hex(c.as_bytes())).transpose()?;
    p.speed = Some(speed);
    Ok(p)
}

/// Copies a guest's results from `from` to `to`: a series starting at run 1 replaces what was
/// there, a later chunk adds its runs. Beside them, the series' provenance with the host's
/// load before and after the guest and the share of its CPU that other work took meanwhile
/// (the guest shares two host cores with whatever else runs, so a noisy run can be
/// recognized); that share is also said on stderr.
pub(crate) fn keep_results(
    from: &Path,
    to: &Path,
    first_run: usize,
    runs: usize,
    provenance: &Provenance,
    run: &GuestRun,
) -> Result<()> {
    if to.exists() && first_run == 1 {
        std::fs::remove_dir_all(to).with_context(|| format!("replacing {}", to.display()))?;
    }
    copy_tree(from, to)?;
    let mut p = provenance.clone();
    p.host_load_after = Some(std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim().to_string());
    p.guest_wall_s = Some(run.wall_secs);
    p.host_cpu = run.host_cpu;
    if let Some(h) = &run.host_cpu {
        eprintln!("host: {}", h.summary());
    }
    // JSON in a .txt: the results' readers (summary, agent-host summary, plot scripts) take
    // every *.json under runs/ for an arm result.
    let file = match first_run {
        1 => "provenance.txt".to_string(),
        n => format!("provenance-runs{n:02}-{:02}.txt", n + runs - 1),
    };
    std::fs::write(to.join(file), serde_json::to_string_pretty(&p)? + "\n")?;
    Ok(())
}

/// A failed guest's results, copied to `to` (outside the series' `runs/`, so no report reads
/// them) instead of being lost with the guest: the levels or runs it finished can be looked
/// at, and rerun. Returns how many files were kept (0 when the guest wrote none).
pub(crate) fn salvage(from: &Path, to: &Path) -> Result<usize> {
    if !from.is_dir() {
        return Ok(0);
    }
    if to.exists() {
        std::fs::remove_dir_all(to).with_context(|| format!("replacing {}", to.display()))?;
    }
    copy_tree(from, to)?;
    Ok(count_files(to))
}

fn count_files(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .flatten()
            .map(|e| if e.file_type().is_ok_and(|t| t.is_dir()) { count_files(&e.path()) } else { 1 })
            .sum()
    })
}

/// Inside a guest: the scenario the host passed in `$MEMQOS_SCENARIO` and the guest's results
/// directory (`$MEMQOS_RESULTS`).
pub(crate) fn guest_inputs<T: serde::de::DeserializeOwned>() -> Result<(T, PathBuf)> {
    let json =
        std::env::var("MEMQOS_SCENARIO").context("--in-guest needs MEMQOS_SCENARIO (set by memqos-lab experiment)")?;
    let scenario: T = serde_json::from_str(&json).context("MEMQOS_SCENARIO")?;
    let results =
        std::env::var_os("MEMQOS_RESULTS").context("--in-guest runs inside a memqos guest (MEMQOS_RESULTS unset)")?;
    Ok((scenario, PathBuf::from(results)))
}

fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target).with_context(|| format!("copying to {}", target.display()))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provenance::HostCpu;

    #[test]
    fn kept_results_carry_provenance_the_readers_skip() {
        let guest = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(guest.path().join("seed")).unwrap();
        let to = out.path().join("runs/oom/7.2");
        let p = Provenance {
            commit: Some("0123456789abcdef0123456789abcdef01234567".into()),
            dirty: Some(false),
            speed: Some(10.0),
            kernel: "7.2".into(),
            ..Default::default()
        };
        let host_cpu = HostCpu::new(12.5, 2, 24.0, 0.0, 22.0, 0.5);
        let run = |wall_secs, host_cpu| GuestRun {
            exit_code: 0,
            console: String::new(),
            results_dir: guest.path().to_path_buf(),
            boot_secs: 1.0,
            wall_secs,
            accel: memqos_vmtest::Accel::Tcg,
            host_cpu,
        };
        keep_results(guest.path(), &to, 1, 5, &p, &run(12.5, Some(host_cpu))).unwrap();
        let text = std::fs::read_to_string(to.join("provenance.txt")).unwrap();
        let back: Provenance = serde_json::from_str(&text).unwrap();
        assert_eq!((back.commit, back.speed, back.guest_wall_s), (p.commit.clone(), Some(10.0), Some(12.5)));
        assert_eq!(back.host_cpu, Some(host_cpu));
        assert!(back.host_load_after.is_some());
        // A later chunk gets its own file, and the arm-result reader is not confused by either.
        // A host without /proc/stat measured nothing: the file says nothing about it.
        keep_results(guest.path(), &to, 6, 2, &p, &run(1.0, None)).unwrap();
        let later = std::fs::read_to_string(to.join("provenance-runs06-07.txt")).unwrap();
        assert!(!later.contains("host_cpu"), "{later}");
        assert!(crate::summary::load_results(&out.path().join("runs")).unwrap().is_empty());
    }

    #[test]
    fn a_failed_guests_results_are_kept_outside_the_series() {
        let guest = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(guest.path().join("run01")).unwrap();
        std::fs::write(guest.path().join("run01/06-none.json"), "{}").unwrap();
        std::fs::write(guest.path().join("console.txt"), "x").unwrap();
        let to = out.path().join("failed/7.2");
        assert_eq!(salvage(guest.path(), &to).unwrap(), 2);
        assert!(to.join("run01/06-none.json").is_file());
        // A second failure replaces the first; a guest that wrote nothing keeps nothing.
        std::fs::remove_file(guest.path().join("console.txt")).unwrap();
        assert_eq!(salvage(guest.path(), &to).unwrap(), 1);
        assert_eq!(salvage(&guest.path().join("absent"), &out.path().join("failed/6.12")).unwrap(), 0);
        assert!(!out.path().join("failed/6.12").exists());
    }
}
