//! The one place memqos writes: every knob kind (memory.high/low/min, cgroup.freeze,
//! cgroup.kill, cpu.weight, oom_score_adj, the dirty-derived memory.high) goes through
//! [`Actuator::apply`], which for a batch of requests
//! 1. reads each knob's current value and stages the original of knobs not yet journaled,
//! 2. makes the journal durable (one append and one fsync for the whole batch),
//! 3. writes each value through a directory fd opened beneath the cgroup root (cached per
//!    cgroup id; a process's through its /proc/PID dir fd), never following a symlink,
//! 4. emits one typed [`WriteEvent`] per write.
//!
//! In a dry run the actuator decides nothing differently but writes nothing, journal
//! included: it logs each write it would make, with the value found and the reason (a write
//! repeated with the same value is logged once).
//!
//! The actuator is also the restore guard: dropping it without [`Actuator::restore`] (a
//! panic unwinding through the daemon) restores the journal.

use crate::beneath::{self, CgroupId, FileError, OpenError, Root};
use crate::events::{Event, EventLog, Outcome, WriteEvent};
use crate::journal::{Entry, Journal, Key, Process, RestoreReport};
use crate::limit_writer::{Done, Job, LimitWriter, INLINE_WAIT};
use anyhow::Result;
use memqos_cgroupfs::fds::{Kept, Use};
use memqos_policy::Reason;
use memqos_schema::KnobFile;
use std::collections::{HashMap, HashSet};
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

/// What a write is aimed at.
#[derive(Clone, Debug, PartialEq)]
pub enum Target {
    Cgroup {
        path: String,
        id: CgroupId,
    },
    /// A process found in cgroup `cgroup` (for the log and the journal; "" if it left).
    Process {
        cgroup: String,
        cgroup_id: CgroupId,
        process: Process,
    },
}

impl Target {
    fn key(&self, file: &str) -> Key {
        match self {
            Target::Cgroup { id, .. } => Key::Cgroup(*id, file.to_owned()),
            Target::Process { process, .. } => Key::Process(*process, file.to_owned()),
        }
    }

    fn cgroup(&self) -> (&str, CgroupId) {
        match self {
            Target::Cgroup { path, id } => (path, *id),
            Target::Process { cgroup, cgroup_id, .. } => (cgroup, *cgroup_id),
        }
    }
}

/// One write to make.
#[derive(Clone, Debug)]
pub struct Request {
    pub target: Target,
    pub file: &'static str,
    pub value: String,
    /// The engine's reason, when it decided the write.
    pub reason: Option<Reason>,
    /// The reason as a sentence, for the log.
    pub why: String,
    /// Journal this as the original instead of the value found (a child that inherited an
    /// oom_score_adj memqos had set on its parent).
    pub original: Option<String>,
    /// This write puts the original back: its journal entry is dropped afterwards.
    pub restores: bool,
}

impl Request {
    pub fn new(target: Target, file: &'static str, value: impl Into<String>, why: impl Into<String>) -> Request {
        Request { target, file, value: value.into(), reason: None, why: why.into(), original: None, restores: false }
    }
}

pub struct Actuator {
    root: Root,
    /// Kept within the descriptor budget (`memqos_cgroupfs::fds`), given back when dropped.
    dirs: HashMap<CgroupId, Kept<OwnedFd>>,
    journal: Journal,
    pub log: EventLog,
    dry_run: bool,
    dry_logged: HashMap<Key, String>,
    restored: bool,
    /// Why the last journal commit failed, while it fails (said once, and when it ends).
    journal_failing: Option<String>,
    /// The value memqos last wrote to each watched knob (`KnobFile::watched`): a different
    /// value found later was written by someone else ([`Actuator::taken_over`]).
    written: HashMap<Key, String>,
    /// Knobs taken over that memqos writes no more, their restores included: those whose
    /// respect is not the engine's foreign rule (see [`Actuator::taken_over`]).
    theirs: HashSet<Key>,
    /// Knobs taken over by someone else whose journal forget has not reached disk yet (the
    /// commit failed: a full disk). A failed commit puts the forget back, so it is staged
    /// again before every commit and before a restore, until one commit succeeds.
    taken: HashSet<Key>,
    /// Limit-lowering writes, made by workers so that no write's reclaim holds the loop.
    limits: LimitWriter<Pending>,
    /// The value each knob in a worker's hands is being set to.
    limit_in_flight: HashMap<Key, String>,
    /// A lower value decided for a knob still in flight: written after it, newest only.
    limit_waiting: HashMap<Key, (Request, Option<String>)>,
    /// Writes finished outside `apply` (a worker's), for the next `apply` or `finished_writes`.
    late: Vec<WriteEvent>,
    /// The kernel was seen making a limit's writer reclaim (said once).
    said_blocking: bool,
    /// How memory.high/max are written (see [`LimitWrites`]).
    limit_writes: LimitWrites,
}

/// How memory.high and memory.max are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitWrites {
    /// Lowering writes by the worker pool, `O_NONBLOCK`: the daemon's, on cgroupfs.
    Workers,
    /// On the caller's thread, `O_NONBLOCK`: fake trees, where no write reclaims (and tests
    /// see every outcome at once).
    Inline,
    /// On the caller's thread, blocking, as before the workers: `memqos-lab bench limits`'s
    /// "before" arm only.
    InlineBlocking,
}

/// A limit write in a worker's hands: what its event needs when it is done.
struct Pending {
    req: Request,
    key: Key,
    previous: Option<String>,
    mono_ns: u64,
}

/// How long a restore waits for limit writes still in a worker's hands (their reclaim), so
/// that no write lands after the original is put back.
const RESTORE_WAIT: Duration = Duration::from_secs(10);
/// A limit write that took this long made its writer reclaim (the kernel ignores O_NONBLOCK).
const RECLAIMED_WRITE: Duration = Duration::from_millis(50);

enum Dir {
    /// Kept in the cache.
    Cgroup(CgroupId),
    /// Opened for this use only: a process's /proc dir, or a cgroup's when the descriptor
    /// budget (`memqos_cgroupfs::fds`) says no more may be kept.
    Owned(OwnedFd),
    /// Was open to read the value found; opened again to write, so a batch of thousands of
    /// writes never holds thousands of descriptors at once.
    Reopen,
}

/// Cached cgroup directory fds count against the process's descriptor budget.
const FDS: Use = Use::Reaction;

/// memory.high and memory.max: the knobs whose writer may have to reclaim.
fn is_limit(file: &str) -> bool {
    matches!(file, "memory.high" | "memory.max")
}

/// Whether writing `value` lowers a limit that is `than` now (unknown: assume it does).
fn lowers(value: &str, than: Option<&str>) -> bool {
    let bytes = |v: &str| v.trim().parse::<memqos_policy::Limit>().ok().map(|l| l.bytes().unwrap_or(u64::MAX));
    match (bytes(value), than.and_then(bytes)) {
        (Some(new), Some(old)) => new < old,
        _ => true,
    }
}

impl Actuator {
    pub fn new(root: Root, journal: Journal, log: EventLog, dry_run: bool) -> Actuator {
        let root_is_cgroup2 = root.is_cgroup2();
        Actuator {
            root,
            dirs: HashMap::new(),
            journal,
            log,
            dry_run,
            dry_logged: HashMap::new(),
            restored: false,
            journal_failing: None,
            written: HashMap::new(),
            taken: HashSet::new(),
            theirs: HashSet::new(),
            limits: LimitWriter::default(),
            limit_in_flight: HashMap::new(),
            limit_waiting: HashMap::new(),
            late: Vec::new(),
            said_blocking: false,
            limit_writes: if root_is_cgroup2 { LimitWrites::Workers } else { LimitWrites::Inline },
        }
    }

    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    pub fn dry_run(&self) -> bool {
        self.dry_run
    }

    pub fn emit(&mut self, event: Event) {
        self.log.emit(event);
    }

    /// A cgroup's directory fd, opened beneath the root on first use and kept while the
    /// descriptor budget allows.
    fn dir(&mut self, path: &str, id: CgroupId) -> Result<Dir, OpenError> {
        if self.dirs.contains_key(&id) {
            return Ok(Dir::Cgroup(id));
        }
        let (fd, _) = self.root.open_dir(path, Some(id))?;
        match Kept::new(FDS, 1, fd) {
            Ok(kept) => {
                self.dirs.insert(id, kept);
                Ok(Dir::Cgroup(id))
            }
            Err(fd) => Ok(Dir::Owned(fd)),
        }
    }

    fn open(&mut self, target: &Target) -> Result<Dir, Outcome> {
        match target {
            Target::Cgroup { path, id } => match self.dir(path, *id) {
                Ok(d) => Ok(d),
                Err(OpenError::Vanished) => Err(Outcome::Vanished),
                Err(e) => Err(Outcome::Error(format!("cgroup {path}: {e}"))),
            },
            Target::Process { process, .. } => match beneath::open_process(process.pid, process.start_time) {
                Ok(fd) => Ok(Dir::Owned(fd)),
                Err(FileError::Vanished) => Err(Outcome::Vanished),
                Err(FileError::Io(e)) => Err(Outcome::Error(format!("/proc/{}: {e}", process.pid))),
            },
        }
    }

    /// The descriptor behind `dir`; None when it is no longer there: a cached cgroup fd
    /// dropped since (an earlier write of the same batch found the cgroup gone), or a
    /// per-use fd not reopened. Either way the cgroup is treated as vanished, never a panic.
    fn fd<'a>(&'a self, dir: &'a Dir) -> Option<&'a OwnedFd> {
        match dir {
            Dir::Cgroup(id) => self.dirs.get(id).map(|k| &k.value),
            Dir::Owned(fd) => Some(fd),
            Dir::Reopen => None,
        }
    }

    /// Reads a knob of a cgroup through its cached fd (None: vanished or unreadable).
    pub fn read(&mut self, path: &str, id: CgroupId, file: &str) -> Result<String, FileError> {
        let dir = match self.dir(path, id) {
            Ok(d) => d,
            Err(OpenError::Vanished) => return Err(FileError::Vanished),
            Err(e) => return Err(FileError::Io(std::io::Error::other(e.to_string()))),
        };
        match self.fd(&dir) {
            Some(fd) => beneath::read_at(fd, file),
            None => Err(FileError::Vanished),
        }
    }

    /// Journal, write, log: see the module comment. Returns the events it logged.
    pub fn apply(&mut self, mut batch: Vec<Request>) -> Result<Vec<WriteEvent>> {
        // A knob someone else took over is theirs: its stale original least of all is written.
        batch.retain(|r| !self.theirs.contains(&r.target.key(r.file)));
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        // A taken-over knob's original must not be staged again as if still ours.
        self.restage_taken();
        // 1. Open and read; stage originals.
        let mut prepared = Vec::with_capacity(batch.len());
        for req in batch {
            let mut staged = false;
            let key = req.target.key(req.file);
            let dir = self.open(&req.target);
            let previous = match (&dir, req.file) {
                // Not journaled (it cannot be undone): nothing to read.
                (Ok(_), file) if KnobFile::from_name(file).is_some_and(|k| !k.journaled()) => None,
                (Err(_), _) => None,
                (Ok(d), file) => self.fd(d).and_then(|fd| beneath::read_at(fd, file).ok()),
            };
            if self.dry_run {
                if self.dry_logged.get(&key) == Some(&req.value) {
                    continue;
                }
                self.dry_logged.insert(key.clone(), req.value.clone());
            } else if let (Ok(_), Some(prev), false) = (&dir, &previous, req.restores) {
                let (cgroup, cgroup_id) = req.target.cgroup();
                let process = match &req.target {
                    Target::Process { process, .. } => Some(*process),
                    Target::Cgroup { .. } => None,
                };
                let original = req.original.clone().unwrap_or_else(|| prev.clone());
                staged = self.journal.stage(Entry {
                    cgroup: cgroup.to_owned(),
                    cgroup_id,
                    file: req.file.to_owned(),
                    original,
                    process,
                });
            }
            let dir = dir.map(|d| if matches!(d, Dir::Owned(_)) { Dir::Reopen } else { d });
            prepared.push((req, key, dir, previous, staged));
        }
        // 2. Durable before any write. A journal that cannot be written (disk full,
        // read-only) stops only the writes whose original it would have to record: knobs
        // already journaled are still managed (and restorable), new ones wait until it can.
        let unjournaled = match self.journal.commit() {
            Ok(()) => {
                self.taken.clear();
                if let Some(was) = self.journal_failing.take() {
                    self.log.emit(Event::Degraded {
                        message: format!(
                            "the journal is written again (it was not: {was}); new knobs are managed again"
                        ),
                    });
                }
                None
            }
            Err(e) => {
                self.restage_taken();
                let why = format!("{e:#}");
                if self.journal_failing.is_none() {
                    self.log.emit(Event::Degraded {
                        message: format!("{why}: knobs whose original is not journaled are left as they are until it can be written; journaled ones are still managed"),
                    });
                }
                self.journal_failing = Some(why.clone());
                Some(why)
            }
        };
        // 3. Write, 4. log. A cgroup found gone is gone for the rest of the batch: its other
        // knobs (a restore writes every journaled one) are not tried through a dropped fd.
        let mut events = std::mem::take(&mut self.late);
        let mut vanished: HashSet<CgroupId> = HashSet::new();
        for (req, key, dir, previous, staged) in prepared {
            let mono_ns = crate::mono_ns();
            let dir = match dir {
                _ if matches!(req.target, Target::Cgroup { id, .. } if vanished.contains(&id)) => {
                    Err(Outcome::Vanished)
                }
                Ok(Dir::Reopen) if !self.dry_run => self.open(&req.target),
                d => d,
            };
            let refused = staged && unjournaled.is_some();
            let (req, key, previous) = match &dir {
                Ok(d)
                    if !self.dry_run && !refused && self.limit_writes == LimitWrites::Workers && is_limit(req.file) =>
                {
                    match self.write_limit(req, key, d, previous, mono_ns) {
                        Some(here) => here,
                        None => continue, // a worker's now, or waiting for one
                    }
                }
                _ => (req, key, previous),
            };
            let outcome = match (&dir, self.dry_run) {
                (Err(o), _) => o.clone(),
                (Ok(_), false) if refused => Outcome::Error(format!(
                    "not written: its original could not be journaled ({})",
                    unjournaled.as_deref().unwrap_or_default()
                )),
                (Ok(_), true) => Outcome::DryRun,
                (Ok(_), false) => self.write_now(&dir, &req),
            };
            events.push(self.finish(Pending { req, key, previous, mono_ns }, outcome, &mut vanished));
        }
        // Limit writes that do not reclaim (O_NONBLOCK honoured, or nothing to reclaim) are
        // done within a thread hand-off: they are reported with this batch.
        if self.limits.in_flight() > 0 {
            let done = self.limits.finished(Some(Instant::now() + INLINE_WAIT));
            events.extend(self.collect(done, &mut vanished));
        }
        Ok(events)
    }

    /// Overrides how limits are written (the bench's arms; tests of the workers on a fake
    /// tree). The daemon keeps the default.
    #[doc(hidden)]
    pub fn set_limit_writes(&mut self, how: LimitWrites) {
        self.limit_writes = how;
    }

    /// Limit writes still in the workers' hands or waiting for them.
    pub fn limit_writes_pending(&self) -> usize {
        self.limits.in_flight() + self.limit_waiting.len()
    }

    /// One write through the directory `dir` opened for it, on this thread. Limits are
    /// written `O_NONBLOCK`: where the kernel honours it, lowering one below usage does not
    /// make this thread reclaim the difference (`memory_high_write`); the kernel's own
    /// reclaim and throttling of the cgroup follow as before.
    fn write_now(&self, dir: &Result<Dir, Outcome>, req: &Request) -> Outcome {
        let Ok(d) = dir else { return Outcome::Vanished };
        let nonblocking = is_limit(req.file) && self.limit_writes != LimitWrites::InlineBlocking;
        let write = |fd: &OwnedFd| {
            if nonblocking {
                beneath::write_at_nonblocking(fd, req.file, &req.value)
            } else {
                beneath::write_at(fd, req.file, &req.value)
            }
        };
        match self.fd(d).map(write) {
            None | Some(Err(FileError::Vanished)) => Outcome::Vanished,
            Some(Ok(())) => Outcome::Ok,
            Some(Err(FileError::Io(e))) => Outcome::Error(format!("writing {}: {e}", req.file)),
        }
    }

    /// A memory.high/max write: one that lowers the limit goes to a worker (its reclaim must
    /// not hold the loop), or waits for the one in flight for the same knob so that writes
    /// land in the order decided; one that raises it is given back to be written at once,
    /// and supersedes a lower value still waiting. None: a worker's or waiting.
    fn write_limit(
        &mut self,
        req: Request,
        key: Key,
        dir: &Dir,
        previous: Option<String>,
        mono_ns: u64,
    ) -> Option<(Request, Key, Option<String>)> {
        if let Some(flying) = self.limit_in_flight.get(&key) {
            if lowers(&req.value, Some(flying)) {
                self.limit_waiting.insert(key, (req, previous));
                return None;
            }
            self.limit_waiting.remove(&key);
            return Some((req, key, previous));
        }
        if !lowers(&req.value, previous.as_deref()) {
            return Some((req, key, previous));
        }
        let Some(fd) = self.fd(dir).and_then(|fd| fd.try_clone().ok()) else {
            return Some((req, key, previous)); // out of descriptors: written here
        };
        let (file, value) = (req.file, req.value.clone());
        match self.limits.send(Job {
            fd,
            file,
            value: value.clone(),
            payload: Pending { req, key: key.clone(), previous, mono_ns },
        }) {
            Ok(()) => {
                self.limit_in_flight.insert(key, value);
                None
            }
            Err(job) => Some((job.payload.req, job.payload.key, job.payload.previous)),
        }
    }

    /// What a write came to: the actuator's state after it (the fd of a vanished cgroup
    /// dropped, the value remembered as ours, a restored knob's journal entry forgotten) and
    /// its event, logged.
    fn finish(&mut self, p: Pending, outcome: Outcome, vanished: &mut HashSet<CgroupId>) -> WriteEvent {
        let Pending { req, key, previous, mono_ns } = p;
        // A knob file gone is not always its cgroup gone (a tenant that disables the memory
        // controller below itself removes only memory.*): the rest of the batch skips the
        // cgroup only if its directory with that id is gone too.
        if outcome == Outcome::Vanished {
            if let Target::Cgroup { path, id } = &req.target {
                if self.root.open_dir(path, Some(*id)).is_err() {
                    self.dirs.remove(id);
                    vanished.insert(*id);
                }
            }
        }
        if req.restores && outcome == Outcome::Ok {
            self.journal.stage_forget(&key);
            self.written.remove(&key);
        } else if outcome == Outcome::Ok && KnobFile::from_name(req.file).is_some_and(KnobFile::watched) {
            self.written.insert(key, req.value.clone());
        }
        let (cgroup, cgroup_id) = req.target.cgroup();
        let ev = WriteEvent {
            cgroup: cgroup.to_owned(),
            cgroup_id,
            pid: match &req.target {
                Target::Process { process, .. } => Some(process.pid),
                Target::Cgroup { .. } => None,
            },
            file: req.file.to_owned(),
            value: req.value,
            previous,
            outcome,
            reason: req.reason,
            why: req.why,
            dry_run: self.dry_run,
            mono_ns,
            mono_done_ns: crate::mono_ns(),
        };
        self.log.emit(Event::Write(ev.clone()));
        ev
    }

    /// Limit writes the workers finished: their events, and the next value waiting for each
    /// knob handed on.
    fn collect(&mut self, done: Vec<Done<Pending>>, vanished: &mut HashSet<CgroupId>) -> Vec<WriteEvent> {
        let mut events = Vec::with_capacity(done.len());
        for d in done {
            self.limit_in_flight.remove(&d.payload.key);
            if d.took >= RECLAIMED_WRITE && !self.said_blocking {
                self.said_blocking = true;
                self.log.emit(Event::Degraded {
                    message: format!(
                        "{}/{} took {} ms to write: this kernel makes the writer of a lower limit reclaim (it ignores O_NONBLOCK there); limits are lowered by {} worker threads, so no cgroup's reclaim holds the loop",
                        d.payload.req.target.cgroup().0,
                        d.payload.req.file,
                        d.took.as_millis(),
                        crate::limit_writer::WORKERS
                    ),
                });
            }
            let outcome = match d.result {
                Ok(()) => Outcome::Ok,
                Err(FileError::Vanished) => Outcome::Vanished,
                Err(FileError::Io(e)) => Outcome::Error(format!("writing {}: {e}", d.payload.req.file)),
            };
            let key = d.payload.key.clone();
            events.push(self.finish(d.payload, outcome, vanished));
            if let Some((req, previous)) = self.limit_waiting.remove(&key) {
                events.extend(self.send_waiting(req, key, previous, vanished));
            }
        }
        events
    }

    /// A lower value that waited for the write before it: opened afresh and handed on.
    fn send_waiting(
        &mut self,
        req: Request,
        key: Key,
        previous: Option<String>,
        vanished: &mut HashSet<CgroupId>,
    ) -> Option<WriteEvent> {
        let mono_ns = crate::mono_ns();
        let dir = match &req.target {
            Target::Cgroup { id, .. } if vanished.contains(id) => Err(Outcome::Vanished),
            target => self.open(target),
        };
        let here = match &dir {
            Ok(d) => self.write_limit(req, key, d, previous, mono_ns)?,
            Err(_) => (req, key, previous),
        };
        let outcome = self.write_now(&dir, &here.0);
        Some(self.finish(Pending { req: here.0, key: here.1, previous: here.2, mono_ns }, outcome, vanished))
    }

    /// Writes the workers finished since the last look, logged now (the loop calls this
    /// once per iteration: a write that reclaimed for seconds is reported when it ends).
    pub fn finished_writes(&mut self) -> Vec<WriteEvent> {
        let mut events = std::mem::take(&mut self.late);
        if self.limits.in_flight() > 0 {
            let done = self.limits.finished(None);
            events.extend(self.collect(done, &mut HashSet::new()));
        }
        events
    }

    /// Waits (at most RESTORE_WAIT) for the limit writes in the workers' hands, dropping
    /// those still waiting: nothing memqos decided may land after a restore.
    fn settle_limits(&mut self) {
        self.limit_waiting.clear();
        let until = Instant::now() + RESTORE_WAIT;
        while self.limits.in_flight() > 0 && Instant::now() < until {
            let done = self.limits.finished(Some(until));
            let events = self.collect(done, &mut HashSet::new());
            self.late.extend(events);
        }
        if self.limits.in_flight() > 0 {
            self.log.emit(Event::Degraded {
                message: format!(
                    "{} limit write(s) still reclaiming after {} s: restoring anyway (the kernel set their value before reclaiming; the restore's value is the one that stays)",
                    self.limits.in_flight(),
                    RESTORE_WAIT.as_secs()
                ),
            });
        }
    }

    /// Drops the state of cgroups no longer observed: their cached fds, and their journal
    /// entries once the directory with that id is really gone (a cgroup that merely left the
    /// managed set, e.g. by getting children, keeps its entries so restore still reaches it).
    pub fn retain_cgroups(&mut self, observed: &std::collections::HashSet<CgroupId>) -> Result<()> {
        self.dirs.retain(|id, _| observed.contains(id));
        let stale: Vec<Entry> = self
            .journal
            .entries()
            .filter(|e| e.process.is_none() && !observed.contains(&e.cgroup_id))
            .cloned()
            .collect();
        for e in stale {
            if matches!(self.root.open_dir(&e.cgroup, Some(e.cgroup_id)), Err(OpenError::Vanished)) {
                self.journal.stage_forget(&e.key());
                self.written.remove(&e.key());
            }
        }
        self.theirs.retain(|k| !matches!(k, Key::Cgroup(id, _) if !observed.contains(id)));
        Ok(())
    }

    /// Forgets a cgroup the daemon itself removed (`leftovers`): nothing is left to put back.
    /// After the rmdir, not before: were it forgotten first and the rmdir then refused (a
    /// process arrived), the cgroup would keep knobs memqos wrote with no original to restore.
    pub fn forget_cgroup(&mut self, id: CgroupId) {
        self.dirs.remove(&id);
        let keys: Vec<Key> =
            self.journal.entries().filter(|e| e.process.is_none() && e.cgroup_id == id).map(Entry::key).collect();
        for key in keys {
            self.journal.stage_forget(&key);
            self.written.remove(&key);
            self.theirs.remove(&key);
        }
    }

    /// Forgets processes that exited (nothing to put back).
    pub fn forget_processes(&mut self, gone: &[Process], file: &str) {
        for p in gone {
            let key = Key::Process(*p, file.to_owned());
            self.journal.stage_forget(&key);
            self.written.remove(&key);
            self.theirs.remove(&key);
        }
    }

    /// The journaled original of a process knob.
    pub fn process_original(&self, process: Process, file: &str) -> Option<&str> {
        self.journal.get(&Key::Process(process, file.to_owned())).map(|e| e.original.as_str())
    }

    /// Whether a knob memqos wrote (`key`) now shows a value memqos did not write (`found`):
    /// someone else (an administrator, systemd, kubelet) set it since. Then memqos must not
    /// later "restore" its stale original over that value: the journal entry is forgotten
    /// and the write memqos had made is returned with the forgotten original, for the log.
    /// The engine's memory knobs are then respected by its foreign rule (the value found
    /// becomes their original); any other knob is theirs and never written again. The forget
    /// is committed at once. Values are compared as the kernel stores them
    /// (`KnobFile::shows`).
    pub fn taken_over(&mut self, key: Key, found: &str) -> Option<(String, String)> {
        // A limit a worker is still writing shows the new value before memqos records it.
        if self.limit_in_flight.contains_key(&key) || self.limit_waiting.contains_key(&key) {
            return None;
        }
        let (Key::Cgroup(_, file) | Key::Process(_, file)) = &key;
        let knob = KnobFile::from_name(file)?;
        if knob.shows(self.written.get(&key)?, found) {
            return None;
        }
        let wrote = self.written.remove(&key)?;
        let original = self.journal.get(&key).map(|e| e.original.clone())?;
        self.journal.stage_forget(&key);
        if !matches!(knob, KnobFile::MemoryHigh | KnobFile::MemoryLow | KnobFile::MemoryMin) {
            self.theirs.insert(key.clone());
        }
        // Durable now, not at the next batch (which may be long in coming): a crash in
        // between would have the next start "restore" the stale original over their value.
        // A failed commit puts the entry back: it stays in `taken` and is forgotten again
        // before every later commit and before a restore, until a commit succeeds.
        self.taken.insert(key);
        if self.journal.commit().is_ok() {
            self.taken.clear();
        } else {
            self.restage_taken();
        }
        Some((wrote, original))
    }

    /// Before a restore, every knob memqos wrote is read once more: one someone else changed
    /// since it was last looked at is taken over (and logged) rather than put back.
    fn forget_changed(&mut self) {
        let mut keys: Vec<Key> = self.written.keys().cloned().collect();
        keys.sort();
        for key in keys {
            let Some((at, found)) = self.read_key(&key) else { continue };
            let (Key::Cgroup(_, file) | Key::Process(_, file)) = &key;
            if let Some((wrote, original)) = self.taken_over(key.clone(), &found) {
                let message = takeover_note(&at, file, &found, &wrote, &original);
                self.log.emit(Event::Degraded { message });
            }
        }
    }

    /// A written knob's value now, with where it is for the log; None when it cannot be read
    /// (gone: nothing to decide).
    fn read_key(&self, key: &Key) -> Option<(String, String)> {
        match key {
            Key::Cgroup(id, file) => {
                let path = self.journal.get(key)?.cgroup.clone();
                let (dir, _) = self.root.open_dir(&path, Some(*id)).ok()?;
                Some((memqos_cgroupfs::name::display(&path), beneath::read_at(&dir, file).ok()?))
            }
            Key::Process(p, file) => {
                let dir = beneath::open_process(p.pid, p.start_time).ok()?;
                Some((format!("pid {}", p.pid), beneath::read_at(&dir, file).ok()?))
            }
        }
    }

    /// Whether the knob `key` was taken over by someone else and is left to them.
    pub fn is_theirs(&self, key: &Key) -> bool {
        self.theirs.contains(key)
    }

    /// Stages the forget of every taken-over knob whose forget is not durable yet.
    fn restage_taken(&mut self) {
        for key in &self.taken {
            self.journal.stage_forget(key);
        }
    }

    /// Takes knobs someone set on memqos's behalf as memqos's own, without writing them:
    /// each `(path, id, file, original, found)` gets `original` journaled (what a stop or a
    /// crash restore puts back) and `found` remembered as memqos's write, so a later change
    /// by someone else is noticed ([`Actuator::taken_over`]). One commit for all; false (and
    /// nothing taken) when it fails. `memqos run`'s armed memory.high (`admission`).
    pub fn adopt(&mut self, knobs: &[(String, CgroupId, &str, String, String)]) -> bool {
        if self.dry_run {
            return false;
        }
        // A taken-over knob's original must not be committed again as if still ours.
        self.restage_taken();
        let mut staged = Vec::new();
        for (path, id, file, original, found) in knobs {
            let entry = Entry {
                cgroup: path.clone(),
                cgroup_id: *id,
                file: (*file).to_owned(),
                original: original.clone(),
                process: None,
            };
            if self.journal.stage(entry) {
                staged.push((Key::Cgroup(*id, (*file).to_owned()), found.clone()));
            }
        }
        if self.journal.commit().is_err() {
            self.restage_taken();
            return false;
        }
        self.taken.clear();
        self.written.extend(staged);
        true
    }

    /// After a restore, the actuator is used again (the loop starts afresh): an exit
    /// without the orderly restore restores what it writes from now.
    pub fn resume(&mut self) {
        self.restored = false;
    }

    /// Writes every journaled original back (see `Journal::restore`).
    pub fn restore(&mut self) -> Result<RestoreReport> {
        self.settle_limits();
        // Never put a stale original back over a value someone else set.
        if !self.dry_run {
            self.forget_changed();
        }
        self.restage_taken();
        self.taken.clear();
        self.restored = true;
        self.dirs.clear();
        self.written.clear();
        let empty = Journal::open_empty_like(&self.journal);
        let journal = std::mem::replace(&mut self.journal, empty);
        if self.dry_run {
            return Ok(RestoreReport::default());
        }
        journal.restore()
    }
}

/// The log line for a knob someone else set (`at`: the cgroup or process) after memqos wrote
/// it: what it is now, and that memqos's original is forgotten, never written back.
pub fn takeover_note(at: &str, file: &str, found: &str, wrote: &str, original: &str) -> String {
    format!(
        "{at}/{file} is {} now, set by someone else after memqos wrote {wrote}: that value is theirs; memqos forgets the original it had ({original}) and never writes it back",
        found.trim()
    )
}

impl Drop for Actuator {
    /// The restore guard: an exit that skipped the orderly restore (a panic) restores here.
    fn drop(&mut self) {
        if self.restored || self.dry_run || self.journal.is_empty() {
            return;
        }
        match self.restore() {
            Ok(r) if r.failed.is_empty() => eprintln!("memqos: restored {} knob(s) while unwinding", r.restored.len()),
            Ok(r) => eprintln!("memqos: restore while unwinding failed for: {}", r.failures().join("; ")),
            Err(e) => eprintln!("memqos: restore while unwinding failed: {e:#}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;
    use std::path::PathBuf;

    /// A fake root with `cgroups` (each memory.high `max`), its state dir and an actuator on
    /// them.
    struct Fixture {
        _dir: tempfile::TempDir,
        root: PathBuf,
        state: PathBuf,
        act: Actuator,
    }

    impl Fixture {
        fn new(cgroups: &[&str]) -> Fixture {
            let dir = tempfile::tempdir().unwrap();
            let (root, state) = (dir.path().join("cg"), dir.path().join("state"));
            for c in cgroups {
                std::fs::create_dir_all(root.join(c)).unwrap();
                std::fs::write(root.join(c).join("memory.high"), "max\n").unwrap();
            }
            let journal = Journal::open(&state, &root).unwrap();
            let log = EventLog::open(&state, 1 << 20, false);
            let act = Actuator::new(Root::open(&root).unwrap(), journal, log, false);
            Fixture { _dir: dir, root, state, act }
        }

        fn id(&self, c: &str) -> CgroupId {
            std::fs::metadata(self.root.join(c)).unwrap().ino()
        }

        fn target(&self, c: &str) -> Target {
            Target::Cgroup { path: c.into(), id: self.id(c) }
        }
    }

    fn high_of(id: CgroupId) -> Key {
        Key::Cgroup(id, "memory.high".into())
    }

    /// A knob someone else took over is forgotten on disk at once: a crash before the next
    /// batch (none may come for a long time) must not leave the stale original for the next
    /// start to "restore" over the value they set.
    #[test]
    fn a_taken_over_knob_is_forgotten_on_disk_at_once() {
        let Fixture { _dir, root, state, mut act } = Fixture::new(&["low/a"]);
        let id = std::fs::metadata(root.join("low/a")).unwrap().ino();
        let target = Target::Cgroup { path: "low/a".into(), id };
        let wrote = act.apply(vec![Request::new(target, "memory.high", "1048576", "test")]).unwrap();
        assert_eq!(wrote[0].outcome, Outcome::Ok);
        assert_eq!(Journal::open(&state, &root).unwrap().original(id, "memory.high"), Some("max"));

        // Someone else sets it; the next sample sees it.
        std::fs::write(root.join("low/a/memory.high"), "2097152\n").unwrap();
        let taken = act.taken_over(high_of(id), "2097152");
        assert_eq!(taken, Some(("1048576".to_string(), "max".to_string())));

        // A crash now: no restore on the way out, no further batch.
        std::mem::forget(act);
        assert_eq!(Journal::open(&state, &root).unwrap().original(id, "memory.high"), None);
    }

    /// On a full disk the forget cannot reach the journal: it is retried with every later
    /// commit (not only the next), and a restore meanwhile leaves their value alone.
    #[test]
    fn a_taken_over_knob_whose_forget_keeps_failing_is_never_restored() {
        let mut f = Fixture::new(&["low/a", "low/b", "low/c"]);
        let (root, state) = (f.root.clone(), f.state.clone());
        let (a, b, c, a_id) = (f.target("low/a"), f.target("low/b"), f.target("low/c"), f.id("low/a"));
        let act = &mut f.act;
        act.apply(vec![Request::new(a, "memory.high", "1048576", "test")]).unwrap();

        // The disk fills; then someone else sets the knob.
        let full = std::fs::OpenOptions::new().append(true).open("/dev/full").unwrap();
        let real = act.journal.swap_file_for_test(full).unwrap();
        std::fs::write(root.join("low/a/memory.high"), "2097152\n").unwrap();
        let taken = act.taken_over(high_of(a_id), "2097152");
        assert_eq!(taken, Some(("1048576".to_string(), "max".to_string())));
        // A second batch whose commit fails too (its own write is refused: not journaled).
        let wrote = act.apply(vec![Request::new(b, "memory.high", "1048576", "test")]).unwrap();
        assert!(matches!(wrote[0].outcome, Outcome::Error(_)), "{:?}", wrote[0].outcome);
        assert_eq!(act.journal.original(a_id, "memory.high"), None, "forgotten again before the commit");

        // The disk has room again: the next commit makes the forget durable.
        act.journal.swap_file_for_test(real);
        act.apply(vec![Request::new(c, "memory.high", "1048576", "test")]).unwrap();
        assert_eq!(Journal::open(&state, &root).unwrap().original(a_id, "memory.high"), None);
        let report = act.restore().unwrap();
        assert!(report.failed.is_empty(), "{:?}", report.failures());
        assert_eq!(std::fs::read_to_string(root.join("low/a/memory.high")).unwrap(), "2097152\n", "their value stays");
        assert_eq!(std::fs::read_to_string(root.join("low/c/memory.high")).unwrap(), "max", "ours is put back");
    }

    /// A batch with several knobs of one cgroup whose knob files disappear (a tenant removing
    /// its memory controller) or which disappears whole: nothing panics, the knobs still
    /// there are written, and the cgroups after it too. The first write that found it gone
    /// used to drop its cached fd, and the next knob of the same cgroup indexed that fd and
    /// panicked, taking the daemon down.
    #[test]
    fn a_cgroup_gone_mid_batch_is_vanished_for_all_its_knobs() {
        let mut f = Fixture::new(&["low/a", "low/b"]);
        // low/a's memory.low is gone (ENOENT: the one vanished rule), its other knobs not yet.
        std::fs::write(f.root.join("low/a/memory.swap.max"), "max\n").unwrap();
        let (a, b) = (f.target("low/a"), f.target("low/b"));
        let batch = vec![
            Request::new(a.clone(), "memory.low", "1048576", "test"),
            Request::new(a.clone(), "memory.swap.max", "0", "test"),
            Request::new(a, "memory.high", "2097152", "test"),
            Request::new(b, "memory.high", "1048576", "test"),
        ];
        let wrote = f.act.apply(batch).unwrap();
        let outcomes: Vec<(&str, &str, &Outcome)> =
            wrote.iter().map(|w| (w.cgroup.as_str(), w.file.as_str(), &w.outcome)).collect();
        // Only memory.low is gone: the cgroup is there, its other knobs are written.
        assert_eq!(
            outcomes,
            vec![
                ("low/a", "memory.low", &Outcome::Vanished),
                ("low/a", "memory.swap.max", &Outcome::Ok),
                ("low/a", "memory.high", &Outcome::Ok),
                ("low/b", "memory.high", &Outcome::Ok),
            ]
        );
        assert_eq!(std::fs::read_to_string(f.root.join("low/a/memory.swap.max")).unwrap(), "0");
        assert_eq!(std::fs::read_to_string(f.root.join("low/b/memory.high")).unwrap(), "1048576");

        // Now the whole cgroup goes: every knob of it is vanished, the batch goes on.
        let (a, b) = (f.target("low/a"), f.target("low/b"));
        std::fs::remove_dir_all(f.root.join("low/a")).unwrap();
        let batch = vec![
            Request::new(a.clone(), "memory.swap.max", "max", "test"),
            Request::new(a, "memory.high", "max", "test"),
            Request::new(b, "memory.high", "2097152", "test"),
        ];
        let wrote = f.act.apply(batch).unwrap();
        let outcomes: Vec<&Outcome> = wrote.iter().map(|w| &w.outcome).collect();
        assert_eq!(outcomes, vec![&Outcome::Vanished, &Outcome::Vanished, &Outcome::Ok]);
    }

    /// On the worker pool, limit writes land as decided (the last value stays, each write
    /// has its event) and a restore waits for those in flight before putting originals back.
    #[test]
    fn limit_writes_on_workers_land_as_decided_and_a_restore_waits_for_them() {
        let mut f = Fixture::new(&["low/a", "low/b"]);
        f.act.set_limit_writes(LimitWrites::Workers);
        let (a, b) = (f.target("low/a"), f.target("low/b"));
        let mut events = Vec::new();
        for batch in [
            vec![
                Request::new(a.clone(), "memory.high", "8388608", "cut"),
                Request::new(b, "memory.high", "8388608", "cut"),
            ],
            vec![Request::new(a.clone(), "memory.high", "4194304", "cut")],
            vec![Request::new(a.clone(), "memory.high", "max", "release")],
            vec![Request::new(a, "memory.high", "2097152", "cut")],
        ] {
            events.extend(f.act.apply(batch).unwrap());
        }
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while f.act.limit_writes_pending() > 0 && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
            events.extend(f.act.finished_writes());
        }
        events.extend(f.act.finished_writes());
        assert_eq!(events.len(), 5, "every write has its event: {events:?}");
        assert!(events.iter().all(|e| e.outcome == Outcome::Ok), "{events:?}");
        assert_eq!(std::fs::read_to_string(f.root.join("low/a/memory.high")).unwrap(), "2097152");
        f.act.restore().unwrap();
        for c in ["low/a", "low/b"] {
            assert_eq!(std::fs::read_to_string(f.root.join(c).join("memory.high")).unwrap(), "max", "{c}");
        }
    }

    #[test]
    fn a_limit_lowers_only_below_what_it_is() {
        assert!(lowers("1048576", Some("max")));
        assert!(lowers("1048576", Some("2097152")));
        assert!(!lowers("max", Some("1048576")));
        assert!(!lowers("2097152", Some("2097152")));
        assert!(lowers("1048576", None), "unknown: assume it reclaims");
    }

    /// A restore while the forget is still not durable leaves their value alone too.
    #[test]
    fn a_restore_before_the_forget_is_durable_leaves_their_value() {
        let Fixture { _dir, root, state: _, mut act } = Fixture::new(&["low/a"]);
        let id = std::fs::metadata(root.join("low/a")).unwrap().ino();
        act.apply(vec![Request::new(Target::Cgroup { path: "low/a".into(), id }, "memory.high", "1048576", "test")])
            .unwrap();
        let full = std::fs::OpenOptions::new().append(true).open("/dev/full").unwrap();
        act.journal.swap_file_for_test(full);
        std::fs::write(root.join("low/a/memory.high"), "2097152\n").unwrap();
        assert!(act.taken_over(high_of(id), "2097152").is_some());
        let report = act.restore().unwrap();
        assert!(report.restored.is_empty(), "{:?}", report.restored);
        assert_eq!(std::fs::read_to_string(root.join("low/a/memory.high")).unwrap(), "2097152\n");
    }

    /// Every cgroup knob memqos writes besides the engine's memory knobs, with the kernel's
    /// value, memqos's and an administrator's.
    const OTHERS: [(&str, &str, &str, &str); 3] = [
        ("cpu.weight", "100", "500", "300"),
        ("memory.swap.max", "max", "0", "1073741824"),
        ("cgroup.freeze", "0", "1", "0"),
    ];

    fn journaled(state: &std::path::Path, root: &std::path::Path, id: CgroupId, file: &str) -> Option<String> {
        Journal::open(state, root).unwrap().original(id, file).map(str::to_owned)
    }

    /// cpu.weight, memory.swap.max, cgroup.freeze: a value someone else writes over memqos's
    /// is noticed, its original forgotten on disk at once, and memqos writes the knob no
    /// more: neither its tier's value again nor the stale original (put back as a settle
    /// would, or by the restore at stop).
    #[test]
    fn a_taken_over_knob_of_any_kind_is_forgotten_and_never_written_again() {
        let Fixture { _dir, root, state, mut act } = Fixture::new(&["a"]);
        let id = std::fs::metadata(root.join("a")).unwrap().ino();
        let target = Target::Cgroup { path: "a".into(), id };
        for (file, kernel, ours, _) in OTHERS {
            std::fs::write(root.join("a").join(file), format!("{kernel}\n")).unwrap();
            let wrote = act.apply(vec![Request::new(target.clone(), file, ours, "test")]).unwrap();
            assert_eq!(wrote[0].outcome, Outcome::Ok, "{file}");
            assert_eq!(journaled(&state, &root, id, file).as_deref(), Some(kernel), "{file}");
            assert_eq!(act.taken_over(Key::Cgroup(id, file.into()), &format!("{ours}\n")), None, "{file}: still ours");
        }
        for (file, kernel, ours, theirs) in OTHERS {
            std::fs::write(root.join("a").join(file), format!("{theirs}\n")).unwrap();
            let key = Key::Cgroup(id, file.into());
            let taken = act.taken_over(key.clone(), &format!("{theirs}\n"));
            assert_eq!(taken, Some((ours.to_string(), kernel.to_string())), "{file}");
            assert_eq!(journaled(&state, &root, id, file), None, "{file}: forgotten on disk at once");
            assert!(act.is_theirs(&key), "{file}");
            let mut restore = Request::new(target.clone(), file, kernel, "settle");
            restore.restores = true;
            let wrote = act.apply(vec![Request::new(target.clone(), file, ours, "tier"), restore]).unwrap();
            assert!(wrote.is_empty(), "{file}: not written: {wrote:?}");
        }
        let report = act.restore().unwrap();
        assert!(report.restored.is_empty() && report.failed.is_empty(), "{:?}", report.restored);
        for (file, _, _, theirs) in OTHERS {
            assert_eq!(std::fs::read_to_string(root.join("a").join(file)).unwrap(), format!("{theirs}\n"), "{file}");
        }
    }

    /// A change made after the last look (no sample noticed it) is still not overwritten at
    /// stop: the restore reads every knob memqos wrote first, logs the take-over and puts
    /// back only what still shows memqos's value.
    #[test]
    fn a_change_made_since_the_last_look_is_not_restored_at_stop() {
        let Fixture { _dir, root, state, mut act } = Fixture::new(&["a", "b"]);
        let (a, b) =
            (std::fs::metadata(root.join("a")).unwrap().ino(), std::fs::metadata(root.join("b")).unwrap().ino());
        let mut batch = Vec::new();
        for (cg, id) in [("a", a), ("b", b)] {
            let target = Target::Cgroup { path: cg.into(), id };
            batch.push(Request::new(target.clone(), "memory.high", "1048576", "test"));
            for (file, kernel, ours, _) in OTHERS {
                std::fs::write(root.join(cg).join(file), format!("{kernel}\n")).unwrap();
                batch.push(Request::new(target.clone(), file, ours, "test"));
            }
        }
        assert!(act.apply(batch).unwrap().iter().all(|w| w.outcome == Outcome::Ok));
        // Someone else sets every knob of a; b is left as memqos set it.
        std::fs::write(root.join("a/memory.high"), "2097152\n").unwrap();
        for (file, _, _, theirs) in OTHERS {
            std::fs::write(root.join("a").join(file), format!("{theirs}\n")).unwrap();
        }
        let report = act.restore().unwrap();
        assert_eq!(report.restored.len(), 4, "b's four knobs: {:?}", report.restored);
        assert_eq!(std::fs::read_to_string(root.join("a/memory.high")).unwrap(), "2097152\n");
        assert_eq!(std::fs::read_to_string(root.join("b/memory.high")).unwrap(), "max");
        for (file, kernel, _, theirs) in OTHERS {
            assert_eq!(std::fs::read_to_string(root.join("a").join(file)).unwrap(), format!("{theirs}\n"), "{file}");
            assert_eq!(std::fs::read_to_string(root.join("b").join(file)).unwrap(), kernel, "{file}");
        }
        let said: Vec<String> = crate::events::read(&state)
            .into_iter()
            .filter_map(|l| match l.event {
                Event::Degraded { message } if message.contains("set by someone else") => Some(message),
                _ => None,
            })
            .collect();
        assert_eq!(said.len(), 4, "{said:?}");
        assert!(said.iter().all(|m| m.starts_with("a/")), "{said:?}");
        assert!(said.iter().any(|m| m.starts_with("a/cpu.weight is 300 now") && m.contains("(100)")), "{said:?}");
    }

    /// A process's oom_score_adj: an administrator's value written over memqos's is theirs;
    /// neither a settle nor the stop puts the stale original back.
    #[test]
    fn a_processs_oom_score_adj_set_by_someone_else_is_not_put_back() {
        let Fixture { _dir, root: _, state: _, mut act } = Fixture::new(&["a"]);
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        let adj = || std::fs::read_to_string(format!("/proc/{pid}/oom_score_adj")).unwrap().trim().to_owned();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let process = Process { pid, start_time: crate::proc_stat::start_time_of(&stat).unwrap() };
        let target = Target::Process { cgroup: "a".into(), cgroup_id: 1, process };
        let original = adj();
        let wrote = act.apply(vec![Request::new(target.clone(), "oom_score_adj", "700", "tier")]).unwrap();
        assert_eq!((&wrote[0].outcome, adj().as_str()), (&Outcome::Ok, "700"));
        assert_eq!(act.process_original(process, "oom_score_adj"), Some(original.as_str()));
        std::fs::write(format!("/proc/{pid}/oom_score_adj"), "800").unwrap();
        let key = Key::Process(process, "oom_score_adj".into());
        assert_eq!(act.taken_over(key, "800\n"), Some(("700".to_string(), original.clone())));
        assert_eq!(act.process_original(process, "oom_score_adj"), None, "forgotten");
        let mut settle = Request::new(target, "oom_score_adj", original, "process left its tier");
        settle.restores = true;
        assert!(act.apply(vec![settle]).unwrap().is_empty(), "the settle is not written");
        act.restore().unwrap();
        assert_eq!(adj(), "800", "theirs stays");
        let _ = child.kill();
        let _ = child.wait();
    }
}
