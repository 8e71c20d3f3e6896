//! The process's descriptor budget.
//!
//! memqos keeps descriptors open per cgroup where that saves system calls: the text stats
//! backend (about 7 per cgroup), the fast path's files, the actuator's directory fds, PSI
//! triggers. With a low open-file limit that it may not raise (a container without
//! CAP_SYS_RESOURCE: 1,024) ten thousand cgroups exhaust it, and then a file the daemon
//! must open (status.json, the journal) fails with EMFILE. So every cache asks here before
//! keeping a descriptor, and reads the file by opening it each time when the answer is no:
//! slower, never wrong. The bulk cache (the snapshot's files) may take half the budget; the
//! rest is for the few descriptors a reaction reads through, and a margin is never handed out.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// Descriptors never handed out: the journal, logs, status, sockets, BPF maps, stdio.
pub const MARGIN: u64 = 128;

/// Who keeps a descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Use {
    /// Whole-tree caches (the text backend): at most half the budget.
    Bulk,
    /// Descriptors a reaction reads or writes through (fast path, actuator, PSI).
    Reaction,
}

static HELD_BULK: AtomicU64 = AtomicU64::new(0);
static HELD_REACTION: AtomicU64 = AtomicU64::new(0);
static BUDGET: OnceLock<u64> = OnceLock::new();

/// The soft open-file limit now in force.
#[allow(clippy::unnecessary_cast)] // rlim_t is u64 here, u32 on some 32-bit targets
pub fn open_file_limit() -> u64 {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: valid out-pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 1024;
    }
    lim.rlim_cur as u64
}

/// Descriptors the caches may keep together: the open-file limit when first asked (the
/// daemon raises it first, as far as it may), less [`MARGIN`].
pub fn budget() -> u64 {
    *BUDGET.get_or_init(|| open_file_limit().saturating_sub(MARGIN))
}

fn counter(u: Use) -> &'static AtomicU64 {
    match u {
        Use::Bulk => &HELD_BULK,
        Use::Reaction => &HELD_REACTION,
    }
}

/// Asks to keep `n` more descriptors; true: kept (give them back with [`release`]).
pub fn try_keep(u: Use, n: u64) -> bool {
    let total = budget();
    let cap = match u {
        Use::Bulk => total / 2,
        Use::Reaction => total,
    };
    let c = counter(u);
    let mut held = c.load(Ordering::Relaxed);
    loop {
        let everyone = held + counter(other(u)).load(Ordering::Relaxed);
        if held.saturating_add(n) > cap || everyone.saturating_add(n) > total {
            return false;
        }
        match c.compare_exchange_weak(held, held + n, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return true,
            Err(now) => held = now,
        }
    }
}

fn other(u: Use) -> Use {
    match u {
        Use::Bulk => Use::Reaction,
        Use::Reaction => Use::Bulk,
    }
}

/// Gives back `n` descriptors kept under `u`.
pub fn release(u: Use, n: u64) {
    let _ = counter(u).fetch_update(Ordering::Relaxed, Ordering::Relaxed, |h| Some(h.saturating_sub(n)));
}

/// Descriptors kept now under `u`.
pub fn held(u: Use) -> u64 {
    counter(u).load(Ordering::Relaxed)
}

/// EMFILE or ENFILE: the process or the system is out of descriptors.
pub fn exhausted(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE))
}

/// A value holding `n` descriptors kept under the budget, given back when it is dropped.
#[derive(Debug)]
pub struct Kept<T> {
    pub value: T,
    use_: Use,
    n: u64,
}

impl<T> Kept<T> {
    /// Keeps `value` if `n` more descriptors may be kept; Err(value) when the budget says no
    /// (the caller uses it once and closes it).
    pub fn new(use_: Use, n: u64, value: T) -> Result<Kept<T>, T> {
        if try_keep(use_, n) {
            Ok(Kept { value, use_, n })
        } else {
            Err(value)
        }
    }
}

impl<T> Drop for Kept<T> {
    fn drop(&mut self) {
        release(self.use_, self.n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bulk_cache_gets_at_most_half_and_nobody_more_than_the_budget() {
        let total = budget();
        let before = (held(Use::Bulk), held(Use::Reaction));
        let mut bulk = 0;
        while try_keep(Use::Bulk, 1) {
            bulk += 1;
        }
        assert!(held(Use::Bulk) <= total / 2, "{} of {total}", held(Use::Bulk));
        let mut reaction = 0;
        while try_keep(Use::Reaction, 1) {
            reaction += 1;
        }
        assert!(held(Use::Bulk) + held(Use::Reaction) <= total);
        assert!(reaction > 0, "the reaction's share is not taken by the bulk cache");
        release(Use::Bulk, bulk);
        release(Use::Reaction, reaction);
        assert_eq!((held(Use::Bulk), held(Use::Reaction)), before);
    }
}
