//! `memqos run`: set up the call's cgroup, run the command in it, report, clean up.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use memqos_cgroupfs::{Cgroup, Limit};
use memqos_policy::Config;

use crate::armed;
use crate::error::SetupError;
use crate::hint::{resolve_tier, Hint};
use crate::layout::{self, Position, Root, RUNTIME};
use crate::report::{self, Ancestry, CallInfo};
use crate::spawn::{self, SpawnError, SpawnMode};
use crate::wait;

/// The default managed root, as in the daemon's example config.
pub const DEFAULT_ROOT: &str = "/sys/fs/cgroup/agents";
/// The session of a call started outside any session with no --session or $MEMQOS_SESSION.
pub const DEFAULT_SESSION: &str = "default";

/// What to run and how; the CLI's arguments with the environment already applied.
#[derive(Clone, Debug, Default)]
pub struct Request {
    /// `--root`: the managed root (else the config's `cgroup_root`, else $MEMQOS_ROOT).
    pub root: Option<PathBuf>,
    /// `--config`: a daemon config; gives the root and lets the tier be checked.
    pub config: Option<PathBuf>,
    pub session: Option<String>,
    pub tier: Option<String>,
    pub hint: Option<String>,
    /// `--max`: memory.max of the call's cgroup.
    pub max: Option<String>,
    /// `--runtime`: run the agent runtime itself in `<session>/runtime`.
    pub runtime: bool,
    /// `--expect`: the peak the call (or the runtime) declares, as the cgroup's
    /// `user.memqos.expected_peak`: a protected tier reserves that room from the start.
    pub expect: Option<String>,
    /// `--workload`: the workload the call (or the runtime) runs, as the cgroup's
    /// `user.memqos.workload`: a `learn_peak` tier records its peak under that key and
    /// reserves the learned peak for the next cgroup with the same key.
    pub workload: Option<String>,
    /// `--json`: the call's report as one JSON line on stderr.
    pub json: bool,
    /// `--stats`: a one-line summary on stderr.
    pub stats: bool,
    /// `--verbose`: say on stderr what was set up (the armed ceiling, or why none).
    pub verbose: bool,
    /// `--state-dir`: the daemon's state directory, where its allowances for new calls are
    /// (else $MEMQOS_STATE_DIR, else the config's `state_dir`, else /run/memqos).
    pub state_dir: Option<PathBuf>,
    pub command: Vec<OsString>,
}

/// Runs the request; returns the exit status to exit with. Errors are printed on stderr.
pub fn run(req: &Request) -> u8 {
    let fallback = std::env::var("MEMQOS_FALLBACK").is_ok_and(|v| v == "exec");
    match prepare(req) {
        Ok(Prepared::Nested) => exec_here(&req.command),
        Ok(Prepared::Call(call)) => (*call).run(req),
        Err(e) if fallback => {
            eprintln!("memqos run: {e}; running the command without a cgroup (MEMQOS_FALLBACK=exec)");
            exec_here(&req.command)
        }
        Err(e) => {
            eprintln!("memqos run: {e}");
            125
        }
    }
}

enum Prepared {
    /// Already inside a tool call: run the command there, in the outer call's cgroup.
    Nested,
    Call(Box<Call>),
}

/// A created call cgroup, ready for the command.
struct Call {
    root: PathBuf,
    session: String,
    tier: String,
    cg: Cgroup,
    hint_bytes: Option<u64>,
    before: Ancestry,
    /// The daemon's event log, when a config named its state_dir.
    events_log: Option<PathBuf>,
    /// The armed ceiling (`armed`), or why there is none.
    ceiling: Result<armed::Ceiling, String>,
    /// The wait for room before the call started (`wait`), if it had to wait.
    waited: Option<wait::Waited>,
    /// Its wait took its declaration from a tick's room (`wait::Door`): armed at it.
    took_declaration: bool,
    /// `--expect`, for a tool call: what its wait and its ceiling were to cover.
    declared: Option<u64>,
    /// A tool call's creator lock (`layout::CallCgroup`), held until the call is dropped,
    /// after its cgroup is removed; the runtime's shared cgroup has none.
    _lock: Option<std::os::fd::OwnedFd>,
    /// The session's shared lock (`layout::Session`): the daemon leaves the session alone
    /// while any call of it runs.
    _session_lock: std::os::fd::OwnedFd,
}

fn prepare(req: &Request) -> Result<Prepared, SetupError> {
    if req.command.is_empty() {
        return Err(SetupError::Usage("no command given: memqos run [OPTIONS] -- CMD [ARGS...]".into()));
    }
    let hint = req.hint.as_deref().map(Hint::parse).transpose()?;
    let expect = req
        .expect
        .as_deref()
        .map(|m| memqos_policy::size::parse_size(m).map_err(|e| SetupError::Usage(format!("--expect: {e}"))))
        .transpose()?;
    if let Some(key) = req.workload.as_deref() {
        memqos_policy::check_workload_key(key).map_err(|e| SetupError::Usage(format!("--workload: {e}")))?;
    }
    let max = req
        .max
        .as_deref()
        .map(|m| memqos_policy::size::parse_size(m).map_err(|e| SetupError::Usage(format!("--max: {e}"))))
        .transpose()?;
    if req.runtime && (req.tier.is_some() || hint.is_some()) {
        return Err(SetupError::Usage(
            "--runtime runs the agent runtime in <session>/runtime: it takes no --tier or --hint".into(),
        ));
    }
    let tier = if req.runtime { RUNTIME.to_owned() } else { resolve_tier(req.tier.as_deref(), hint)? };
    let (root_path, config) = resolve_root(req)?;
    let root = Root::open(&root_path)?;

    let proc_cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let pos = layout::position(root.path(), &proc_cgroup, &mountinfo);
    if nested(&pos, req.runtime)? {
        return Ok(Prepared::Nested);
    }
    let session_name = req
        .session
        .clone()
        .or(match &pos {
            Position::Runtime { session } | Position::Call { session, .. } => Some(session.clone()),
            Position::Outside => None,
        })
        .or_else(|| std::env::var("MEMQOS_SESSION").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| DEFAULT_SESSION.to_owned());
    let layout::Session { cg: session, lock: session_lock } = root.session(&session_name)?;
    let state_dir = req
        .state_dir
        .clone()
        .or_else(|| std::env::var_os("MEMQOS_STATE_DIR").filter(|v| !v.is_empty()).map(PathBuf::from))
        .or_else(|| config.as_ref().map(|c| c.1.state_dir.clone()))
        .unwrap_or_else(|| PathBuf::from(armed::DEFAULT_STATE_DIR));
    let door = if req.runtime {
        wait::Door::default()
    } else {
        // Stale siblings (calls whose process died) go first: a call that waits for room
        // should not wait beside cgroups that may still hold charged page cache.
        layout::sweep(&session);
        // Before the call's cgroup exists: a waiting call holds no memory and leaves the
        // daemon no empty cgroup to track.
        let planned = session.child(&format!("{tier}.{}", std::process::id()));
        let tier = daemon_tier(config.as_ref().map(|c| &c.1), root.path(), &planned, &tier);
        wait::for_room(&state_dir, root.path(), &tier, expect, req.verbose)
    };
    let (cg, lock) = if req.runtime {
        (layout::runtime(&session)?, None)
    } else {
        let c = layout::create_call(&session, &tier, std::process::id())?;
        (c.cg, Some(c.lock))
    };
    let call = Call {
        _lock: lock,
        _session_lock: session_lock,
        root: root.path().to_owned(),
        session: session_name,
        tier,
        before: Ancestry::read(&cg),
        cg,
        hint_bytes: hint.and_then(Hint::low_bytes),
        events_log: config.as_ref().map(|c| c.1.state_dir.join(memqos_schema::state::EVENTS_FILE)),
        ceiling: Err("not armed yet".into()),
        waited: door.waited,
        took_declaration: door.took_declaration,
        declared: if req.runtime { None } else { expect },
    };
    if let Some(cfg) = &config {
        call.check_tier(cfg.0.as_path(), &cfg.1, expect.is_some(), req.workload.is_some());
    }
    if let Some(key) = &req.workload {
        // Set before the command runs, so its whole lifetime is learned under this key.
        if let Err(e) = call.cg.set_xattr(memqos_policy::WORKLOAD_XATTR, key) {
            call.remove();
            return Err(e.into());
        }
    }
    if let Some(bytes) = expect {
        // A declaration the daemon reads on its next full sample; set before the command runs.
        if let Err(e) = call.cg.set_xattr(memqos_policy::EXPECTED_PEAK_XATTR, &bytes.to_string()) {
            call.remove();
            return Err(e.into());
        }
    }
    let knobs = [("memory.low", call.hint_bytes), ("memory.max", max)];
    for (file, value) in knobs {
        if let Some(b) = value {
            if let Err(e) = call.cg.set_limit(file, Limit::Bytes(b)) {
                call.remove();
                return Err(e.into());
            }
        }
    }
    let mut call = call;
    call.ceiling = if req.runtime {
        Err("the runtime is not armed (it is protected, not throttled)".into())
    } else {
        let tier = daemon_tier(config.as_ref().map(|c| &c.1), &call.root, &call.cg, &call.tier);
        armed::arm(&call.cg, &state_dir, &call.root, &tier, expect, call.took_declaration)
    };
    if req.verbose {
        eprintln!("memqos run: {}", armed_line(&call.ceiling, call.waited.as_ref()));
    }
    Ok(Prepared::Call(Box::new(call)))
}

/// Whether the command stays where this process is: inside a tool call, a nested call runs
/// in the outer call's cgroup. `--runtime` from inside a call is refused: it would move the
/// call's command out of its (throttled) cgroup into the session's protected runtime, and
/// the daemon would give it the runtime's tier (protection, a negative oom_score_adj), which
/// the call is not entitled to.
fn nested(pos: &Position, runtime: bool) -> Result<bool, SetupError> {
    match pos {
        Position::Call { session, call } if runtime => Err(SetupError::Usage(format!(
            "--runtime refused: this process runs inside tool call {session}/{call}, and a tool call may not start the agent runtime; start the runtime from outside the managed root"
        ))),
        Position::Call { .. } => Ok(true),
        Position::Outside | Position::Runtime { .. } => Ok(false),
    }
}

/// The root from --root, --config, $MEMQOS_ROOT, $MEMQOS_CONFIG, or the default; the config
/// too when one was named.
fn resolve_root(req: &Request) -> Result<(PathBuf, Option<(PathBuf, Config)>), SetupError> {
    let config_path =
        req.config.clone().or_else(|| std::env::var_os("MEMQOS_CONFIG").filter(|v| !v.is_empty()).map(PathBuf::from));
    let config = match config_path {
        Some(p) => {
            let text = std::fs::read_to_string(&p)
                .map_err(|e| SetupError::Io { what: format!("reading config {}", p.display()), source: e })?;
            let cfg =
                Config::from_str(&text, &p.display().to_string()).map_err(|e| SetupError::Usage(e.to_string()))?;
            Some((p, cfg))
        }
        None => None,
    };
    let root = req
        .root
        .clone()
        .or_else(|| config.as_ref().map(|c| c.1.cgroup_root.clone()))
        .or_else(|| std::env::var_os("MEMQOS_ROOT").filter(|v| !v.is_empty()).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_ROOT));
    Ok((root, config))
}

/// The tier the daemon sees the call at `cg` in: its config's, when known, else `asked`.
fn daemon_tier(config: Option<&Config>, root: &Path, cg: &Cgroup, asked: &str) -> String {
    let Some(cfg) = config else { return asked.to_owned() };
    let rel = cg.path().strip_prefix(root).unwrap_or(cg.path()).display().to_string();
    cfg.tiers.classify(&rel).and_then(|i| cfg.tiers.get(i)).map_or(asked.to_owned(), |t| t.name.clone())
}

/// What `--verbose` says about the armed ceiling, and the wait before it.
fn armed_line(c: &Result<armed::Ceiling, String>, waited: Option<&wait::Waited>) -> String {
    let ceiling = armed_ceiling_line(c);
    match waited {
        Some(w) => format!(
            "{ceiling}; after waiting {:.1} s for room ({}{})",
            w.ms as f64 / 1000.0,
            w.ended.as_str(),
            w.why.as_deref().map_or(String::new(), |y| format!(": {y}"))
        ),
        None => ceiling,
    }
}

fn armed_ceiling_line(c: &Result<armed::Ceiling, String>) -> String {
    match c {
        Ok(c) if c.at_declaration => format!(
            "armed memory.high at {} (its declared peak: the memqos daemon had that much room)",
            memqos_cgroupfs::units::human(c.bytes)
        ),
        Ok(c) => format!(
            "armed memory.high at {} (the memqos daemon's allowance for a new call of this tier)",
            memqos_cgroupfs::units::human(c.bytes)
        ),
        Err(why) => format!("no memory ceiling armed: {why}"),
    }
}

impl Call {
    /// Warns when the daemon config would place the call in another tier than asked for:
    /// the call still runs, but the operator should know its globs do not match. Also when
    /// `--expect` declares a peak in a tier that neither protects (those reserve room) nor
    /// throttles with `admission` on (there a call waits at the door for room for it).
    /// Likewise when `--workload` names a workload in a tier that does not learn peaks.
    fn check_tier(&self, file: &Path, cfg: &Config, declares: bool, names_workload: bool) {
        let rel = self.cg.path().strip_prefix(&self.root).unwrap_or(self.cg.path()).display().to_string();
        let tier = cfg.tiers.classify(&rel).and_then(|i| cfg.tiers.get(i));
        if names_workload && tier.is_none_or(|t| !t.learn_peak) {
            eprintln!(
                "memqos run: warning: --workload names the workload of {rel}, but its tier in {} does not set learn_peak: its peak is neither learned nor reserved",
                file.display()
            );
        }
        let uses_declaration = |t: &memqos_policy::config::Tier| {
            t.protect != memqos_policy::config::Protect::None || (t.throttle && cfg.policy.admission)
        };
        if declares && tier.is_none_or(|t| !uses_declaration(t)) {
            eprintln!(
                "memqos run: warning: --expect declares a peak for {rel}, but its tier in {} neither protects nor throttles with policy.admission on: nothing reserves or waits for room for it",
                file.display()
            );
        }
        let got = tier.map(|t| t.name.as_str());
        if got != Some(self.tier.as_str()) {
            eprintln!(
                "memqos run: warning: {rel} is in tier {} of {}, not {:?}: add a pattern such as \"*/{}.*\" to that tier's match",
                got.map_or("none".to_owned(), |g| format!("{g:?}")),
                file.display(),
                self.tier,
                self.tier
            );
        }
    }

    fn run(mut self, req: &Request) -> u8 {
        let env = [
            ("MEMQOS_ROOT".to_owned(), self.root.display().to_string()),
            ("MEMQOS_SESSION".to_owned(), self.session.clone()),
            ("MEMQOS_CGROUP".to_owned(), self.cg.path().display().to_string()),
        ];
        let (cg, ceiling) = (&self.cg, &mut self.ceiling);
        let mut watch = || {
            if let Ok(c) = ceiling.as_mut() {
                c.watch(cg);
            }
        };
        let spawn = || spawn::run_in_watching(cg.path(), &req.command, &env, SpawnMode::IntoCgroup, &mut watch);
        let shared = self.tier == RUNTIME;
        let (exit, wall) = match join_retrying(shared, || cg.create(), spawn) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("memqos run: {e}");
                self.remove();
                return e.shell_code();
            }
        };
        let mut r = report::collect(&CallInfo {
            call: &self.cg,
            session: &self.session,
            tier: &self.tier,
            root: &self.root,
            exit,
            wall_ms: wall.as_millis() as u64,
            hint_bytes: self.hint_bytes,
            before: &self.before,
        });
        if let Some(log) = &self.events_log {
            let rel = self.cg.path().strip_prefix(&self.root).unwrap_or(self.cg.path()).display().to_string();
            r.daemon_stall_actions = crate::daemon_log::stall_actions(log, &rel);
        }
        r.armed = match &self.ceiling {
            Ok(c) => memqos_schema::call::Armed {
                high_bytes: Some(c.bytes),
                skipped: None,
                held: r.events.high > 0,
                lifted: c.lifted.clone(),
                ..Default::default()
            },
            Err(why) => memqos_schema::call::Armed { skipped: Some(why.clone()), ..Default::default() },
        };
        if self.ceiling.is_ok() {
            r.armed.declared_bytes = self.declared;
        }
        if let Some(w) = &self.waited {
            r.armed.waited_ms = w.ms;
            r.armed.wait_ended = Some(w.ended.as_str().to_owned());
        }
        r.kept = !self.remove();
        let command = req.command.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" ");
        let mut err = std::io::stderr().lock();
        let mut text = report::oom_text(&r, &command);
        text.push_str(&crate::daemon_log::stall_text(&r.daemon_stall_actions));
        let killed = r.oom.is_some() || r.signal == Some(libc::SIGKILL);
        text.push_str(&report::armed_text(&r.armed, killed, req.verbose));
        if req.stats {
            text.push_str(&report::stats_text(&r));
        }
        if req.json {
            text.push_str(&serde_json::to_string(&r).unwrap_or_default());
            text.push('\n');
        }
        let _ = err.write_all(text.as_bytes());
        r.status
    }

    /// Removes the call's cgroup unless processes still run in it (a command that left
    /// background processes behind); returns whether it is gone. The runtime's cgroup may be
    /// shared by several runtimes of one session: it stays while any runs.
    fn remove(&self) -> bool {
        // Right after the last exit the kernel may still be unlinking the task: `populated`
        // still set, or rmdir EBUSY (20 tries of 1 ms were too few in a TCG guest: the
        // runtime's cgroup stayed). Another runtime of the session keeps it populated for good.
        let deadline = Instant::now() + Duration::from_millis(200);
        loop {
            if !self.cg.is_populated().unwrap_or(false) {
                match self.cg.remove() {
                    Ok(()) => return true,
                    Err(e) if e.is_vanished() => return true,
                    Err(_) => {}
                }
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// Runs `spawn`; for the runtime's shared cgroup (`shared`), again after `recreate` when the
/// cgroup vanished under it. Two runtimes of one session share `<session>/runtime` and the
/// one that ends last removes it: if that happens between another's mkdir and its clone3
/// (ENODEV: the cgroup is dead; ENOENT: the directory is gone), the other would fail with
/// 125. Making the cgroup again is the idempotent answer; a few tries bound a pathological
/// loop of runtimes starting and ending.
fn join_retrying<T>(
    shared: bool,
    recreate: impl Fn() -> Result<(), memqos_cgroupfs::Error>,
    mut spawn: impl FnMut() -> Result<T, SpawnError>,
) -> Result<T, SpawnError> {
    let mut tries = 0;
    loop {
        match spawn() {
            Err(SpawnError::Join { cgroup, source })
                if shared && tries < 10 && matches!(source.raw_os_error(), Some(libc::ENODEV | libc::ENOENT)) =>
            {
                tries += 1;
                recreate().map_err(|e| SpawnError::Join {
                    cgroup: cgroup.clone(),
                    source: std::io::Error::other(e.to_string()),
                })?;
            }
            r => return r,
        }
    }
}

/// Replaces this process with the command (nested calls and the fallback).
fn exec_here(command: &[OsString]) -> u8 {
    use std::os::unix::process::CommandExt;
    if command.is_empty() {
        return 125;
    }
    let err = std::process::Command::new(&command[0]).args(&command[1..]).exec();
    eprintln!("memqos run: {}: {err}", command[0].to_string_lossy());
    if err.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vanished(errno: i32) -> SpawnError {
        SpawnError::Join { cgroup: "/cg/s/runtime".into(), source: std::io::Error::from_raw_os_error(errno) }
    }

    #[test]
    fn the_runtime_is_refused_from_inside_a_tool_call_and_nested_calls_stay_in_it() {
        let mountinfo = "29 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n";
        let root = Path::new("/sys/fs/cgroup/agents");
        let in_call = layout::position(root, "0::/agents/s1/tool.5\n", mountinfo);
        let e = nested(&in_call, true).expect_err("a call cannot start the runtime").to_string();
        assert!(e.contains("--runtime refused") && e.contains("s1/tool.5"), "{e}");
        assert!(nested(&in_call, false).unwrap(), "a nested call runs in the outer call's cgroup");
        // From the runtime or from outside, the runtime may start (again) and calls are made.
        for pos in [layout::position(root, "0::/agents/s1/runtime\n", mountinfo), Position::Outside] {
            assert!(!nested(&pos, true).unwrap(), "{pos:?}");
            assert!(!nested(&pos, false).unwrap(), "{pos:?}");
        }
    }

    #[test]
    fn the_shared_runtime_cgroup_is_made_again_when_another_runtime_removed_it() {
        let made = std::cell::Cell::new(0);
        let recreate = || {
            made.set(made.get() + 1);
            Ok(())
        };
        // Removed after our mkdir (ENODEV at clone3), then before our open (ENOENT): joined at the third try.
        let mut answers = vec![Err(vanished(libc::ENODEV)), Err(vanished(libc::ENOENT)), Ok(7)].into_iter();
        assert_eq!(join_retrying(true, recreate, || answers.next().unwrap()).unwrap(), 7);
        assert_eq!(made.get(), 2);
        // A tool call's own cgroup is never shared: no retry, the error stands.
        let r = join_retrying(false, recreate, || Err::<(), _>(vanished(libc::ENODEV)));
        assert!(matches!(r, Err(SpawnError::Join { .. })) && made.get() == 2);
        // Other errors are not a vanished cgroup.
        let r = join_retrying(true, recreate, || Err::<(), _>(vanished(libc::EACCES)));
        assert!(matches!(r, Err(SpawnError::Join { .. })) && made.get() == 2);
        // Bounded.
        let r = join_retrying(true, recreate, || Err::<(), _>(vanished(libc::ENODEV)));
        assert!(r.is_err() && made.get() == 12);
    }

    #[test]
    fn a_bad_workload_key_is_a_usage_error_before_anything_is_made() {
        let req = |key: &str| Request {
            workload: Some(key.into()),
            root: Some("/nonexistent/memqos-root".into()),
            command: vec!["true".into()],
            ..Request::default()
        };
        for (key, says) in
            [("", "must not be empty"), ("a\nb", "control character"), (&"x".repeat(257), "longer than 256")]
        {
            match prepare(&req(key)) {
                Err(SetupError::Usage(m)) => assert!(m.starts_with("--workload: ") && m.contains(says), "{key:?}: {m}"),
                Err(e) => panic!("{key:?}: not a usage error: {e}"),
                Ok(_) => panic!("{key:?} accepted"),
            }
        }
        // A good key gets past the check (and fails later, on the missing root).
        assert!(!matches!(prepare(&req("cargo test")), Err(SetupError::Usage(_))));
    }
}
