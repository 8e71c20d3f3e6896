//! Where sessions and tool calls live under the managed root, and the checks that the root can
//! hold them.
//!
//! ```text
//! <root>/<session>/runtime        the agent runtime (`memqos run --runtime`), protected tier
//! <root>/<session>/<tier>.<pid>   one cgroup per tool call, e.g. tool.4711, tool-low.4712
//! ```
//!
//! The session cgroup holds no process itself (cgroup v2's no-internal-process rule: a cgroup
//! that gives controllers to its children may not hold tasks), only the runtime and the calls.
//! The tier is in the call's name so that a daemon config's globs (`*/tool-low.*`) place it
//! without any other state; the pid makes the name unique while the call runs.

use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use memqos_cgroupfs::Cgroup;

use crate::error::SetupError;

/// Name of the agent runtime's cgroup inside a session.
pub const RUNTIME: &str = "runtime";

/// Controllers a session hands to its runtime and calls when the root has them.
const SESSION_CONTROLLERS: [&str; 4] = ["memory", "cpu", "io", "pids"];

/// CGROUP2_SUPER_MAGIC from linux/magic.h.
const CGROUP2_MAGIC: i64 = 0x6367_7270;

/// The managed root, checked to be a cgroup v2 directory with the memory controller given to
/// its children.
#[derive(Clone, Debug)]
pub struct Root {
    cg: Cgroup,
}

impl Root {
    /// Opens `path` and checks, in this order: it exists, it is on a cgroup2 filesystem, the
    /// memory controller is available in it and enabled for its children.
    pub fn open(path: &Path) -> Result<Root, SetupError> {
        Self::open_with(path, true)
    }

    /// [`Root::open`] without the filesystem check, for fake trees in tests.
    pub fn open_unchecked_fs(path: &Path) -> Result<Root, SetupError> {
        Self::open_with(path, false)
    }

    fn open_with(path: &Path, check_fs: bool) -> Result<Root, SetupError> {
        if !path.is_dir() {
            return Err(SetupError::RootMissing { root: path.to_owned() });
        }
        if check_fs {
            let magic =
                fs_magic(path).map_err(|e| SetupError::Io { what: format!("statfs {}", path.display()), source: e })?;
            if magic != CGROUP2_MAGIC {
                return Err(SetupError::NotCgroup2 { root: path.to_owned(), magic });
            }
        }
        let cg = Cgroup::new(path);
        let controllers = cg.controllers().map_err(SetupError::Cgroup)?;
        if !controllers.iter().any(|c| c == "memory") {
            return Err(SetupError::MemoryUnavailable { root: path.to_owned() });
        }
        let enabled = cg.subtree_control().map_err(SetupError::Cgroup)?;
        if !enabled.iter().any(|c| c == "memory") {
            return Err(SetupError::MemoryNotDelegated { root: path.to_owned() });
        }
        Ok(Root { cg })
    }

    pub fn path(&self) -> &Path {
        self.cg.path()
    }

    /// The session's cgroup, created (with controllers for its children) if missing, and
    /// marked as made by `memqos run` if this call made it. Concurrent calls of the same
    /// session may race here: an existing directory and an already enabled controller are both
    /// fine. Returned with a shared lock ([`Session`]) that keeps the daemon from removing it.
    pub fn session(&self, name: &str) -> Result<Session, SetupError> {
        check_name("session", name)?;
        let s = self.cg.child(name);
        let lock = (0..100).find_map(|_| session_lock(&s).transpose()).unwrap_or_else(|| {
            Err(SetupError::Io {
                what: format!("mkdir {}", s.path().display()),
                source: std::io::Error::from_raw_os_error(libc::ENOENT),
            })
        })?;
        let available = s.controllers().map_err(SetupError::Cgroup)?;
        let enabled = s.subtree_control().map_err(SetupError::Cgroup)?;
        let missing: Vec<&str> = SESSION_CONTROLLERS
            .into_iter()
            .filter(|c| available.iter().any(|a| a == c) && !enabled.iter().any(|e| e == c))
            .collect();
        if !missing.is_empty() {
            s.enable_controllers(&missing).map_err(SetupError::Cgroup)?;
        }
        Ok(Session { cg: s, lock })
    }
}

/// One try at making (if missing) and locking the session `s`: `Ok(None)` when the daemon
/// removed it between the mkdir and the lock (try again). A session this call made is marked
/// ([`memqos_schema::call::MADE_BY_RUN_XATTR`]) under the lock: only marked ones are removed.
fn session_lock(s: &Cgroup) -> Result<Option<OwnedFd>, SetupError> {
    let made = match std::fs::create_dir(s.path()) {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
        Err(e) => return Err(SetupError::Io { what: format!("mkdir {}", s.path().display()), source: e }),
    };
    let lock = match lock_dir(s.path(), libc::LOCK_SH) {
        Ok(lock) if same_dir(s.path(), &lock) => lock,
        Ok(_) => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(None),
        Err(e) => return Err(SetupError::Io { what: format!("flock {}", s.path().display()), source: e }),
    };
    if made {
        mark(s, memqos_schema::call::MADE_SESSION);
    }
    Ok(Some(lock))
}

/// Marks a cgroup this call made. Best effort: where cgroupfs has no `user.*` xattrs (Linux
/// before 5.7) it stays unmarked, and the daemon never removes it (a call's own sweep still
/// removes call leftovers).
fn mark(cg: &Cgroup, kind: &str) {
    let _ = cg.set_xattr(memqos_schema::call::MADE_BY_RUN_XATTR, kind);
}

/// A session's cgroup and a shared `flock` on its directory, held by every `memqos run` of
/// the session while it runs: the daemon removes an idle session only under the exclusive
/// lock, so never between a call's mkdir of the session and of its own cgroup.
#[derive(Debug)]
pub struct Session {
    pub cg: Cgroup,
    /// Close-on-exec: the command does not inherit it.
    pub lock: OwnedFd,
}

/// A call cgroup and the lock that marks its creator alive: an `flock` on the cgroup's
/// directory, held until the call's cgroup is removed. The kernel drops it when the creator
/// exits however it exits (SIGKILL included), and it means the same in every PID namespace,
/// which the pid in the name does not: a sweep in another container cannot tell whether that
/// pid is alive.
pub struct CallCgroup {
    pub cg: Cgroup,
    /// Held for the call's lifetime (close-on-exec: the command does not inherit it).
    pub lock: OwnedFd,
}

/// Creates `<session>/<tier>.<pid>` (with a `-N` suffix if a leftover of the same name
/// exists), locked, and returns it. A new directory every time: two live calls never share
/// one.
pub fn create_call(session: &Cgroup, tier: &str, pid: u32) -> Result<CallCgroup, SetupError> {
    check_name("tier", tier)?;
    for n in 0..100u32 {
        let name = if n == 0 { format!("{tier}.{pid}") } else { format!("{tier}.{pid}-{n}") };
        let cg = session.child(&name);
        match std::fs::create_dir(cg.path()) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(SetupError::Io { what: format!("mkdir {}", cg.path().display()), source: e }),
        }
        // A concurrent sweep may remove the new, still unlocked and empty directory before
        // the lock is taken; it holds the lock while it removes, so once we have the lock the
        // directory is either still ours or gone for good (then: the next name).
        match lock_dir(cg.path(), libc::LOCK_EX) {
            Ok(lock) if same_dir(cg.path(), &lock) => {
                mark(&cg, memqos_schema::call::MADE_CALL);
                return Ok(CallCgroup { cg, lock });
            }
            Ok(_) => continue,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
            Err(e) => return Err(SetupError::Io { what: format!("flock {}", cg.path().display()), source: e }),
        }
    }
    Err(SetupError::Io {
        what: format!("mkdir {}/{tier}.{pid}-*", session.path().display()),
        source: std::io::Error::from_raw_os_error(libc::EEXIST),
    })
}

/// Opens `dir` and takes an `flock` on it: `op` is `LOCK_EX` or `LOCK_SH`, with `LOCK_NB` not
/// to wait.
fn lock_dir(dir: &Path, op: i32) -> std::io::Result<OwnedFd> {
    use std::os::fd::{AsRawFd, FromRawFd};
    use std::os::unix::ffi::OsStrExt;
    let c = CString::new(dir.as_os_str().as_bytes()).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: valid C string; the fd is owned below.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: a valid fd.
    if unsafe { libc::flock(fd.as_raw_fd(), op) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(fd)
}

/// True while `path` still names the directory `fd` has open (not removed, not replaced).
fn same_dir(path: &Path, fd: &OwnedFd) -> bool {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;
    // SAFETY: fstat fills the zeroed struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return false;
    }
    std::fs::metadata(path).is_ok_and(|m| m.ino() == st.st_ino && m.dev() == st.st_dev)
}

/// The runtime's cgroup of a session (shared if several runtimes start in one session).
pub fn runtime(session: &Cgroup) -> Result<Cgroup, SetupError> {
    let cg = session.child(RUNTIME);
    cg.create().map_err(SetupError::Cgroup)?;
    Ok(cg)
}

/// Call cgroups of a session whose creator is gone and in which nothing runs (a `memqos run`
/// that was SIGKILLed, or a call whose background processes have since ended): what
/// [`sweep`] removes. The creator is alive while it holds its directory's lock
/// ([`CallCgroup`]); a cgroup whose cgroup.events cannot be read counts as populated. Each is
/// returned locked, so its creator cannot be mid-creation while it is removed.
pub fn leftovers(session: &Cgroup) -> Vec<(Cgroup, OwnedFd)> {
    let Ok(children) = session.children() else {
        return Vec::new();
    };
    children
        .into_iter()
        .filter(|cg| {
            let name = cg.path().file_name().and_then(|n| n.to_str()).unwrap_or("");
            creator_pid(name).is_some()
        })
        .filter_map(|cg| {
            // Not locked by a live creator, in any PID namespace...
            let lock = lock_dir(cg.path(), libc::LOCK_EX | libc::LOCK_NB).ok()?;
            // ...and empty (checked under the lock: a creator cannot start a command now).
            (!cg.is_populated().unwrap_or(true)).then_some((cg, lock))
        })
        .collect()
}

/// Removes [`leftovers`]; returns how many. Errors are ignored: a concurrent call may sweep
/// the same cgroup, or a process may have entered it meanwhile (rmdir then fails with EBUSY).
pub fn sweep(session: &Cgroup) -> usize {
    // Each lock is held across its rmdir (see `create_call`).
    leftovers(session).iter().filter(|(cg, _lock)| cg.remove().is_ok()).count()
}

/// The pid in a call cgroup's name `<tier>.<pid>` or `<tier>.<pid>-<n>`.
pub fn creator_pid(name: &str) -> Option<u32> {
    let (_, rest) = name.rsplit_once('.')?;
    let digits = rest.split('-').next()?;
    digits.parse().ok()
}

/// Session and tier names become path components and glob targets: keep them plain.
pub fn check_name(what: &'static str, name: &str) -> Result<(), SetupError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !(what == "tier" && (name.contains('.') || name == RUNTIME));
    if ok {
        Ok(())
    } else {
        Err(SetupError::BadName { what, name: name.to_owned() })
    }
}

/// Where this process already is, relative to the managed root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Position {
    /// Not below the root.
    Outside,
    /// In a session's runtime cgroup: calls it starts belong to that session.
    Runtime { session: String },
    /// Inside a tool call (a nested `memqos run`, e.g. `make` running recipe lines through
    /// SHELL=memqos-shell): the command stays in the outer call's cgroup.
    Call { session: String, call: String },
}

/// Finds this process's place from the text of /proc/self/cgroup (the `0::/path` line) and
/// /proc/self/mountinfo (where cgroup2 is mounted).
pub fn position(root: &Path, proc_cgroup: &str, mountinfo: &str) -> Position {
    let Some(rel) = proc_cgroup.lines().find_map(|l| l.strip_prefix("0::")) else {
        return Position::Outside;
    };
    let Some(mount) = cgroup2_mount_for(root, mountinfo) else {
        return Position::Outside;
    };
    let me = mount.join(rel.trim().trim_start_matches('/'));
    let Ok(below) = me.strip_prefix(root) else {
        return Position::Outside;
    };
    // A process outside its cgroup namespace sees "/../x": not a place below the root (and
    // `..` is no session), however the path lines up with the root's text.
    if below.components().any(|c| !matches!(c, std::path::Component::Normal(_))) {
        return Position::Outside;
    }
    let parts: Vec<&str> = below.iter().filter_map(|p| p.to_str()).collect();
    match parts.as_slice() {
        [session, RUNTIME, ..] => Position::Runtime { session: session.to_string() },
        [session, call, ..] => Position::Call { session: session.to_string(), call: call.to_string() },
        _ => Position::Outside,
    }
}

/// The mount point of the cgroup2 filesystem that contains `root` (the longest match).
fn cgroup2_mount_for(root: &Path, mountinfo: &str) -> Option<PathBuf> {
    memqos_cgroupfs::mounts::cgroup2_of(mountinfo, root).map(|m| m.mount_point)
}

fn fs_magic(path: &Path) -> std::io::Result<i64> {
    use std::os::unix::ffi::OsStrExt;
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: statfs fills the zeroed struct; the path is a valid C string.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    #[allow(clippy::unnecessary_cast)] // f_type's width differs between libcs.
    Ok(st.f_type as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{fake_root, fake_session};

    #[test]
    fn root_checks_name_the_problem() {
        let dir = tempfile::tempdir().unwrap();
        let missing = Root::open_unchecked_fs(&dir.path().join("nope")).unwrap_err().to_string();
        assert!(missing.contains("nope") && missing.contains("does not exist"), "{missing}");

        // The host's /tmp is not cgroup2.
        let not_v2 = Root::open(dir.path()).unwrap_err().to_string();
        assert!(not_v2.contains("not a cgroup v2"), "{not_v2}");

        std::fs::write(dir.path().join("cgroup.controllers"), "cpu io\n").unwrap();
        std::fs::write(dir.path().join("cgroup.subtree_control"), "").unwrap();
        let unavailable = Root::open_unchecked_fs(dir.path()).unwrap_err().to_string();
        assert!(unavailable.contains("memory controller is not available"), "{unavailable}");

        std::fs::write(dir.path().join("cgroup.controllers"), "cpu io memory\n").unwrap();
        let not_delegated = Root::open_unchecked_fs(dir.path()).unwrap_err().to_string();
        assert!(
            not_delegated.contains("+memory") && not_delegated.contains("cgroup.subtree_control"),
            "{not_delegated}"
        );

        std::fs::write(dir.path().join("cgroup.subtree_control"), "memory\n").unwrap();
        Root::open_unchecked_fs(dir.path()).unwrap();
    }

    #[test]
    fn session_gets_controllers_and_calls_get_unique_names() {
        let (_dir, root) = fake_root();
        let s = fake_session(&root, "s1");
        assert_eq!(std::fs::read_to_string(s.path().join("cgroup.subtree_control")).unwrap(), "+memory +cpu +pids");

        let a = create_call(&s, "tool", 42).unwrap().cg;
        let b = create_call(&s, "tool", 42).unwrap().cg;
        assert!(a.path().ends_with("s1/tool.42") && b.path().ends_with("s1/tool.42-1"), "{a:?} {b:?}");
        assert_eq!(creator_pid("tool.42-1"), Some(42));
        assert_eq!(creator_pid("tool-low.7"), Some(7));
        assert_eq!(creator_pid(RUNTIME), None);

        assert!(root.session("../x").unwrap_err().to_string().contains("session name"));
        assert!(create_call(&s, "a.b", 1).is_err() && create_call(&s, RUNTIME, 1).is_err());
    }

    #[test]
    fn leftovers_are_unlocked_and_empty_calls_only() {
        let (_dir, root) = fake_root();
        let s = fake_session(&root, "s");
        let events = |cg: &Cgroup, populated: &str| {
            std::fs::write(cg.path().join("cgroup.events"), format!("populated {populated}\nfrozen 0\n")).unwrap()
        };
        // A live call: locked by its creator, empty between mkdir and the command's start.
        let live = create_call(&s, "tool", 10).unwrap();
        events(&live.cg, "0");
        // Creators gone: one empty, one with background processes left, one unreadable.
        for (name, populated) in [("tool.11", Some("0")), ("tool.12", Some("1")), ("tool.13", None)] {
            std::fs::create_dir(s.path().join(name)).unwrap();
            if let Some(p) = populated {
                events(&s.child(name), p);
            }
        }
        // The runtime has no creator lock and is never swept.
        std::fs::create_dir(s.path().join(RUNTIME)).unwrap();
        events(&s.child(RUNTIME), "0");
        let found = |s: &Cgroup| leftovers(s).into_iter().map(|(c, _)| c.path().to_owned()).collect::<Vec<_>>();
        assert_eq!(found(&s), vec![s.path().join("tool.11")]);
        // The creator ends (its lock goes with it): its cgroup is a leftover now.
        drop(live.lock);
        assert_eq!(found(&s), vec![s.path().join("tool.10"), s.path().join("tool.11")]);
    }

    #[test]
    fn a_sigkilled_creator_in_any_pid_namespace_leaves_a_sweepable_cgroup() {
        let (_dir, root) = fake_root();
        let s = fake_session(&root, "s");
        // Another process holds the lock, as a `memqos run` of another container would: its
        // pid means nothing here (pid 1 is alive in every namespace), the lock does.
        let call = create_call(&s, "tool", 1).unwrap();
        std::fs::write(call.cg.path().join("cgroup.events"), "populated 0\n").unwrap();
        drop(call.lock);
        // -o: the command does not inherit the lock, as the lock memqos run holds is close-on-exec.
        let mut holder =
            std::process::Command::new("flock").arg("-o").arg(call.cg.path()).args(["sleep", "10"]).spawn().unwrap();
        let held = (0..200).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            lock_dir(call.cg.path(), libc::LOCK_EX | libc::LOCK_NB).is_err()
        });
        assert!(held, "flock(1) never took the lock");
        assert!(leftovers(&s).is_empty(), "a locked call is alive whatever its pid");
        holder.kill().unwrap(); // SIGKILL
        holder.wait().unwrap();
        assert_eq!(leftovers(&s).len(), 1);
    }

    #[test]
    fn what_memqos_run_makes_is_marked_and_its_session_locked_shared() {
        use memqos_schema::call::{MADE_BY_RUN_XATTR, MADE_CALL, MADE_SESSION};
        let (_dir, root) = fake_root();
        let made = |cg: &Cgroup| cg.xattr_bytes(MADE_BY_RUN_XATTR, 64).unwrap().map(|v| String::from_utf8(v).unwrap());
        // A session this call makes is marked; one that was there (an operator's) is not.
        // (A fake tree's new directory has no cgroup.controllers: the lock step alone first.)
        let lock = session_lock(&root.cg.child("new")).unwrap().expect("made and locked");
        assert_eq!(made(&root.cg.child("new")).as_deref(), Some(MADE_SESSION));
        drop(lock);
        let fresh = fake_session(&root, "new");
        let fresh = Session { lock: lock_dir(fresh.path(), libc::LOCK_SH).unwrap(), cg: fresh };
        assert_eq!(made(&fresh.cg).as_deref(), Some(MADE_SESSION), "still ours when used again");
        let theirs = fake_session(&root, "theirs");
        assert_eq!(made(&theirs), None);
        let call = create_call(&fresh.cg, "tool", 3).unwrap();
        assert_eq!(made(&call.cg).as_deref(), Some(MADE_CALL));
        // Shared: another call of the session gets it too; the daemon's exclusive try does not.
        let again = root.session("new").unwrap();
        assert!(lock_dir(fresh.cg.path(), libc::LOCK_EX | libc::LOCK_NB).is_err());
        drop((fresh.lock, again.lock));
        assert!(lock_dir(fresh.cg.path(), libc::LOCK_EX | libc::LOCK_NB).is_ok());
    }

    #[test]
    fn a_locked_directory_that_was_removed_is_not_ours() {
        let (_dir, root) = fake_root();
        let s = fake_session(&root, "s");
        let c = create_call(&s, "tool", 7).unwrap();
        assert!(c.cg.path().ends_with("s/tool.7") && same_dir(c.cg.path(), &c.lock));
        // What create_call sees after a sweep removed its fresh directory before it locked it.
        std::fs::remove_dir(c.cg.path()).unwrap();
        assert!(!same_dir(c.cg.path(), &c.lock));
        std::fs::create_dir(c.cg.path()).unwrap();
        assert!(!same_dir(c.cg.path(), &c.lock), "a new directory of the same name is another one");
    }

    #[test]
    fn position_from_proc_files() {
        let mountinfo = "29 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n30 23 0:27 / /sys/fs/cgroup/unified rw - cgroup2 none rw\n";
        let root = Path::new("/sys/fs/cgroup/agents");
        assert_eq!(position(root, "0::/agents/s1/runtime\n", mountinfo), Position::Runtime { session: "s1".into() });
        assert_eq!(
            position(root, "0::/agents/s1/tool.5\n", mountinfo),
            Position::Call { session: "s1".into(), call: "tool.5".into() }
        );
        assert_eq!(position(root, "0::/agents/s1\n", mountinfo), Position::Outside);
        assert_eq!(position(root, "0::/user.slice\n", mountinfo), Position::Outside);
        assert_eq!(position(root, "12:memory:/x\n", mountinfo), Position::Outside);
        // A root under a v1 mount point only: no cgroup2 mount contains it.
        assert_eq!(position(Path::new("/cg/agents"), "0::/agents/s/runtime\n", mountinfo), Position::Outside);
        // Found by `proptest_position_names_a_place_below_the_root` (src/proptests.rs): a
        // process outside its cgroup namespace ("0::/../x/y") was placed in session "..".
        let whole = Path::new("/sys/fs/cgroup");
        assert_eq!(position(whole, "0::/../s1/tool.5\n", mountinfo), Position::Outside);
        assert_eq!(position(root, "0::/agents/s1/../s2/tool.5\n", mountinfo), Position::Outside);
    }
}
