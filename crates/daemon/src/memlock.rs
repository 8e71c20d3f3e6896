//! Keeping the daemon's own pages in RAM.
//!
//! memqos acts when memory is short, which is when the kernel reclaims everyone's pages, the
//! daemon's included: its text is file-backed and goes first, and a daemon that must fault its
//! own code back in (from a slow disk, or a host share under emulation) reacts seconds late,
//! or not at all while a thrash lasts. Userspace OOM agents lock themselves for the same
//! reason. (The RFC demo's runs where memqos did not help, docs/experiments.md, happened with
//! and without the lock: their cause is elsewhere.)

use std::io;

/// Locks every page of this process, present and future, as it is first touched
/// (`MCL_ONFAULT`: unused parts of the mappings, such as the binary's debug sections or thread
/// stacks' untouched tails, are not populated just to be locked). Needs `CAP_IPC_LOCK` or a
/// large enough `RLIMIT_MEMLOCK`.
pub fn lock_all() -> io::Result<()> {
    // SAFETY: mlockall takes only flags and changes no memory.
    let rc = unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE | libc::MCL_ONFAULT) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The locked memory in kB a process's `/proc/PID/status` text reports (`VmLck:`), if any.
pub fn locked_kb(proc_status: &str) -> Option<u64> {
    proc_status.lines().find_map(|l| l.strip_prefix("VmLck:"))?.split_whitespace().next()?.parse().ok()
}

/// Why the daemon runs unlocked, for its `degraded` line.
pub fn unlocked_message(e: &io::Error) -> String {
    format!(
        "memory not locked (mlockall: {e}): under heavy memory pressure the daemon's own pages can be \
         reclaimed and its reactions delayed; grant CAP_IPC_LOCK (the packaged unit does)"
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn lock_all_locks_this_process_or_says_why_not() {
        match super::lock_all() {
            Ok(()) => {
                let status = std::fs::read_to_string("/proc/self/status").unwrap();
                let locked = super::locked_kb(&status).expect("VmLck in /proc/self/status");
                // SAFETY: flags-free; undoes the lock so other tests in this process run as usual.
                unsafe { libc::munlockall() };
                assert!(locked > 0, "mlockall succeeded but VmLck is {locked} kB");
            }
            // Unprivileged with a small RLIMIT_MEMLOCK: the daemon says so and runs on.
            Err(e) => assert!(super::unlocked_message(&e).contains("CAP_IPC_LOCK"), "{e}"),
        }
    }
}
