//! One lock per state directory (`flock` on `<state_dir>/lock`): the daemon holds it for its
//! whole life, and every restorer (the guardian, `memqos restore`, a starting daemon) takes
//! it first. So a slow guardian cannot restore the journal of a daemon restarted meanwhile,
//! and a manual restore cannot undo a live daemon's knobs. The kernel drops the lock when
//! its holder dies, even by SIGKILL; the fd is close-on-exec so no child inherits it.

use anyhow::{bail, Context, Result};
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use memqos_schema::state::LOCK_FILE;

pub struct StateLock {
    file: std::fs::File,
    path: PathBuf,
}

/// Who holds a lock, from the pid its holder wrote into the file.
fn holder(file: &mut std::fs::File) -> String {
    let mut s = String::new();
    let _ = file.rewind();
    let _ = file.read_to_string(&mut s);
    match s.trim().parse::<u32>() {
        Ok(pid) => format!("pid {pid}"),
        Err(_) => "another process".into(),
    }
}

impl StateLock {
    fn open(state_dir: &Path) -> Result<(std::fs::File, PathBuf)> {
        std::fs::create_dir_all(state_dir)
            .with_context(|| format!("creating state directory {}", state_dir.display()))?;
        let path = state_dir.join(LOCK_FILE);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        Ok((file, path))
    }

    /// Takes the lock now or fails naming its holder. `what` says who wants it, for the
    /// message ("memqos restore", "memqos daemon").
    pub fn try_acquire(state_dir: &Path, what: &str) -> Result<StateLock> {
        let (mut file, path) = StateLock::open(state_dir)?;
        // SAFETY: flock on a valid fd.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
                bail!(
                    "{what}: another memqos process ({}: a daemon, or a guardian restoring) holds {}; a daemon restores its knobs itself when it stops (SIGTERM): stop it first",
                    holder(&mut file),
                    path.display()
                );
            }
            return Err(err).with_context(|| format!("flock {}", path.display()));
        }
        let mut lock = StateLock { file, path };
        lock.write_pid();
        Ok(lock)
    }

    /// Waits up to `patience` for the lock. None if another holder keeps it that long (then
    /// that holder, a restarted daemon, is responsible for the journal).
    pub fn acquire_within(state_dir: &Path, patience: Duration) -> Result<Option<StateLock>> {
        let (file, path) = StateLock::open(state_dir)?;
        let t0 = Instant::now();
        loop {
            // SAFETY: flock on a valid fd.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                let mut lock = StateLock { file, path };
                lock.write_pid();
                return Ok(Some(lock));
            }
            if t0.elapsed() >= patience {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn write_pid(&mut self) {
        let _ = self.file.set_len(0);
        let _ = self.file.rewind();
        let _ = write!(self.file, "{}", std::process::id());
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// One daemon per cgroup root: an exclusive `flock` on the root directory itself, held for
/// the daemon's life. Two daemons with different state directories on one tree would each
/// journal the other's writes as "originals" and fight over every knob; the state lock
/// cannot see that, the root's own inode can. (Nothing else flocks cgroup directories; the
/// kernel drops the lock when the daemon dies.)
pub struct RootLock {
    _dir: std::fs::File,
}

impl RootLock {
    pub fn try_acquire(cgroup_root: &Path) -> Result<RootLock> {
        use std::os::unix::fs::OpenOptionsExt;
        let dir = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(cgroup_root)
            .with_context(|| format!("opening cgroup_root {}", cgroup_root.display()))?;
        // SAFETY: flock on a valid fd.
        if unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
                bail!(
                    "another memqos daemon manages cgroup_root {} (with another state_dir): one daemon per tree; stop it first",
                    cgroup_root.display()
                );
            }
            return Err(err).with_context(|| format!("flock {}", cgroup_root.display()));
        }
        Ok(RootLock { _dir: dir })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time() {
        let dir = std::env::temp_dir().join(format!("memqos-lock-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let held = StateLock::try_acquire(&dir, "memqos daemon").unwrap();
        // flock locks belong to the open file description: a second open conflicts even in
        // the same process, as another process's would.
        let err = StateLock::try_acquire(&dir, "memqos restore").err().unwrap().to_string();
        assert!(err.contains("memqos restore") && err.contains(&format!("pid {}", std::process::id())), "{err}");
        assert!(StateLock::acquire_within(&dir, Duration::from_millis(50)).unwrap().is_none());
        drop(held);
        assert!(StateLock::acquire_within(&dir, Duration::from_millis(50)).unwrap().is_some());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
