//! The one cgroup I/O layer: directories and files opened strictly beneath the cgroup root.
//!
//! Every open goes through the root's fd with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`
//! (kernels 5.6+; older ones, and paths longer than PATH_MAX, which no single system call
//! takes, walk the path one component at a time with `O_NOFOLLOW`, each relative to its
//! parent's fd), after the relative path was checked to hold no `..`, `.`, empty or absolute
//! component. A journal or a config therefore cannot make memqos read or write outside its
//! root, a symlink planted in the tree is refused, not followed, and a tree nested deeper
//! than PATH_MAX is read like any other. The directory's inode is its cgroup id: callers
//! compare it with the id they expect, so a cgroup removed and re-created under the same name
//! is a different cgroup. "Gone" is decided by the one rule, [`crate::vanished`].

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
    crate::name::checked_relative(rel).map(|_| ())
}

/// CGROUP2_SUPER_MAGIC from linux/magic.h.
pub const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

/// The cgroup root, opened once.
pub struct Root {
    path: PathBuf,
    fd: OwnedFd,
    /// The root's filesystem is cgroup2 (fstatfs of the opened fd): false on fake trees.
    cgroup2: bool,
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

use crate::vanished as is_vanished_errno;

fn cstr(s: &str) -> CString {
    CString::new(s).expect("checked: no NUL")
}

/// A carried relative path as the bytes the filesystem knows (`crate::name`), checked
/// after decoding: an error, never a panic, for a name with a NUL or a `..`.
fn cpath(rel: &str) -> std::io::Result<CString> {
    use std::os::unix::ffi::OsStringExt;
    let bytes = crate::name::checked_relative(rel)
        .map_err(|why| std::io::Error::new(std::io::ErrorKind::InvalidInput, why))?
        .into_vec();
    CString::new(bytes).map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "NUL in a path"))
}

impl Root {
    /// Opens the directory `path` as a root, whatever its filesystem: fake trees in tests are
    /// directories on tmpfs. [`Root::is_cgroup2`] says what it is; [`Root::open_cgroup2`]
    /// refuses anything else.
    pub fn open(path: &Path) -> std::io::Result<Root> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags_dir()
            .open(path)
            .map_err(|e| std::io::Error::new(e.kind(), format!("opening cgroup_root {}: {e}", path.display())))?;
        let fd: OwnedFd = f.into();
        let cgroup2 = fs_magic(&fd).map(|m| m == CGROUP2_SUPER_MAGIC).unwrap_or(false);
        Ok(Root { path: path.to_owned(), fd, cgroup2 })
    }

    /// [`Root::open`], refusing a directory that is not on a cgroup2 filesystem (checked with
    /// fstatfs on the opened descriptor, so the answer is about the directory opened).
    pub fn open_cgroup2(path: &Path) -> std::io::Result<Root> {
        let root = Root::open(path)?;
        if !root.cgroup2 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{} is not on a cgroup2 filesystem", path.display()),
            ));
        }
        Ok(root)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the root is on a cgroup2 filesystem (fstatfs: CGROUP2_SUPER_MAGIC).
    pub fn is_cgroup2(&self) -> bool {
        self.cgroup2
    }

    /// The root directory's owner (fstat of its descriptor).
    pub fn owner(&self) -> std::io::Result<u32> {
        Ok(std::fs::File::from(self.fd.try_clone()?).metadata()?.uid())
    }

    /// Whether `rel` is a directory beneath the root now (no symlink on the way).
    pub fn exists(&self, rel: &str) -> bool {
        self.open_dir(rel, None).is_ok()
    }

    /// Opens `file` of the cgroup directory `rel` beneath the root with `flags` (`O_RDONLY`,
    /// `O_RDWR`, ...; never created, never through a symlink). One openat2 where the kernel
    /// has it and the path fits in PATH_MAX; else the directory is opened a component at a
    /// time and the file relative to it. Errors are the system's (ELOOP for a symlink,
    /// ENOENT for a missing file or cgroup): [`crate::vanished`] decides what is gone.
    pub fn open_file(&self, rel: &str, file: &str, flags: i32) -> std::io::Result<std::fs::File> {
        check_relative(rel).map_err(|why| std::io::Error::new(std::io::ErrorKind::InvalidInput, why))?;
        if file.is_empty() || file.contains('/') || file == "." || file == ".." || file.contains('\0') {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{file:?} is not a file name")));
        }
        if rel.is_empty() {
            return open_file(&self.fd, file, flags);
        }
        let joined = format!("{rel}/{file}");
        match openat2(&self.fd, &joined, (flags | libc::O_CLOEXEC) as u64) {
            Ok(fd) => Ok(std::fs::File::from(fd)),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS) | Some(libc::ENAMETOOLONG)) => {
                let dir = walk_beneath(&self.fd, rel)?;
                open_file(&dir, file, flags)
            }
            Err(e) => Err(e),
        }
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

impl Root {
    /// Removes the cgroup `rel` (never the root) if its name still holds the cgroup `expect`:
    /// `unlinkat(parent, name, AT_REMOVEDIR)` on its parent's descriptor opened beneath the
    /// root (the kernel has no rmdir by descriptor; the id is checked on the parent's
    /// descriptor right before). Errors are the system's: EBUSY for a cgroup with a process
    /// or a child, ENOENT for one gone ([`crate::vanished`]). On a fake tree (not cgroup2)
    /// the regular files in the directory stand for the kernel's interface files, which rmdir
    /// takes with the directory: they are unlinked first, and only there.
    pub fn remove_cgroup(&self, rel: &str, expect: CgroupId) -> std::io::Result<()> {
        let invalid = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, why);
        check_relative(rel).map_err(invalid)?;
        let (parent_rel, name) = rel.rsplit_once('/').unwrap_or(("", rel));
        if name.is_empty() {
            return Err(invalid("the root is never removed".into()));
        }
        let parent = match self.open_dir(parent_rel, None) {
            Ok((fd, _)) => fd,
            Err(OpenError::Vanished) => return Err(std::io::Error::from_raw_os_error(libc::ENOENT)),
            Err(OpenError::Refused(why)) => return Err(invalid(why)),
            Err(OpenError::Io(e)) => return Err(e),
        };
        let name = cpath(name)?;
        if stat_at(&parent, &name)?.st_ino != expect {
            return Err(std::io::Error::from_raw_os_error(libc::ENOENT)); // another cgroup now
        }
        match unlinkat(&parent, &name, libc::AT_REMOVEDIR) {
            Err(e) if !self.cgroup2 && e.raw_os_error() == Some(libc::ENOTEMPTY) => {
                // SAFETY: a valid dir fd and a NUL-terminated name; the fd is owned below.
                let fd = unsafe {
                    libc::openat(
                        parent.as_raw_fd(),
                        name.as_ptr(),
                        libc::O_DIRECTORY | libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                    )
                };
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // SAFETY: a new fd we own.
                let dir = unsafe { OwnedFd::from_raw_fd(fd) };
                let files = entries(&dir)?;
                if files.iter().any(|(_, is_dir)| *is_dir) {
                    return Err(e); // a child cgroup: as the kernel, nothing removed
                }
                for (file, _) in &files {
                    unlinkat(&dir, file, 0)?;
                }
                unlinkat(&parent, &name, libc::AT_REMOVEDIR)
            }
            r => r,
        }
    }
}

fn stat_at(dir: &OwnedFd, name: &CString) -> std::io::Result<libc::stat64> {
    // SAFETY: a zeroed stat filled by fstatat; valid dir fd and NUL-terminated name.
    let mut st: libc::stat64 = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstatat64(dir.as_raw_fd(), name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st)
}

fn unlinkat(dir: &OwnedFd, name: &CString, flags: i32) -> std::io::Result<()> {
    // SAFETY: a valid dir fd and a NUL-terminated name.
    if unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The entries of a fake tree's cgroup directory: (name, is a directory). Through
/// /proc/self/fd: only ever for fake trees.
fn entries(dir: &OwnedFd) -> std::io::Result<Vec<(CString, bool)>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))? {
        let e = e?;
        use std::os::unix::ffi::OsStrExt;
        let name =
            CString::new(e.file_name().as_bytes()).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
        out.push((name, e.file_type()?.is_dir()));
    }
    Ok(out)
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

/// fstatfs(2) of an open descriptor: the filesystem's magic number.
fn fs_magic(fd: &OwnedFd) -> std::io::Result<i64> {
    // SAFETY: fstatfs fills the zeroed struct; the fd is valid.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstatfs(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    #[allow(clippy::unnecessary_cast)] // f_type's width differs between libcs.
    Ok(st.f_type as i64)
}

/// openat2(2) of `rel` beneath `root`, refusing every symlink.
fn openat2(root: &OwnedFd, rel: &str, flags: u64) -> std::io::Result<OwnedFd> {
    let path = cpath(rel)?;
    // SAFETY: open_how is plain data; all-zero is its documented default.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = flags;
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
    Err(std::io::Error::last_os_error())
}

fn open_beneath(root: &OwnedFd, rel: &str) -> std::io::Result<OwnedFd> {
    match openat2(root, rel, (libc::O_DIRECTORY | libc::O_RDONLY | libc::O_CLOEXEC) as u64) {
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS) | Some(libc::ENAMETOOLONG)) => walk_beneath(root, rel),
        other => other,
    }
}

/// No openat2 (kernel < 5.6), or a path longer than PATH_MAX: one component at a time, each
/// relative to its parent's fd, never following a link. `rel` was checked to hold no "..", so
/// this cannot climb out either.
fn walk_beneath(root: &OwnedFd, rel: &str) -> std::io::Result<OwnedFd> {
    let mut cur = root.try_clone()?;
    for comp in rel.split('/') {
        let c = cpath(comp)?;
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
pub fn open_file(dir: &OwnedFd, file: &str, flags: i32) -> std::io::Result<std::fs::File> {
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
    /// An I/O error by the one vanished rule.
    pub fn from_io(e: std::io::Error) -> FileError {
        if is_vanished_errno(&e) {
            FileError::Vanished
        } else {
            FileError::Io(e)
        }
    }
}

pub fn read_at(dir: &OwnedFd, file: &str) -> Result<String, FileError> {
    let mut f = open_file(dir, file, libc::O_RDONLY).map_err(FileError::from_io)?;
    let mut s = String::new();
    f.read_to_string(&mut s).map_err(FileError::from_io)?;
    Ok(s.trim().to_owned())
}

/// Writes `value` in one write(2), as the kernel expects; O_TRUNC is ignored by cgroupfs and
/// /proc and keeps fake trees correct. Never creates a file.
pub fn write_at(dir: &OwnedFd, file: &str, value: &str) -> Result<(), FileError> {
    write_with(dir, file, value, 0)
}

/// [`write_at`] through a file opened `O_NONBLOCK`: since a 2025 kernel change, memory.high
/// and memory.max set that way return at once instead of making the writer reclaim down to
/// the new limit (the kernel's own reclaim and throttling of the cgroup still follow).
/// Kernels before it ignore the flag for cgroup files, so it is always safe to pass.
pub fn write_at_nonblocking(dir: &OwnedFd, file: &str, value: &str) -> Result<(), FileError> {
    write_with(dir, file, value, libc::O_NONBLOCK)
}

fn write_with(dir: &OwnedFd, file: &str, value: &str, flags: i32) -> Result<(), FileError> {
    let mut f = open_file(dir, file, libc::O_WRONLY | libc::O_TRUNC | flags).map_err(FileError::from_io)?;
    f.write_all(value.as_bytes()).map_err(FileError::from_io)
}

/// The subdirectories of the directory `dir` (child cgroups): each name as the filesystem
/// has it and the directory's inode (its cgroup id), in readdir order. Symlinks are not
/// directories here. Entries that vanish while listed are left out.
pub fn subdirs(dir: &OwnedFd) -> std::io::Result<Vec<(std::ffi::OsString, u64)>> {
    use std::os::unix::ffi::OsStrExt;
    // fdopendir takes the fd it is given: a duplicate, closed by closedir.
    let fd = dir.try_clone()?;
    // SAFETY: a valid fd we own; on success the DIR owns it.
    let d = unsafe { libc::fdopendir(fd.as_raw_fd()) };
    if d.is_null() {
        return Err(std::io::Error::last_os_error());
    }
    std::mem::forget(fd);
    // SAFETY: `d` is a valid DIR*; rewinding reads from the start whatever the shared offset.
    unsafe { libc::rewinddir(d) };
    let mut out = Vec::new();
    let result = loop {
        // SAFETY: errno is thread-local; cleared to tell the end from an error.
        unsafe { *libc::__errno_location() = 0 };
        // SAFETY: a valid DIR*; the entry is valid until the next readdir on it.
        let ent = unsafe { libc::readdir64(d) };
        if ent.is_null() {
            let err = std::io::Error::last_os_error();
            break if err.raw_os_error().unwrap_or(0) == 0 { Ok(()) } else { Err(err) };
        }
        // SAFETY: d_name is NUL-terminated within the entry.
        let name = unsafe { std::ffi::CStr::from_ptr((*ent).d_name.as_ptr()) };
        let bytes = name.to_bytes();
        if bytes == b"." || bytes == b".." {
            continue;
        }
        // As std's DirEntry::metadata: fstatat without following a link.
        // SAFETY: a zeroed stat filled by fstatat; valid dir fd and NUL-terminated name.
        let mut st: libc::stat64 = unsafe { std::mem::zeroed() };
        let rc = unsafe { libc::fstatat64(libc::dirfd(d), name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) };
        if rc != 0 || st.st_mode & libc::S_IFMT != libc::S_IFDIR {
            continue;
        }
        out.push((std::ffi::OsStr::from_bytes(bytes).to_owned(), st.st_ino));
    };
    // SAFETY: closes the DIR and the fd it owns.
    unsafe { libc::closedir(d) };
    result.map(|()| out)
}

/// A cgroup directory opened beneath the root ([`Root::cgroup`]): typed reads through its
/// descriptor, errors naming the cgroup and file, "vanished" by the one rule.
pub struct Dir {
    fd: OwnedFd,
    id: CgroupId,
    /// For messages (and to tell a missing file of a live cgroup from a gone cgroup).
    path: PathBuf,
}

impl Root {
    /// The cgroup directory `rel` ("" = the root) as a [`Dir`].
    pub fn cgroup(&self, rel: &str) -> crate::Result<Dir> {
        let path = crate::name::fs_path(&self.path, rel);
        let io = |source: std::io::Error, path: PathBuf| crate::Error::Io {
            cgroup: path,
            file: String::new(),
            op: "open",
            source,
        };
        match self.open_dir(rel, None) {
            Ok((fd, id)) => Ok(Dir { fd, id, path }),
            Err(OpenError::Vanished) => Err(crate::Error::Vanished { cgroup: path, file: "" }),
            Err(OpenError::Refused(why)) => Err(io(std::io::Error::new(std::io::ErrorKind::InvalidInput, why), path)),
            Err(OpenError::Io(e)) => Err(io(e, path)),
        }
    }
}

impl Dir {
    /// The cgroup id (the directory's inode).
    pub fn id(&self) -> CgroupId {
        self.id
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    pub fn read_string(&self, file: &'static str) -> crate::Result<String> {
        let err = |op, e| crate::cgroup::map_err(&self.path, op, file, e);
        let mut f = open_file(&self.fd, file, libc::O_RDONLY).map_err(|e| err("open", e))?;
        let mut s = String::new();
        f.read_to_string(&mut s).map_err(|e| err("read", e))?;
        Ok(s)
    }

    fn parsed<T>(
        &self,
        file: &'static str,
        f: impl FnOnce(&str) -> std::result::Result<T, crate::parse::ParseError>,
    ) -> crate::Result<T> {
        let text = self.read_string(file)?;
        f(&text).map_err(|source| crate::Error::Parse { cgroup: self.path.clone(), file: file.into(), source })
    }

    pub fn memory_current(&self) -> crate::Result<u64> {
        self.parsed("memory.current", crate::parse::parse_u64)
    }

    pub fn memory_peak(&self) -> crate::Result<u64> {
        self.parsed("memory.peak", crate::parse::parse_u64)
    }

    /// Reads one of memory.{high,max,low,min,swap.max}.
    pub fn limit(&self, file: &'static str) -> crate::Result<crate::Limit> {
        self.parsed(file, crate::parse::parse_limit)
    }

    pub fn procs(&self) -> crate::Result<Vec<u32>> {
        self.parsed("cgroup.procs", crate::parse::parse_pids)
    }

    pub fn is_frozen(&self) -> crate::Result<bool> {
        self.parsed("cgroup.freeze", |t| crate::parse::parse_u64(t).map(|v| v != 0))
    }

    /// `populated` of cgroup.events: whether any process runs in this cgroup or below.
    pub fn is_populated(&self) -> crate::Result<bool> {
        self.parsed("cgroup.events", |t| {
            let kv = crate::parse::parse_flat_keyed(t)?;
            Ok(kv.iter().any(|&(k, v)| k == "populated" && v != 0))
        })
    }

    /// The directory's owner (fstat of the descriptor).
    pub fn owner(&self) -> std::io::Result<u32> {
        Ok(std::fs::File::from(self.fd.try_clone()?).metadata()?.uid())
    }

    /// As [`crate::Cgroup::xattr_flag`], through the descriptor.
    pub fn xattr_flag(&self, name: &str) -> bool {
        crate::cgroup::xattr_flag(|buf| self.getxattr(name, buf))
    }

    /// As [`crate::Cgroup::xattr_bytes`], through the descriptor.
    pub fn xattr_bytes(&self, name: &str, max: usize) -> std::io::Result<Option<Vec<u8>>> {
        crate::cgroup::xattr_bytes(|buf| self.getxattr(name, buf), max)
    }

    fn getxattr(&self, name: &str, buf: &mut [u8]) -> std::io::Result<usize> {
        let name = CString::new(name).map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
        // SAFETY: a valid fd, a NUL-terminated name and a buffer of the length given.
        let n = unsafe { libc::fgetxattr(self.fd.as_raw_fd(), name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        usize::try_from(n).map_err(|_| std::io::Error::last_os_error())
    }
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
    fn files_open_beneath_the_root_and_refuse_symlinks() {
        let base = std::env::temp_dir().join(format!("memqos-beneath-files-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("root/a/b")).unwrap();
        std::fs::create_dir_all(base.join("outside")).unwrap();
        std::fs::write(base.join("outside/memory.current"), "666\n").unwrap();
        std::fs::write(base.join("root/a/b/memory.current"), "42\n").unwrap();
        std::os::unix::fs::symlink(base.join("outside"), base.join("root/a/link")).unwrap();
        std::os::unix::fs::symlink(base.join("outside/memory.current"), base.join("root/a/memory.current")).unwrap();
        let root = Root::open(&base.join("root")).unwrap();
        assert!(!root.is_cgroup2(), "a directory in /tmp");
        assert!(Root::open_cgroup2(&base.join("root")).is_err());

        let mut s = String::new();
        root.open_file("a/b", "memory.current", libc::O_RDONLY).unwrap().read_to_string(&mut s).unwrap();
        assert_eq!(s, "42\n");
        let loop_err = |r: std::io::Result<std::fs::File>| r.err().and_then(|e| e.raw_os_error());
        assert_eq!(loop_err(root.open_file("a/link", "memory.current", libc::O_RDONLY)), Some(libc::ELOOP));
        assert_eq!(loop_err(root.open_file("a", "memory.current", libc::O_RDONLY)), Some(libc::ELOOP));
        for (rel, file) in [("../outside", "memory.current"), ("a", "../link/memory.current"), ("/tmp", "x"), ("a", "")]
        {
            let e = root.open_file(rel, file, libc::O_RDONLY).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{rel} {file}");
        }
        let gone = root.open_file("gone", "memory.current", libc::O_RDONLY).unwrap_err();
        assert!(crate::vanished(&gone), "{gone}");
        assert!(root.exists("a/b") && !root.exists("a/link") && !root.exists("gone"));

        let (a, _) = root.open_dir("a", None).unwrap();
        let kids = subdirs(&a).unwrap();
        assert_eq!(kids.len(), 1, "the symlinked directory is not a child: {kids:?}");
        assert_eq!(kids[0].0, "b");
        assert_eq!(kids[0].1, std::fs::metadata(base.join("root/a/b")).unwrap().ino());
        std::fs::remove_dir_all(&base).unwrap();
    }

    /// A tree nested past PATH_MAX (4096 bytes) cannot be named by one path; it is opened
    /// relative to parent fds. The chain is made with mkdirat, as a tenant would.
    #[test]
    fn trees_deeper_than_path_max_are_opened_beneath() {
        let base = std::env::temp_dir().join(format!("memqos-beneath-deep-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let name = "d".repeat(200);
        let depth = 30; // 30 * 201 bytes: past PATH_MAX
        let mut dir: OwnedFd = std::fs::File::open(&base).unwrap().into();
        for _ in 0..depth {
            let c = cstr(&name);
            // SAFETY: valid fd and NUL-terminated name.
            assert_eq!(unsafe { libc::mkdirat(dir.as_raw_fd(), c.as_ptr(), 0o755) }, 0);
            dir = open_file(&dir, &name, libc::O_DIRECTORY | libc::O_RDONLY).unwrap().into();
        }
        write_at_new(&dir, "memory.current", "7\n");
        let deepest_id = inode(&dir).unwrap();
        let rel = vec![name.as_str(); depth].join("/");
        assert!(rel.len() > libc::PATH_MAX as usize);

        let root = Root::open(&base).unwrap();
        let (fd, id) = root.open_dir(&rel, None).unwrap();
        assert_eq!(id, deepest_id);
        assert_eq!(read_at(&fd, "memory.current").ok().as_deref(), Some("7"));
        let mut s = String::new();
        root.open_file(&rel, "memory.current", libc::O_RDONLY).unwrap().read_to_string(&mut s).unwrap();
        assert_eq!(s, "7\n");
        write_at(&fd, "memory.current", "8").unwrap();
        assert_eq!(read_at(&fd, "memory.current").ok().as_deref(), Some("8"));
        assert!(matches!(root.open_dir(&format!("{rel}/gone"), None), Err(OpenError::Vanished)));
        // Remove it deepest first, each level beneath its parent's fd.
        let mut chain = vec![root.open_dir("", None).unwrap().0];
        for i in 1..=depth {
            chain.push(root.open_dir(&vec![name.as_str(); i].join("/"), None).unwrap().0);
        }
        let c = cstr("memory.current");
        // SAFETY: valid fds and NUL-terminated names.
        unsafe { libc::unlinkat(chain[depth].as_raw_fd(), c.as_ptr(), 0) };
        let n = cstr(&name);
        for i in (0..depth).rev() {
            assert_eq!(unsafe { libc::unlinkat(chain[i].as_raw_fd(), n.as_ptr(), libc::AT_REMOVEDIR) }, 0);
        }
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_cgroup_is_removed_beneath_its_parent_and_only_if_it_is_still_the_one_meant() {
        let base = std::env::temp_dir().join(format!("memqos-beneath-rm-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("root/s/call/child")).unwrap();
        std::fs::write(base.join("root/s/call/cgroup.events"), "populated 0\n").unwrap();
        let root = Root::open(&base.join("root")).unwrap();
        let id = |rel: &str| std::fs::metadata(base.join("root").join(rel)).unwrap().ino();
        let errno = |r: std::io::Result<()>| r.unwrap_err().raw_os_error();
        assert!(root.remove_cgroup("", id("")).is_err() && root.remove_cgroup("../root", id("")).is_err());
        assert_eq!(errno(root.remove_cgroup("s/call", id("s"))), Some(libc::ENOENT), "another id: not removed");
        assert_eq!(errno(root.remove_cgroup("s/call", id("s/call"))), Some(libc::ENOTEMPTY), "it has a child");
        assert!(base.join("root/s/call/cgroup.events").exists(), "nothing of it removed");
        root.remove_cgroup("s/call/child", id("s/call/child")).unwrap();
        root.remove_cgroup("s/call", id("s/call")).unwrap();
        assert!(!base.join("root/s/call").exists() && base.join("root/s").exists());
        assert_eq!(errno(root.remove_cgroup("s/call", 1)), Some(libc::ENOENT));
        std::fs::remove_dir_all(&base).unwrap();
    }

    fn write_at_new(dir: &OwnedFd, file: &str, value: &str) {
        let c = cstr(file);
        // SAFETY: valid fd and NUL-terminated name.
        let fd = unsafe {
            libc::openat(dir.as_raw_fd(), c.as_ptr(), libc::O_WRONLY | libc::O_CREAT | libc::O_CLOEXEC, 0o644)
        };
        assert!(fd >= 0);
        // SAFETY: a new fd we own.
        let mut f = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        f.write_all(value.as_bytes()).unwrap();
    }
}
