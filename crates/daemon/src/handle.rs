//! Stop and reload as values: a [`Handle`] is what asks a running daemon to stop or to reload
//! its config. The binary's handle is wired to SIGTERM/SIGINT (stop) and SIGHUP (reload)
//! (`Handle::on_signals`); an in-process test holds a plain one and asks through it, so no
//! signal ever goes to the whole test process and no test has to stop the daemon on a timer.
//!
//! A request sets a flag the loop looks at on each wakeup, and wakes the loop's poll(2)
//! through an eventfd, so it is seen at once even in a long sleep. The signal handlers only
//! store to the flag (async-signal-safe); without SA_RESTART the signal makes poll(2) return
//! EINTR, which wakes the loop as before.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::Arc;

/// Asks a daemon to stop or reload; clones ask the same daemon.
#[derive(Clone)]
pub struct Handle {
    inner: Arc<Inner>,
}

struct Inner {
    stop: AtomicBool,
    reload: AtomicBool,
    /// Readable once a request was made (drained by the loop's wait).
    wake: Option<OwnedFd>,
    /// `run` wires SIGTERM/SIGINT/SIGHUP to this handle, where the daemon always installed
    /// its handlers (once its guardian runs).
    signals: bool,
}

impl Default for Handle {
    fn default() -> Self {
        Handle::new()
    }
}

impl Handle {
    /// A handle that only its holders use (tests, embedding).
    pub fn new() -> Handle {
        Handle::build(false)
    }

    /// The daemon command's handle: `run` wires SIGTERM and SIGINT to `request_stop` and
    /// SIGHUP to `request_reload` (its default action would kill the daemon).
    pub fn on_signals() -> Handle {
        Handle::build(true)
    }

    fn build(signals: bool) -> Handle {
        // SAFETY: plain syscall; the fd is owned below. Without it a request is seen at the
        // loop's next wakeup (the sampling interval at most).
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        let wake = (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) });
        Handle {
            inner: Arc::new(Inner { stop: AtomicBool::new(false), reload: AtomicBool::new(false), wake, signals }),
        }
    }

    /// The daemon stops: it finishes the tick under way, restores every knob and returns.
    pub fn request_stop(&self) {
        self.inner.stop.store(true, Ordering::SeqCst);
        self.wake();
    }

    /// The daemon re-reads its config file between two ticks (several requests before it
    /// looks count as one).
    pub fn request_reload(&self) {
        self.inner.reload.store(true, Ordering::SeqCst);
        self.wake();
    }

    pub fn stop_requested(&self) -> bool {
        self.inner.stop.load(Ordering::SeqCst)
    }

    /// True once per reload request.
    pub(crate) fn take_reload(&self) -> bool {
        self.inner.reload.swap(false, Ordering::SeqCst)
    }

    /// The fd the loop's wait polls (readable after a request); `drain_wake` empties it.
    pub(crate) fn wake_fd(&self) -> Option<RawFd> {
        self.inner.wake.as_ref().map(|f| f.as_raw_fd())
    }

    fn wake(&self) {
        if let Some(fd) = &self.inner.wake {
            let one: u64 = 1;
            // SAFETY: an 8-byte write from a valid u64 to our eventfd. EAGAIN (the counter
            // is full) still leaves it readable.
            unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
        }
    }

    /// Wires the process's SIGTERM/SIGINT/SIGHUP to this handle if it was made by
    /// `on_signals` (the last handle wired gets them).
    pub(crate) fn wire_signals_if_asked(&self) {
        if !self.inner.signals {
            return;
        }
        // Never freed: a handler may be running with the pointer it loaded.
        let raw = Arc::into_raw(self.inner.clone()) as *mut Inner;
        WIRED.store(raw, Ordering::SeqCst);
        for (sig, handler) in
            [(libc::SIGTERM, on_stop as extern "C" fn(_)), (libc::SIGINT, on_stop), (libc::SIGHUP, on_reload)]
        {
            // SAFETY: the handlers only load a pointer and store to an atomic. No
            // SA_RESTART, so poll(2) returns EINTR and the loop notices at once.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = handler as *const () as usize;
                libc::sigemptyset(&mut sa.sa_mask);
                libc::sigaction(sig, &sa, std::ptr::null_mut());
            }
        }
    }
}

/// Empties the wake fd after a wakeup (`Signals::wait`).
pub(crate) fn drain_wake(fd: RawFd) {
    let mut n: u64 = 0;
    // SAFETY: an 8-byte read into a valid u64 from a non-blocking eventfd.
    unsafe { libc::read(fd, (&mut n as *mut u64).cast(), 8) };
}

/// The handle the signal handlers set (leaked once wired, so it outlives any handler).
static WIRED: AtomicPtr<Inner> = AtomicPtr::new(std::ptr::null_mut());

extern "C" fn on_stop(_: libc::c_int) {
    let p = WIRED.load(Ordering::SeqCst);
    // SAFETY: null or a leaked Arc's pointer, never freed.
    if let Some(inner) = unsafe { p.as_ref() } {
        inner.stop.store(true, Ordering::SeqCst);
    }
}

extern "C" fn on_reload(_: libc::c_int) {
    let p = WIRED.load(Ordering::SeqCst);
    // SAFETY: as in on_stop.
    if let Some(inner) = unsafe { p.as_ref() } {
        inner.reload.store(true, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_seen_once_and_wakes_a_poll() {
        let h = Handle::new();
        let fd = h.wake_fd().expect("eventfd");
        let readable = || {
            let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
            // SAFETY: one valid pollfd, no wait.
            unsafe { libc::poll(&mut p, 1, 0) == 1 }
        };
        assert!(!readable() && !h.stop_requested() && !h.take_reload());
        h.clone().request_reload();
        assert!(readable(), "a clone's request wakes the poll");
        drain_wake(fd);
        assert!(!readable());
        assert!(h.take_reload() && !h.take_reload(), "taken once");
        h.request_stop();
        assert!(h.stop_requested() && readable());
    }
}
