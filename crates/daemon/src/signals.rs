//! Wakeups between periodic samples: PSI triggers on protected cgroups' memory.pressure,
//! inotify on memory.events (the managed cgroups' and the root's), and the BPF source's ring
//! buffer (`bpf_source`). All are kernel-side notifications, so the daemon sleeps in poll(2)
//! until something happens or the sampling interval (the floor) expires.

use crate::bpf_source::{BpfSource, Crossing};
use memqos_policy::{CgroupId, SignalEvent};
use memqos_schema::events::{BpfCounters, BpfHooks, BpfStats, BpfSummary};
use std::collections::HashMap;
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

/// A PSI trigger: wake when tasks of the cgroup stalled on memory for 50 ms within a 500 ms
/// window (500 ms is the shortest window the kernel accepts). Tight enough to react within a
/// window, loose enough to ignore a single direct-reclaim hiccup.
const PSI_TRIGGER: &str = "some 50000 500000";
/// The same ratio in the shortest window an unprivileged process may ask for: without
/// CAP_SYS_RESOURCE (a container) the kernel accepts only multiples of 2 s and refuses the
/// 500 ms window with EINVAL.
const PSI_TRIGGER_UNPRIVILEGED: &str = "some 200000 2000000";

/// One wakeup: which cgroup (by kernel id; its path beside it, for reads and the log) and
/// what happened.
#[derive(Clone, Debug, PartialEq)]
pub struct Wakeup {
    pub cgroup: CgroupId,
    pub path: String,
    pub event: SignalEvent,
}

pub struct Signals {
    psi_enabled: bool,
    events_enabled: bool,
    bpf_wanted: bool,
    /// PSI triggers of protected cgroups, by id (a cgroup re-created under its path gets a
    /// trigger of its own), with the path.
    psi: HashMap<CgroupId, (String, memqos_cgroupfs::fds::Kept<OwnedFd>)>,
    /// Whether 500 ms PSI windows are still tried (false once the kernel refused one).
    psi_window: bool,
    inotify: Option<OwnedFd>,
    /// memory.events watches: watch descriptor -> (cgroup id, path), and back by id.
    watches: HashMap<i32, (CgroupId, String)>,
    watched: HashMap<CgroupId, i32>,
    /// The root's id, whose memory.events is watched too (path "").
    root_id: Option<CgroupId>,
    /// Why a source could not be set up, reported once.
    pub degraded: Vec<String>,
    bpf: Option<BpfSource>,
    /// The BPF source started: what it attached (logged once by the daemon).
    pub bpf_started: Option<BpfHooks>,
    /// Crossings drained by the last `wait`, for the log.
    pub bpf_crossings: Vec<Crossing>,
    /// Directory watches (IN_CREATE/IN_DELETE) on every cgroup of the managed tree: a new
    /// cgroup is seen when it is made, not at the next sample.
    tree: Option<OwnedFd>,
    tree_watches: HashMap<i32, String>,
    tree_watched: HashMap<String, i32>,
    /// The root the tree watches are relative to (set by `sync_tree`).
    root: Option<std::path::PathBuf>,
    /// Cgroups created since the daemon last took them (`take_created`), relative paths.
    created: Vec<String>,
    /// Cgroups removed since the daemon last took them (`take_removed`), relative paths.
    removed: Vec<String>,
    /// cgroup.events watches (IN_MODIFY: populated or frozen changed) of cgroups whose
    /// tier adjusts processes: a first process joining is seen when it joins.
    populated_watches: HashMap<i32, String>,
    populated_watched: HashMap<String, i32>,
    /// The kernel log (`/dev/kmsg`), polled for OOM kills; `kernel_log_ready` says it has
    /// records the daemon has not read yet.
    kernel_log: Option<RawFd>,
    pub kernel_log_ready: bool,
    /// The daemon's `Handle` eventfd: a stop or reload request ends the wait.
    wake: Option<RawFd>,
}

impl Signals {
    /// `bpf`: try to start the BPF source; if it cannot start, one `degraded` line says why
    /// and the other sources carry on.
    pub fn new(psi: bool, events: bool, bpf: bool) -> Signals {
        let mut s = Signals {
            psi_enabled: psi,
            events_enabled: events,
            bpf_wanted: bpf,
            psi: HashMap::new(),
            psi_window: true,
            inotify: None,
            watches: HashMap::new(),
            watched: HashMap::new(),
            root_id: None,
            degraded: Vec::new(),
            bpf: None,
            bpf_started: None,
            bpf_crossings: Vec::new(),
            tree: None,
            tree_watches: HashMap::new(),
            tree_watched: HashMap::new(),
            root: None,
            created: Vec::new(),
            removed: Vec::new(),
            populated_watches: HashMap::new(),
            populated_watched: HashMap::new(),
            kernel_log: None,
            kernel_log_ready: false,
            wake: None,
        };
        // SAFETY: plain syscall; the fd is owned below.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if fd >= 0 {
            s.tree = Some(unsafe { OwnedFd::from_raw_fd(fd) });
        } else {
            s.degraded.push(format!(
                "new cgroups are noticed at the next periodic sample only: inotify_init1: {}",
                std::io::Error::last_os_error()
            ));
        }
        if bpf {
            match BpfSource::start() {
                Ok(src) => {
                    s.bpf_started = Some(src.describe());
                    s.bpf = Some(src);
                }
                Err(why) => {
                    s.degraded.push(format!("BPF pressure source off: {why}; continuing on PSI and memory.events"))
                }
            }
        }
        if events {
            // SAFETY: plain syscall; the fd is owned below.
            let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
            if fd >= 0 {
                s.inotify = Some(unsafe { OwnedFd::from_raw_fd(fd) });
            } else {
                s.degraded.push(format!(
                    "memory.events notifications off: inotify_init1: {}",
                    std::io::Error::last_os_error()
                ));
            }
        }
        s
    }

    /// Wakes `wait` when the kernel logs something (the fd stays owned by the caller and
    /// must outlive this set).
    pub fn watch_kernel_log(&mut self, fd: Option<RawFd>) {
        self.kernel_log = fd;
    }

    /// Ends `wait` when a stop or reload is requested (`Handle::wake_fd`; the fd stays owned
    /// by the handle, which must outlive this set).
    pub fn watch_wake(&mut self, fd: Option<RawFd>) {
        self.wake = fd;
    }

    /// Which sources were asked for (psi, events, bpf): a reload that changes them builds
    /// a new set.
    pub fn enabled(&self) -> (bool, bool, bool) {
        (self.psi_enabled, self.events_enabled, self.bpf_wanted)
    }

    /// Keeps triggers and watches in line with the managed set, by cgroup id (path beside
    /// it): `protected` get a PSI trigger, `all` (the daemon passes the protected ones too)
    /// get an inotify watch on memory.events. Gone cgroups are dropped, and so is a cgroup
    /// re-created under the same path: the new one, another id, is set up anew.
    pub fn sync(&mut self, root: &Path, protected: &[(CgroupId, String)], all: &[(CgroupId, String)]) {
        if let Some(bpf) = &mut self.bpf {
            bpf.sync(protected);
        }
        if self.psi_enabled {
            let wanted: std::collections::HashSet<CgroupId> = protected.iter().map(|(id, _)| *id).collect();
            self.psi.retain(|id, _| wanted.contains(id));
            // Triggers are opened beneath the root (`memqos_cgroupfs::beneath`), opened here
            // when one is new: the root as it is now, even if it was re-created.
            let mut psi_root: Option<crate::beneath::Root> = None;
            for (cg, id) in protected {
                if self.psi.contains_key(cg) {
                    continue;
                }
                if psi_root.is_none() {
                    match crate::beneath::Root::open(root) {
                        Ok(r) => psi_root = Some(r),
                        Err(e) => {
                            self.note(format!("PSI trigger on {id}/memory.pressure: {e}"));
                            continue;
                        }
                    }
                }
                let r = psi_root.as_ref().expect("opened above");
                match psi_trigger(|| r.open_file(id, "memory.pressure", libc::O_RDWR), &mut self.psi_window) {
                    Ok((fd, fell_back)) => {
                        // A trigger holds a descriptor: within the budget, or the cgroup's
                        // pressure is seen by the periodic sample only.
                        let Ok(fd) = memqos_cgroupfs::fds::Kept::new(memqos_cgroupfs::fds::Use::Reaction, 1, fd) else {
                            self.note(format!(
                                "PSI triggers beyond the descriptor budget ({} open files): some protected cgroups (first: {id}) are sampled, not signalled",
                                memqos_cgroupfs::fds::open_file_limit()
                            ));
                            continue;
                        };
                        if fell_back {
                            self.note(format!(
                                "PSI triggers of 500 ms refused (EINVAL: no CAP_SYS_RESOURCE?): using 2 s windows (\"{PSI_TRIGGER_UNPRIVILEGED}\"); pressure is seen up to 2 s later"
                            ));
                        }
                        self.psi.insert(*cg, (id.clone(), fd));
                    }
                    Err(e) => self.note(format!("PSI trigger on {id}/memory.pressure: {e}")),
                }
            }
        }
        if let (true, Some(ino)) = (self.events_enabled, &self.inotify) {
            use std::os::unix::fs::MetadataExt;
            // The root's own memory.events ("" here): its `max`/`oom` counts are parent
            // pressure for the engine, and only the root's file changes when the root's limit
            // is hit.
            if self.root_id.is_none() {
                self.root_id = std::fs::metadata(root).ok().map(|m| CgroupId(m.ino()));
            }
            let root_id = self.root_id;
            let wanted: std::collections::HashSet<CgroupId> = all.iter().map(|(id, _)| *id).chain(root_id).collect();
            let stale: Vec<CgroupId> = self.watched.keys().filter(|id| !wanted.contains(id)).copied().collect();
            for id in stale {
                if let Some(wd) = self.watched.remove(&id) {
                    // The kernel drops watches of removed cgroups itself; ignore errors.
                    unsafe { libc::inotify_rm_watch(ino.as_raw_fd(), wd) };
                    self.watches.remove(&wd);
                }
            }
            let the_root = root_id.map(|r| (r, String::new()));
            for (cg, id) in the_root.iter().chain(all) {
                if self.watched.contains_key(cg) {
                    continue;
                }
                let Ok(path) =
                    CString::new(memqos_cgroupfs::name::fs_path(root, id).join("memory.events").as_os_str().as_bytes())
                else {
                    continue;
                };
                let wd = unsafe { libc::inotify_add_watch(ino.as_raw_fd(), path.as_ptr(), libc::IN_MODIFY) };
                if wd >= 0 {
                    // One inode, one watch descriptor: a cgroup re-created under a path takes
                    // the old one's descriptor only if the kernel reuses it, after IN_IGNORED.
                    if let Some((old, _)) = self.watches.insert(wd, (*cg, id.clone())) {
                        if old != *cg {
                            self.watched.remove(&old);
                        }
                    }
                    self.watched.insert(*cg, wd);
                }
            }
        }
    }

    /// Watches every directory in `dirs` (relative paths, "" = the root) for cgroups made
    /// or removed in it; watches of directories no longer listed are dropped.
    pub fn sync_tree(&mut self, root: &Path, dirs: &[&str]) {
        let Some(fd) = self.tree.as_ref().map(|f| f.as_raw_fd()) else {
            return;
        };
        if self.root.as_deref() != Some(root) {
            self.root = Some(root.to_owned());
        }
        let keep: std::collections::HashSet<&str> = dirs.iter().copied().collect();
        let stale: Vec<String> = self.tree_watched.keys().filter(|d| !keep.contains(d.as_str())).cloned().collect();
        for d in stale {
            if let Some(wd) = self.tree_watched.remove(&d) {
                unsafe { libc::inotify_rm_watch(fd, wd) };
                self.tree_watches.remove(&wd);
            }
        }
        for d in dirs {
            if !self.tree_watched.contains_key(*d) {
                self.watch_dir(root, d);
            }
        }
    }

    /// Keeps cgroup.events watches on exactly `cgroups` (relative paths): a change there
    /// (the first process joined) queues the cgroup for `take_created`, like a new one.
    pub fn sync_populated(&mut self, root: &Path, cgroups: &[&str]) {
        let Some(fd) = self.tree.as_ref().map(|f| f.as_raw_fd()) else {
            return;
        };
        let keep: std::collections::HashSet<&str> = cgroups.iter().copied().collect();
        let stale: Vec<String> =
            self.populated_watched.keys().filter(|d| !keep.contains(d.as_str())).cloned().collect();
        for d in stale {
            if let Some(wd) = self.populated_watched.remove(&d) {
                unsafe { libc::inotify_rm_watch(fd, wd) };
                self.populated_watches.remove(&wd);
            }
        }
        for c in cgroups {
            self.watch_populated(root, c);
        }
    }

    /// Watches `rel`'s cgroup.events (see `sync_populated`).
    pub fn watch_populated(&mut self, root: &Path, rel: &str) {
        let Some(fd) = self.tree.as_ref().map(|f| f.as_raw_fd()) else {
            return;
        };
        if self.populated_watched.contains_key(rel) {
            return;
        }
        let Ok(path) =
            CString::new(memqos_cgroupfs::name::fs_path(root, rel).join("cgroup.events").as_os_str().as_bytes())
        else {
            return;
        };
        // SAFETY: valid fd and NUL-terminated path.
        let wd = unsafe { libc::inotify_add_watch(fd, path.as_ptr(), libc::IN_MODIFY | libc::IN_DONT_FOLLOW) };
        if wd >= 0 {
            self.populated_watches.insert(wd, rel.to_owned());
            self.populated_watched.insert(rel.to_owned(), wd);
        }
    }

    fn watch_dir(&mut self, root: &Path, rel: &str) {
        let Some(fd) = self.tree.as_ref().map(|f| f.as_raw_fd()) else {
            return;
        };
        let Ok(path) = CString::new(memqos_cgroupfs::name::fs_path(root, rel).as_os_str().as_bytes()) else {
            return;
        };
        let mask = libc::IN_CREATE | libc::IN_MOVED_TO | libc::IN_DELETE | libc::IN_ONLYDIR | libc::IN_DONT_FOLLOW;
        // SAFETY: valid fd and NUL-terminated path.
        let wd = unsafe { libc::inotify_add_watch(fd, path.as_ptr(), mask) };
        if wd >= 0 {
            self.tree_watches.insert(wd, rel.to_owned());
            self.tree_watched.insert(rel.to_owned(), wd);
        } else {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ENOSPC) {
                self.note(format!(
                    "new cgroups are noticed at the next periodic sample only beyond {} watches: fs.inotify.max_user_watches reached",
                    self.tree_watched.len()
                ));
            }
        }
    }

    /// Cgroups created since the last call (relative paths, parents before children).
    pub fn take_created(&mut self) -> Vec<String> {
        std::mem::take(&mut self.created)
    }

    /// Cgroups removed since the last call (relative paths, in the order seen).
    pub fn take_removed(&mut self) -> Vec<String> {
        std::mem::take(&mut self.removed)
    }

    /// Reads the tree watches' events: new directories are watched at once (their own
    /// children are seen too) and queued for `take_created`.
    fn drain_tree(&mut self, root: &Path) {
        let Some(fd) = self.tree.as_ref().map(|f| f.as_raw_fd()) else {
            return;
        };
        let mut buf = [0u8; 8192];
        loop {
            let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                break;
            }
            for ev in crate::inotify::records(&buf[..n as usize]) {
                let name = memqos_cgroupfs::name::encode(std::ffi::OsStr::from_bytes(ev.name));
                if ev.mask & libc::IN_IGNORED != 0 {
                    if let Some(d) = self.tree_watches.remove(&ev.wd) {
                        self.tree_watched.remove(&d);
                    }
                    if let Some(d) = self.populated_watches.remove(&ev.wd) {
                        self.populated_watched.remove(&d);
                    }
                    continue;
                }
                if let Some(rel) = self.populated_watches.get(&ev.wd) {
                    if !self.created.contains(rel) {
                        self.created.push(rel.clone());
                    }
                    continue;
                }
                let Some(parent) = self.tree_watches.get(&ev.wd).cloned() else { continue };
                if ev.mask & libc::IN_ISDIR == 0 || name.is_empty() {
                    continue;
                }
                let rel = if parent.is_empty() { name } else { format!("{parent}/{name}") };
                if ev.mask & (libc::IN_CREATE | libc::IN_MOVED_TO) != 0 {
                    self.watch_dir(root, &rel);
                    self.created.push(rel);
                } else if ev.mask & libc::IN_DELETE != 0 {
                    self.created.retain(|c| c != &rel);
                    self.removed.push(rel);
                }
            }
        }
    }

    /// The BPF source's counters per watched cgroup and its global stats (None when off).
    pub fn bpf_summary(&self) -> Option<BpfSummary> {
        let b = self.bpf.as_ref()?;
        let counters = b
            .counters()
            .into_iter()
            .map(|(id, c)| (id, BpfCounters { total: c.total.to_vec(), suppressed: c.suppressed }))
            .collect();
        let s = b.stats();
        let stats = BpfStats { emitted: s.emitted, ring_full: s.ring_full, rate_limited: s.rate_limited };
        Some(BpfSummary { counters, stats })
    }

    fn note(&mut self, msg: String) {
        if !self.degraded.contains(&msg) {
            self.degraded.push(msg);
        }
    }

    /// Sleeps until a signal fires or `timeout` passes; returns the wakeups, per cgroup id.
    /// EINTR (a shutdown signal) and a `Handle` request return early with no events.
    pub fn wait(&mut self, timeout: Duration) -> Vec<Wakeup> {
        let mut fds: Vec<libc::pollfd> = Vec::new();
        let mut ids: Vec<Option<CgroupId>> = Vec::new();
        for (id, (_, fd)) in &self.psi {
            fds.push(libc::pollfd { fd: fd.value.as_raw_fd(), events: libc::POLLPRI, revents: 0 });
            ids.push(Some(*id));
        }
        if let Some(ino) = &self.inotify {
            fds.push(libc::pollfd { fd: ino.as_raw_fd(), events: libc::POLLIN, revents: 0 });
            ids.push(None);
        }
        let tree_fd = self.tree.as_ref().map(|f| f.as_raw_fd());
        if let Some(fd) = tree_fd {
            fds.push(libc::pollfd { fd, events: libc::POLLIN, revents: 0 });
            ids.push(None);
        }
        if let Some(fd) = self.kernel_log {
            fds.push(libc::pollfd { fd, events: libc::POLLIN, revents: 0 });
            ids.push(None);
        }
        if let Some(fd) = self.wake {
            fds.push(libc::pollfd { fd, events: libc::POLLIN, revents: 0 });
            ids.push(None);
        }
        if let Some(bpf) = &self.bpf {
            fds.push(libc::pollfd { fd: bpf.fd(), events: libc::POLLIN, revents: 0 });
        }
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: fds is a valid array of pollfd for the duration of the call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        let mut out = Vec::new();
        // The ring is drained on every wakeup (cheap, never blocks), not only when its fd
        // fired: a crossing that raced with another wakeup is not left for the next one.
        // Appended, not replaced: a coalesced wait (two calls before the daemon drains them)
        // keeps every crossing for the log.
        let fresh = self.bpf.as_mut().map(|b| b.drain()).unwrap_or_default();
        for c in &fresh {
            let item = Wakeup { cgroup: c.cgroup_id, path: c.cgroup.clone(), event: BpfSource::signal(c) };
            if !out.contains(&item) {
                out.push(item);
            }
        }
        self.bpf_crossings.extend(fresh);
        if n <= 0 {
            return out;
        }
        let mut gone = Vec::new();
        let mut tree_changed = false;
        // zip stops at `ids`: the BPF fd (last, no id) was drained above.
        for (p, id) in fds.iter().zip(ids) {
            match id {
                Some(id) if p.revents & libc::POLLERR != 0 => gone.push(id), // cgroup removed
                Some(id) if p.revents & libc::POLLPRI != 0 => {
                    let path = self.psi.get(&id).map(|(path, _)| path.clone()).unwrap_or_default();
                    out.push(Wakeup { cgroup: id, path, event: SignalEvent::PsiTrigger });
                }
                None if Some(p.fd) == tree_fd => tree_changed |= p.revents & libc::POLLIN != 0,
                // POLLERR too: records were overwritten unread, and the next read resumes.
                None if Some(p.fd) == self.kernel_log => self.kernel_log_ready |= p.revents != 0,
                // A request: the loop reads its flag; emptied so the next wait sleeps again.
                None if Some(p.fd) == self.wake && p.revents != 0 => crate::handle::drain_wake(p.fd),
                None if p.revents & libc::POLLIN != 0 => out.extend(self.drain_inotify()),
                _ => {}
            }
        }
        for id in gone {
            self.psi.remove(&id);
        }
        if tree_changed {
            if let Some(root) = self.root.clone() {
                self.drain_tree(&root);
            }
        }
        out
    }

    fn drain_inotify(&mut self) -> Vec<Wakeup> {
        let Some(ino) = &self.inotify else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = unsafe { libc::read(ino.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                break;
            }
            for ev in crate::inotify::records(&buf[..n as usize]) {
                // The watch is gone (its cgroup's files were freed, or `sync` removed it):
                // no memory.events change. A cgroup still managed is watched anew by `sync`.
                if ev.mask & libc::IN_IGNORED != 0 {
                    if let Some((cgroup, _)) = self.watches.remove(&ev.wd) {
                        self.watched.remove(&cgroup);
                    }
                    continue;
                }
                if let Some((cgroup, path)) = self.watches.get(&ev.wd) {
                    let item = Wakeup { cgroup: *cgroup, path: path.clone(), event: SignalEvent::EventsChanged };
                    if !out.contains(&item) {
                        out.push(item);
                    }
                }
            }
        }
        out
    }
}

/// Registers a trigger in the window this process may use (`short`: whether the 500 ms
/// one is still worth trying). Ok((fd, true)): this call found the short window refused
/// and fell back to 2 s, for good.
/// Registers a trigger on the memory.pressure file `open` opens read-write (beneath the root).
fn psi_trigger(
    open: impl Fn() -> std::io::Result<std::fs::File>,
    short: &mut bool,
) -> std::io::Result<(OwnedFd, bool)> {
    use std::io::Write;
    if *short {
        let mut f = open()?;
        match f.write_all(PSI_TRIGGER.as_bytes()) {
            Ok(()) => return Ok((f.into(), false)),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => *short = false,
            Err(e) => return Err(e),
        }
        // A refused trigger leaves the file unusable for another: a fresh open.
        let mut f = open()?;
        f.write_all(PSI_TRIGGER_UNPRIVILEGED.as_bytes())?;
        return Ok((f.into(), true));
    }
    let mut f = open()?;
    f.write_all(PSI_TRIGGER_UNPRIVILEGED.as_bytes())?;
    Ok((f.into(), false))
}
