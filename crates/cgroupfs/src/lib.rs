//! Typed access to cgroup v2 memory-controller files.
//!
//! Parsing is separate from I/O: [`parse`] holds pure functions over text (one per file
//! *format*, not per file). [`beneath`] is the I/O layer of every long-lived reader and
//! writer (the daemon, its PSI triggers, the text stats backend): descriptors opened beneath
//! a root fd, no symlinks, no PATH_MAX limit. [`Cgroup`] is a path-based handle for
//! short-lived commands and tests, and attaches the cgroup path and file name to every error. "The cgroup vanished" is turned into
//! [`Error::Vanished`] in one place so callers can treat it as a normal outcome.

pub mod beneath;
mod cgroup;
pub mod fds;
pub mod mounts;
pub mod name;
pub mod parse;
pub mod procfs;
pub mod units;

pub use cgroup::{Cgroup, Error, Result};
pub use parse::{Limit, MemoryEvents, Pressure, PressureLine};

/// The one rule for "it is gone": ENOENT (the cgroup's directory or the process no longer
/// exists), ENODEV (files of a cgroup being removed, read through an fd opened before) and
/// ESRCH (a /proc/PID fd whose process exited). Not an error to report, a normal outcome.
/// Callers that can tell a missing *file* of a live cgroup (no memory controller) check the
/// directory before taking ENOENT as gone.
pub fn vanished(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ENODEV) | Some(libc::ESRCH))
}
