//! The memqos arm's daemon, as both pipelines run it: the arm's config written into a fresh
//! state directory, the daemon started with the runner's own binary, and after the arm
//! stopped with SIGTERM and checked for what it must leave behind (a clean exit, no journal
//! of unrestored knobs, every cgroup's protection knobs back at their defaults).

use anyhow::{Context, Result};
use memqos_cgroupfs::{Cgroup, Limit};
use memqos_lab::daemon_process::DaemonProcess;
use memqos_schema::state::JOURNAL_FILE;
use std::path::{Path, PathBuf};
use std::process::Stdio;

pub(crate) struct ArmDaemon {
    process: DaemonProcess,
    state_dir: PathBuf,
    /// Files carried across arms: (kept outside, name in `state_dir`).
    carried: Vec<(PathBuf, String)>,
}

/// What the daemon left when it was stopped.
pub(crate) struct Stopped {
    /// Its event log.
    pub log: String,
    /// It exited with status 0.
    pub clean_exit: bool,
    /// A journal of knobs it had not restored is still in its state directory.
    pub journal_left: bool,
    /// CPU time it used (user + system, s) up to just before it was stopped.
    pub cpu_s: Option<f64>,
}

impl ArmDaemon {
    /// Wipes `state_dir`, writes `config` there as memqos.toml and starts `exe daemon` on it.
    pub(crate) fn start(exe: &Path, state_dir: &Path, config: &str) -> Result<ArmDaemon> {
        Self::start_carrying(exe, state_dir, config, &[])
    }

    /// As `start`, with `carried` files (kept outside, name in `state_dir`) copied into the
    /// fresh state directory first, those that exist, and back out by `stop`: what one arm's
    /// daemon leaves there for the next arm's (the tier's recent peaks,
    /// `memqos_learns_tier_peak`).
    pub(crate) fn start_carrying(
        exe: &Path,
        state_dir: &Path,
        config: &str,
        carried: &[(&Path, &str)],
    ) -> Result<ArmDaemon> {
        let _ = std::fs::remove_dir_all(state_dir);
        std::fs::create_dir_all(state_dir)?;
        for (kept, name) in carried {
            if kept.exists() {
                std::fs::copy(kept, state_dir.join(name))
                    .with_context(|| format!("carrying {} into {}", kept.display(), state_dir.display()))?;
            }
        }
        let file = state_dir.join("memqos.toml");
        std::fs::write(&file, config)?;
        let process = DaemonProcess::start(exe, &file, state_dir, &[], Stdio::null())?;
        let carried = carried.iter().map(|(kept, name)| (kept.to_path_buf(), name.to_string())).collect();
        Ok(ArmDaemon { process, state_dir: state_dir.to_path_buf(), carried })
    }

    /// SIGTERM and wait; then the carried files the daemon left go back to where they are kept.
    pub(crate) fn stop(self) -> Result<Stopped> {
        let cpu_s = self.process.cpu_seconds();
        let (status, log) = self.process.stop()?;
        for (kept, name) in &self.carried {
            let left = self.state_dir.join(name);
            if left.exists() {
                std::fs::copy(&left, kept)
                    .with_context(|| format!("keeping {} in {}", left.display(), kept.display()))?;
            }
        }
        let journal_left = self.state_dir.join(JOURNAL_FILE).exists();
        Ok(Stopped { log, clean_exit: status.success(), journal_left, cpu_s })
    }
}

/// `cg`'s memory.high is max, its memory.low and memory.min 0 and it is not frozen, as the
/// daemon must leave it (parking and the held queue freeze); a knob that cannot be read
/// counts as `unreadable`.
pub(crate) fn knobs_at_defaults(cg: &Cgroup, unreadable: bool) -> bool {
    cg.limit("memory.high").map(|l| l == Limit::Max).unwrap_or(unreadable)
        && cg.limit("memory.low").map(|l| l == Limit::Bytes(0)).unwrap_or(unreadable)
        && cg.limit("memory.min").map(|l| l == Limit::Bytes(0)).unwrap_or(unreadable)
        && cg.read_string("cgroup.freeze").map(|v| v.trim() == "0").unwrap_or(unreadable)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frozen_cgroup_is_not_at_its_defaults() {
        let dir = tempfile::tempdir().unwrap();
        for (file, value) in [("memory.high", "max\n"), ("memory.low", "0\n"), ("memory.min", "0\n")] {
            std::fs::write(dir.path().join(file), value).unwrap();
        }
        let cg = Cgroup::new(dir.path());
        assert!(!knobs_at_defaults(&cg, false), "cgroup.freeze unreadable counts as unreadable");
        assert!(knobs_at_defaults(&cg, true));
        std::fs::write(dir.path().join("cgroup.freeze"), "1\n").unwrap();
        assert!(!knobs_at_defaults(&cg, true));
        std::fs::write(dir.path().join("cgroup.freeze"), "0\n").unwrap();
        assert!(knobs_at_defaults(&cg, false));
    }
}
