//! Waiting at the door: a tool call with no room waits before it starts (`policy.admission`).
//!
//! The daemon's allowance for a tier says `wait` when a new call would start into a full
//! host. Armed at the floor, such a call is held there and then OOM-killed all the same
//! (docs/agent-host-admission/report.md); before it starts, and before its cgroup exists, it
//! holds no memory and cannot be killed. So `memqos run` waits there, looking at the daemon's
//! file every [`POLL`], until a tick has room and it wins that tick's claim (then it starts
//! armed at that allowance), the daemon is gone (then it starts as without one), or the
//! file's `wait_limit_ms` passes (then it starts armed at the allowance of that moment).
//!
//! A call that declares its peak (`memqos run --expect`) also waits while the daemon's room for
//! its tier is smaller than the declaration: started into less, it would be held at its
//! ceiling and then killed; waiting, it holds nothing.
//!
//! Only calls that had to wait take the claim (`<state_dir>/admission.claim`): one of them
//! starts per published tick, so waiters do not all start on one allowance. It is not
//! oldest first: whichever waiter looks first after a tick takes it.

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use memqos_schema::admission::Admission;
use memqos_schema::state::ADMISSION_CLAIM_FILE;

use crate::armed;

/// How often a waiting call looks at the daemon's file.
pub const POLL: Duration = Duration::from_millis(100);

/// Why a wait ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// A tick had room and this call took it.
    Room,
    /// `wait_limit_ms` passed.
    Limit,
    /// The daemon's file went stale, was withdrawn or names another root, or its process is
    /// gone: the call starts as without a daemon.
    DaemonGone,
    /// The claim file could not be taken (a read-only state directory, another user's file):
    /// the call starts rather than wait on something it cannot take.
    NoClaim,
}

impl Ended {
    /// The word `--json` reports (`armed.wait_ended`).
    pub fn as_str(self) -> &'static str {
        match self {
            Ended::Room => "room",
            Ended::Limit => "limit",
            Ended::DaemonGone => "daemon gone",
            Ended::NoClaim => "no claim",
        }
    }
}

/// A wait before the call started.
#[derive(Debug)]
pub struct Waited {
    pub ms: u64,
    pub ended: Ended,
    /// What ended it, in words, when it was not room or the limit.
    pub why: Option<String>,
}

/// Whether a new call of `tier` that declares `declared` bytes (if it does) must wait: its
/// tier's allowance says so, or the room is smaller than the declaration.
fn must_wait(a: &Admission, tier: &str, declared: Option<u64>) -> bool {
    a.wait(tier) || declared.is_some_and(|d| a.room(tier).is_some_and(|room| room < d))
}

/// Waits, while the daemon's allowance for `tier` says so (or its room is below `declared`,
/// the call's declared peak), until the call may start; None when it did not have to wait
/// (no wait asked, no trusted file, `wait_limit_ms` 0).
pub fn for_room(state_dir: &Path, root: &Path, tier: &str, declared: Option<u64>, verbose: bool) -> Option<Waited> {
    let started = Instant::now();
    let first = armed::current(state_dir, root, armed::unix_ms()).ok()?;
    if !must_wait(&first, tier, declared) || first.wait_limit_ms == 0 {
        return None;
    }
    let limit = Duration::from_millis(first.wait_limit_ms);
    if verbose {
        let what = match declared {
            Some(d) if !first.wait(tier) => format!("room for its declared {}", memqos_policy::size::human(d)),
            _ => "room".to_owned(),
        };
        eprintln!(
            "memqos run: no {what} for a new {tier} call now: waiting for the memqos daemon to have it (at most {:.1} s)",
            limit.as_secs_f64()
        );
    }
    let done = |ended, why| Some(Waited { ms: started.elapsed().as_millis() as u64, ended, why });
    loop {
        std::thread::sleep(POLL);
        let a = match armed::current(state_dir, root, armed::unix_ms()) {
            Ok(a) => a,
            Err(why) => return done(Ended::DaemonGone, Some(why)),
        };
        if !must_wait(&a, tier, declared) {
            match claim(state_dir, a.seq, a.pid) {
                Ok(true) => return done(Ended::Room, None),
                Ok(false) => {} // another waiter started on this tick
                Err(e) => {
                    let why = format!("cannot take {}: {e}", state_dir.join(ADMISSION_CLAIM_FILE).display());
                    return done(Ended::NoClaim, Some(why));
                }
            }
        }
        if started.elapsed() >= limit {
            return done(Ended::Limit, None);
        }
    }
}

/// Takes tick `seq` of the daemon `pid` for this call, under an exclusive lock on the claim
/// file; Ok(false) when a waiter already started on that tick or a later one. A claim of
/// another daemon (one that died without removing it) counts as none.
fn claim(state_dir: &Path, seq: u64, pid: u32) -> std::io::Result<bool> {
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .open(state_dir.join(ADMISSION_CLAIM_FILE))?;
    // SAFETY: a valid fd; the lock goes with it when `file` is dropped.
    if unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&file), libc::LOCK_EX) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    if let Some((claimed, by)) = parse_claim(&text) {
        if by == pid && claimed >= seq {
            return Ok(false);
        }
    }
    file.set_len(0)?;
    file.write_all_at(format!("{seq} {pid}\n").as_bytes(), 0)?;
    file.flush()?;
    Ok(true)
}

/// `"<seq> <pid>"`; None for anything else (an empty file: nothing claimed yet).
pub(crate) fn parse_claim(text: &str) -> Option<(u64, u32)> {
    let mut words = text.split_whitespace();
    let seq = words.next()?.parse().ok()?;
    let pid = words.next()?.parse().ok()?;
    Some((seq, pid))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{publish, publish_tiers};
    use memqos_schema::admission::TierAllowance;
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;

    const ROOT: &str = "/sys/fs/cgroup/agents";
    /// Generous: this host is loaded; no test waits this long unless it fails.
    const PATIENCE: u64 = 20_000;
    /// How long a test lets its waiters read the file (and find they must wait) before the
    /// fake daemon changes it: they start at once, so this is slack for a loaded host.
    const BEFORE_THE_TICK: Duration = Duration::from_millis(1_000);

    /// A daemon in a thread: republishes every 50 ms (so the file never goes stale under
    /// load) with the tick and the wait it is told, until it is stopped.
    struct FakeDaemon {
        state: PathBuf,
        seq: Arc<AtomicU64>,
        wait: Arc<AtomicBool>,
        /// The room published beside the allowance (MiB).
        room_mib: Arc<AtomicU64>,
        stop: Arc<AtomicBool>,
        thread: Option<std::thread::JoinHandle<()>>,
    }

    impl FakeDaemon {
        fn start(state: &Path, wait_limit_ms: u64) -> FakeDaemon {
            let (seq, wait, stop) =
                (Arc::new(AtomicU64::new(1)), Arc::new(AtomicBool::new(true)), Arc::new(AtomicBool::new(false)));
            let room_mib = Arc::new(AtomicU64::new(64));
            let publish_now = {
                let (state, seq, wait, room) = (state.to_owned(), seq.clone(), wait.clone(), room_mib.clone());
                move || {
                    let tiers = vec![TierAllowance {
                        tier: "tool".into(),
                        allowance_bytes: 64 << 20,
                        wait: wait.load(Ordering::SeqCst),
                        room_bytes: Some(room.load(Ordering::SeqCst) << 20),
                    }];
                    publish_tiers(
                        &state,
                        ROOT,
                        armed::unix_ms(),
                        std::process::id(),
                        tiers,
                        seq.load(Ordering::SeqCst),
                        wait_limit_ms,
                    );
                }
            };
            publish_now();
            let stopped = stop.clone();
            let thread = std::thread::spawn(move || {
                while !stopped.load(Ordering::SeqCst) {
                    publish_now();
                    std::thread::sleep(Duration::from_millis(50));
                }
            });
            FakeDaemon { state: state.to_owned(), seq, wait, room_mib, stop, thread: Some(thread) }
        }

        /// A new tick with room (or without).
        fn tick(&self, wait: bool) {
            tick(&self.wait, &self.seq, wait);
        }

        /// A tick with room [`BEFORE_THE_TICK`] from now, from another thread (the test's
        /// own thread is the waiter).
        fn room_later(&self) -> std::thread::JoinHandle<()> {
            let (wait, seq) = (self.wait.clone(), self.seq.clone());
            std::thread::spawn(move || {
                std::thread::sleep(BEFORE_THE_TICK);
                tick(&wait, &seq, false);
            })
        }

        fn stop(&mut self) {
            self.stop.store(true, Ordering::SeqCst);
            if let Some(t) = self.thread.take() {
                t.join().unwrap();
            }
        }

        fn claimed(&self) -> Option<(u64, u32)> {
            parse_claim(&std::fs::read_to_string(self.state.join(ADMISSION_CLAIM_FILE)).ok()?)
        }
    }

    fn tick(wait: &AtomicBool, seq: &AtomicU64, waiting: bool) {
        wait.store(waiting, Ordering::SeqCst);
        seq.fetch_add(1, Ordering::SeqCst);
    }

    impl Drop for FakeDaemon {
        fn drop(&mut self) {
            self.stop();
        }
    }

    fn wait(state: &Path) -> Option<Waited> {
        for_room(state, Path::new(ROOT), "tool", None, false)
    }

    #[test]
    fn a_call_waits_until_a_tick_has_room_and_claims_that_tick() {
        let d = tempfile::tempdir().unwrap();
        let daemon = FakeDaemon::start(d.path(), PATIENCE);
        let opener = daemon.room_later();
        let w = wait(d.path()).expect("it had to wait");
        opener.join().unwrap();
        assert_eq!((w.ended, w.why.as_deref()), (Ended::Room, None));
        assert!(w.ms > 0);
        assert_eq!(daemon.claimed(), Some((2, std::process::id())), "the tick it started on");
    }

    #[test]
    fn a_declared_call_waits_until_the_room_covers_its_declaration() {
        let d = tempfile::tempdir().unwrap();
        let daemon = FakeDaemon::start(d.path(), PATIENCE);
        // The allowance has room for an undeclared call: it starts at once (once the fake
        // daemon has republished).
        daemon.tick(false);
        std::thread::sleep(Duration::from_millis(200));
        assert!(wait(d.path()).is_none());
        // A call that declares 500 MiB beside 64 MiB of room waits, through ticks without
        // enough room, until one has it, and claims that tick.
        let (room, seq) = (daemon.room_mib.clone(), daemon.seq.clone());
        let opener = std::thread::spawn(move || {
            std::thread::sleep(BEFORE_THE_TICK);
            room.store(300, Ordering::SeqCst);
            seq.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(BEFORE_THE_TICK);
            room.store(600, Ordering::SeqCst);
            seq.fetch_add(1, Ordering::SeqCst);
        });
        let w = for_room(d.path(), Path::new(ROOT), "tool", Some(500 << 20), false).expect("it had to wait");
        opener.join().unwrap();
        assert_eq!(w.ended, Ended::Room);
        assert!(w.ms >= 2 * BEFORE_THE_TICK.as_millis() as u64, "not on the 300 MiB tick: {w:?}");
        assert_eq!(daemon.claimed(), Some((4, std::process::id())), "the tick with 600 MiB");
        // A declaration the room covers: no wait.
        assert!(for_room(d.path(), Path::new(ROOT), "tool", Some(500 << 20), false).is_none());
    }

    #[test]
    fn no_wait_asked_no_limit_or_no_trusted_file_means_no_wait() {
        let d = tempfile::tempdir().unwrap();
        assert!(wait(d.path()).is_none(), "no file");
        let me = std::process::id();
        publish(d.path(), ROOT, armed::unix_ms(), me, &[("tool", 64 << 20, false)], 1, PATIENCE);
        assert!(wait(d.path()).is_none(), "room");
        publish(d.path(), ROOT, armed::unix_ms(), me, &[("tool", 64 << 20, true)], 1, 0);
        assert!(wait(d.path()).is_none(), "waiting turned off");
        publish(d.path(), ROOT, armed::unix_ms() - 10_000, me, &[("tool", 64 << 20, true)], 1, PATIENCE);
        assert!(wait(d.path()).is_none(), "stale");
        assert!(!d.path().join(ADMISSION_CLAIM_FILE).exists(), "no claim without a wait");
    }

    #[test]
    fn a_daemon_that_goes_away_ends_the_wait_and_the_call_starts_unarmed() {
        let d = tempfile::tempdir().unwrap();
        let daemon = FakeDaemon::start(d.path(), PATIENCE);
        let stopper = std::thread::spawn({
            let state = d.path().to_owned();
            let mut daemon = daemon;
            move || {
                std::thread::sleep(BEFORE_THE_TICK);
                daemon.stop();
                std::fs::remove_file(state.join(memqos_schema::state::ADMISSION_FILE)).unwrap();
            }
        });
        let w = wait(d.path()).expect("it waited");
        stopper.join().unwrap();
        assert_eq!(w.ended, Ended::DaemonGone);
        assert!(w.why.as_deref().is_some_and(|y| y.contains("missing")), "{w:?}");
        assert!(armed::allowance(d.path(), Path::new(ROOT), "tool", armed::unix_ms()).is_err(), "so: unarmed");
    }

    #[test]
    fn the_limit_ends_the_wait() {
        let d = tempfile::tempdir().unwrap();
        let _daemon = FakeDaemon::start(d.path(), 300);
        let w = wait(d.path()).expect("it waited");
        assert_eq!(w.ended, Ended::Limit);
        assert!(w.ms >= 300, "{w:?}");
        assert!(armed::allowance(d.path(), Path::new(ROOT), "tool", armed::unix_ms()).is_ok(), "so: armed");
    }

    #[test]
    fn one_waiter_starts_per_tick() {
        let d = tempfile::tempdir().unwrap();
        let daemon = FakeDaemon::start(d.path(), PATIENCE);
        let (tx, rx) = std::sync::mpsc::channel();
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let (state, tx) = (d.path().to_owned(), tx.clone());
                std::thread::spawn(move || tx.send(wait(&state)).unwrap())
            })
            .collect();
        // Both are waiting by now; then one tick with room.
        std::thread::sleep(BEFORE_THE_TICK);
        daemon.tick(false);
        let first = rx.recv_timeout(Duration::from_millis(PATIENCE)).unwrap().expect("waited");
        assert_eq!(first.ended, Ended::Room);
        assert_eq!(daemon.claimed().map(|c| c.0), Some(2));
        assert!(rx.recv_timeout(Duration::from_millis(500)).is_err(), "the second waits for the next tick");
        daemon.tick(false);
        let second = rx.recv_timeout(Duration::from_millis(PATIENCE)).unwrap().expect("waited");
        assert_eq!(second.ended, Ended::Room);
        assert_eq!(daemon.claimed().map(|c| c.0), Some(3));
        for w in waiters {
            w.join().unwrap();
        }
    }

    #[test]
    fn a_claim_is_taken_once_per_tick_and_a_dead_daemons_claim_is_none() {
        let d = tempfile::tempdir().unwrap();
        assert!(claim(d.path(), 5, 7).unwrap());
        assert!(!claim(d.path(), 5, 7).unwrap(), "taken");
        assert!(!claim(d.path(), 4, 7).unwrap(), "an older tick");
        assert!(claim(d.path(), 6, 7).unwrap());
        assert!(claim(d.path(), 1, 8).unwrap(), "another daemon counts from 1");
        assert_eq!(parse_claim(&std::fs::read_to_string(d.path().join(ADMISSION_CLAIM_FILE)).unwrap()), Some((1, 8)));
        // A claim that cannot be opened is an error, not a wait.
        let ro = tempfile::tempdir().unwrap();
        std::fs::create_dir(ro.path().join(ADMISSION_CLAIM_FILE)).unwrap();
        assert!(claim(ro.path(), 1, 7).is_err());
    }

    #[test]
    fn a_claim_that_cannot_be_taken_starts_the_call() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join(ADMISSION_CLAIM_FILE)).unwrap();
        let daemon = FakeDaemon::start(d.path(), PATIENCE);
        let opener = daemon.room_later();
        let w = wait(d.path()).expect("waited");
        opener.join().unwrap();
        assert_eq!(w.ended, Ended::NoClaim);
        assert!(w.why.as_deref().is_some_and(|y| y.contains("admission.claim")), "{w:?}");
    }
}
