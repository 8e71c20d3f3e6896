//! Opening cgroup directories and knob files strictly beneath the cgroup root.
//!
//! Every write memqos makes goes through a directory fd opened under the root's fd with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` (kernels 5.6+; older ones walk the path
//! one component at a time with `O_NOFOLLOW`), after the relative path was checked to hold no
//! `..`, `.`, empty or absolute component. A journal or a config therefore cannot make memqos
//! write outside its root, and a symlink planted in the tree is refused, not followed.
//! The directory's inode is its cgroup id: callers compare it with the id they expect, so a
//! cgroup removed and re-created under the same name is a different cgroup.

use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The kernel's cgroup id: the inode number of the cgroup's directory (cgroupfs), as BPF
/// and the stats snapshot report it.
pub type CgroupId = u64;

/// Why a relative cgroup path is refused; the message names the path.
pub fn check_relative(rel: &str) -> Result<(), String> {
    if rel.starts_with('/') {
        return Err(format!("{rel:?} is an absolute path (must be relative to cgroup_root)"));
    }
    if rel.is_empty() {
        return Ok(()); // the root itself
    }
    for comp in rel.split('/') {
        match comp {
            "" => return Err(format!("{rel:?} has an empty path component")),
            "." | ".." => return Err(format!("{rel:?} has a {comp:?} component (must stay beneath cgroup_root)")),
            _ if comp.contains('\0') => return Err(format!("{rel:?} has a NUL byte")),
            _ => {}
        }
    }
    Ok(())
}

/// The cgroup root, opened once.
pub struct Root {
    path: PathBuf,
    fd: OwnedFd,
}

/// An error from opening or using a cgroup directory.
#[derive(Debug)]
pub enum OpenError {
    /// The path is gone, or now names another cgroup (re-created): not an error for callers.
    Vanished,
    /// Refused: the path leaves the root, holds a symlink, or is malformed.
    Refused(String),
    Io(std::io::Error),
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::Vanished => write!(f, "cgroup vanished"),
            OpenError::Refused(why) => write!(f, "refused: {why}"),
            OpenError::Io(e) => write!(f, "{e}"),
        }
    }
}

use memqos_cgroupfs::vanished as is_vanished_errno;

fn cstr(s: &str) -> CString {
    CString::new(s).expect("checked: no NUL")
}

/// A carried relative path as the bytes the filesystem knows (`memqos_cgroupfs::name`).
fn cpath(rel: &str) -> CString {
    use std::os::unix::ffi::OsStringExt;
    CString::new(memqos_cgroupfs::name::decode(rel).into_vec()).expect("checked: no NUL")
}

impl Root {
    pub fn open(path: &Path) -> std::io::Result<Root> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags_dir()
            .open(path)
            .map_err(|e| std::io::Error::new(e.kind(), format!("opening cgroup_root {}: {e}", path.display())))?;
        Ok(Root { path: path.to_owned(), fd: f.into() })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens the cgroup directory `rel` (relative, "" = the root) beneath the root and returns
    /// it with its cgroup id. With `expect`, a different id means the name now belongs to
    /// another cgroup: `Vanished`.
    pub fn open_dir(&self, rel: &str, expect: Option<CgroupId>) -> Result<(OwnedFd, CgroupId), OpenError> {
        check_relative(rel).map_err(OpenError::Refused)?;
        let fd = if rel.is_empty() {
            dup(&self.fd).map_err(OpenError::Io)?
        } else {
            open_beneath(&self.fd, rel).map_err(|e| map_open_err(e, rel))?
        };
        let id = inode(&fd).map_err(OpenError::Io)?;
        match expect {
            Some(want) if want != id => Err(OpenError::Vanished),
            _ => Ok((fd, id)),
        }
    }
}

fn map_open_err(e: std::io::Error, rel: &str) -> OpenError {
    match e.raw_os_error() {
        Some(libc::ELOOP) => OpenError::Refused(format!("{rel:?} holds a symbolic link")),
        Some(libc::EXDEV) => OpenError::Refused(format!("{rel:?} leaves cgroup_root")),
        Some(libc::ENOTDIR) => OpenError::Refused(format!("{rel:?} is not a directory")),
        _ if is_vanished_errno(&e) => OpenError::Vanished,
        _ => OpenError::Io(e),
    }
}

trait DirFlags {
    fn custom_flags_dir(&mut self) -> &mut Self;
}

impl DirFlags for std::fs::OpenOptions {
    fn custom_flags_dir(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.custom_flags(libc::O_DIRECTORY)
    }
}

fn dup(fd: &OwnedFd) -> std::io::Result<OwnedFd> {
    fd.try_clone()
}

pub fn inode(fd: &OwnedFd) -> std::io::Result<u64> {
    let f = std::fs::File::from(fd.try_clone()?);
    Ok(f.metadata()?.ino())
}

fn open_beneath(root: &OwnedFd, rel: &str) -> std::io::Result<OwnedFd> {
    let path = cpath(rel);
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_DIRECTORY | libc::O_RDONLY | libc::O_CLOEXEC) as u64;
    how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: valid fd, NUL-terminated path and an open_how of the size passed.
    let r = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root.as_raw_fd(),
            path.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if r >= 0 {
        // SAFETY: a new fd we own.
        return Ok(unsafe { OwnedFd::from_raw_fd(r as i32) });
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() != Some(libc::ENOSYS) {
        return Err(err);
    }
    // No openat2 (kernel < 5.6): one component at a time, never following a link. `rel`
    // was checked to hold no "..", so this cannot climb out either.
    let mut cur = root.try_clone()?;
    for comp in rel.split('/') {
        let c = cpath(comp);
        // SAFETY: valid fd and NUL-terminated name.
        let r = unsafe {
            libc::openat(
                cur.as_raw_fd(),
                c.as_ptr(),
                libc::O_DIRECTORY | libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a new fd we own.
        cur = unsafe { OwnedFd::from_raw_fd(r) };
    }
    Ok(cur)
}

/// Opens `file` in the directory `dir`, never following a symlink.
pub(crate) fn open_file(dir: &OwnedFd, file: &str, flags: i32) -> std::io::Result<std::fs::File> {
    let c = cstr(file);
    // SAFETY: valid fd and NUL-terminated name.
    let r = unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), flags | libc::O_NOFOLLOW | libc::O_CLOEXEC) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a new fd we own.
    Ok(std::fs::File::from(unsafe { OwnedFd::from_raw_fd(r) }))
}

/// The outcome of reading or writing one file in a directory fd.
#[derive(Debug)]
pub enum FileError {
    Vanished,
    Io(std::io::Error),
}

impl FileError {
    fn from(e: std::io::Error) -> FileError {
        if is_vanished_errno(&e) {
            FileError::Vanished
        } else {
            FileError::Io(e)
        }
    }
}

pub fn read_at(dir: &OwnedFd, file: &str) -> Result<String, FileError> {
    let mut f = open_file(dir, file, libc::O_RDONLY).map_err(FileError::from)?;
    let mut s = String::new();
    f.read_to_string(&mut s).map_err(FileError::from)?;
    Ok(s.trim().to_owned())
}

/// Writes `value` in one write(2), as the kernel expects; O_TRUNC is ignored by cgroupfs and
/// /proc and keeps fake trees correct. Never creates a file.
pub fn write_at(dir: &OwnedFd, file: &str, value: &str) -> Result<(), FileError> {
    let mut f = open_file(dir, file, libc::O_WRONLY | libc::O_TRUNC).map_err(FileError::from)?;
    f.write_all(value.as_bytes()).map_err(FileError::from)
}

/// `/proc/PID` as a directory fd. The fd keeps naming that one process: once it exits, every
/// open through it fails with ESRCH even if the pid is reused, so a write through it can
/// never reach a recycled pid. `start_time` (field 22 of its stat, read through the fd) is
/// checked against the expected one.
pub fn open_process(pid: u32, start_time: u64) -> Result<OwnedFd, FileError> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags_dir()
        .open(format!("/proc/{pid}"))
        .map_err(FileError::from)?;
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
    fn relative_paths_are_checked() {
        assert!(check_relative("a/b").is_ok());
        assert!(check_relative("").is_ok());
        for bad in ["/etc", "../x", "a/../b", "a//b", "./a", "a/"] {
            assert!(check_relative(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn opens_stay_beneath_the_root_and_refuse_symlinks() {
        let base = std::env::temp_dir().join(format!("memqos-beneath-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("root/a/b")).unwrap();
        std::fs::create_dir_all(base.join("outside")).unwrap();
        std::os::unix::fs::symlink(base.join("outside"), base.join("root/link")).unwrap();
        std::os::unix::fs::symlink("a", base.join("root/rel-link")).unwrap();
        std::fs::write(base.join("root/a/b/memory.high"), "max\n").unwrap();
        std::os::unix::fs::symlink(base.join("outside/x"), base.join("root/a/memory.high")).unwrap();
        let root = Root::open(&base.join("root")).unwrap();

        let (dir, id) = root.open_dir("a/b", None).unwrap();
        assert_eq!(id, std::fs::metadata(base.join("root/a/b")).unwrap().ino());
        write_at(&dir, "memory.high", "1234").unwrap();
        assert_eq!(read_at(&dir, "memory.high").ok().as_deref(), Some("1234"));
        assert!(matches!(root.open_dir("a/b", Some(id + 1)), Err(OpenError::Vanished)), "another id is another cgroup");
        assert!(matches!(root.open_dir("gone", None), Err(OpenError::Vanished)));
        for bad in ["link", "rel-link", "../outside", "/tmp"] {
            assert!(matches!(root.open_dir(bad, None), Err(OpenError::Refused(_))), "{bad}");
        }
        let (a, _) = root.open_dir("a", None).unwrap();
        assert!(
            matches!(write_at(&a, "memory.high", "1"), Err(FileError::Io(_))),
            "a symlinked knob file is not followed"
        );
        assert!(!base.join("outside/x").exists());
        assert!(matches!(write_at(&a, "memory.low", "1"), Err(FileError::Vanished)), "files are never created");
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn process_dirs_check_the_start_time() {
        let me = std::process::id();
        let start = crate::proc_stat::start_time(me).unwrap();
        assert!(open_process(me, start).is_ok());
        assert!(matches!(open_process(me, start + 1), Err(FileError::Vanished)));
    }
}
