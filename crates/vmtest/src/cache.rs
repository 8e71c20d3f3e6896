//! Where downloaded kernels, built initramfs images and run directories live: outside the
//! source tree, shared by every checkout on the machine.

use std::fs::File;
use std::path::PathBuf;

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
    pub fn acquire(name: &str) -> std::io::Result<FileLock> {
        let dir = cache_dir();
        std::fs::create_dir_all(&dir)?;
        let file = File::options().create(true).truncate(false).write(true).open(dir.join(name))?;
        // SAFETY: flock on a valid fd; blocking is what we want.
        let rc = unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&file), libc::LOCK_EX) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(FileLock { _file: file })
    }
}
