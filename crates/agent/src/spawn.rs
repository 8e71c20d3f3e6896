//! Starts the command inside a cgroup and waits for it, forwarding signals.
//!
//! `memqos run` must outlive the command to read its peak and remove its cgroup, so it forks
//! instead of exec'ing. The child is created directly in the call's cgroup with clone3's
//! `CLONE_INTO_CGROUP` (Linux 5.7+): no migration, so no write lock on the kernel's
//! threadgroup rwsem (a migration through cgroup.procs can wait for an RCU grace period,
//! milliseconds that every tool call would pay). Older kernels fall back to fork and a write
//! of the child's pid to cgroup.procs before exec.
//!
//! Between fork and exec the child only makes async-signal-safe calls on data prepared by the
//! parent (the program path, argv and envp as C strings), as std's `Command` does.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How the child gets into its cgroup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpawnMode {
    /// clone3(CLONE_INTO_CGROUP), falling back to [`SpawnMode::ForkThenMove`] on kernels
    /// without it.
    IntoCgroup,
    /// fork, then the child writes itself into cgroup.procs before exec.
    ForkThenMove,
}

/// How the command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
}

impl Exit {
    /// The status a shell reports: the exit code, or 128 + the signal number.
    pub fn shell_code(self) -> u8 {
        match self {
            Exit::Code(c) => (c & 0xff) as u8,
            Exit::Signal(s) => (128 + s).clamp(0, 255) as u8,
        }
    }
}

/// The command could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("{cmd}: command not found")]
    NotFound { cmd: String },
    #[error("{cmd}: {source}")]
    Exec { cmd: String, source: io::Error },
    #[error("cannot move the command into {cgroup}: {source}")]
    Join { cgroup: PathBuf, source: io::Error },
    #[error("{what}: {source}")]
    Sys { what: &'static str, source: io::Error },
}

impl SpawnError {
    /// The exit status a shell would give: 127 not found, 126 found but not executable,
    /// 125 memqos's own failure.
    pub fn shell_code(&self) -> u8 {
        match self {
            SpawnError::NotFound { .. } => 127,
            SpawnError::Exec { .. } => 126,
            _ => 125,
        }
    }
}

/// Signals passed on to the command when another process sent them to us. Signals from the
/// terminal (Ctrl-C) already reach the whole foreground process group, the command included,
/// so forwarding those would deliver them twice.
const FORWARDED: [libc::c_int; 7] =
    [libc::SIGHUP, libc::SIGINT, libc::SIGQUIT, libc::SIGTERM, libc::SIGUSR1, libc::SIGUSR2, libc::SIGWINCH];

/// Runs `argv` in `cgroup` with `extra_env` added to this process's environment; returns how
/// it ended and the wall time from spawn to exit.
pub fn run_in(
    cgroup: &Path,
    argv: &[OsString],
    extra_env: &[(String, String)],
    mode: SpawnMode,
) -> Result<(Exit, Duration), SpawnError> {
    run_in_watching(cgroup, argv, extra_env, mode, &mut || {})
}

/// [`run_in`], calling `watch` while the command runs (about every 50 ms, and at each signal):
/// `memqos run` looks after its armed ceiling there.
pub fn run_in_watching(
    cgroup: &Path,
    argv: &[OsString],
    extra_env: &[(String, String)],
    mode: SpawnMode,
    watch: &mut dyn FnMut(),
) -> Result<(Exit, Duration), SpawnError> {
    let cmd_name = argv.first().map(|a| a.to_string_lossy().into_owned()).unwrap_or_default();
    let program = resolve(argv.first().map(OsString::as_os_str).unwrap_or_default())
        .ok_or_else(|| SpawnError::NotFound { cmd: cmd_name.clone() })?;
    let prepared = Prepared::new(&program, argv, extra_env)?;
    let dir = open(cgroup, libc::O_RDONLY | libc::O_DIRECTORY)
        .map_err(|source| SpawnError::Join { cgroup: cgroup.to_owned(), source })?;
    let procs = open(&cgroup.join("cgroup.procs"), libc::O_WRONLY)
        .map_err(|source| SpawnError::Join { cgroup: cgroup.to_owned(), source })?;
    let (err_r, err_w) = pipe()?;

    let mask = SignalMask::block()?;
    let start = Instant::now();
    let pid = spawn(mode, cgroup, &dir, &procs, &err_w, &prepared, &mask.old)?;
    drop(err_w);
    if let Some((stage, errno)) = read_child_error(&err_r) {
        reap(pid);
        let source = io::Error::from_raw_os_error(errno);
        return Err(match stage {
            STAGE_JOIN => SpawnError::Join { cgroup: cgroup.to_owned(), source },
            _ if errno == libc::ENOENT => SpawnError::NotFound { cmd: cmd_name },
            _ => SpawnError::Exec { cmd: cmd_name, source },
        });
    }
    let exit = wait_forwarding(pid, &mask.set, watch)?;
    Ok((exit, start.elapsed()))
}

/// PATH lookup as execvp does it, done before fork so the child need not allocate.
fn resolve(cmd: &OsStr) -> Option<PathBuf> {
    if cmd.is_empty() {
        return None;
    }
    if cmd.as_bytes().contains(&b'/') {
        return Some(PathBuf::from(cmd));
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path).map(|d| d.join(cmd)).find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    let Ok(c) = CString::new(p.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: a valid C string; access only checks permissions.
    p.is_file() && unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0
}

/// Everything the child needs, as C data owned by the parent.
struct Prepared {
    program: CString,
    _argv: Vec<CString>,
    argv_ptrs: Vec<*const libc::c_char>,
    _envp: Vec<CString>,
    envp_ptrs: Vec<*const libc::c_char>,
}

impl Prepared {
    fn new(program: &Path, argv: &[OsString], extra_env: &[(String, String)]) -> Result<Prepared, SpawnError> {
        let nul = |what: &'static str| SpawnError::Sys { what, source: io::Error::from_raw_os_error(libc::EINVAL) };
        let program = CString::new(program.as_os_str().as_bytes()).map_err(|_| nul("program path contains NUL"))?;
        let argv: Vec<CString> = argv
            .iter()
            .map(|a| CString::new(a.as_bytes()))
            .collect::<Result<_, _>>()
            .map_err(|_| nul("an argument contains NUL"))?;
        let mut env: Vec<(OsString, OsString)> =
            std::env::vars_os().filter(|(k, _)| !extra_env.iter().any(|(e, _)| OsStr::new(e) == k)).collect();
        env.extend(extra_env.iter().map(|(k, v)| (k.into(), v.into())));
        let envp: Vec<CString> = env
            .iter()
            .map(|(k, v)| {
                let mut b = k.as_bytes().to_vec();
                b.push(b'=');
                b.extend_from_slice(v.as_bytes());
                CString::new(b)
            })
            .collect::<Result<_, _>>()
            .map_err(|_| nul("an environment variable contains NUL"))?;
        let ptrs = |v: &[CString]| v.iter().map(|c| c.as_ptr()).chain(std::iter::once(std::ptr::null())).collect();
        Ok(Prepared { program, argv_ptrs: ptrs(&argv), envp_ptrs: ptrs(&envp), _argv: argv, _envp: envp })
    }
}

const STAGE_JOIN: u32 = 1;
const STAGE_EXEC: u32 = 2;

/// clone_args of clone3(2), the layout up to `cgroup` (CLONE_ARGS_SIZE_VER2).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

fn spawn(
    mode: SpawnMode,
    cgroup: &Path,
    dir: &OwnedFd,
    procs: &OwnedFd,
    err_w: &OwnedFd,
    p: &Prepared,
    old_mask: &libc::sigset_t,
) -> Result<libc::pid_t, SpawnError> {
    let mut move_self = mode == SpawnMode::ForkThenMove;
    let pid = if mode == SpawnMode::IntoCgroup {
        let args = CloneArgs {
            flags: CLONE_INTO_CGROUP,
            exit_signal: libc::SIGCHLD as u64,
            cgroup: dir.as_raw_fd() as u64,
            ..Default::default()
        };
        // SAFETY: without CLONE_VM, clone3 duplicates the process like fork; the child only
        // runs `child_exec`, which makes async-signal-safe calls.
        let r = unsafe { libc::syscall(libc::SYS_clone3, &args as *const CloneArgs, std::mem::size_of::<CloneArgs>()) };
        if r >= 0 {
            r as libc::pid_t
        } else {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                // No clone3 (< 5.3) or no CLONE_INTO_CGROUP (< 5.7).
                Some(libc::ENOSYS | libc::E2BIG | libc::EINVAL) => {
                    move_self = true;
                    fork()?
                }
                _ => return Err(SpawnError::Join { cgroup: cgroup.to_owned(), source: e }),
            }
        }
    } else {
        fork()?
    };
    if pid == 0 {
        child_exec(move_self, procs.as_raw_fd(), err_w.as_raw_fd(), p, old_mask);
    }
    Ok(pid)
}

fn fork() -> Result<libc::pid_t, SpawnError> {
    // SAFETY: the child only runs `child_exec` (async-signal-safe calls).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(SpawnError::Sys { what: "fork", source: io::Error::last_os_error() });
    }
    Ok(pid)
}

/// In the child: join the cgroup if needed, restore signal state, exec. Never returns.
fn child_exec(move_self: bool, procs: libc::c_int, err_w: libc::c_int, p: &Prepared, old_mask: &libc::sigset_t) -> ! {
    // SAFETY: only async-signal-safe calls on memory prepared before fork.
    unsafe {
        if move_self && libc::write(procs, b"0".as_ptr().cast(), 1) != 1 {
            report_and_exit(err_w, STAGE_JOIN, 125);
        }
        // Rust ignores SIGPIPE in its own processes; the command gets the default back, as
        // with std's Command, and the signal mask it had before memqos blocked anything.
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::pthread_sigmask(libc::SIG_SETMASK, old_mask, std::ptr::null_mut());
        libc::execve(p.program.as_ptr(), p.argv_ptrs.as_ptr(), p.envp_ptrs.as_ptr());
        report_and_exit(err_w, STAGE_EXEC, 127)
    }
}

unsafe fn report_and_exit(err_w: libc::c_int, stage: u32, code: libc::c_int) -> ! {
    let errno = *libc::__errno_location() as u32;
    let mut buf = [0u8; 8];
    buf[..4].copy_from_slice(&stage.to_ne_bytes());
    buf[4..].copy_from_slice(&errno.to_ne_bytes());
    libc::write(err_w, buf.as_ptr().cast(), 8);
    libc::_exit(code)
}

/// EOF (the pipe closed on exec) means the command started.
fn read_child_error(r: &OwnedFd) -> Option<(u32, i32)> {
    let mut buf = [0u8; 8];
    loop {
        // SAFETY: reading into a local buffer.
        let n = unsafe { libc::read(r.as_raw_fd(), buf.as_mut_ptr().cast(), 8) };
        if n < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        if n != 8 {
            return None;
        }
        let stage = u32::from_ne_bytes(buf[..4].try_into().unwrap());
        let errno = u32::from_ne_bytes(buf[4..].try_into().unwrap()) as i32;
        return Some((stage, errno));
    }
}

fn reap(pid: libc::pid_t) {
    let mut status = 0;
    // SAFETY: waiting for our own child.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0
        && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
    {}
}

/// Waits for `pid`, passing on the forwarded signals that processes send to us. SIGCHLD is in
/// the blocked set, so its arrival wakes the wait at once; the timeout only matters where
/// SIGCHLD is taken by another thread (tests run in a threaded harness).
fn wait_forwarding(pid: libc::pid_t, set: &libc::sigset_t, watch: &mut dyn FnMut()) -> Result<Exit, SpawnError> {
    let timeout = libc::timespec { tv_sec: 0, tv_nsec: 50_000_000 };
    loop {
        let mut status = 0;
        // SAFETY: our own child; WNOHANG never blocks.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            return Ok(if libc::WIFSIGNALED(status) {
                Exit::Signal(libc::WTERMSIG(status))
            } else {
                Exit::Code(libc::WEXITSTATUS(status))
            });
        }
        if r < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return Err(SpawnError::Sys { what: "waitpid", source: io::Error::last_os_error() });
        }
        watch();
        // SAFETY: siginfo is plain data filled by the kernel.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let sig = unsafe { libc::sigtimedwait(set, &mut info, &timeout) };
        // si_code <= 0: sent by a process (kill, sigqueue, tgkill); > 0: by the kernel.
        if sig > 0 && sig != libc::SIGCHLD && info.si_code <= 0 {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(pid, sig) };
        }
    }
}

/// The forwarded signals and SIGCHLD, blocked in this thread (so none is lost between the
/// spawn and the wait); the old mask is restored on drop and given to the child.
struct SignalMask {
    set: libc::sigset_t,
    old: libc::sigset_t,
}

impl SignalMask {
    fn block() -> Result<SignalMask, SpawnError> {
        // SAFETY: sigset_t is plain data initialised by sigemptyset.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for s in FORWARDED.iter().chain(&[libc::SIGCHLD]) {
                libc::sigaddset(&mut set, *s);
            }
            let r = libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
            if r != 0 {
                return Err(SpawnError::Sys { what: "pthread_sigmask", source: io::Error::from_raw_os_error(r) });
            }
            Ok(SignalMask { set, old })
        }
    }
}

impl Drop for SignalMask {
    fn drop(&mut self) {
        // SAFETY: restoring the mask saved in `block`.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut()) };
    }
}

fn open(path: &Path, flags: libc::c_int) -> io::Result<OwnedFd> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: a valid C string; the fd is owned by the returned OwnedFd.
    let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn pipe() -> Result<(OwnedFd, OwnedFd), SpawnError> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two fds that we then own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(SpawnError::Sys { what: "pipe2", source: io::Error::last_os_error() });
    }
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_cgroup() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("cgroup.procs"), "").unwrap();
        d
    }

    fn sh(script: &str) -> Vec<OsString> {
        vec!["sh".into(), "-c".into(), script.into()]
    }

    #[test]
    fn exit_codes_and_signals_come_back_as_a_shell_reports_them() {
        let cg = fake_cgroup();
        let run = |s: &str| run_in(cg.path(), &sh(s), &[], SpawnMode::ForkThenMove).unwrap().0;
        assert_eq!(run("exit 0"), Exit::Code(0));
        assert_eq!(run("exit 3").shell_code(), 3);
        let killed = run("kill -TERM $$");
        assert_eq!(killed, Exit::Signal(libc::SIGTERM));
        assert_eq!(killed.shell_code(), 128 + 15);
        assert_eq!(Exit::Signal(libc::SIGKILL).shell_code(), 137);
        // The child wrote itself into the (fake) cgroup.procs before exec.
        assert_eq!(std::fs::read_to_string(cg.path().join("cgroup.procs")).unwrap(), "0");
    }

    #[test]
    fn environment_is_passed_and_sigpipe_is_default_again() {
        let cg = fake_cgroup();
        let out = cg.path().join("out");
        // SigIgn of the exec'd awk: inherited ignores survive exec, so SIGPIPE (bit 12) shows
        // if memqos (a Rust program, which ignores it) had passed its own disposition on.
        let script = format!(
            "echo \"$MEMQOS_SESSION\" > {0}; awk '/^SigIgn/ {{print $2}}' /proc/self/status >> {0}",
            out.display()
        );
        let env = [("MEMQOS_SESSION".to_string(), "s1".to_string())];
        let (exit, _) = run_in(cg.path(), &sh(&script), &env, SpawnMode::ForkThenMove).unwrap();
        assert_eq!(exit, Exit::Code(0));
        let text = std::fs::read_to_string(out).unwrap();
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some("s1"));
        let ign = u64::from_str_radix(lines.next().unwrap().trim(), 16).unwrap();
        assert_eq!(ign & (1 << (libc::SIGPIPE - 1)), 0, "SIGPIPE still ignored in the command: {ign:x}");
    }

    #[test]
    fn missing_and_unexecutable_commands_get_127_and_126() {
        let cg = fake_cgroup();
        let e = run_in(cg.path(), &["no-such-command-memqos".into()], &[], SpawnMode::ForkThenMove).unwrap_err();
        assert_eq!(e.shell_code(), 127, "{e}");
        assert!(e.to_string().contains("no-such-command-memqos: command not found"), "{e}");
        let file = cg.path().join("not-exec");
        std::fs::write(&file, "#!/bin/sh\n").unwrap();
        let e = run_in(cg.path(), &[file.into_os_string()], &[], SpawnMode::ForkThenMove).unwrap_err();
        assert_eq!(e.shell_code(), 126, "{e}");
    }

    #[test]
    fn a_cgroup_that_cannot_be_joined_is_an_error_naming_it() {
        let d = tempfile::tempdir().unwrap();
        let e = run_in(&d.path().join("gone"), &sh("exit 0"), &[], SpawnMode::ForkThenMove).unwrap_err();
        assert_eq!(e.shell_code(), 125);
        assert!(e.to_string().contains("gone"), "{e}");
    }
}
