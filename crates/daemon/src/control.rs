//! The daemon's control socket, `<state_dir>/control.sock`: `memqos explain` asks it why a
//! cgroup's knobs are what they are.
//!
//! Who may connect: the socket is created mode 0600 (root, or the daemon's user), or 0660
//! owned by `[control] group`; the peer's credentials (SO_PEERCRED, and its groups from
//! /proc) are checked again on accept. The control loop never waits for a client: a thread
//! of its own serves one connection at a time from the view the loop publishes (a mutex held
//! only to copy out or to update, never across I/O), with a bounded request, read and write
//! timeouts.
//!
//! Protocol: one JSON line each way. Request `{"explain": "CGROUP"}`; reply `{"ok": {...}}`
//! (an [`Explanation`]) or `{"error": "..."}`.

use crate::explain::{self, Explanation, View};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use memqos_schema::state::SOCKET_FILE;
/// Longest request accepted.
const MAX_REQUEST: usize = 4096;
const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// Input discarded after a reply, at most.
const DRAIN_LIMIT: usize = 64 << 10;
/// ...and only what arrives this soon: a client still sending is cut off.
const DRAIN_TIME: Duration = Duration::from_millis(200);

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Request {
    Explain(String),
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    Ok(Box<Explanation>),
    Error(String),
}

/// The gid of a group name.
fn gid_of(name: &str) -> Result<u32> {
    let c = std::ffi::CString::new(name)?;
    // SAFETY: getgrnam returns a pointer to static storage or null; read at once.
    let g = unsafe { libc::getgrnam(c.as_ptr()) };
    if g.is_null() {
        bail!("control.group {name:?}: no such group on this host");
    }
    Ok(unsafe { (*g).gr_gid })
}

/// Who may use the socket: the mode and group to give it.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Access {
    gid: Option<u32>,
}

impl Access {
    fn of(cfg: &memqos_policy::Config) -> Result<Access> {
        Ok(Access { gid: cfg.control.group.as_deref().map(gid_of).transpose()? })
    }

    fn apply(&self, path: &Path) -> Result<()> {
        let mode = if self.gid.is_some() { 0o660 } else { 0o600 };
        if let Some(gid) = self.gid {
            std::os::unix::fs::chown(path, None, Some(gid)).with_context(|| format!("chown {}", path.display()))?;
        }
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
            .with_context(|| format!("chmod {}", path.display()))
    }

    /// SO_PEERCRED: root, the daemon's own user, or a member of the group.
    fn allows(&self, s: &UnixStream) -> bool {
        let mut cred = libc::ucred { pid: 0, uid: u32::MAX, gid: u32::MAX };
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        use std::os::fd::AsRawFd;
        // SAFETY: valid out-pointer and length.
        let rc = unsafe {
            libc::getsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERCRED,
                (&mut cred as *mut libc::ucred).cast(),
                &mut len,
            )
        };
        if rc != 0 {
            return false;
        }
        if cred.uid == 0 || cred.uid == unsafe { libc::geteuid() } {
            return true;
        }
        let Some(gid) = self.gid else { return false };
        if cred.gid == gid {
            return true;
        }
        // Supplementary groups are not in ucred: read them from the peer's status.
        let status = std::fs::read(format!("/proc/{}/status", cred.pid)).unwrap_or_default();
        in_groups(&String::from_utf8_lossy(&status), gid)
    }
}

/// Whether the `Groups:` line of a /proc/PID/status text lists `gid` (the supplementary
/// groups). The first `Groups:` line counts: the kernel prints it after `Name:`, whose
/// value (the command, which the peer chooses) may itself hold a line break escaped as
/// `\n` but never a real one.
pub fn in_groups(proc_status: &str, gid: u32) -> bool {
    proc_status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .is_some_and(|g| g.split_whitespace().any(|x| x.parse() == Ok(gid)))
}

/// The serving side, owned by the daemon loop.
pub struct Server {
    path: PathBuf,
    view: Arc<Mutex<View>>,
    access: Arc<Mutex<Access>>,
}

impl Server {
    /// Binds `<state_dir>/control.sock` with its final mode already in place and starts the
    /// serving thread. A stale socket of an earlier run is replaced (the state lock is ours).
    pub fn start(state_dir: &Path, view: View) -> Result<Server> {
        let access = Access::of(&view.cfg)?;
        let path = state_dir.join(SOCKET_FILE);
        match std::fs::symlink_metadata(&path) {
            Ok(m) if std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()) => {
                std::fs::remove_file(&path).with_context(|| format!("removing stale {}", path.display()))?
            }
            Ok(_) => bail!("{} exists and is not a socket; move it away", path.display()),
            Err(_) => {}
        }
        // No moment where the socket is open to everyone: bind under a tight umask. The
        // daemon's other threads create no files at this point.
        let old = unsafe { libc::umask(0o177) };
        let bound = UnixListener::bind(&path);
        unsafe { libc::umask(old) };
        let listener = bound.with_context(|| format!("binding {}", path.display()))?;
        access.apply(&path)?;
        let view = Arc::new(Mutex::new(view));
        let access = Arc::new(Mutex::new(access));
        let (v, a) = (view.clone(), access.clone());
        std::thread::Builder::new().name("control".into()).spawn(move || serve(listener, v, a))?;
        Ok(Server { path, view, access })
    }

    /// Runs `f` on the published view (briefly: the control thread waits meanwhile).
    pub fn update(&self, f: impl FnOnce(&mut View)) {
        f(&mut self.view.lock().unwrap_or_else(|e| e.into_inner()));
    }

    /// A reload: check the new config's group (Err leaves everything as it was)...
    pub fn prepare_reload(&self, cfg: &memqos_policy::Config) -> Result<impl FnOnce() -> Result<()> + '_> {
        let access = Access::of(cfg)?;
        let cfg = cfg.clone();
        // ...and apply it with the config once the reload is accepted.
        Ok(move || {
            access.apply(&self.path)?;
            *self.access.lock().unwrap_or_else(|e| e.into_inner()) = access;
            self.update(|v| v.cfg = cfg);
            Ok(())
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn serve(listener: UnixListener, view: Arc<Mutex<View>>, access: Arc<Mutex<Access>>) {
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else {
            // EMFILE and the like: wait for descriptors to come back instead of spinning.
            std::thread::sleep(crate::deadline::ACCEPT_BACKOFF);
            continue;
        };
        let allowed = access.lock().map(|a| a.allows(&stream)).unwrap_or(false);
        // One deadline for the whole exchange: a client that trickles its request or reads
        // the reply slowly gets IO_TIMEOUT in all, not per byte.
        let mut s = crate::deadline::Exchange::new(&mut stream, IO_TIMEOUT);
        let reply = if allowed {
            match read_request(&mut s) {
                Ok(Request::Explain(cgroup)) => {
                    // What the loop published, taken under the lock; any filesystem access
                    // the explanation needs happens after it is released, so a slow
                    // cgroupfs never holds the loop's next update.
                    let r = explain::explain_with(&view, &cgroup);
                    match r {
                        Ok(e) => Reply::Ok(Box::new(e)),
                        Err(e) => Reply::Error(e),
                    }
                }
                Err(e) => Reply::Error(e),
            }
        } else {
            Reply::Error("permission denied: only root or the daemon's [control] group may ask".into())
        };
        if let Ok(mut line) = serde_json::to_vec(&reply) {
            line.push(b'\n');
            let _ = s.write_all(&line);
        }
        // Closing with unread input would reset the connection before the client reads the
        // reply (an oversized request): signal EOF, then discard a bounded rest (only what
        // arrives within DRAIN_TIME: a client still sending is cut off).
        let _ = stream.shutdown(std::net::Shutdown::Write);
        let mut s = crate::deadline::Exchange::new(&mut stream, DRAIN_TIME);
        let mut sink = [0u8; 4096];
        let mut left = DRAIN_LIMIT;
        while left > 0 {
            match s.read(&mut sink) {
                Ok(n) if n > 0 => left = left.saturating_sub(n),
                _ => break,
            }
        }
    }
}

fn read_request(s: &mut impl Read) -> Result<Request, String> {
    let mut buf = Vec::with_capacity(256);
    let mut chunk = [0u8; 512];
    while !buf.contains(&b'\n') {
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => return Err(format!("reading the request: {e}")),
        }
        if buf.len() > MAX_REQUEST {
            return Err(format!("request longer than {MAX_REQUEST} bytes"));
        }
    }
    let line = buf.split(|&b| b == b'\n').next().unwrap_or_default();
    serde_json::from_slice(line).map_err(|e| format!("not a memqos control request: {e}"))
}

/// The client side (`memqos explain`): one request, one reply.
pub fn ask(state_dir: &Path, request: &Request) -> Result<Reply> {
    let path = state_dir.join(SOCKET_FILE);
    let mut s = match UnixStream::connect(&path) {
        Ok(s) => s,
        Err(e) if matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused) => {
            bail!(
                "no memqos daemon is running with state directory {} (no control socket at {})",
                state_dir.display(),
                path.display()
            )
        }
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => bail!(
            "permission denied opening {}: only root or the group set in the daemon's [control] group may use it",
            path.display()
        ),
        Err(e) => return Err(e).with_context(|| format!("connecting to {}", path.display())),
    };
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut line = serde_json::to_vec(request)?;
    line.push(b'\n');
    s.write_all(&line).with_context(|| format!("writing to {}", path.display()))?;
    let mut reply = String::new();
    s.read_to_string(&mut reply).with_context(|| format!("reading from {}", path.display()))?;
    serde_json::from_str(reply.trim()).with_context(|| format!("{}: not a memqos reply: {reply:?}", path.display()))
}
