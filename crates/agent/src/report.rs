//! What a call did (exit, time, peak, memory events) and, if the OOM killer struck, a
//! plain-language account for the agent that reads stderr: which limit was hit, how much the
//! command used, who else held memory, what to try.
//!
//! Which limit: the kernel counts an OOM in memory.events.local `oom` of the cgroup whose
//! memory.max was reached, and the kill in `oom_kill` of the victim's cgroups. So the deepest
//! of the call's ancestors (the call included) whose local `oom` rose during the call is the
//! one whose limit was hit; none means the host itself ran out of memory.

use std::path::{Path, PathBuf};

use memqos_cgroupfs::{Cgroup, Limit, MemoryEvents};
use memqos_policy::size::human;

use crate::spawn::Exit;

/// The report's types are the schema crate's, so readers of `memqos run --json` share them.
pub use memqos_schema::call::{CallEvents, CallReport, Holder, LimitHit, OomAccount};

/// memory.events.local of the call and each ancestor that has one, deepest first.
#[derive(Clone, Debug)]
pub struct Ancestry {
    levels: Vec<(Cgroup, MemoryEvents)>,
}

impl Ancestry {
    /// Reads the counters from `call` upwards until a cgroup without memory.events.local
    /// (the hierarchy's root, or a kernel older than 5.2).
    pub fn read(call: &Cgroup) -> Ancestry {
        let mut levels = Vec::new();
        let mut cur = Some(call.path().to_owned());
        while let Some(p) = cur {
            let cg = Cgroup::new(&p);
            match local_events(&cg) {
                Some(ev) => levels.push((cg, ev)),
                None => break,
            }
            cur = p.parent().map(Path::to_owned);
        }
        Ancestry { levels }
    }

    /// The deepest cgroup whose local `oom` count grew between `self` and `after`.
    fn oom_level(&self, after: &Ancestry) -> Option<&Cgroup> {
        self.levels
            .iter()
            .zip(&after.levels)
            .find(|((a, before), (b, now))| a == b && now.oom > before.oom)
            .map(|((cg, _), _)| cg)
    }
}

fn local_events(cg: &Cgroup) -> Option<MemoryEvents> {
    let text = cg.read_string("memory.events.local").ok()?;
    MemoryEvents::parse(&text).ok()
}

/// What the caller knows about the call, for [`collect`].
pub struct CallInfo<'a> {
    pub call: &'a Cgroup,
    pub session: &'a str,
    pub tier: &'a str,
    pub root: &'a Path,
    pub exit: Exit,
    pub wall_ms: u64,
    pub hint_bytes: Option<u64>,
    pub before: &'a Ancestry,
}

/// Reads the call's cgroup after the command exited (before it is removed) and builds the
/// report. Files that cannot be read leave their field empty: a report is never an error.
pub fn collect(info: &CallInfo) -> CallReport {
    let ev = info.call.memory_events().unwrap_or_default();
    let events = CallEvents { high: ev.high, max: ev.max, oom_kill: ev.oom_kill };
    let peak_bytes = info.call.memory_peak().ok();
    let signal = match info.exit {
        Exit::Signal(s) => Some(s),
        Exit::Code(_) => None,
    };
    let oom = (ev.oom_kill > 0).then(|| {
        let after = Ancestry::read(info.call);
        let level = info.before.oom_level(&after);
        let scope = level.map(Cgroup::path).unwrap_or(info.root);
        let limit = level.map(|cg| LimitHit {
            cgroup: cg.path().display().to_string(),
            role: role(cg.path(), info.call.path(), info.root),
            max_bytes: cg.limit("memory.max").ok().and_then(Limit::bytes),
        });
        let others = largest_holders(scope, info.call.path(), 3);
        let facts = Facts {
            limit: limit.as_ref(),
            own_limit: level.is_some_and(|l| l == info.call),
            peak: peak_bytes,
            others: &others,
            hint: info.hint_bytes,
        };
        OomAccount {
            killed: ev.oom_kill,
            command_killed: signal == Some(libc::SIGKILL),
            advice: advice(&facts),
            limit,
            others,
        }
    });
    CallReport {
        cgroup: info.call.path().display().to_string(),
        session: info.session.to_owned(),
        tier: info.tier.to_owned(),
        status: info.exit.shell_code(),
        signal,
        wall_ms: info.wall_ms,
        peak_bytes,
        events,
        hint_bytes: info.hint_bytes,
        kept: false,
        oom,
        daemon_stall_actions: Vec::new(),
        armed: Default::default(),
    }
}

fn role(cg: &Path, call: &Path, root: &Path) -> String {
    if cg == call {
        "this call".into()
    } else if Some(cg) == call.parent() {
        "its session".into()
    } else if cg == root {
        "the managed root".into()
    } else {
        "an ancestor of the managed root".into()
    }
}

/// The biggest leaf cgroups below `scope` other than `exclude`, by memory.current.
fn largest_holders(scope: &Path, exclude: &Path, n: usize) -> Vec<Holder> {
    let Ok(all) = Cgroup::new(scope).descendants() else {
        return Vec::new();
    };
    let mut v: Vec<Holder> = all
        .iter()
        .filter(|cg| cg.path() != exclude && cg.children().map(|k| k.is_empty()).unwrap_or(false))
        .filter_map(|cg| {
            let bytes = cg.memory_current().ok()?;
            let name = cg.path().strip_prefix(scope).unwrap_or(cg.path()).display().to_string();
            Some(Holder { cgroup: name, bytes })
        })
        .filter(|h| h.bytes > 0)
        .collect();
    v.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.cgroup.cmp(&b.cgroup)));
    v.truncate(n);
    v
}

struct Facts<'a> {
    limit: Option<&'a LimitHit>,
    own_limit: bool,
    peak: Option<u64>,
    others: &'a [Holder],
    hint: Option<u64>,
}

const LESS_MEMORY: &str = "make the command use less memory: fewer parallel jobs (make -j1, cargo build -j 1, pytest -n 0), smaller inputs or batches, streaming instead of loading whole files";

fn advice(f: &Facts) -> Vec<String> {
    let mut out = Vec::new();
    match f.limit {
        Some(_) if f.own_limit => {
            out.push("raise this call's own limit (memqos run --max) if the host has room".into());
            out.push(LESS_MEMORY.into());
        }
        Some(_) => {
            let others: u64 = f.others.iter().map(|h| h.bytes).sum();
            if others > f.peak.unwrap_or(0) / 4 {
                out.push(
                    "run it again when the other tool calls holding memory have finished, or run fewer things at once"
                        .into(),
                );
            }
            out.push(LESS_MEMORY.into());
            out.push("with the memqos daemon managing this root, `--hint high` (MEMQOS_HINT=high for memqos-shell) makes other tool calls give memory up first".into());
        }
        None => {
            out.push("the whole host ran out of memory: wait for other work to finish, then retry".into());
            out.push(LESS_MEMORY.into());
        }
    }
    if let (Some(h), Some(p)) = (f.hint, f.peak) {
        if p > h {
            out.insert(
                0,
                format!("it used {} although it declared --hint {}: declare what it really needs", human(p), human(h)),
            );
        }
    }
    out
}

/// The plain-language account printed on stderr, one `memqos:` line per fact.
pub fn oom_text(r: &CallReport, command: &str) -> String {
    let Some(o) = &r.oom else {
        return String::new();
    };
    let mut t = String::new();
    let who = if o.command_killed {
        format!("`{command}` was killed by the kernel's out-of-memory (OOM) killer")
    } else {
        format!("{} process(es) of `{command}` were killed by the kernel's out-of-memory (OOM) killer", o.killed)
    };
    t.push_str(&format!("memqos: {who} (exit status {}).\n", r.status));
    match &o.limit {
        Some(l) => t.push_str(&format!(
            "memqos: the limit reached: memory.max = {} of {} ({}).\n",
            l.max_bytes.map_or("max".into(), human),
            l.cgroup,
            l.role
        )),
        None => t.push_str("memqos: no cgroup limit was reached: the host ran out of memory.\n"),
    }
    let peak = r.peak_bytes.map_or("unknown".into(), human);
    t.push_str(&format!("memqos: this command used at most {peak} in {:.1} s.\n", r.wall_ms as f64 / 1000.0));
    if !o.others.is_empty() {
        let list: Vec<String> = o.others.iter().map(|h| format!("{} {}", h.cgroup, human(h.bytes))).collect();
        t.push_str(&format!("memqos: others holding memory under that limit now: {}.\n", list.join(", ")));
    }
    for a in &o.advice {
        t.push_str(&format!("memqos: try: {a}.\n"));
    }
    t
}

/// The stderr lines about the armed ceiling (`armed`): that the call was held by it, always
/// (the agent reads why its call was slow); that it waited for room before it started, when
/// it was `killed` anyway or with `verbose`; with `verbose`, also that memqos run lifted it,
/// and why none was armed.
pub fn armed_text(a: &memqos_schema::call::Armed, killed: bool, verbose: bool) -> String {
    let mut t = String::new();
    if a.waited_ms > 0 && (killed || verbose) {
        t.push_str(&format!(
            "memqos: this call waited {:.1} s for room before it started ({}).\n",
            a.waited_ms as f64 / 1000.0,
            a.wait_ended.as_deref().unwrap_or("room")
        ));
    }
    if let (Some(b), true) = (a.high_bytes, a.held) {
        t.push_str(&format!(
            "memqos: this call was held at its memory ceiling (memory.high armed at {} before it started: the room the memqos daemon had left for a new call, raised as room frees); it waited for memory instead of pushing the host into an OOM kill.\n",
            human(b)
        ));
    }
    if verbose {
        if let Some(why) = &a.lifted {
            t.push_str(&format!("memqos: the armed ceiling was lifted to max while the call ran: {why}.\n"));
        }
        if let Some(why) = &a.skipped {
            t.push_str(&format!("memqos: no memory ceiling was armed: {why}.\n"));
        }
    }
    t
}

/// The one-line summary of `--stats`.
pub fn stats_text(r: &CallReport) -> String {
    let name = PathBuf::from(&r.cgroup).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut t = format!(
        "memqos: {name} (session {}, tier {}): status {}, {:.3} s, peak {}",
        r.session,
        r.tier,
        r.status,
        r.wall_ms as f64 / 1000.0,
        r.peak_bytes.map_or("unknown".into(), human)
    );
    if r.events.high > 0 {
        t.push_str(&format!(", throttled at memory.high {} times", r.events.high));
    }
    if r.kept {
        t.push_str(", cgroup kept: processes still run in it");
    }
    t.push('\n');
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake call at root/s/tool.1 with siblings, and memory.events.local at every level.
    fn tree(dir: &Path) -> (Cgroup, PathBuf) {
        let root = dir.join("root");
        let call = root.join("s/tool.1");
        for (p, current) in [
            (&root, 0u64),
            (&root.join("s"), 0),
            (&call, 0),
            (&root.join("s/runtime"), 300 << 20),
            (&root.join("s/tool.2"), 100 << 20),
            (&root.join("t/tool.3"), 50 << 20),
        ] {
            std::fs::create_dir_all(p).unwrap();
            std::fs::write(p.join("memory.events.local"), "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n").unwrap();
            std::fs::write(p.join("memory.current"), format!("{current}\n")).unwrap();
            std::fs::write(p.join("memory.max"), "max\n").unwrap();
        }
        std::fs::write(root.join("s/memory.max"), format!("{}\n", 512u64 << 20)).unwrap();
        std::fs::write(call.join("memory.peak"), format!("{}\n", 200u64 << 20)).unwrap();
        (Cgroup::new(call), root)
    }

    fn info<'a>(call: &'a Cgroup, root: &'a Path, before: &'a Ancestry, exit: Exit) -> CallInfo<'a> {
        CallInfo { call, session: "s", tier: "tool", root, exit, wall_ms: 2500, hint_bytes: Some(64 << 20), before }
    }

    #[test]
    fn a_session_limit_oom_is_explained_with_the_other_holders() {
        let dir = tempfile::tempdir().unwrap();
        let (call, root) = tree(dir.path());
        let before = Ancestry::read(&call);
        // The ancestry stops below the first cgroup without memory.events.local.
        assert_eq!(before.levels.len(), 3);
        std::fs::write(call.path().join("memory.events"), "low 0\nhigh 4\nmax 9\noom 1\noom_kill 1\n").unwrap();
        std::fs::write(root.join("s/memory.events.local"), "low 0\nhigh 0\nmax 9\noom 1\noom_kill 0\n").unwrap();
        std::fs::write(root.join("memory.events.local"), "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n").unwrap();

        let r = collect(&info(&call, &root, &before, Exit::Signal(libc::SIGKILL)));
        assert_eq!((r.status, r.signal, r.peak_bytes), (137, Some(9), Some(200 << 20)));
        assert_eq!(r.events, CallEvents { high: 4, max: 9, oom_kill: 1 });
        let o = r.oom.as_ref().expect("an OOM account");
        let limit = o.limit.as_ref().unwrap();
        assert_eq!((limit.role.as_str(), limit.max_bytes), ("its session", Some(512 << 20)));
        assert!(limit.cgroup.ends_with("root/s"));
        assert_eq!(
            o.others,
            vec![
                Holder { cgroup: "runtime".into(), bytes: 300 << 20 },
                Holder { cgroup: "tool.2".into(), bytes: 100 << 20 }
            ]
        );
        let text = oom_text(&r, "pytest -x");
        for want in [
            "`pytest -x` was killed by the kernel's out-of-memory (OOM) killer (exit status 137)",
            "memory.max = 512M of",
            "(its session)",
            "used at most 200M in 2.5 s",
            "runtime 300M, tool.2 100M",
            "try: it used 200M although it declared --hint 64M",
            "try: run it again when the other tool calls",
        ] {
            assert!(text.contains(want), "missing {want:?} in:\n{text}");
        }
    }

    #[test]
    fn own_limit_and_host_oom_get_their_own_advice() {
        let dir = tempfile::tempdir().unwrap();
        let (call, root) = tree(dir.path());
        let before = Ancestry::read(&call);
        std::fs::write(call.path().join("memory.events"), "oom_kill 2\n").unwrap();
        std::fs::write(call.path().join("memory.events.local"), "oom 1\noom_kill 2\n").unwrap();
        let r = collect(&info(&call, &root, &before, Exit::Code(1)));
        let o = r.oom.as_ref().unwrap();
        assert_eq!(o.limit.as_ref().unwrap().role, "this call");
        assert!(!o.command_killed && o.killed == 2);
        assert!(oom_text(&r, "make").contains("2 process(es) of `make` were killed"));
        assert!(
            o.advice.iter().any(|a| a.contains("raise this call's own limit (memqos run --max)")),
            "{:?}",
            o.advice
        );

        // No level counted an OOM: the host ran out.
        std::fs::write(call.path().join("memory.events.local"), "oom 0\noom_kill 2\n").unwrap();
        let r = collect(&info(&call, &root, &before, Exit::Signal(9)));
        assert!(r.oom.as_ref().unwrap().limit.is_none());
        assert!(oom_text(&r, "x").contains("the host ran out of memory"));
    }

    #[test]
    fn no_oom_no_account_and_a_stats_line() {
        let dir = tempfile::tempdir().unwrap();
        let (call, root) = tree(dir.path());
        let before = Ancestry::read(&call);
        std::fs::write(call.path().join("memory.events"), "high 3\nmax 0\noom_kill 0\n").unwrap();
        let r = collect(&info(&call, &root, &before, Exit::Code(0)));
        assert!(r.oom.is_none() && oom_text(&r, "x").is_empty());
        assert_eq!(
            stats_text(&r),
            "memqos: tool.1 (session s, tier tool): status 0, 2.500 s, peak 200M, throttled at memory.high 3 times\n"
        );
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["peak_bytes"], 200u64 << 20);
        assert_eq!(json["events"]["high"], 3);
    }

    #[test]
    fn a_wait_before_the_call_is_told_when_it_was_killed_anyway_or_asked() {
        let waited = memqos_schema::call::Armed {
            high_bytes: Some(64 << 20),
            waited_ms: 2_500,
            wait_ended: Some("limit".into()),
            ..Default::default()
        };
        let line = "memqos: this call waited 2.5 s for room before it started (limit).\n";
        assert_eq!(armed_text(&waited, true, false), line);
        assert_eq!(armed_text(&waited, false, true), line);
        assert_eq!(armed_text(&waited, false, false), "", "not killed: the agent need not hear of it");
        let no_wait = memqos_schema::call::Armed { high_bytes: Some(64 << 20), ..Default::default() };
        assert_eq!(armed_text(&no_wait, true, true), "");
    }
}
