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
//! A call that declares its peak (`memqos run --expect`) knows better than the share: its
//! door is the daemon's whole room for its tier against its declaration, not the allowance's
//! `wait`. It starts as soon as the room, less what other declared calls took from it since
//! the daemon last counted them, covers its declaration, and waits while it does not: started
//! into less, it would be held at its ceiling and then killed; waiting, it holds nothing. A
//! small declared call on a host with 200 MiB free starts at once where the share (half the
//! room, below the floor) would make it wait.
//!
//! The claim file (`<state_dir>/admission.claim`) is the ledger both kinds of call share: the
//! last tick a call started on, the daemon that published it, and the bytes calls took from
//! that tick's room and from the two before it. An armed call is in the daemon's room (as
//! promised) from its next full sample on, one or two ticks after it starts; until then the
//! ledger counts it, so two declared calls do not start on the same room. An undeclared call
//! that had to wait takes a tick no call has started on yet (one per tick, as the share
//! assumes) and records its allowance. It is not oldest first: whichever waiter looks first
//! after a tick takes it.

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

/// How many ticks the ledger remembers what calls took: the tick a call started on and the
/// two after it, by when the daemon's full sample counts the armed call itself.
const LEDGER_TICKS: usize = 3;

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

/// How a call passed the door.
#[derive(Debug, Default)]
pub struct Door {
    /// The wait before it started, if it had to wait (or could not take the claim).
    pub waited: Option<Waited>,
    /// A declared call took its declaration from a tick's room: it is armed at it.
    pub took_declaration: bool,
}

/// What a call takes from a tick, under the claim file's lock.
#[derive(Clone, Copy, Debug)]
enum Take {
    /// An undeclared call that had to wait: a tick no call has started on yet; it records
    /// the allowance it is armed at.
    Tick { allowance: u64 },
    /// A declared call: `bytes` (its ceiling) of the tick's `room`, less what calls took
    /// from this tick and the ones before it that the daemon may not count yet.
    Room { bytes: u64, room: u64 },
}

/// What one look at the daemon's file says a call may do.
enum Look {
    /// Start now, taking nothing: there is no door for it (its tier has nothing published).
    Pass,
    /// Start if the ledger gives this of the tick.
    Take(Take),
    /// Look again at a later tick.
    Wait,
}

/// Passes the door for a new call of `tier` that declares `declared` bytes (if it does): at
/// once when there is room (no wait asked, or its declaration fits), after a wait otherwise
/// (see the module doc). An unreadable or untrusted file, or `wait_limit_ms` 0: no wait.
pub fn for_room(state_dir: &Path, root: &Path, tier: &str, declared: Option<u64>, verbose: bool) -> Door {
    let Ok(first) = armed::current(state_dir, root, armed::unix_ms()) else {
        return Door::default();
    };
    if first.wait_limit_ms == 0 {
        return Door::default();
    }
    match declared.map(armed::declared_ceiling) {
        // Its ceiling (the declaration, as armed) of the whole room, through the ledger.
        Some(ceiling) => {
            let look = |a: &Admission| match a.room(tier) {
                None => Look::Pass,
                Some(room) if room >= ceiling => Look::Take(Take::Room { bytes: ceiling, room }),
                Some(_) => Look::Wait,
            };
            let announce = |a: &Admission| {
                format!(
                    "no room for this {tier} call's declared {} now ({} free, less what calls just took)",
                    memqos_policy::size::human(ceiling),
                    memqos_policy::size::human(a.room(tier).unwrap_or(0))
                )
            };
            let (waited, took_declaration) = at_the_door(state_dir, root, first, verbose, look, announce);
            Door { waited, took_declaration }
        }
        // Undeclared: the allowance's `wait`; one that need not wait takes no claim.
        None if !first.wait(tier) => Door::default(),
        None => {
            let look = |a: &Admission| {
                if a.wait(tier) {
                    Look::Wait
                } else {
                    Look::Take(Take::Tick { allowance: a.allowance(tier).unwrap_or(0).max(armed::MIN_CEILING) })
                }
            };
            let announce = |_: &Admission| format!("no room for a new {tier} call now");
            let (waited, _) = at_the_door(state_dir, root, first, verbose, look, announce);
            Door { waited, took_declaration: false }
        }
    }
}

/// Looks at the daemon's file (`first`, then every [`POLL`]) until `look` lets the call
/// start, the file's `wait_limit_ms` passes or the daemon is gone; says `announce` once under
/// `verbose` when it has to wait. Returns the wait (None when it started on the first look)
/// and whether it took what it asked of a tick.
fn at_the_door(
    state_dir: &Path,
    root: &Path,
    first: Admission,
    verbose: bool,
    look: impl Fn(&Admission) -> Look,
    announce: impl Fn(&Admission) -> String,
) -> (Option<Waited>, bool) {
    let started = Instant::now();
    let limit = Duration::from_millis(first.wait_limit_ms);
    let (mut a, mut looked) = (first, 0u32);
    let waited = |ended, why| Some(Waited { ms: started.elapsed().as_millis() as u64, ended, why });
    loop {
        match look(&a) {
            Look::Pass => return (None, false),
            Look::Take(take) => match claim(state_dir, a.seq, a.pid, take) {
                Ok(true) => return (if looked == 0 { None } else { waited(Ended::Room, None) }, true),
                Ok(false) => {} // calls started on this tick already: the next one
                Err(e) => {
                    let why = format!("cannot take {}: {e}", state_dir.join(ADMISSION_CLAIM_FILE).display());
                    return (waited(Ended::NoClaim, Some(why)), false);
                }
            },
            Look::Wait => {}
        }
        if looked == 0 && verbose {
            eprintln!(
                "memqos run: {}: waiting for the memqos daemon to have it (at most {:.1} s)",
                announce(&a),
                limit.as_secs_f64()
            );
        }
        looked += 1;
        if started.elapsed() >= limit {
            return (waited(Ended::Limit, None), false);
        }
        std::thread::sleep(POLL);
        a = match armed::current(state_dir, root, armed::unix_ms()) {
            Ok(a) => a,
            Err(why) => return (waited(Ended::DaemonGone, Some(why)), false),
        };
    }
}

/// The claim file's content: the last tick a call started on, the daemon `pid` that
/// published it, and what calls took from that tick's room (`taken[0]`) and from the
/// [`LEDGER_TICKS`]` - 1` ticks before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ledger {
    pub seq: u64,
    pub pid: u32,
    pub taken: [u64; LEDGER_TICKS],
}

impl Ledger {
    /// What calls took from tick `seq`'s room and the ones before it still counted, as of
    /// this ledger; None when the ledger is of a later tick (the caller read an older file).
    pub(crate) fn taken_as_of(&self, seq: u64) -> Option<[u64; LEDGER_TICKS]> {
        let behind = seq.checked_sub(self.seq)?;
        let mut taken = [0; LEDGER_TICKS];
        for (i, t) in self.taken.iter().enumerate() {
            // The file is anyone's who may run calls: a ledger of tick 0 read at tick 2^64 - 1
            // must not wrap (debug: panic) into a recent slot.
            let at = usize::try_from(behind).ok().and_then(|b| b.checked_add(i));
            if let Some(slot) = at.and_then(|at| taken.get_mut(at)) {
                *slot = *t;
            }
        }
        Some(taken)
    }

    pub(crate) fn text(&self) -> String {
        let taken: Vec<String> = self.taken.iter().map(u64::to_string).collect();
        format!("{} {} {}\n", self.seq, self.pid, taken.join(" "))
    }
}

/// Takes what `take` asks of tick `seq` of the daemon `pid`, under an exclusive lock on the
/// claim file; Ok(false) when the tick cannot give it (see [`Take`]) or the ledger is of a
/// later tick. A ledger of another daemon (one that died without removing it) counts as none.
fn claim(state_dir: &Path, seq: u64, pid: u32, take: Take) -> std::io::Result<bool> {
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
    let mut taken = match parse_claim(&text).filter(|l| l.pid == pid) {
        Some(l) => match l.taken_as_of(seq) {
            Some(t) => t,
            None => return Ok(false),
        },
        None => [0; LEDGER_TICKS],
    };
    let (fits, took) = match take {
        Take::Tick { allowance } => (taken[0] == 0, allowance.max(1)),
        Take::Room { bytes, room } => (taken.iter().fold(bytes, |s, t| s.saturating_add(*t)) <= room, bytes),
    };
    if !fits {
        return Ok(false);
    }
    taken[0] = taken[0].saturating_add(took);
    file.set_len(0)?;
    file.write_all_at(Ledger { seq, pid, taken }.text().as_bytes(), 0)?;
    file.flush()?;
    Ok(true)
}

/// `"<seq> <pid> <taken>..."`; a file of an older memqos (`"<seq> <pid>"`: a waiter started
/// on that tick) reads as that tick taken whole. None for anything else (an empty file:
/// nothing claimed yet).
pub(crate) fn parse_claim(text: &str) -> Option<Ledger> {
    let mut words = text.split_whitespace();
    let seq = words.next()?.parse().ok()?;
    let pid = words.next()?.parse().ok()?;
    let mut taken = [0; LEDGER_TICKS];
    let mut any = false;
    for slot in &mut taken {
        match words.next() {
            Some(w) => {
                *slot = w.parse().ok()?;
                any = true;
            }
            None => break,
        }
    }
    if !any {
        taken[0] = u64::MAX;
    }
    Some(Ledger { seq, pid, taken })
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

        /// The tick of the last claim and its daemon.
        fn claimed(&self) -> Option<(u64, u32)> {
            parse_claim(&std::fs::read_to_string(self.state.join(ADMISSION_CLAIM_FILE)).ok()?).map(|l| (l.seq, l.pid))
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
        for_room(state, Path::new(ROOT), "tool", None, false).waited
    }

    fn declared(state: &Path, bytes: u64) -> Door {
        for_room(state, Path::new(ROOT), "tool", Some(bytes), false)
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
        // The share says wait (below the floor), but 64 MiB of room covers a call that
        // declares 40 MiB: it starts at once, armed at its declaration, and the ledger has it.
        let door = declared(d.path(), 40 << 20);
        assert!(door.waited.is_none() && door.took_declaration, "{door:?}");
        assert_eq!(ledger(d.path()).map(|l| (l.seq, l.taken[0])), Some((1, 40 << 20)));
        // A call that declares 500 MiB waits, through ticks without enough room, until one
        // has it, and takes it from that tick.
        let (room, seq) = (daemon.room_mib.clone(), daemon.seq.clone());
        let opener = std::thread::spawn(move || {
            std::thread::sleep(BEFORE_THE_TICK);
            room.store(300, Ordering::SeqCst);
            seq.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(BEFORE_THE_TICK);
            room.store(600, Ordering::SeqCst);
            seq.fetch_add(1, Ordering::SeqCst);
        });
        let door = declared(d.path(), 500 << 20);
        opener.join().unwrap();
        let w = door.waited.as_ref().expect("it had to wait");
        assert!(door.took_declaration);
        assert_eq!(w.ended, Ended::Room);
        assert!(w.ms >= 2 * BEFORE_THE_TICK.as_millis() as u64, "not on the 300 MiB tick: {w:?}");
        assert_eq!(daemon.claimed(), Some((3, std::process::id())), "the tick with 600 MiB");
        // The same tick's 600 MiB less the 500 MiB just taken and the 40 MiB of two ticks
        // ago (the daemon may not count that call yet) covers a 60 MiB call.
        let door = declared(d.path(), 60 << 20);
        assert!(door.waited.is_none() && door.took_declaration, "{door:?}");
        assert_eq!(ledger(d.path()).map(|l| l.taken), Some([560 << 20, 0, 40 << 20]));
    }

    #[test]
    fn a_declared_call_that_never_has_room_starts_at_the_limit_untaken() {
        let d = tempfile::tempdir().unwrap();
        let _daemon = FakeDaemon::start(d.path(), 300);
        let door = declared(d.path(), 500 << 20);
        assert!(!door.took_declaration);
        let w = door.waited.expect("it waited");
        assert_eq!(w.ended, Ended::Limit);
        assert!(w.ms >= 300, "{w:?}");
        assert!(ledger(d.path()).is_none(), "took nothing");
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

    fn ledger(state: &Path) -> Option<Ledger> {
        parse_claim(&std::fs::read_to_string(state.join(ADMISSION_CLAIM_FILE)).ok()?)
    }

    const MIB: u64 = 1 << 20;

    fn tick_of(allowance_mib: u64) -> Take {
        Take::Tick { allowance: allowance_mib * MIB }
    }

    fn room_of(bytes_mib: u64, room_mib: u64) -> Take {
        Take::Room { bytes: bytes_mib * MIB, room: room_mib * MIB }
    }

    #[test]
    fn an_undeclared_waiter_takes_a_tick_once_and_a_dead_daemons_claim_is_none() {
        let d = tempfile::tempdir().unwrap();
        assert!(claim(d.path(), 5, 7, tick_of(64)).unwrap());
        assert!(!claim(d.path(), 5, 7, tick_of(64)).unwrap(), "taken");
        assert!(!claim(d.path(), 4, 7, tick_of(64)).unwrap(), "an older tick");
        assert!(claim(d.path(), 6, 7, tick_of(64)).unwrap());
        assert!(claim(d.path(), 1, 8, tick_of(64)).unwrap(), "another daemon counts from 1");
        assert_eq!(ledger(d.path()), Some(Ledger { seq: 1, pid: 8, taken: [64 * MIB, 0, 0] }));
        // A claim that cannot be opened is an error, not a wait.
        let ro = tempfile::tempdir().unwrap();
        std::fs::create_dir(ro.path().join(ADMISSION_CLAIM_FILE)).unwrap();
        assert!(claim(ro.path(), 1, 7, tick_of(64)).is_err());
    }

    #[test]
    fn declared_calls_share_a_ticks_room_and_the_ledger_counts_them_for_three_ticks() {
        let d = tempfile::tempdir().unwrap();
        assert!(claim(d.path(), 1, 7, room_of(60, 100)).unwrap());
        assert!(!claim(d.path(), 1, 7, room_of(60, 100)).unwrap(), "60 + 60 > 100");
        assert!(claim(d.path(), 1, 7, room_of(40, 100)).unwrap(), "60 + 40 fits");
        // The next two ticks' room may not count them yet: the ledger still does.
        assert!(!claim(d.path(), 2, 7, room_of(1, 100)).unwrap());
        assert!(!claim(d.path(), 3, 7, room_of(1, 100)).unwrap());
        assert!(claim(d.path(), 4, 7, room_of(100, 100)).unwrap(), "the daemon counts them by then");
        // An undeclared waiter takes only a tick no call started on, and counts.
        assert!(!claim(d.path(), 4, 7, tick_of(64)).unwrap());
        assert!(claim(d.path(), 5, 7, tick_of(64)).unwrap());
        assert!(!claim(d.path(), 5, 7, room_of(137, 300)).unwrap(), "64 + 100 + 137 > 300");
        assert!(claim(d.path(), 5, 7, room_of(136, 300)).unwrap());
        assert_eq!(ledger(d.path()), Some(Ledger { seq: 5, pid: 7, taken: [200 * MIB, 100 * MIB, 0] }));
        // A later tick's ledger: this call read an older file; it looks again.
        assert!(!claim(d.path(), 4, 7, room_of(1, 1000)).unwrap());
    }

    #[test]
    fn an_older_memqos_claim_file_reads_as_its_tick_taken_whole() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join(ADMISSION_CLAIM_FILE), "5 7\n").unwrap();
        assert!(!claim(d.path(), 5, 7, room_of(1, 1 << 20)).unwrap());
        assert!(!claim(d.path(), 5, 7, tick_of(64)).unwrap());
        assert!(claim(d.path(), 6, 7, tick_of(64)).unwrap());
        assert_eq!(parse_claim("5 7 1 2 3"), Some(Ledger { seq: 5, pid: 7, taken: [1, 2, 3] }));
        assert_eq!(parse_claim(""), None);
        assert_eq!(parse_claim("5 7 x"), None);
    }

    /// Found by `proptest_claim_ledger_shifts_without_wrapping` (src/proptests.rs): a ledger
    /// of tick 0 read at tick u64::MAX overflowed the slot index (a panic in debug builds; in
    /// release it wrapped into a recent slot and counted an ancient take as this tick's).
    #[test]
    fn a_ledger_ages_of_ticks_apart_is_forgotten() {
        let l = Ledger { seq: 0, pid: 7, taken: [1, 2, 3] };
        assert_eq!(l.taken_as_of(u64::MAX), Some([0, 0, 0]));
        assert_eq!(l.taken_as_of(1), Some([0, 1, 2]));
        assert_eq!(Ledger { seq: 1, ..l }.taken_as_of(0), None);
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
