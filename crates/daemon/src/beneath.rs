//! The daemon's view of the one cgroup I/O layer (`memqos_cgroupfs::beneath`: descriptors
//! beneath the root, no symlinks), plus the /proc/PID descriptors oom_score_adj is written
//! through.

use std::os::fd::OwnedFd;

pub use memqos_cgroupfs::beneath::{
    check_relative, inode, open_file, read_at, write_at, write_at_nonblocking, CgroupId, FileError, OpenError, Root,
};

/// `/proc/PID` as a directory fd. The fd keeps naming that one process: once it exits, every
/// open through it fails with ESRCH even if the pid is reused, so a write through it can
/// never reach a recycled pid. `start_time` (field 22 of its stat, read through the fd) is
/// checked against the expected one.
pub fn open_process(pid: u32, start_time: u64) -> Result<OwnedFd, FileError> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY)
        .open(format!("/proc/{pid}"))
        .map_err(FileError::from_io)?;
    let fd: OwnedFd = f.into();
    let stat = read_at(&fd, "stat")?;
    if crate::proc_stat::start_time_of(&stat) != Some(start_time) {
        return Err(FileError::Vanished);
    }
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_dirs_check_the_start_time() {
        let me = std::process::id();
        let start = crate::proc_stat::start_time(me).unwrap();
        assert!(open_process(me, start).is_ok());
        assert!(matches!(open_process(me, start + 1), Err(FileError::Vanished)));
    }
}
