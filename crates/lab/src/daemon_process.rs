//! A `memqos daemon` run as a child process: for the demo, the experiments, the benches and
//! the guest tests, which all need "start it, wait until it is really running, stop it, read
//! what it did".

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use memqos_daemon::proc_stat;
use memqos_daemon::status::STATUS_FILE;

/// Start-up is over when the first status.json exists: the config was valid, the journal
/// of an earlier run restored and the first tick done.
const START_TIMEOUT: Duration = Duration::from_secs(30);

pub struct DaemonProcess {
    child: Option<Child>,
    state_dir: PathBuf,
}

impl DaemonProcess {
    /// Runs `exe daemon --config CONFIG --state-dir STATE_DIR EXTRA...` with stdout going to
    /// `stdout`, and waits for its first status.json. A stale status.json and event log from
    /// an earlier run in `state_dir` are removed first, so neither is mistaken for this one's.
    pub fn start(exe: &Path, config: &Path, state_dir: &Path, extra: &[&str], stdout: Stdio) -> Result<DaemonProcess> {
        Self::start_within(exe, config, state_dir, extra, stdout, START_TIMEOUT)
    }

    /// [`DaemonProcess::start`] with a longer start-up allowance (a first sample of a very
    /// large tree under emulation).
    pub fn start_within(
        exe: &Path,
        config: &Path,
        state_dir: &Path,
        extra: &[&str],
        stdout: Stdio,
        timeout: Duration,
    ) -> Result<DaemonProcess> {
        std::fs::create_dir_all(state_dir).with_context(|| format!("creating {}", state_dir.display()))?;
        for stale in [STATUS_FILE, memqos_daemon::events::EVENTS_FILE, memqos_daemon::events::ROTATED_FILE] {
            let _ = std::fs::remove_file(state_dir.join(stale));
        }
        let mut child = Command::new(exe)
            .args(["daemon", "--config"])
            .arg(config)
            .arg("--state-dir")
            .arg(state_dir)
            .args(extra)
            .stdout(stdout)
            .spawn()
            .with_context(|| format!("starting {} daemon", exe.display()))?;
        let t0 = Instant::now();
        while !state_dir.join(STATUS_FILE).exists() {
            if let Some(st) = child.try_wait()? {
                bail!("memqos daemon exited during start-up ({st}); config {}", config.display());
            }
            if t0.elapsed() > timeout {
                let _ = child.kill();
                let _ = child.wait();
                bail!("memqos daemon did not write {STATUS_FILE} within {} s", timeout.as_secs());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(DaemonProcess { child: Some(child), state_dir: state_dir.to_owned() })
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Its exit status if it has exited (without waiting).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }

    /// CPU time (user + system) the daemon has used so far, in seconds; None once it is gone.
    pub fn cpu_seconds(&self) -> Option<f64> {
        proc_stat::cpu_ticks(self.pid()).map(|t| t as f64 / proc_stat::ticks_per_second())
    }

    /// SIGTERM and wait: the daemon restores every knob it changed before it exits. Returns
    /// its exit status and its whole event log (one JSON object per line, restore included).
    pub fn stop(mut self) -> Result<(ExitStatus, String)> {
        let mut child = self.child.take().expect("stopped only once");
        if let Ok(Some(status)) = child.try_wait() {
            return Ok((status, self.events())); // exited on its own (and reaped: no kill)
        }
        // SAFETY: kill(2) on our own child's pid, which is not reaped yet.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let status = child.wait().context("waiting for the memqos daemon")?;
        Ok((status, self.events()))
    }

    /// SIGKILL and wait: the daemon gets no chance to restore anything (the guardian, unless
    /// disabled, or the next start does).
    pub fn kill(mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The daemon's event log so far (rotated part first); empty if it wrote none.
    pub fn events(&self) -> String {
        let dir = &self.state_dir;
        let mut text = std::fs::read_to_string(dir.join(memqos_daemon::events::ROTATED_FILE)).unwrap_or_default();
        text.push_str(&std::fs::read_to_string(dir.join(memqos_daemon::events::EVENTS_FILE)).unwrap_or_default());
        text
    }
}

impl Drop for DaemonProcess {
    /// A caller that bails out early still stops the daemon the orderly way, so nothing it
    /// manages stays throttled.
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: as in `stop`.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let _ = child.wait();
        }
    }
}

/// How many knob writes an event log records.
pub fn count_writes(events: &str) -> usize {
    memqos_daemon::events::writes(&memqos_daemon::events::parse(events)).count()
}
