//! Running the replay in a worker process, so that its end can be reported even when the
//! kernel kills it.
//!
//! A SIGKILLed process writes no report, so the replay runs in a child (the worker) and the
//! caller's process (the supervisor) stays small, collects the worker's records as they
//! happen, reaps it and decides the outcome from its wait status and the cgroup's
//! memory.events. Only the worker joins `--cgroup`: the OOM killer then has exactly one
//! candidate there and the supervisor survives whatever happens in it.
//!
//! The worker is any program that calls [`worker_main`] (memqos re-executes itself as
//! `memqos-lab replay --worker`). Protocol:
//! - stdin: one JSON [`WorkerConfig`], then EOF;
//! - fd 3 (named by the `MEMQOS_REPLAY_RECORD_FD` variable): JSON lines, one [`Message`]
//!   each, written as they happen (a killed worker leaves at most a partial last line,
//!   which is ignored);
//! - stdout goes to the supervisor's stderr, so `--json -` output stays clean; stderr is
//!   inherited.
//!
//! Exit status: 0 after `done`, 1 after `error`, 2 when not started by a supervisor.

use crate::engine::{self, EngineEvent, EngineOptions};
use crate::report::{decide_outcome, Outcome, RunData, StepRecord};
use crate::schedule::Schedule;
use memqos_cgroupfs::{Cgroup, MemoryEvents};
use serde::{Deserialize, Serialize};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub const RECORD_FD_ENV: &str = "MEMQOS_REPLAY_RECORD_FD";
const RECORD_FD: i32 = 3;

/// Everything a worker needs; the supervisor parses the trace, so a worker never sees a
/// malformed one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerConfig {
    pub schedule: Schedule,
    pub chunk_bytes: usize,
    pub read_rss: bool,
    /// The worker writes its pid to `<cgroup>/cgroup.procs` before touching any memory.
    pub cgroup: Option<PathBuf>,
    /// See `EngineOptions::pause_file`.
    #[serde(default)]
    pub pause_file: Option<PathBuf>,
    /// See `EngineOptions::fill`.
    #[serde(default)]
    pub fill: Option<crate::memory::PageFill>,
}

/// One line on the record fd.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Message {
    Baseline { bytes: u64, alloc_us: u64 },
    Step(StepRecord),
    Done { completion_us: u64, peak_held_bytes: u64, vm_hwm_bytes: Option<u64> },
    Error { message: String },
}

/// The worker side: reads the config, joins the cgroup, replays, reports. Returns the exit
/// code for the caller to exit with.
pub fn worker_main() -> u8 {
    let Some(fd) = std::env::var(RECORD_FD_ENV).ok().and_then(|v| v.parse::<i32>().ok()) else {
        eprintln!("memqos-lab replay worker: {RECORD_FD_ENV} is not set; the worker is started by `memqos-lab replay`");
        return 2;
    };
    // SAFETY: the supervisor placed the write end of its pipe at this fd for us alone, and
    // nothing else in this process uses it.
    let mut out = unsafe { std::fs::File::from_raw_fd(fd) };
    let mut send = move |msg: &Message| -> io::Result<()> {
        let mut line = serde_json::to_vec(msg).map_err(io::Error::other)?;
        line.push(b'\n');
        // One write per line: a kill between lines never leaves a torn line behind.
        out.write_all(&line)
    };
    let fail = |send: &mut dyn FnMut(&Message) -> io::Result<()>, message: String| {
        eprintln!("memqos-lab replay worker: {message}");
        let _ = send(&Message::Error { message });
        1
    };

    let mut input = String::new();
    if let Err(e) = io::stdin().read_to_string(&mut input) {
        return fail(&mut send, format!("reading the config from stdin: {e}"));
    }
    let cfg: WorkerConfig = match serde_json::from_str(&input) {
        Ok(c) => c,
        Err(e) => return fail(&mut send, format!("bad config on stdin: {e}")),
    };
    drop(input);
    if let Some(path) = &cfg.cgroup {
        if let Err(e) = Cgroup::new(path).add_proc(std::process::id()) {
            return fail(&mut send, format!("joining the cgroup: {e}"));
        }
    }
    let opts = EngineOptions {
        chunk_bytes: cfg.chunk_bytes,
        read_rss: cfg.read_rss,
        pause_file: cfg.pause_file.clone(),
        fill: cfg.fill,
    };
    let result = engine::run(&cfg.schedule, &opts, |ev| match ev {
        EngineEvent::Baseline { bytes, took } => send(&Message::Baseline { bytes, alloc_us: took.as_micros() as u64 }),
        EngineEvent::Step(rec) => send(&Message::Step(rec.clone())),
    });
    match result {
        Ok(end) => {
            let done = Message::Done {
                completion_us: end.completion.as_micros() as u64,
                peak_held_bytes: end.peak_held_bytes,
                vm_hwm_bytes: end.vm_hwm_bytes,
            };
            match send(&done) {
                Ok(()) => 0,
                Err(e) => fail(&mut send, format!("reporting the end: {e}")),
            }
        }
        Err(e) => fail(&mut send, e.to_string()),
    }
}

/// What the supervisor reports while the worker runs.
#[derive(Debug)]
pub enum Event<'a> {
    Spawned { pid: u32 },
    Baseline { bytes: u64, took: Duration },
    Step(&'a StepRecord),
}

#[derive(Debug, thiserror::Error)]
pub enum SuperviseError {
    /// The cgroup's memory.events could not be read before the start: wrong path, not a
    /// cgroup v2 memory cgroup, or no permission. Nothing was started.
    // Not a `#[source]`: the message already includes it, and `{:#}` would repeat it.
    #[error("{0} (--cgroup must be a cgroup v2 directory whose parent enables the memory controller)")]
    Cgroup(memqos_cgroupfs::Error),
    #[error("starting the worker {program}: {error}")]
    Spawn { program: String, error: io::Error },
    #[error("{what}: {error}")]
    Io { what: &'static str, error: io::Error },
}

impl From<memqos_cgroupfs::Error> for SuperviseError {
    fn from(e: memqos_cgroupfs::Error) -> Self {
        SuperviseError::Cgroup(e)
    }
}

fn io_err(what: &'static str) -> impl FnOnce(io::Error) -> SuperviseError {
    move |error| SuperviseError::Io { what, error }
}

/// Starts `worker` (a command whose process calls [`worker_main`]), feeds it `cfg`, collects
/// its records and decides how it ended. Returns `Err` only when the run could not start or
/// the supervisor itself failed; everything that happens to the worker is in the returned
/// [`RunData::outcome`].
///
/// `stop` (see [`install_stop_handlers`]) is checked every 100 ms; once set, the worker gets
/// SIGTERM and the run ends as `Killed`, with its report.
pub fn supervise(
    mut worker: Command,
    cfg: &WorkerConfig,
    stop: Option<&AtomicBool>,
    mut observe: impl FnMut(Event<'_>),
) -> Result<RunData, SuperviseError> {
    let cgroup = cfg.cgroup.as_ref().map(Cgroup::new);
    let events_before = match &cgroup {
        Some(cg) => Some(cg.memory_events()?),
        None => None,
    };
    let config =
        serde_json::to_vec(cfg).map_err(|e| SuperviseError::Io { what: "encoding the config", error: e.into() })?;

    let (rd, wr) = pipe().map_err(io_err("creating the record pipe"))?;
    let wr_fd = wr.as_raw_fd();
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    let child_stdout = io::stderr().as_fd().try_clone_to_owned().map_err(io_err("duplicating stderr"))?;
    worker.env(RECORD_FD_ENV, RECORD_FD.to_string()).stdin(Stdio::piped()).stdout(Stdio::from(child_stdout));
    // SAFETY: the closure runs in the forked child before exec and only makes
    // async-signal-safe calls (dup2, fcntl, prctl, getppid) on plain integers.
    unsafe {
        worker.pre_exec(move || {
            if wr_fd == RECORD_FD {
                // Already in place, but still close-on-exec: clear that instead.
                if libc::fcntl(wr_fd, libc::F_SETFD, 0) < 0 {
                    return Err(io::Error::last_os_error());
                }
            } else if libc::dup2(wr_fd, RECORD_FD) < 0 {
                return Err(io::Error::last_os_error());
            }
            // A worker outliving its supervisor would hold memory with nobody watching.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) < 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                return Err(io::Error::other("supervisor exited before the worker started"));
            }
            Ok(())
        });
    }

    let started = Instant::now();
    let mut child = worker.spawn().map_err(|error| SuperviseError::Spawn {
        program: worker.get_program().to_string_lossy().into_owned(),
        error,
    })?;
    drop(wr); // EOF on rd once the worker is gone
    observe(Event::Spawned { pid: child.id() });
    if let Some(mut stdin) = child.stdin.take() {
        // A worker that dies before reading its config shows up in its wait status.
        let _ = stdin.write_all(&config);
    }

    let mut collected = Collected::default();
    let mut stop_sent = false;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    loop {
        if let Some(flag) = stop {
            if flag.load(Ordering::Relaxed) && !stop_sent {
                // SAFETY: kill on the pid of our own unreaped child.
                unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
                stop_sent = true;
            }
        }
        match wait_readable(&rd, 100) {
            Ok(false) => continue,
            Ok(true) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io_err("waiting for worker records")(e)),
        }
        let n = match read_fd(&rd, &mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io_err("reading worker records")(e)),
        };
        buf.extend_from_slice(&chunk[..n]);
        while let Some(pos) = buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buf.drain(..=pos).collect();
            collected.take_line(&line[..line.len() - 1], &mut observe);
        }
    }
    let status = loop {
        match child.wait() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => break other.map_err(io_err("waiting for the worker"))?,
        }
    };
    let wall = started.elapsed();

    let (oom_kill_delta, memory_events_delta) = match (&cgroup, events_before) {
        (Some(cg), Some(before)) => {
            let delta = events_delta(cg, &before, status.signal() == Some(libc::SIGKILL));
            (delta.map(|d| d.oom_kill), delta)
        }
        _ => (None, None),
    };
    let outcome = decide_outcome(
        status.code(),
        status.signal(),
        collected.done.is_some(),
        collected.error.as_deref(),
        oom_kill_delta,
    );
    let (completion, vm_hwm_bytes) = match (&outcome, collected.done) {
        (Outcome::Finished, Some((c, hwm))) => (Some(c), hwm),
        _ => (None, None),
    };
    Ok(RunData {
        steps: collected.steps,
        outcome,
        completion,
        wall: Some(wall),
        baseline_alloc: collected.baseline_alloc,
        vm_hwm_bytes,
        oom_kill_delta,
        memory_events_delta,
    })
}

/// memory.events after the run minus before. The kernel counts an OOM kill right after
/// sending SIGKILL, so a reaped victim should already be counted; for a SIGKILL with no
/// oom_kill yet, re-read for up to 100 ms before concluding it was not the OOM killer.
fn events_delta(cg: &Cgroup, before: &MemoryEvents, sigkilled: bool) -> Option<MemoryEvents> {
    let mut delta = cg.memory_events().ok()?.delta_since(before);
    for _ in 0..10 {
        if !sigkilled || delta.oom_kill > 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
        delta = cg.memory_events().ok()?.delta_since(before);
    }
    Some(delta)
}

#[derive(Default)]
struct Collected {
    steps: Vec<StepRecord>,
    baseline_alloc: Option<Duration>,
    done: Option<(Duration, Option<u64>)>,
    error: Option<String>,
}

impl Collected {
    fn take_line(&mut self, line: &[u8], observe: &mut impl FnMut(Event<'_>)) {
        match serde_json::from_slice::<Message>(line) {
            Ok(Message::Baseline { bytes, alloc_us }) => {
                let took = Duration::from_micros(alloc_us);
                self.baseline_alloc = Some(took);
                observe(Event::Baseline { bytes, took });
            }
            Ok(Message::Step(rec)) => {
                observe(Event::Step(&rec));
                self.steps.push(rec);
            }
            Ok(Message::Done { completion_us, vm_hwm_bytes, .. }) => {
                self.done = Some((Duration::from_micros(completion_us), vm_hwm_bytes));
            }
            Ok(Message::Error { message }) => {
                self.error.get_or_insert(message);
            }
            Err(e) => {
                self.error.get_or_insert_with(|| {
                    format!("unreadable worker record {:?}: {e}", String::from_utf8_lossy(line))
                });
            }
        }
    }
}

/// Replays in this process (no worker, no cgroup): for tests and for callers that
/// measure on an unconstrained host. An OOM kill takes the caller down with it.
pub fn run_in_process(schedule: &Schedule, opts: &EngineOptions, mut observe: impl FnMut(&StepRecord)) -> RunData {
    let mut steps = Vec::with_capacity(schedule.steps.len());
    let mut baseline_alloc = None;
    let result = engine::run(schedule, opts, |ev| {
        match ev {
            EngineEvent::Baseline { took, .. } => baseline_alloc = Some(took),
            EngineEvent::Step(rec) => {
                observe(rec);
                steps.push(rec.clone());
            }
        }
        Ok(())
    });
    let (outcome, completion, vm_hwm_bytes) = match result {
        Ok(end) => (Outcome::Finished, Some(end.completion), end.vm_hwm_bytes),
        Err(e) => (Outcome::Failed { exit_code: None, message: e.to_string() }, None, None),
    };
    RunData {
        steps,
        outcome,
        completion,
        wall: None,
        baseline_alloc,
        vm_hwm_bytes,
        oom_kill_delta: None,
        memory_events_delta: None,
    }
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// Makes SIGINT and SIGTERM set a flag instead of killing the supervisor, so an interrupted
/// replay still reaps its worker and writes its report; pass the flag to [`supervise`].
/// (Handlers are reset by exec, so the worker keeps the default actions.)
pub fn install_stop_handlers() -> io::Result<&'static AtomicBool> {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction with a handler that only stores to an atomic.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_stop_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut sa.sa_mask);
            if libc::sigaction(sig, &sa, std::ptr::null_mut()) < 0 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(&STOP)
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds into the array on success.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both fds are fresh and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn wait_readable(fd: &OwnedFd, timeout_ms: i32) -> io::Result<bool> {
    let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd.
    match unsafe { libc::poll(&mut p, 1, timeout_ms) } {
        n if n < 0 => Err(io::Error::last_os_error()),
        0 => Ok(false),
        // POLLHUP without POLLIN is EOF, which read() reports as 0.
        _ => Ok(true),
    }
}

fn read_fd(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: reads at most buf.len() bytes into buf.
    let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_as_tagged_lines() {
        let m = Message::Done { completion_us: 5, peak_held_bytes: 6, vm_hwm_bytes: None };
        let s = serde_json::to_string(&m).unwrap();
        assert!(s.starts_with(r#"{"type":"done""#), "{s}");
        assert_eq!(serde_json::from_str::<Message>(&s).unwrap(), m);
    }

    #[test]
    fn torn_and_foreign_lines_become_the_error() {
        let mut c = Collected::default();
        c.take_line(br#"{"type":"step","step":0"#, &mut |_| {});
        c.take_line(br#"{"type":"error","message":"later"}"#, &mut |_| {});
        assert!(c.error.unwrap().starts_with("unreadable worker record"));
    }
}
