//! systemd's readiness protocol (sd_notify(3)) without libsystemd: one datagram of
//! `KEY=VALUE` lines to the Unix socket named by `$NOTIFY_SOCKET`. A name starting with '@'
//! is in the abstract namespace. Outside systemd the variable is unset and this does nothing.

use std::io;
use std::os::unix::net::UnixDatagram;

/// Sends `state` (e.g. "READY=1\nSTATUS=...") if the service manager asked for it. Returns
/// whether a message was sent.
pub fn notify(state: &str) -> io::Result<bool> {
    let Some(target) = std::env::var_os("NOTIFY_SOCKET") else {
        return Ok(false);
    };
    let target = target.to_string_lossy().into_owned();
    let sock = UnixDatagram::unbound()?;
    if let Some(name) = target.strip_prefix('@') {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
        sock.send_to_addr(state.as_bytes(), &addr)?;
    } else if target.starts_with('/') {
        sock.send_to(state.as_bytes(), &target)?;
    } else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("NOTIFY_SOCKET={target}: neither a path nor an abstract name"),
        ));
    }
    Ok(true)
}

/// systemd's watchdog (`WatchdogSec=`): `WATCHDOG=1` at most once per quarter of the
/// interval systemd asked for in `$WATCHDOG_USEC` (for this process: `$WATCHDOG_PID`). The
/// daemon feeds it only when a loop iteration completes, so a loop that hangs or restarts
/// forever is restarted by systemd instead of reported running.
pub struct Watchdog {
    every: Option<std::time::Duration>,
    last: Option<std::time::Instant>,
}

impl Watchdog {
    pub fn from_env() -> Watchdog {
        let for_us = std::env::var("WATCHDOG_PID").ok().and_then(|p| p.parse::<u32>().ok());
        let every = std::env::var("WATCHDOG_USEC")
            .ok()
            .and_then(|u| u.parse::<u64>().ok())
            .filter(|_| for_us.is_none_or(|pid| pid == std::process::id()))
            .filter(|&us| us > 0)
            .map(|us| std::time::Duration::from_micros(us / 4));
        Watchdog { every, last: None }
    }

    pub fn enabled(&self) -> bool {
        self.every.is_some()
    }

    pub fn feed(&mut self) {
        let Some(every) = self.every else { return };
        if self.last.is_some_and(|t| t.elapsed() < every) {
            return;
        }
        self.last = Some(std::time::Instant::now());
        let _ = notify("WATCHDOG=1");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Both address forms reach a listening socket; the env var is process-wide, so one test.
    #[test]
    fn sends_to_path_and_abstract_sockets() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let server = UnixDatagram::bind(&path).unwrap();
        std::env::set_var("NOTIFY_SOCKET", &path);
        assert!(notify("READY=1").unwrap());
        let mut buf = [0u8; 64];
        let n = server.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");

        use std::os::linux::net::SocketAddrExt;
        let name = format!("memqos-test-{}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let server = UnixDatagram::bind_addr(&addr).unwrap();
        std::env::set_var("NOTIFY_SOCKET", format!("@{name}"));
        assert!(notify("STOPPING=1").unwrap());
        let n = server.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"STOPPING=1");

        std::env::set_var("NOTIFY_SOCKET", "relative");
        assert!(notify("READY=1").is_err());
        std::env::remove_var("NOTIFY_SOCKET");
        assert!(!notify("READY=1").unwrap());
    }
}
