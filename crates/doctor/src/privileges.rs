//! What the daemon will be allowed to do here, found by trying (issue 28, item 6): inside a
//! container or without capabilities the kernel refuses BPF loads (EPERM), PSI trigger
//! windows shorter than 2 s (EINVAL without CAP_SYS_RESOURCE), a higher open-file limit, or
//! writes to the cgroup tree. Each probe is harmless: a trivial BPF program loaded and
//! closed, PSI triggers registered on a file descriptor that is closed at once (the kernel
//! drops the trigger with it), `access(2)` for writability, `getrlimit(2)`.
//!
//! The system calls sit behind [`Prober`] so the judge is tested with fake answers; no
//! test touches the host's cgroup mounts.

use std::io;
use std::path::{Path, PathBuf};

use serde::Serialize;

/// PSI trigger windows tried, shortest first, in microseconds: the daemon's own 500 ms
/// window, then 1 s, then 2 s (the shortest an unprivileged writer may use).
pub const PSI_WINDOWS_US: [u64; 3] = [500_000, 1_000_000, 2_000_000];
/// Stall threshold of the probe triggers (µs within the window), below every window.
const PSI_PROBE_STALL_US: u64 = 150_000;
/// Descriptors the text stats backend keeps per managed cgroup (memory.events, .current,
/// .max, .high, .low, .min, .pressure: `FileSet::Knobs` in memqos-stats).
pub const FDS_PER_CGROUP: u64 = 7;
/// Descriptors kept back for everything else (the daemon's descriptor budget,
/// `memqos_cgroupfs::fds`, of which the statistics may keep half).
pub const FD_RESERVE: u64 = memqos_cgroupfs::fds::MARGIN;
/// Below this many cgroups within the descriptor budget, the limit is worth a warning.
pub const FEW_CGROUPS: u64 = 1_000;

/// The system calls the probes make.
pub trait Prober {
    /// Loads (and unloads) a trivial BPF program.
    fn bpf_load(&self) -> io::Result<()>;
    /// Registers `trigger` (e.g. `some 150000 500000`) on the PSI file `file`, then drops it.
    fn psi_trigger(&self, file: &Path, trigger: &str) -> io::Result<()>;
    /// RLIMIT_NOFILE: (soft, hard); `u64::MAX` for unlimited.
    fn nofile(&self) -> io::Result<(u64, u64)>;
    /// Whether this process may write `path` (a cgroup directory or file).
    fn writable(&self, path: &Path) -> io::Result<()>;
    /// Whether this process runs as root (a refused write means something else then).
    fn is_root(&self) -> bool;
}

/// One probe's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Outcome {
    Allowed,
    /// Refused with this errno (EPERM, EACCES, EINVAL, EROFS, ...): `error` is its text.
    Refused {
        errno: Option<i32>,
        error: String,
    },
}

impl Outcome {
    fn of(r: io::Result<()>) -> Outcome {
        match r {
            Ok(()) => Outcome::Allowed,
            Err(e) => Outcome::Refused { errno: e.raw_os_error(), error: e.to_string() },
        }
    }

    pub fn allowed(&self) -> bool {
        matches!(self, Outcome::Allowed)
    }
}

/// What the probes found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Privileges {
    pub bpf_load: Outcome,
    /// The memory.pressure file the triggers were tried on (None: no cgroup2 mount).
    pub psi_file: Option<PathBuf>,
    /// Each window tried, shortest first, until one was accepted.
    pub psi_windows: Vec<(u64, Outcome)>,
    /// RLIMIT_NOFILE (soft, hard), or why it could not be read.
    pub nofile: Result<(u64, u64), String>,
    /// The cgroup root the daemon would manage, and whether it may be written.
    pub root: Option<PathBuf>,
    pub root_write: Option<Outcome>,
    pub is_root: bool,
}

impl Privileges {
    /// The shortest PSI window accepted, in µs.
    pub fn shortest_psi_window_us(&self) -> Option<u64> {
        self.psi_windows.iter().find(|(_, o)| o.allowed()).map(|(w, _)| *w)
    }

    /// How many cgroups the hard open-file limit leaves descriptors for (the daemon raises
    /// its soft limit to the hard one).
    pub fn cgroups_in_fd_budget(&self) -> Option<u64> {
        let (_, hard) = *self.nofile.as_ref().ok()?;
        Some(hard.saturating_sub(FD_RESERVE) / 2 / FDS_PER_CGROUP)
    }
}

/// Runs every probe. `psi_file`: a memory.pressure this process may open (its own cgroup's
/// or the root's); `root`: the cgroup tree the daemon would manage.
pub fn probe(p: &dyn Prober, psi_file: Option<&Path>, root: Option<&Path>) -> Privileges {
    let mut psi_windows = Vec::new();
    if let Some(file) = psi_file {
        for w in PSI_WINDOWS_US {
            let o = Outcome::of(p.psi_trigger(file, &format!("some {PSI_PROBE_STALL_US} {w}")));
            let ok = o.allowed();
            psi_windows.push((w, o));
            if ok {
                break;
            }
        }
    }
    Privileges {
        bpf_load: Outcome::of(p.bpf_load()),
        psi_file: psi_file.map(Path::to_path_buf),
        psi_windows,
        nofile: p.nofile().map_err(|e| e.to_string()),
        root: root.map(Path::to_path_buf),
        root_write: root.map(|r| Outcome::of(p.writable(r))),
        is_root: p.is_root(),
    }
}

/// The real system calls.
pub struct Host;

impl Prober for Host {
    fn bpf_load(&self) -> io::Result<()> {
        // BPF_PROG_TYPE_SOCKET_FILTER: `r0 = 0; exit`, the smallest program the verifier
        // accepts; needs CAP_BPF (or CAP_SYS_ADMIN) where unprivileged BPF is disabled.
        let insns: [u64; 2] = [0x0000_0000_0000_00b7, 0x0000_0000_0000_0095];
        let license = c"GPL";
        #[repr(C)]
        #[derive(Default)]
        struct ProgLoad {
            prog_type: u32,
            insn_cnt: u32,
            insns: u64,
            license: u64,
            log_level: u32,
            log_size: u32,
            log_buf: u64,
            kern_version: u32,
            prog_flags: u32,
        }
        let attr = ProgLoad {
            prog_type: 1,
            insn_cnt: insns.len() as u32,
            insns: insns.as_ptr() as u64,
            license: license.as_ptr() as u64,
            ..Default::default()
        };
        // SAFETY: attr points at valid memory of the size given; the result is an fd or -1.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                5, /* BPF_PROG_LOAD */
                &attr as *const ProgLoad,
                std::mem::size_of::<ProgLoad>(),
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the fd was just returned to us.
        unsafe { libc::close(fd as i32) };
        Ok(())
    }

    fn psi_trigger(&self, file: &Path, trigger: &str) -> io::Result<()> {
        use std::io::Write;
        // The trigger lives as long as this descriptor: dropped when the file closes.
        let mut f = std::fs::OpenOptions::new().read(true).write(true).open(file)?;
        let mut text = trigger.as_bytes().to_vec();
        text.push(0);
        f.write_all(&text)
    }

    fn nofile(&self) -> io::Result<(u64, u64)> {
        let mut l = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: valid out-pointer.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) } != 0 {
            return Err(io::Error::last_os_error());
        }
        #[allow(clippy::unnecessary_cast)] // rlim_t is u64 on glibc and musl x86_64, not everywhere.
        let v = |x: libc::rlim_t| if x == libc::RLIM_INFINITY { u64::MAX } else { x as u64 };
        Ok((v(l.rlim_cur), v(l.rlim_max)))
    }

    fn writable(&self, path: &Path) -> io::Result<()> {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(path.as_os_str().as_bytes())?;
        // SAFETY: valid C string. Effective ids (AT_EACCESS), as the daemon's writes use.
        if unsafe { libc::faccessat(libc::AT_FDCWD, c.as_ptr(), libc::W_OK, libc::AT_EACCESS) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn is_root(&self) -> bool {
        // SAFETY: no preconditions.
        unsafe { libc::geteuid() == 0 }
    }
}

/// This process's cgroup v2 path from `/proc/self/cgroup` (`0::/path`).
pub fn own_cgroup(proc_self_cgroup: &str) -> Option<&str> {
    proc_self_cgroup.lines().find_map(|l| l.strip_prefix("0::"))
}
