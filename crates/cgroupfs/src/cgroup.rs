//! A cgroup v2 directory and the typed reads/writes memqos needs from it.

use crate::parse::{self, Limit, MemoryEvents, ParseError, Pressure};
use std::io;
use std::path::{Path, PathBuf};

pub type Result<T> = std::result::Result<T, Error>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The cgroup was removed (rmdir) between listing and access: a normal outcome for
    /// short-lived tenants, so it has its own kind.
    #[error("cgroup {cgroup} vanished while reading {file}")]
    Vanished { cgroup: PathBuf, file: &'static str },
    #[error("cgroup {cgroup}: {op} {file}: {source}")]
    Io { cgroup: PathBuf, file: String, op: &'static str, source: io::Error },
    #[error("cgroup {cgroup}: {file}: {source}")]
    Parse { cgroup: PathBuf, file: String, source: ParseError },
}

impl Error {
    pub fn is_vanished(&self) -> bool {
        matches!(self, Error::Vanished { .. })
    }
}

/// A cgroup directory in a cgroup v2 hierarchy. The hierarchy root is whatever the caller
/// passes; nothing here assumes /sys/fs/cgroup.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Cgroup {
    path: PathBuf,
}

impl Cgroup {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Cgroup { path: path.into() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn child(&self, name: &str) -> Cgroup {
        Cgroup::new(self.path.join(name))
    }

    /// Creates the directory (the kernel populates it); an existing one is fine.
    pub fn create(&self) -> Result<()> {
        match std::fs::create_dir(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
            Err(source) => Err(self.io_err("mkdir", "", source)),
        }
    }

    /// rmdir; the cgroup must have no tasks and no children.
    pub fn remove(&self) -> Result<()> {
        std::fs::remove_dir(&self.path).map_err(|e| self.map_err("rmdir", "", e))
    }

    pub fn exists(&self) -> bool {
        self.path.join("cgroup.procs").exists()
    }

    pub fn read_string(&self, file: &'static str) -> Result<String> {
        std::fs::read_to_string(self.path.join(file)).map_err(|e| self.map_err("read", file, e))
    }

    /// Writes `value` in one write(2), as the kernel expects. O_TRUNC is ignored by cgroupfs
    /// (as with a shell's `echo >`) and keeps fake trees in tests correct.
    pub fn write_string(&self, file: &'static str, value: &str) -> Result<()> {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(self.path.join(file))
            .map_err(|e| self.map_err("open", file, e))?;
        f.write_all(value.as_bytes()).map_err(|e| self.map_err("write", file, e))
    }

    fn parsed<T>(&self, file: &'static str, f: impl FnOnce(&str) -> std::result::Result<T, ParseError>) -> Result<T> {
        let text = self.read_string(file)?;
        f(&text).map_err(|source| Error::Parse { cgroup: self.path.clone(), file: file.into(), source })
    }

    pub fn memory_current(&self) -> Result<u64> {
        self.parsed("memory.current", parse::parse_u64)
    }

    pub fn memory_peak(&self) -> Result<u64> {
        self.parsed("memory.peak", parse::parse_u64)
    }

    /// Reads one of memory.{high,max,low,min,swap.max}.
    pub fn limit(&self, file: &'static str) -> Result<Limit> {
        self.parsed(file, parse::parse_limit)
    }

    pub fn set_limit(&self, file: &'static str, value: Limit) -> Result<()> {
        self.write_string(file, &value.to_string())
    }

    pub fn memory_events(&self) -> Result<MemoryEvents> {
        self.parsed("memory.events", MemoryEvents::parse)
    }

    pub fn memory_pressure(&self) -> Result<Pressure> {
        self.parsed("memory.pressure", Pressure::parse)
    }

    /// memory.stat as (key, value) pairs in kernel order.
    pub fn memory_stat(&self) -> Result<Vec<(String, u64)>> {
        self.parsed("memory.stat", |t| {
            parse::parse_flat_keyed(t).map(|kv| kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
        })
    }

    pub fn controllers(&self) -> Result<Vec<String>> {
        self.parsed("cgroup.controllers", |t| Ok(parse::parse_controllers(t).into_iter().map(String::from).collect()))
    }

    pub fn subtree_control(&self) -> Result<Vec<String>> {
        self.parsed("cgroup.subtree_control", |t| {
            Ok(parse::parse_controllers(t).into_iter().map(String::from).collect())
        })
    }

    /// Enables controllers for children, e.g. `["memory"]` writes "+memory".
    pub fn enable_controllers(&self, names: &[&str]) -> Result<()> {
        let text: Vec<String> = names.iter().map(|n| format!("+{n}")).collect();
        self.write_string("cgroup.subtree_control", &text.join(" "))
    }

    pub fn procs(&self) -> Result<Vec<u32>> {
        self.parsed("cgroup.procs", parse::parse_pids)
    }

    /// Moves a process into this cgroup.
    pub fn add_proc(&self, pid: u32) -> Result<()> {
        self.write_string("cgroup.procs", &pid.to_string())
    }

    pub fn is_frozen(&self) -> Result<bool> {
        self.parsed("cgroup.freeze", |t| parse::parse_u64(t).map(|v| v != 0))
    }

    /// `populated` of cgroup.events: whether any process runs in this cgroup or below.
    pub fn is_populated(&self) -> Result<bool> {
        self.parsed("cgroup.events", |t| {
            let kv = parse::parse_flat_keyed(t)?;
            Ok(kv.iter().any(|&(k, v)| k == "populated" && v != 0))
        })
    }

    /// True for the hierarchy's root (e.g. /sys/fs/cgroup itself), the only cgroup without
    /// a cgroup.type file; it also has no memory.max (fake trees in tests, which often omit
    /// cgroup.type, do have one).
    pub fn is_hierarchy_root(&self) -> bool {
        self.path.join("cgroup.controllers").exists()
            && !self.path.join("cgroup.type").exists()
            && !self.path.join("memory.max").exists()
    }

    /// Whether the extended attribute `name` is set on the cgroup's directory to anything
    /// but "0" (systemd writes "1" in user.oomd_avoid/omit). Absent, unreadable or a vanished
    /// cgroup all read as unset: a hint, not a knob.
    pub fn xattr_flag(&self, name: &str) -> bool {
        xattr_flag(|buf| self.getxattr(name, buf))
    }

    /// The value of the extended attribute `name` as stored (not trimmed): `Ok(None)` when it
    /// is not set, an `ERANGE` error when it is longer than `max` bytes.
    pub fn xattr_bytes(&self, name: &str, max: usize) -> io::Result<Option<Vec<u8>>> {
        xattr_bytes(|buf| self.getxattr(name, buf), max)
    }

    /// getxattr(2) of `name` on the cgroup's directory into `buf`: the value's length.
    fn getxattr(&self, name: &str, buf: &mut [u8]) -> io::Result<usize> {
        use std::os::unix::ffi::OsStrExt;
        let invalid = || io::Error::from(io::ErrorKind::InvalidInput);
        let path = std::ffi::CString::new(self.path.as_os_str().as_bytes()).map_err(|_| invalid())?;
        let name = std::ffi::CString::new(name).map_err(|_| invalid())?;
        // SAFETY: NUL-terminated strings and a buffer of the length given.
        let n = unsafe { libc::getxattr(path.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        usize::try_from(n).map_err(|_| io::Error::last_os_error())
    }

    /// Sets the extended attribute `name` (a `user.*` name: cgroupfs keeps those since 5.7)
    /// on the cgroup's directory, e.g. `user.memqos.expected_peak`.
    pub fn set_xattr(&self, name: &'static str, value: &str) -> Result<()> {
        use std::os::unix::ffi::OsStrExt;
        let invalid =
            |what: &str| self.io_err("setxattr", name, io::Error::new(io::ErrorKind::InvalidInput, what.to_owned()));
        let path = std::ffi::CString::new(self.path.as_os_str().as_bytes()).map_err(|_| invalid("NUL in the path"))?;
        let cname = std::ffi::CString::new(name).map_err(|_| invalid("NUL in the name"))?;
        // SAFETY: NUL-terminated strings, value pointer and length from one slice.
        let rc = unsafe { libc::setxattr(path.as_ptr(), cname.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
        if rc == 0 {
            Ok(())
        } else {
            Err(self.map_err("setxattr", name, io::Error::last_os_error()))
        }
    }

    /// Direct child cgroups (directories), sorted by name.
    pub fn children(&self) -> Result<Vec<Cgroup>> {
        let rd = std::fs::read_dir(&self.path).map_err(|e| self.map_err("readdir", "", e))?;
        let mut out = Vec::new();
        for entry in rd {
            let entry = entry.map_err(|e| self.map_err("readdir", "", e))?;
            if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                out.push(Cgroup::new(entry.path()));
            }
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    /// All descendants in pre-order (parents before children), excluding self.
    pub fn descendants(&self) -> Result<Vec<Cgroup>> {
        let mut out = Vec::new();
        let mut stack = self.children()?;
        stack.reverse();
        while let Some(cg) = stack.pop() {
            match cg.children() {
                Ok(mut kids) => {
                    kids.reverse();
                    stack.extend(kids);
                    out.push(cg);
                }
                Err(e) if e.is_vanished() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    fn io_err(&self, op: &'static str, file: &str, source: io::Error) -> Error {
        Error::Io { cgroup: self.path.clone(), file: file.into(), op, source }
    }

    fn map_err(&self, op: &'static str, file: &'static str, e: io::Error) -> Error {
        map_err(&self.path, op, file, e)
    }
}

/// "Vanished" by the one rule (`crate::vanished`); ENOENT only when the cgroup itself no
/// longer exists (a missing file of a live cgroup is an error to report).
pub(crate) fn map_err(cgroup: &Path, op: &'static str, file: &'static str, e: io::Error) -> Error {
    let gone = crate::vanished(&e) && (e.raw_os_error() != Some(libc::ENOENT) || !cgroup.exists());
    if gone {
        Error::Vanished { cgroup: cgroup.to_owned(), file }
    } else {
        Error::Io { cgroup: cgroup.to_owned(), file: file.into(), op, source: e }
    }
}

/// Whether an extended attribute read by `get` is set to anything but "0".
pub(crate) fn xattr_flag(get: impl FnOnce(&mut [u8]) -> io::Result<usize>) -> bool {
    let mut buf = [0u8; 16];
    match get(&mut buf) {
        Ok(n) => &buf[..n] != b"0",
        // ERANGE (a long value) still means "set".
        Err(e) => e.raw_os_error() == Some(libc::ERANGE),
    }
}

/// An extended attribute read by `get` as stored: `Ok(None)` when it is not set.
pub(crate) fn xattr_bytes(get: impl FnOnce(&mut [u8]) -> io::Result<usize>, max: usize) -> io::Result<Option<Vec<u8>>> {
    let mut buf = vec![0u8; max];
    match get(&mut buf) {
        Ok(n) => {
            buf.truncate(n);
            Ok(Some(buf))
        }
        Err(e) if e.raw_os_error() == Some(libc::ENODATA) => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_tree() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "memqos-cgroupfs-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("a/x")).unwrap();
        std::fs::create_dir_all(dir.join("b")).unwrap();
        for d in ["", "a", "a/x", "b"] {
            std::fs::write(dir.join(d).join("cgroup.procs"), "").unwrap();
        }
        std::fs::write(dir.join("a/memory.high"), "max\n").unwrap();
        std::fs::write(dir.join("a/memory.current"), "4096\n").unwrap();
        std::fs::write(dir.join("a/memory.events"), "low 0\nhigh 3\nmax 0\noom 0\noom_kill 0\n").unwrap();
        std::fs::write(dir.join("b/memory.current"), "junk\n").unwrap();
        dir
    }

    #[test]
    fn typed_reads_writes_and_errors_name_the_file() {
        let root = fake_tree();
        let a = Cgroup::new(root.join("a"));
        assert_eq!(a.limit("memory.high").unwrap(), Limit::Max);
        a.set_limit("memory.high", Limit::Bytes(1 << 20)).unwrap();
        assert_eq!(a.limit("memory.high").unwrap(), Limit::Bytes(1 << 20));
        assert_eq!(a.memory_current().unwrap(), 4096);
        assert_eq!(a.memory_events().unwrap().high, 3);

        let err = Cgroup::new(root.join("b")).memory_current().unwrap_err().to_string();
        assert!(err.contains("/b") && err.contains("memory.current") && err.contains("junk"), "{err}");

        let gone = Cgroup::new(root.join("gone")).memory_current().unwrap_err();
        assert!(gone.is_vanished(), "{gone}");
        // A missing file in an existing cgroup is not "vanished": it is a kernel feature gap.
        let missing = a.memory_pressure().unwrap_err();
        assert!(!missing.is_vanished() && missing.to_string().contains("memory.pressure"), "{missing}");

        let names: Vec<_> = Cgroup::new(&root)
            .descendants()
            .unwrap()
            .iter()
            .map(|c| c.path().strip_prefix(&root).unwrap().to_owned())
            .collect();
        assert_eq!(names, vec![PathBuf::from("a"), PathBuf::from("a/x"), PathBuf::from("b")]);
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn xattr_flags_and_hierarchy_root() {
        let dir = fake_tree();
        let set = |d: &str, name: &str, v: &str| {
            let p = std::ffi::CString::new(dir.join(d).to_str().unwrap()).unwrap();
            let n = std::ffi::CString::new(name).unwrap();
            // SAFETY: NUL-terminated strings, value pointer and length from one slice.
            let rc = unsafe { libc::setxattr(p.as_ptr(), n.as_ptr(), v.as_ptr().cast(), v.len(), 0) };
            assert_eq!(rc, 0, "setxattr {name} on {d}: {}", std::io::Error::last_os_error());
        };
        set("a", "user.oomd_omit", "1");
        set("b", "user.oomd_omit", "0");
        set("a/x", "user.oomd_avoid", "a value longer than sixteen bytes");
        set("b", "user.memqos.expected_peak", " 512M\n");
        Cgroup::new(dir.join("a")).set_xattr("user.memqos.expected_peak", "1G").unwrap();
        assert_eq!(
            Cgroup::new(dir.join("a")).xattr_bytes("user.memqos.expected_peak", 64).unwrap().as_deref(),
            Some(&b"1G"[..])
        );
        Cgroup::new(dir.join("a")).set_xattr("user.memqos.expected_peak", "").unwrap();
        assert_eq!(
            Cgroup::new(dir.join("a")).xattr_bytes("user.memqos.expected_peak", 64).unwrap().as_deref(),
            Some(&b""[..])
        );
        assert!(Cgroup::new(dir.join("gone")).set_xattr("user.memqos.expected_peak", "1G").is_err());
        let b = Cgroup::new(dir.join("b"));
        assert_eq!(b.xattr_bytes("user.memqos.expected_peak", 64).unwrap().as_deref(), Some(&b" 512M\n"[..]));
        assert_eq!(b.xattr_bytes("user.memqos.expected_peak", 3).unwrap_err().raw_os_error(), Some(libc::ERANGE));
        assert_eq!(b.xattr_bytes("user.memqos.workload", 64).unwrap(), None);
        assert!(Cgroup::new(dir.join("gone")).xattr_bytes("user.oomd_omit", 64).is_err(), "a vanished cgroup");
        assert!(Cgroup::new(dir.join("a")).xattr_flag("user.oomd_omit"));
        assert!(!Cgroup::new(dir.join("b")).xattr_flag("user.oomd_omit"), "\"0\" means unset");
        assert!(!Cgroup::new(dir.join("a")).xattr_flag("user.oomd_avoid"));
        assert!(Cgroup::new(dir.join("a/x")).xattr_flag("user.oomd_avoid"));
        assert!(!Cgroup::new(dir.join("gone")).xattr_flag("user.oomd_omit"));
        // cgroup.type marks every cgroup but the hierarchy's root.
        std::fs::write(dir.join("cgroup.controllers"), "memory\n").unwrap();
        std::fs::write(dir.join("a/cgroup.controllers"), "memory\n").unwrap();
        std::fs::write(dir.join("a/cgroup.type"), "domain\n").unwrap();
        assert!(Cgroup::new(&dir).is_hierarchy_root());
        assert!(!Cgroup::new(dir.join("a")).is_hierarchy_root());
        std::fs::write(dir.join("memory.max"), "max\n").unwrap();
        assert!(!Cgroup::new(&dir).is_hierarchy_root(), "a fake root with memory.max is a parent");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
