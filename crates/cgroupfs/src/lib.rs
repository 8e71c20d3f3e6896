//! Typed access to cgroup v2 memory-controller files.
//!
//! Parsing is separate from I/O: [`parse`] holds pure functions over text (one per file
//! *format*, not per file), [`Cgroup`] does the reads and writes and attaches the cgroup
//! path and file name to every error. "The cgroup vanished" is turned into
//! [`Error::Vanished`] in one place so callers can treat it as a normal outcome.

mod cgroup;
pub mod fds;
pub mod mounts;
pub mod name;
pub mod parse;
pub mod procfs;
pub mod units;

pub use cgroup::{Cgroup, Error, Result};
pub use parse::{Limit, MemoryEvents, Pressure, PressureLine};
