//! OOM attribution: every kernel OOM kill under the managed root becomes one typed event
//! (`oom_kill`) with the victim, its cgroup and tier, the cgroup's peak, the limits in force
//! and the largest holders at that moment; counted per tier for metrics and status.
//!
//! Two sources, joined per cgroup:
//! - memory.events `oom_kill` of each managed cgroup (sampled every tick; the root's own
//!   memory.events wakes the daemon when any descendant's count moves), which says *where*
//!   and *how many*, and is always there;
//! - the kernel log (`/dev/kmsg`, root only), whose `oom-kill:` summary line names the victim
//!   (pid, command), its cgroup and the cgroup whose limit was hit, and whose "Killed
//!   process" line gives its RSS. Read non-blocking from the end at start-up.
//!
//! The summary line is printed before the kernel counts the kill, so a counted kill almost
//! always has its line by the time the daemon reads the log; a count still without a line
//! after [`OWED_GRACE`] is reported with the victim unknown. A logged kill is reported at
//! once, even in a cgroup created and gone between two samples; its count, if it arrives
//! later, is matched against it instead of being reported twice.

use crate::mounts::Cgroup2Mount;
use crate::observe::Seen;
use memqos_cgroupfs::beneath::Dir;
use memqos_cgroupfs::Limit;
use memqos_policy::{Config, ParentObs};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

/// How long a counted kill waits for its kernel log line before it is reported without one.
const OWED_GRACE_MS: u64 = 250;
/// How long a logged kill waits for its count (a cgroup may be gone before it is sampled).
const AHEAD_KEEP_MS: u64 = 5_000;
/// Kills kept for `memqos status`.
pub const RECENT: usize = 10;
/// Largest holders named in a report.
const HOLDERS: usize = 3;
pub use memqos_schema::oom::{Holder, Limits, OomKill, UNMANAGED};

/// What the kernel log says about one kill.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoggedKill {
    pub pid: u32,
    pub command: String,
    /// Hierarchy paths.
    pub task_memcg: String,
    pub oom_memcg: Option<String>,
    pub constraint: Option<String>,
    pub anon_rss_bytes: Option<u64>,
    /// Microseconds since boot (CLOCK_MONOTONIC).
    pub at_us: u64,
}

/// Parses one /dev/kmsg record ("prio,seq,usec,flags;text"): the `oom-kill:` summary line
/// or a "Killed process" line (only pid, command and RSS; `task_memcg` empty).
pub fn parse_record(record: &str) -> Option<LoggedKill> {
    let (head, text) = record.split_once(';')?;
    let at_us = head.split(',').nth(2)?.parse().ok()?;
    let text = text.lines().next()?.trim_end();
    if let Some(summary) = text.strip_prefix("oom-kill:") {
        return parse_summary(summary, at_us);
    }
    // "Memory cgroup out of memory: Killed process 1234 (cmd) total-vm:..kB, anon-rss:..kB, ..."
    let rest = &text[text.find("Killed process ")? + "Killed process ".len()..];
    let (pid, rest) = rest.split_once(" (")?;
    let (command, rest) = rest.rsplit_once(") ").unwrap_or((rest.trim_end_matches(')'), ""));
    let anon = rest
        .split(", ")
        .find_map(|f| f.trim().strip_prefix("anon-rss:"))
        .and_then(|v| v.trim_end_matches("kB").parse::<u64>().ok());
    Some(LoggedKill {
        pid: pid.parse().ok()?,
        command: command.to_owned(),
        // Saturating: a forged or corrupt record must not wrap (release) or panic (debug).
        anon_rss_bytes: anon.map(|kb| kb.saturating_mul(1024)),
        at_us,
        ..LoggedKill::default()
    })
}

/// The kernel's summary line (mm/oom_kill.c `dump_oom_summary`, since 4.19), after
/// `oom-kill:`:
///
/// `constraint=C,nodemask=N,cpuset=S,mems_allowed=M,oom_memcg=O,task_memcg=T,task=COMM,pid=P,uid=U`
///
/// (`,global_oom` instead of `,oom_memcg=O` for a host-wide OOM). Cgroup paths and the
/// command may hold `,` and `=` (kmsg escapes only control bytes, bytes past ASCII and `\`),
/// so a cgroup named `x,task_memcg=y` must not be read as `y`. The line is taken apart from
/// both ends: `uid` and `pid` are numbers, so the last `,uid=` and `,pid=` are theirs; before
/// the first path nothing holds a `/` (the cpuset is printed as its name, or `/` for the root,
/// which is followed by `,mems_allowed=`), so the first `,oom_memcg=/` or `,task_memcg=/` is
/// the kernel's. What is left, `O,task_memcg=T,task=COMM`, is split where T is O or below it
/// (the victim is chosen inside the OOMing cgroup) and COMM fits the kernel's 15 bytes; a
/// line that still splits more than one way names no victim (the kill is then reported from
/// memory.events, victim unknown) rather than the wrong one.
fn parse_summary(summary: &str, at_us: u64) -> Option<LoggedKill> {
    const OOM: &str = ",oom_memcg=";
    const TASK_MEMCG: &str = ",task_memcg=";
    const TASK: &str = ",task=";
    let (rest, uid) = summary.rsplit_once(",uid=")?;
    uid.strip_prefix('-').unwrap_or(uid).parse::<u32>().ok()?;
    let (rest, pid) = rest.rsplit_once(",pid=")?;
    let pid: u32 = pid.parse().ok().filter(|p| *p != 0)?;
    let constraint = summary.strip_prefix("constraint=").map(|c| c.split(',').next().unwrap_or_default().to_owned());
    let oom_at = rest.find(",oom_memcg=/");
    let task_at = rest.find(",task_memcg=/");
    // (oom_memcg, task_memcg, command), every way the rest can be split.
    let mut found: Vec<(Option<&str>, &str, &str)> = Vec::new();
    match (oom_at, task_at) {
        (Some(o), t) if t.is_none_or(|t| o < t) => {
            let tail = &rest[o + OOM.len()..];
            for (i, _) in tail.match_indices(",task_memcg=/") {
                let (oom, after) = (&tail[..i], &tail[i + TASK_MEMCG.len()..]);
                for (j, _) in after.match_indices(TASK) {
                    let (task, comm) = (&after[..j], &after[j + TASK.len()..]);
                    if comm_fits(comm) && below_or_same(task, oom) {
                        found.push((Some(oom), task, comm));
                    }
                }
            }
        }
        (_, Some(t)) => {
            let tail = &rest[t + TASK_MEMCG.len()..];
            for (j, _) in tail.match_indices(TASK) {
                let (task, comm) = (&tail[..j], &tail[j + TASK.len()..]);
                if comm_fits(comm) {
                    found.push((None, task, comm));
                }
            }
        }
        _ => return None,
    }
    let [(oom, task, comm)] = found[..] else {
        return None;
    };
    Some(LoggedKill {
        pid,
        command: comm.to_owned(),
        task_memcg: kmsg_path(task),
        oom_memcg: oom.map(kmsg_path),
        constraint,
        anon_rss_bytes: None,
        at_us,
    })
}

/// Whether `path` is `ancestor` or a cgroup below it.
fn below_or_same(path: &str, ancestor: &str) -> bool {
    ancestor == "/" || path == ancestor || path.strip_prefix(ancestor).is_some_and(|r| r.starts_with('/'))
}

/// Whether a command as kmsg prints it (each escaped byte as `\xNN`) fits a task's comm:
/// at most TASK_COMM_LEN - 1 = 15 bytes.
fn comm_fits(comm: &str) -> bool {
    kmsg_unescape(comm).len() <= 15
}

/// The bytes kmsg printed as `\xNN` put back.
fn kmsg_unescape(text: &str) -> Vec<u8> {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = (b[i] == b'\\' && b.get(i + 1) == Some(&b'x'))
            .then(|| text.get(i + 2..i + 4))
            .flatten()
            .filter(|h| h.bytes().all(|c| c.is_ascii_hexdigit()));
        match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
            Some(byte) => {
                out.push(byte);
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    out
}

/// A cgroup path as kmsg prints it, as memqos carries names (`name::encode`), so that a
/// cgroup whose name is not plain ASCII is matched too.
fn kmsg_path(printed: &str) -> String {
    use std::os::unix::ffi::OsStrExt;
    memqos_cgroupfs::name::encode(std::ffi::OsStr::from_bytes(&kmsg_unescape(printed)))
}

/// /dev/kmsg opened non-blocking at its end.
struct Kmsg {
    fd: OwnedFd,
}

impl Kmsg {
    fn open() -> std::io::Result<Kmsg> {
        let path = c"/dev/kmsg";
        // SAFETY: plain syscalls; the fd is owned below.
        let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // Only what happens from now on: earlier kills are history.
        unsafe { libc::lseek(fd.as_raw_fd(), 0, libc::SEEK_END) };
        Ok(Kmsg { fd })
    }

    /// Every record logged since the last call.
    fn drain(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 8192];
        loop {
            // One record per read(2).
            let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n > 0 {
                out.push(String::from_utf8_lossy(&buf[..n as usize]).into_owned());
                continue;
            }
            // EPIPE: records were overwritten before we read them; the next read resumes.
            if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EPIPE) {
                continue;
            }
            break;
        }
        out
    }
}

/// A killed task's cgroup's memory.peak and limits, as read at one moment.
#[derive(Clone, Copy, Debug, Default)]
struct EarlyRead {
    peak: Option<u64>,
    max: Option<Limit>,
    high: Option<Limit>,
}

impl EarlyRead {
    /// What the cgroup at `rel` beneath `root` holds now; a file that cannot be read (the
    /// cgroup is gone) is `None`.
    fn of(root: &Path, rel: &str) -> EarlyRead {
        open(root, rel).as_ref().map(EarlyRead::read).unwrap_or_default()
    }

    fn read(cg: &Dir) -> EarlyRead {
        EarlyRead { peak: cg.memory_peak().ok(), max: cg.limit("memory.max").ok(), high: cg.limit("memory.high").ok() }
    }
}

/// The cgroup at `rel`, opened beneath `root`; None when it is gone.
fn open(root: &Path, rel: &str) -> Option<Dir> {
    crate::beneath::Root::open(root).ok()?.cgroup(rel).ok()
}

struct Owed {
    cgroup: String,
    count: u64,
    since_ms: u64,
}

pub struct OomReporter {
    kmsg: Option<Kmsg>,
    /// Kill lines read by [`OomReporter::read_log`] ahead of the tick that reports them.
    logged_early: Vec<String>,
    /// Their cgroups' memory.peak and limits, read the moment the kill was logged: a unit's
    /// cgroup (systemd) or a tool call's may be gone by the time the report is made.
    early: HashMap<String, EarlyRead>,
    root: std::path::PathBuf,
    /// cgroup_root as the kernel prints it ("/qos"), to turn log paths into ours.
    root_kernel_path: Option<String>,
    prev: HashMap<u64, u64>,
    primed: bool,
    owed: Vec<Owed>,
    /// Logged kills not yet matched by a count: (cgroup, time).
    ahead: Vec<(String, u64)>,
    /// Kills reported since start, by tier ([`UNMANAGED`] for no tier).
    pub by_tier: BTreeMap<String, u64>,
    pub recent: VecDeque<OomKill>,
    /// Said once, for the log.
    pub notes: Vec<String>,
}

impl OomReporter {
    pub fn new(root: &Path, mount: Option<&Cgroup2Mount>) -> OomReporter {
        let mut notes = Vec::new();
        let kmsg = match Kmsg::open() {
            Ok(k) => Some(k),
            Err(e) => {
                notes.push(format!(
                    "OOM kills are reported without the victim's pid and command: /dev/kmsg: {e} (needs root or CAP_SYSLOG)"
                ));
                None
            }
        };
        OomReporter {
            kmsg,
            logged_early: Vec::new(),
            early: HashMap::new(),
            root: root.to_owned(),
            root_kernel_path: mount.and_then(|m| m.kernel_path(root)),
            prev: HashMap::new(),
            primed: false,
            owed: Vec::new(),
            ahead: Vec::new(),
            by_tier: BTreeMap::new(),
            recent: VecDeque::new(),
            notes,
        }
    }

    /// The kernel log's descriptor, for the daemon's poll: a kill is logged the moment it
    /// happens, which is the only prompt sign of one when cgroup_root is the hierarchy's root
    /// (it has no memory.events to watch), and otherwise waits for the next full sample.
    pub fn log_fd(&self) -> Option<RawFd> {
        self.kmsg.as_ref().map(|k| k.fd.as_raw_fd())
    }

    /// Reads what the kernel logged since the last read and keeps the kill lines for the next
    /// [`OomReporter::observe`]; true if one is a kill's summary (the caller then samples the
    /// tree now, while the victim's cgroup is likely still there to read its peak).
    pub fn read_log(&mut self) -> bool {
        let Some(k) = &self.kmsg else { return false };
        let mut summary = false;
        for r in k.drain() {
            let Some(kill) = parse_record(&r) else { continue };
            if !kill.task_memcg.is_empty() {
                summary = true;
                if let Some(rel) = self.relative(&kill.task_memcg) {
                    let read = EarlyRead::of(&self.root, &rel);
                    self.early.insert(rel, read);
                }
            }
            self.logged_early.push(r);
        }
        summary
    }

    /// Our relative path of a kernel cgroup path, if it is under cgroup_root.
    fn relative(&self, kernel_path: &str) -> Option<String> {
        let root = self.root_kernel_path.as_deref()?;
        if root == "/" {
            return Some(kernel_path.trim_start_matches('/').to_owned());
        }
        let rest = kernel_path.strip_prefix(root)?;
        (rest.is_empty() || rest.starts_with('/')).then(|| rest.trim_start_matches('/').to_owned())
    }

    /// The kills since the last call. `seen`: this tick's managed cgroups; `parent`: the
    /// root's observation (its `oom_kill` delta counts kills in unmanaged cgroups too).
    pub fn observe(
        &mut self,
        cfg: &Config,
        root: &Path,
        seen: &[Seen],
        parent: &ParentObs,
        now_ms: u64,
    ) -> Vec<OomKill> {
        let mut records = std::mem::take(&mut self.logged_early);
        records.extend(self.kmsg.as_ref().map(|k| k.drain()).unwrap_or_default());
        let mut logged: Vec<LoggedKill> = Vec::new();
        for r in &records {
            let Some(k) = parse_record(r) else { continue };
            if k.task_memcg.is_empty() {
                // A "Killed process" line: its RSS belongs to the summary of the same pid.
                if let Some(s) = logged.iter_mut().rev().find(|s| s.pid == k.pid) {
                    s.anon_rss_bytes = k.anon_rss_bytes;
                }
            } else {
                logged.push(k);
            }
        }
        // Counts first: they consume logged kills reported on an earlier tick.
        let mut counted_total = 0;
        for s in seen {
            let total = s.events.oom_kill;
            let before = match self.prev.get(&s.cgroup_id) {
                Some(&p) => p,
                // A cgroup met after start-up was created since: its count starts at 0.
                None if self.primed => 0,
                None => total,
            };
            self.prev.insert(s.cgroup_id, total);
            let mut delta = total.saturating_sub(before);
            counted_total += delta;
            while delta > 0 {
                match self.ahead.iter().position(|(c, _)| *c == s.cgroup) {
                    Some(i) => {
                        self.ahead.remove(i);
                        delta -= 1;
                    }
                    None => break,
                }
            }
            if delta > 0 {
                self.owed.push(Owed { cgroup: s.cgroup.clone(), count: delta, since_ms: now_ms });
            }
        }
        let alive: std::collections::HashSet<u64> = seen.iter().map(|s| s.cgroup_id).collect();
        self.prev.retain(|id, _| alive.contains(id));
        let first = !self.primed;
        self.primed = true;

        let mut out = Vec::new();
        for k in logged {
            let Some(cgroup) = self.relative(&k.task_memcg) else { continue };
            let matched = match self.owed.iter().position(|o| o.cgroup == cgroup) {
                Some(i) => {
                    self.owed[i].count -= 1;
                    if self.owed[i].count == 0 {
                        self.owed.remove(i);
                    }
                    true
                }
                None => {
                    self.ahead.push((cgroup.clone(), now_ms));
                    false
                }
            };
            let source = if matched { "memory.events+kmsg" } else { "kmsg" };
            out.push(self.report(cfg, root, seen, parent, &cgroup, Some(&k), source));
        }
        self.ahead.retain(|(_, t)| now_ms.saturating_sub(*t) < AHEAD_KEEP_MS);
        // Counts whose log line never came (or no log at all).
        let grace = if self.kmsg.is_some() { OWED_GRACE_MS } else { 0 };
        let due: Vec<Owed> = {
            let (due, keep) = std::mem::take(&mut self.owed)
                .into_iter()
                .partition(|o: &Owed| now_ms.saturating_sub(o.since_ms) >= grace);
            self.owed = keep;
            due
        };
        for o in due {
            for _ in 0..o.count {
                out.push(self.report(cfg, root, seen, parent, &o.cgroup, None, "memory.events"));
            }
        }
        // Without the log, kills in cgroups no tier manages show only in the root's count.
        if self.kmsg.is_none() && !first {
            let unexplained = parent.events_delta.oom_kill.saturating_sub(counted_total);
            for _ in 0..unexplained {
                out.push(self.report(cfg, root, seen, parent, "", None, "memory.events"));
            }
        }
        self.early.clear();
        for k in &out {
            *self.by_tier.entry(k.tier.clone().unwrap_or_else(|| UNMANAGED.into())).or_default() += 1;
            self.recent.push_back(k.clone());
            if self.recent.len() > RECENT {
                self.recent.pop_front();
            }
        }
        out
    }

    #[allow(clippy::too_many_arguments)]
    fn report(
        &self,
        cfg: &Config,
        root: &Path,
        seen: &[Seen],
        parent: &ParentObs,
        cgroup: &str,
        logged: Option<&LoggedKill>,
        source: &str,
    ) -> OomKill {
        let s = seen.iter().find(|s| s.cgroup == cgroup && !cgroup.is_empty());
        let known = !cgroup.is_empty();
        let cg = if known { open(root, cgroup) } else { None };
        // Read now, and else as read when the kill was logged (the cgroup may be gone).
        let now = cg.as_ref().map(EarlyRead::read).unwrap_or_default();
        let early = self.early.get(cgroup).copied().unwrap_or_default();
        let tier = match s {
            Some(s) => Some(s.tier.clone()),
            None if known => {
                crate::reload::classify(cfg, root, cgroup).and_then(|i| cfg.tiers.get(i)).map(|t| t.name.clone())
            }
            None => None,
        };
        let mut holders: Vec<Holder> = seen
            .iter()
            .map(|s| Holder { cgroup: s.cgroup.clone(), tier: s.tier.clone(), usage_bytes: s.usage_bytes })
            .collect();
        holders.sort_by(|a, b| b.usage_bytes.cmp(&a.usage_bytes).then_with(|| a.cgroup.cmp(&b.cgroup)));
        holders.truncate(HOLDERS);
        let root_known = parent.max != Limit::Max || parent.high != Limit::Max || parent.usage_bytes > 0;
        OomKill {
            cgroup: cgroup.to_owned(),
            cgroup_id: s.map_or(0, |s| s.cgroup_id),
            tier,
            pid: logged.map(|k| k.pid),
            command: logged.map(|k| k.command.clone()),
            constraint: logged.and_then(|k| k.constraint.clone()),
            oom_cgroup: logged.and_then(|k| k.oom_memcg.clone()),
            victim_anon_rss_bytes: logged.and_then(|k| k.anon_rss_bytes),
            peak_bytes: now.peak.or(early.peak),
            usage_bytes: s.map(|s| s.usage_bytes).or_else(|| cg.as_ref().and_then(|d| d.memory_current().ok())),
            limits: Limits {
                max: s.map(|s| s.knobs.max).or(now.max).or(early.max),
                high: s.map(|s| s.knobs.high).or(now.high).or(early.high),
                root_max: root_known.then_some(parent.max),
                root_high: root_known.then_some(parent.high),
            },
            holders,
            source: source.to_owned(),
            kill_mono_ns: logged.map(|k| k.at_us * 1000),
            reported_mono_ns: crate::mono_ns(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memqos_cgroupfs::MemoryEvents;
    use memqos_policy::Knobs;

    #[test]
    fn parses_the_summary_and_the_killed_process_line() {
        let summary = "6,1234,5000123,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/qos/low,task_memcg=/qos/low/job,task=python3,pid=4242,uid=0\n";
        let k = parse_record(summary).unwrap();
        assert_eq!(
            k,
            LoggedKill {
                pid: 4242,
                command: "python3".into(),
                task_memcg: "/qos/low/job".into(),
                oom_memcg: Some("/qos/low".into()),
                constraint: Some("CONSTRAINT_MEMCG".into()),
                anon_rss_bytes: None,
                at_us: 5000123,
            }
        );
        let killed = "3,1235,5000200,-;Memory cgroup out of memory: Killed process 4242 (python3) total-vm:215000kB, anon-rss:204800kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:500kB oom_score_adj:0\n";
        let k = parse_record(killed).unwrap();
        assert_eq!((k.pid, k.command.as_str(), k.anon_rss_bytes), (4242, "python3", Some(204800 * 1024)));
        assert!(k.task_memcg.is_empty());
        assert!(parse_record("6,1,2,-;random line\n").is_none());
    }

    /// Found by `proptest_kmsg_cgroup_names_with_commas_and_equals`
    /// (tests/proptest_outside_input.rs): the summary was split on every `,`, and the last
    /// `task_memcg=` won, so a tenant's cgroup named `x,task_memcg=y` had its kills
    /// attributed to `y` (or to any cgroup it named).
    #[test]
    fn cgroup_names_with_commas_and_equals_are_not_misattributed() {
        let line = |oom: &str, task: &str, comm: &str| {
            format!("6,1,5,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg={oom},task_memcg={task},task={comm},pid=42,uid=0\n")
        };
        let k = parse_record(&line("/t/x,task_memcg=y", "/t/x,task_memcg=y", "sh")).unwrap();
        assert_eq!((k.task_memcg.as_str(), k.oom_memcg.as_deref()), ("/t/x,task_memcg=y", Some("/t/x,task_memcg=y")));
        let k = parse_record(&line("/t", "/t/x,task_memcg=/victim", "sh")).unwrap();
        assert_eq!(k.task_memcg, "/t/x,task_memcg=/victim");
        // A command with `,pid=` and `,uid=` in it: the last ones are the kernel's.
        let k = parse_record(&line("/t", "/t/j", "a,pid=7,uid=1")).unwrap();
        assert_eq!((k.pid, k.task_memcg.as_str(), k.command.as_str()), (42, "/t/j", "a,pid=7,uid=1"));
        // Both "/t,task=a" running "b" and "/t" running "a,task=b" print this: no victim
        // rather than a guess.
        let global = "6,1,5,-;oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/t,task=a,task=b,pid=42,uid=0\n";
        assert_eq!(parse_record(global), None);
        // kmsg escapes bytes past ASCII and `\`: the path comes back as memqos carries names.
        let k = parse_record(&line("/caf\\xc3\\xa9", "/caf\\xc3\\xa9/a\\x5cb\\xff", "sh")).unwrap();
        assert_eq!((k.oom_memcg.as_deref(), k.task_memcg.as_str()), (Some("/café"), "/café/a\\\\b\\xff"));
    }

    fn seen(cgroup: &str, id: u64, oom_kill: u64, usage: u64) -> Seen {
        Seen {
            cgroup: cgroup.into(),
            cgroup_id: id,
            tier: "batch".into(),
            usage_bytes: usage,
            knobs: Knobs::default(),
            original: Knobs::default(),
            psi_some_avg10: 0.0,
            events: MemoryEvents { oom_kill, ..Default::default() },
        }
    }

    #[test]
    fn counts_become_reports_once_and_history_is_not_reported() {
        let cfg = memqos_policy::Config::from_str(
            "cgroup_root = \"/nonexistent\"\n[[tier]]\nname = \"batch\"\nmatch = [\"**\"]\n",
            "t",
        )
        .unwrap();
        let mount = Cgroup2Mount { mount_point: "/".into(), root: "/".into(), super_options: vec![] };
        let root = Path::new("/nonexistent");
        let mut r = OomReporter::new(root, Some(&mount));
        r.kmsg = None; // counts only: reported at once, victim unknown
        let p = ParentObs::default();
        // Kills before start-up are history.
        assert!(r.observe(&cfg, root, &[seen("a", 1, 3, 10)], &p, 0).is_empty());
        let got = r.observe(&cfg, root, &[seen("a", 1, 5, 10), seen("b", 2, 0, 99)], &p, 500);
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].cgroup.as_str(), got[0].tier.as_deref(), got[0].pid), ("a", Some("batch"), None));
        assert_eq!(got[0].holders[0].cgroup, "b", "largest holder first");
        // A cgroup created after start-up: its whole count is new.
        let got = r.observe(&cfg, root, &[seen("a", 1, 5, 10), seen("c", 3, 1, 1)], &p, 1000);
        assert_eq!(got.iter().map(|k| k.cgroup.as_str()).collect::<Vec<_>>(), ["c"]);
        assert_eq!(r.by_tier["batch"], 3);
        // A logged kill matched to a later count is reported once.
        r.ahead.push(("a".into(), 1000));
        assert!(r.observe(&cfg, root, &[seen("a", 1, 6, 10), seen("c", 3, 1, 1)], &p, 1500).is_empty());
    }

    /// A kernel log stand-in: a datagram socket gives one record per read(2), as /dev/kmsg does.
    fn fake_kmsg() -> (Kmsg, OwnedFd) {
        let mut fds = [0; 2];
        // SAFETY: plain syscall into a two-element array; both fds are owned below.
        let rc = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        };
        assert_eq!(rc, 0, "socketpair: {}", std::io::Error::last_os_error());
        unsafe { (Kmsg { fd: OwnedFd::from_raw_fd(fds[0]) }, OwnedFd::from_raw_fd(fds[1])) }
    }

    fn log(writer: &OwnedFd, record: &str) {
        let n = unsafe { libc::write(writer.as_raw_fd(), record.as_ptr().cast(), record.len()) };
        assert_eq!(n, record.len() as isize);
    }

    #[test]
    fn a_logged_kill_is_noticed_when_read_and_reported_at_the_next_observe_in_a_cgroup_already_gone() {
        // cgroup_root is the hierarchy's root (mounted there), as under systemd: no
        // memory.events to watch.
        let root = std::env::temp_dir().join(format!("memqos-oom-report-{}", std::process::id()));
        let victim = root.join("agents.slice/hog.service");
        std::fs::create_dir_all(&victim).unwrap();
        std::fs::write(victim.join("memory.peak"), "67108864\n").unwrap();
        std::fs::write(victim.join("memory.max"), "67108864\n").unwrap();
        std::fs::write(victim.join("memory.high"), "max\n").unwrap();
        let cfg = memqos_policy::Config::from_str(
            &format!(
                "cgroup_root = \"{}\"\n[[tier]]\nname = \"tools\"\nmatch = [\"agents.slice/*\"]\n",
                root.display()
            ),
            "t",
        )
        .unwrap();
        let mount = Cgroup2Mount { mount_point: root.clone(), root: "/".into(), super_options: vec![] };
        let mut r = OomReporter::new(&root, Some(&mount));
        let root = root.as_path();
        let (kmsg, writer) = fake_kmsg();
        r.kmsg = Some(kmsg);
        let p = ParentObs::default();
        assert!(r.observe(&cfg, root, &[], &p, 0).is_empty());
        log(&writer, "6,10,900000,-;systemd[1]: Started memqos-hog.service.\n");
        assert!(!r.read_log(), "an ordinary line is not a kill");
        log(&writer, "4,11,970000,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/agents.slice/hog.service,task_memcg=/agents.slice/hog.service,task=python3,pid=310,uid=0\n");
        log(&writer, "3,12,970100,-;Memory cgroup out of memory: Killed process 310 (python3) total-vm:70000kB, anon-rss:65316kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:200kB oom_score_adj:0\n");
        assert!(r.read_log(), "the summary line is a kill");
        assert!(!r.read_log(), "read once");
        // The service's cgroup is gone by the time the daemon samples: the log names it and
        // its peak was read when the kill was logged.
        std::fs::remove_dir_all(root).unwrap();
        let got = r.observe(&cfg, root, &[], &p, 100);
        assert_eq!(got.len(), 1, "{got:?}");
        let k = &got[0];
        assert_eq!(
            (k.cgroup.as_str(), k.tier.as_deref(), k.pid, k.command.as_deref(), k.source.as_str()),
            ("agents.slice/hog.service", Some("tools"), Some(310), Some("python3"), "kmsg")
        );
        assert_eq!(k.victim_anon_rss_bytes, Some(65316 * 1024));
        assert_eq!(k.peak_bytes, Some(64 << 20));
        assert_eq!((k.limits.max, k.limits.high), (Some(Limit::Bytes(64 << 20)), Some(Limit::Max)));
        assert_eq!(k.kill_mono_ns, Some(970_000_000));
        assert!(r.observe(&cfg, root, &[], &p, 200).is_empty(), "reported once");
    }
}
