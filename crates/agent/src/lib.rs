//! memqos on agent hosts: one cgroup per tool call.
//!
//! - [`run`]: `memqos run [--tier T] [--session NAME] [--hint low|medium|high|SIZE] -- CMD`
//!   creates `<root>/<session>/<tier>.<pid>`, starts CMD in it, waits, reports (peak, time,
//!   and a plain-language account of an OOM kill), removes the cgroup and exits with CMD's
//!   status (128 + signal if a signal ended it).
//! - [`shell`]: `memqos-shell`, a SHELL for unmodified agents that runs each `-c` command
//!   through `memqos run`.
//! - [`layout`]: where sessions, the runtime and calls live, and the root's checks.
//!
//! See docs/agent-hosts.md for the session layout and a daemon config that protects the agent
//! runtime and keeps tool calls best-effort.

pub mod armed;
pub mod daemon_log;
mod error;
pub mod hint;
pub mod layout;
#[cfg(test)]
mod proptests;
pub mod report;
pub mod run;
pub mod session_config;
pub mod shell;
pub mod spawn;
#[cfg(test)]
mod testutil;
pub mod wait;

pub use error::SetupError;
pub use run::{run, Request};
