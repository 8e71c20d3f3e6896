//! Where downloaded kernels, built initramfs images and run directories live: outside the
//! source tree, shared by every checkout on the machine.

use std::fs::File;
use std::path::{Path, PathBuf};

/// `$MEMQOS_CACHE`, else `$XDG_CACHE_HOME/memqos`, else `$HOME/.cache/memqos`.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("MEMQOS_CACHE") {
        return PathBuf::from(dir);
    }
    if let Some(xdg) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(xdg).join("memqos");
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    PathBuf::from(home).join(".cache/memqos")
}

/// An exclusive advisory lock held until dropped (flock on a file in the cache).
pub struct FileLock {
    _file: File,
}

impl FileLock {
    /// Waits for the lock `name` in the cache directory.
    pub fn acquire(name: &str) -> std::io::Result<FileLock> {
        Self::acquire_at(&cache_dir().join(name))
    }

    /// Waits for the lock file at `path`.
    pub fn acquire_at(path: &Path) -> std::io::Result<FileLock> {
        Self::lock(path, libc::LOCK_EX).map(|l| l.expect("a blocking flock returns only when held"))
    }

    /// Takes the lock file at `path` if it is free now; `None` if another holder has it.
    pub fn try_acquire_at(path: &Path) -> std::io::Result<Option<FileLock>> {
        Self::lock(path, libc::LOCK_EX | libc::LOCK_NB)
    }

    fn lock(path: &Path, op: libc::c_int) -> std::io::Result<Option<FileLock>> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let file = File::options().create(true).truncate(false).write(true).open(path)?;
        // SAFETY: flock on a valid fd.
        let rc = unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&file), op) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            return if err.raw_os_error() == Some(libc::EWOULDBLOCK) { Ok(None) } else { Err(err) };
        }
        Ok(Some(FileLock { _file: file }))
    }
}
