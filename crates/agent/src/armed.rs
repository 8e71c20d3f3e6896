//! The armed ceiling: memory.high on a tool call's cgroup before the call starts, at the
//! allowance the memqos daemon publishes for the call's tier (`policy.admission`,
//! `<state_dir>/admission.json`). A burst shorter than the daemon's sampling interval is then
//! throttled by the kernel instead of running the host budget into an OOM kill.
//!
//! No daemon, a stale or unreadable file, no allowance for the tier: no ceiling, and the call
//! runs as before (said in `--json` and `--verbose` only). The ceiling is written only on the
//! call's own cgroup, after marking it with `user.memqos.armed_high`, so the daemon takes it
//! as its own cut (original `max`) and raises it as room frees. A ceiling is never left
//! without a daemon: while the call runs, `memqos run` lifts it to `max` itself once the
//! daemon's file goes stale or is withdrawn, or its process is gone.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use memqos_cgroupfs::{Cgroup, Limit};
use memqos_policy::size::{page_down, PAGE};
use memqos_schema::admission::{Admission, ADMISSION_VERSION, ARMED_HIGH_XATTR};
use memqos_schema::state::ADMISSION_FILE;

/// The daemon's default state directory (its config's default `state_dir`).
pub const DEFAULT_STATE_DIR: &str = memqos_schema::state::DEFAULT_STATE_DIR;

/// No ceiling is armed below this, whatever a file says: a small call is never held.
pub const MIN_CEILING: u64 = 16 << 20;

/// The ceiling a call that declares `declared` bytes is armed at when the room covers it:
/// the declaration rounded up to a page, at least [`MIN_CEILING`]. What its wait asks of the
/// room too.
pub fn declared_ceiling(declared: u64) -> u64 {
    declared.div_ceil(PAGE).saturating_mul(PAGE).max(MIN_CEILING)
}

/// How often the daemon's liveness is looked at while the call runs.
const CHECK_EVERY: Duration = Duration::from_millis(200);

/// The allowance of `tier` in the file at `state_dir`, at `now_unix_ms`, for calls below
/// `root`; Err says why there is none.
pub fn allowance(state_dir: &Path, root: &Path, tier: &str, now_unix_ms: u64) -> Result<(u64, u32), String> {
    allowance_of(&current(state_dir, root, now_unix_ms)?, tier)
}

fn allowance_of(a: &Admission, tier: &str) -> Result<(u64, u32), String> {
    let bytes = a.allowance(tier).ok_or_else(|| format!("the daemon publishes no allowance for tier {tier:?}"))?;
    Ok((bytes.max(MIN_CEILING), a.pid))
}

/// The file at `state_dir` if a live daemon published it for `root` recently enough to be
/// trusted at `now_unix_ms`; Err says why not.
pub(crate) fn current(state_dir: &Path, root: &Path, now_unix_ms: u64) -> Result<Admission, String> {
    let a = read(state_dir)?;
    if Path::new(&a.cgroup_root) != root {
        return Err(format!("the daemon's allowances are for {}, not {}", a.cgroup_root, root.display()));
    }
    let age = a.age_ms(now_unix_ms);
    if age > a.max_age_ms() {
        return Err(format!("the daemon's allowances are {age} ms old (stale after {} ms)", a.max_age_ms()));
    }
    if !alive(a.pid) {
        return Err(format!("the daemon (pid {}) is gone", a.pid));
    }
    Ok(a)
}

fn read(state_dir: &Path) -> Result<Admission, String> {
    let path = state_dir.join(ADMISSION_FILE);
    let text = std::fs::read(&path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => format!("no daemon allowances ({} is missing)", path.display()),
        _ => format!("{}: {e}", path.display()),
    })?;
    let a: Admission = serde_json::from_slice(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    if a.version != ADMISSION_VERSION {
        return Err(format!("{}: version {} (this memqos reads {ADMISSION_VERSION})", path.display(), a.version));
    }
    Ok(a)
}

fn alive(pid: u32) -> bool {
    // kill(0) asks about our own process group and a pid past i32::MAX becomes a negative
    // one (a group, or every process for -1): neither says the daemon is alive.
    let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists (EPERM: it does, as another user).
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Wall-clock ms since the Unix epoch (the daemon's file carries the same clock).
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// An armed ceiling on a running call.
#[derive(Debug)]
pub struct Ceiling {
    pub bytes: u64,
    state_dir: PathBuf,
    root: PathBuf,
    last_check: Instant,
    /// Why it was lifted, once it was.
    pub lifted: Option<String>,
    /// Armed at the call's declared peak (the room covered it), not at the tier's allowance.
    pub at_declaration: bool,
}

/// Arms `cg` (a call's cgroup just made, nothing running in it yet) at its tier's allowance,
/// or, for a call that declares its peak, at the declaration when the room covers it (at the
/// larger of the allowance and the room when it does not: a wait that ended at its limit);
/// Err says why it was not armed (nothing was written then, or the mark only). A call whose
/// wait took its declaration from a tick's room (`took_declaration`, `wait::Door`) is armed
/// at it whatever the file says now: a newer tick's room may count the calls beside it.
///
/// A declared call is armed at its declaration even when the allowance is larger: the daemon
/// counts what an armed call may still grow to as promised, so a 60 MiB call armed at an
/// 800 MiB share would keep 740 MiB from every call waiting for room.
pub fn arm(
    cg: &Cgroup,
    state_dir: &Path,
    root: &Path,
    tier: &str,
    declared: Option<u64>,
    took_declaration: bool,
) -> Result<Ceiling, String> {
    let a = current(state_dir, root, unix_ms())?;
    let (allowed, _) = allowance_of(&a, tier)?;
    let (bytes, at_declaration) = match (declared.map(declared_ceiling), a.room(tier)) {
        // Taken from a tick's room at the door (`wait`): this file's room may already count
        // the calls that started beside it.
        (Some(d), _) if took_declaration => (d, true),
        (Some(d), Some(room)) if d <= room => (d, true),
        (Some(_), Some(room)) => (allowed.max(room), false),
        _ => (allowed, false),
    };
    // The daemon honours the mark only from root or the root's owner, as every hint; from
    // anyone else it would take the ceiling for an operator's and never raise it.
    let owner = |p: &Path| std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(p).ok()?).into();
    let (mine, roots): (Option<u32>, Option<u32>) = (owner(cg.path()), owner(root));
    if !(mine == Some(0) || (mine.is_some() && mine == roots)) {
        return Err(format!("the call's cgroup is owned by uid {mine:?}, whose marks the daemon does not honour"));
    }
    let bytes = page_down(bytes);
    // The mark first: a daemon that sees the value sees whose it is.
    cg.set_xattr(ARMED_HIGH_XATTR, &bytes.to_string()).map_err(|e| format!("cannot mark the call: {e}"))?;
    cg.set_limit("memory.high", Limit::Bytes(bytes)).map_err(|e| format!("cannot arm the call: {e}"))?;
    Ok(Ceiling {
        bytes,
        state_dir: state_dir.to_owned(),
        root: root.to_owned(),
        last_check: Instant::now() - CHECK_EVERY,
        lifted: None,
        at_declaration,
    })
}

impl Ceiling {
    /// While the call runs: if the daemon no longer looks after the ceiling, lifts the call's
    /// memory.high to `max` (once). Rate-limited to one look per [`CHECK_EVERY`].
    pub fn watch(&mut self, cg: &Cgroup) {
        if self.lifted.is_some() || self.last_check.elapsed() < CHECK_EVERY {
            return;
        }
        self.last_check = Instant::now();
        if let Some(why) = self.stale(unix_ms()) {
            self.lift(cg, why);
        }
    }

    /// Why the daemon no longer looks after the ceiling at `now_unix_ms`, if it does not:
    /// its file withdrawn (a stop), unreadable, for another root, stale for twice its bound
    /// (a late tick is not a dead daemon), or its process gone. A restarted daemon (another
    /// pid) looks after it again: it restores or adopts what it finds.
    pub fn stale(&self, now_unix_ms: u64) -> Option<String> {
        let a = match read(&self.state_dir) {
            Ok(a) => a,
            Err(e) => return Some(e),
        };
        if Path::new(&a.cgroup_root) != self.root {
            return Some(format!("the daemon's allowances are for {} now", a.cgroup_root));
        }
        let age = a.age_ms(now_unix_ms);
        if age > 2 * a.max_age_ms() {
            return Some(format!("the daemon's allowances are {age} ms old: it stopped updating them"));
        }
        (!alive(a.pid)).then(|| format!("the daemon (pid {}) is gone", a.pid))
    }

    /// memory.high back to `max`, on this call's own cgroup only.
    pub fn lift(&mut self, cg: &Cgroup, why: String) {
        let below_max = cg.limit("memory.high").is_ok_and(|l| l != Limit::Max);
        if below_max && cg.set_limit("memory.high", Limit::Max).is_err() {
            return; // tried again at the next look
        }
        self.lifted = Some(why);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by `proptest_admission_file_any_text_is_an_allowance_or_a_reason`
    /// (src/proptests.rs): a file naming pid 0 was trusted (kill(0, 0) asks about our own
    /// process group).
    #[test]
    fn pids_that_are_no_process_are_not_alive() {
        assert!(alive(std::process::id()));
        assert!(!alive(0));
        assert!(!alive(u32::MAX));
        assert!(!alive(i32::MAX as u32 + 1));
    }

    fn publish(dir: &Path, root: &str, at: u64, pid: u32, tiers: &[(&str, u64)]) {
        let tiers: Vec<_> = tiers.iter().map(|&(t, b)| (t, b, false)).collect();
        crate::testutil::publish(dir, root, at, pid, &tiers, 1, 0);
    }

    #[test]
    fn only_a_fresh_allowance_of_a_live_daemon_for_this_root_and_tier_counts() {
        let d = tempfile::tempdir().unwrap();
        let root = Path::new("/sys/fs/cgroup/agents");
        let me = std::process::id();
        let err = allowance(d.path(), root, "tool", 10_000).unwrap_err();
        assert!(err.contains("no daemon allowances"), "{err}");
        publish(d.path(), "/sys/fs/cgroup/agents", 10_000, me, &[("tool", 300 << 20), ("tool-low", 1 << 20)]);
        assert_eq!(allowance(d.path(), root, "tool", 10_500), Ok((300 << 20, me)));
        assert_eq!(allowance(d.path(), root, "tool-low", 10_500), Ok((MIN_CEILING, me)), "never below the minimum");
        let stale = allowance(d.path(), root, "tool", 11_001).unwrap_err();
        assert!(stale.contains("stale after 1000 ms"), "{stale}");
        assert!(allowance(d.path(), root, "runtime", 10_500).unwrap_err().contains("no allowance for tier"));
        assert!(allowance(d.path(), Path::new("/other"), "tool", 10_500).unwrap_err().contains("not /other"));
        // A pid that no process has (above pid_max's ceiling).
        publish(d.path(), "/sys/fs/cgroup/agents", 10_000, 1 << 23, &[("tool", 300 << 20)]);
        assert!(allowance(d.path(), root, "tool", 10_500).unwrap_err().contains("is gone"));
        std::fs::write(d.path().join(ADMISSION_FILE), "{").unwrap();
        assert!(allowance(d.path(), root, "tool", 10_500).is_err(), "unreadable: no ceiling");
    }

    /// A root with a session and a call's cgroup in it, shaped enough for `arm`, and a state
    /// directory.
    struct Fake {
        _dir: tempfile::TempDir,
        root: PathBuf,
        state: PathBuf,
        call: Cgroup,
    }

    fn fake() -> Fake {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("agents");
        let call = root.join("s").join("tool.7");
        std::fs::create_dir_all(&call).unwrap();
        for f in ["memory.high", "memory.max"] {
            std::fs::write(call.join(f), "max\n").unwrap();
        }
        std::fs::write(call.join("cgroup.procs"), "").unwrap();
        let state = dir.path().join("state");
        std::fs::create_dir_all(&state).unwrap();
        Fake { root, state, call: Cgroup::new(&call), _dir: dir }
    }

    fn high(cg: &Cgroup) -> String {
        std::fs::read_to_string(cg.path().join("memory.high")).unwrap().trim().to_owned()
    }

    fn mark(cg: &Cgroup) -> Option<Vec<u8>> {
        cg.xattr_bytes(ARMED_HIGH_XATTR, 64).unwrap()
    }

    #[test]
    fn a_fresh_allowance_is_armed_marked_first_and_nothing_is_written_without_one() {
        let f = fake();
        let root = f.root.display().to_string();
        // Missing, then stale: no ceiling, nothing written.
        let e = arm(&f.call, &f.state, &f.root, "tool", None, false).unwrap_err();
        assert!(e.contains("missing"), "{e}");
        publish(&f.state, &root, unix_ms() - 5_000, std::process::id(), &[("tool", 300 << 20)]);
        let e = arm(&f.call, &f.state, &f.root, "tool", None, false).unwrap_err();
        assert!(e.contains("old"), "{e}");
        assert_eq!((high(&f.call), mark(&f.call)), ("max".to_owned(), None));
        // Fresh, from a live daemon (this process stands in for it).
        publish(&f.state, &root, unix_ms(), std::process::id(), &[("tool", (300 << 20) + 100)]);
        let c = arm(&f.call, &f.state, &f.root, "tool", None, false).expect("armed");
        assert_eq!(c.bytes, 300 << 20, "page aligned");
        assert_eq!(high(&f.call), (300u64 << 20).to_string());
        assert_eq!(mark(&f.call), Some((300u64 << 20).to_string().into_bytes()));
        assert!(c.stale(unix_ms()).is_none() && c.lifted.is_none());
    }

    #[test]
    fn a_declared_call_is_armed_at_its_declaration_as_far_as_the_room_goes() {
        use memqos_schema::admission::TierAllowance;
        let f = fake();
        let root = f.root.display().to_string();
        let at = |allowance: u64, room: Option<u64>| {
            let t = TierAllowance { tier: "tool".into(), allowance_bytes: allowance, wait: false, room_bytes: room };
            crate::testutil::publish_tiers(&f.state, &root, unix_ms(), std::process::id(), vec![t], 1, 0);
        };
        let arm_declared = |d| arm(&f.call, &f.state, &f.root, "tool", d, false).expect("armed").bytes;
        let at_declaration = |d| arm(&f.call, &f.state, &f.root, "tool", d, false).expect("armed").at_declaration;
        at(100 << 20, Some(200 << 20));
        // Within the room: the declaration, rounded up to a page.
        assert_eq!(arm_declared(Some((150 << 20) + 1)), (150 << 20) + 4096);
        assert_eq!(high(&f.call), ((150u64 << 20) + 4096).to_string());
        // More than the room (a wait that ended at its limit): the room. Below the share:
        // still its declaration (what it may grow to is promised away from other calls),
        // never below the least ceiling. None declared: the allowance.
        assert_eq!(arm_declared(Some(500 << 20)), 200 << 20);
        assert_eq!(arm_declared(Some(40 << 20)), 40 << 20);
        assert_eq!(arm_declared(Some(1 << 20)), MIN_CEILING);
        assert_eq!(arm_declared(None), 100 << 20);
        // Which of them were armed at the declaration (what --verbose says).
        assert_eq!([Some(40 << 20), Some(500 << 20), None].map(at_declaration), [true, false, false]);
        // An older daemon publishes no room: the allowance stands in.
        at(100 << 20, None);
        assert_eq!(arm_declared(Some(150 << 20)), 100 << 20);
        // Taken from a tick's room at the door: its declaration, though this newer file's
        // room (which counts the calls that started beside it) is smaller.
        at(100 << 20, Some(200 << 20));
        let c = arm(&f.call, &f.state, &f.root, "tool", Some(500 << 20), true).expect("armed");
        assert_eq!((c.bytes, c.at_declaration), (500 << 20, true));
    }

    #[test]
    fn a_ceiling_is_lifted_to_max_when_the_daemon_withdraws_goes_stale_or_dies() {
        let f = fake();
        let root = f.root.display().to_string();
        let me = std::process::id();
        type Break = fn(&Path, &str);
        let cases: [(Break, &str); 3] = [
            (|s, _| std::fs::remove_file(s.join(ADMISSION_FILE)).unwrap(), "missing"),
            (|s, r| publish(s, r, unix_ms() - 2_001, std::process::id(), &[("tool", 300 << 20)]), "stopped updating"),
            (|s, r| publish(s, r, unix_ms(), 1 << 23, &[("tool", 300 << 20)]), "is gone"),
        ];
        for (break_it, says) in cases {
            publish(&f.state, &root, unix_ms(), me, &[("tool", 300 << 20)]);
            let mut c = arm(&f.call, &f.state, &f.root, "tool", None, false).expect("armed");
            c.watch(&f.call);
            assert_eq!(c.lifted, None, "a live daemon keeps it");
            assert_eq!(high(&f.call), (300u64 << 20).to_string());
            break_it(&f.state, &root);
            c.last_check = Instant::now() - CHECK_EVERY;
            c.watch(&f.call);
            let why = c.lifted.clone().expect("lifted");
            assert!(why.contains(says), "{says}: {why}");
            assert_eq!(high(&f.call), "max", "{says}");
        }
    }

    #[test]
    fn the_call_is_watched_while_it_runs() {
        let f = fake();
        publish(&f.state, &f.root.display().to_string(), unix_ms(), std::process::id(), &[("tool", 64 << 20)]);
        let mut c = arm(&f.call, &f.state, &f.root, "tool", None, false).expect("armed");
        // The daemon stops while the call runs (its file withdrawn after 100 ms).
        let state = f.state.clone();
        let stopper = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            std::fs::remove_file(state.join(ADMISSION_FILE)).unwrap();
        });
        let argv = ["sh".into(), "-c".into(), "sleep 0.6".into()];
        let mode = crate::spawn::SpawnMode::ForkThenMove;
        let call = &f.call;
        crate::spawn::run_in_watching(call.path(), &argv, &[], mode, &mut || c.watch(call)).unwrap();
        stopper.join().unwrap();
        assert!(c.lifted.as_deref().is_some_and(|w| w.contains("missing")), "{:?}", c.lifted);
        assert_eq!(high(&f.call), "max");
    }
}
