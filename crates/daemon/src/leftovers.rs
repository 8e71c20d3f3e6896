//! Cgroups `memqos run` left behind, removed (`policy.remove_leftovers_after_ms`): a tool
//! call's whose `memqos run` was SIGKILLed (its own sweep runs only at the session's next
//! call), and sessions with no calls left, which nothing else ever removes; on an agent host
//! the tree would otherwise grow without bound.
//!
//! Only cgroups marked by `memqos run` at creation (`memqos_schema::call::MADE_BY_RUN_XATTR`)
//! and owned by a trusted owner (`observe::trusted`: a tenant's mark on its own cgroups counts
//! for nothing) are removed, and only once empty (`populated 0`), childless and unlocked:
//! a call's creator holds an exclusive `flock` on its directory while it lives, every call of
//! a session a shared one on the session's (`memqos_agent::layout`). The daemon takes the
//! lock exclusively and without waiting, holds it across the rmdir, and lets a creator that
//! races it find its directory gone (the agent's rule). Work is bounded: a few hundred looks
//! and a few removals per periodic tick, off the reaction path.

use crate::actuator::Actuator;
use crate::beneath::Root;
use crate::events::Event;
use memqos_cgroupfs::beneath::Dir;
use memqos_schema::call::{MADE_BY_RUN_XATTR, MADE_CALL, MADE_SESSION};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Cgroups looked at per tick at most: a tree of thousands is gone through over a few ticks.
const LOOKS_PER_TICK: usize = 256;
/// Cgroups removed per tick at most.
const REMOVALS_PER_TICK: usize = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Call,
    Session,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Call => MADE_CALL,
            Kind::Session => MADE_SESSION,
        }
    }
}

/// What the daemon knows of one leaf cgroup (by id).
struct Tracked {
    rel: String,
    /// Made by `memqos run` (None: not, or not yet looked at).
    kind: Option<Kind>,
    next_look: Instant,
    /// Seen empty, childless and unlocked since.
    idle_since: Option<Instant>,
    /// A dry run said it would remove it.
    said: bool,
}

/// The leftovers seen and removed in this run of the loop.
#[derive(Default)]
pub(crate) struct Leftovers {
    tracked: HashMap<u64, Tracked>,
    /// Removed since the loop started, by kind (`call`, `session`).
    pub removed: BTreeMap<String, u64>,
}

impl Leftovers {
    /// One periodic tick: looks at the leaves due (`rel`, id), then removes those idle for
    /// `grace_ms` (0: never), calls before sessions. A dry run removes nothing and says once
    /// per cgroup what it would remove.
    pub(crate) fn tick(&mut self, grace_ms: u64, root: &Root, leaves: &[(&str, u64)], act: &mut Actuator) {
        if grace_ms == 0 {
            self.tracked.clear();
            return;
        }
        let (now, grace) = (Instant::now(), Duration::from_millis(grace_ms));
        let present: HashSet<u64> = leaves.iter().map(|&(_, id)| id).collect();
        self.tracked.retain(|id, _| present.contains(id));
        let mut looks = 0;
        for &(rel, id) in leaves {
            let t = self.tracked.entry(id).or_insert_with(|| Tracked {
                rel: rel.to_owned(),
                kind: None,
                next_look: now,
                idle_since: None,
                said: false,
            });
            if t.next_look <= now && looks < LOOKS_PER_TICK {
                looks += 1;
                t.look(root, id, now, grace);
            }
        }
        let mut due: Vec<(Kind, u64)> = self
            .tracked
            .iter()
            .filter(|(_, t)| t.idle_since.is_some_and(|s| now.duration_since(s) >= grace))
            .filter_map(|(&id, t)| Some((t.kind?, id)))
            .collect();
        due.sort();
        for (_, id) in due.into_iter().take(REMOVALS_PER_TICK) {
            self.remove(root, id, now, grace, act);
        }
    }

    /// Marked cgroups idle now, waiting out the grace period.
    pub(crate) fn waiting(&self) -> usize {
        self.tracked.values().filter(|t| t.kind.is_some() && t.idle_since.is_some()).count()
    }

    /// Removes the cgroup `id` if it is still marked, idle and unlocked; under its lock.
    fn remove(&mut self, root: &Root, id: u64, now: Instant, grace: Duration, act: &mut Actuator) {
        let Some(t) = self.tracked.get_mut(&id) else { return };
        let Some((kind, dir)) = marked(root, &t.rel, id) else {
            self.tracked.remove(&id);
            return;
        };
        // Held across the rmdir: a creator's mkdir-then-lock finds its directory gone.
        if !lock_exclusive(&dir) || !idle(&dir) {
            t.idle_since = None;
            t.next_look = now + grace / 4;
            return;
        }
        let idle_ms = t.idle_since.map_or(0, |s| now.duration_since(s).as_millis() as u64);
        let event = |dry_run| Event::LeftoverRemoved {
            cgroup: t.rel.clone(),
            cgroup_id: id,
            kind: kind.name().to_owned(),
            idle_ms,
            dry_run,
        };
        if act.dry_run() {
            if !std::mem::replace(&mut t.said, true) {
                act.emit(event(true));
            }
            return;
        }
        match root.remove_cgroup(&t.rel, id) {
            Ok(()) => {
                act.forget_cgroup(id);
                act.emit(event(false));
                *self.removed.entry(kind.name().to_owned()).or_default() += 1;
                self.tracked.remove(&id);
            }
            // Someone else removed it (the session's next call swept it): nothing to count.
            Err(e) if memqos_cgroupfs::vanished(&e) => {
                self.tracked.remove(&id);
            }
            // EBUSY: a process or a child arrived since the check; looked at again later.
            Err(e) => {
                if e.raw_os_error() != Some(libc::EBUSY) {
                    act.emit(Event::Degraded { message: format!("removing leftover {}: {e}", t.rel) });
                }
                t.idle_since = None;
                t.next_look = now + grace;
            }
        }
        drop(dir); // the lock, after the rmdir
    }
}

impl Tracked {
    /// Whether it is a marked cgroup and idle now. Unmarked ones are looked at again after a
    /// grace period (a mark set after the mkdir counts then), marked busy ones four times as
    /// often.
    fn look(&mut self, root: &Root, id: u64, now: Instant, grace: Duration) {
        let Some((kind, dir)) = marked(root, &self.rel, id) else {
            (self.kind, self.idle_since, self.next_look) = (None, None, now + grace);
            return;
        };
        self.kind = Some(kind);
        let free = lock_exclusive(&dir) && idle(&dir);
        drop(dir); // unlocked at once: only a removal holds it
        if free {
            self.idle_since.get_or_insert(now);
        } else {
            self.idle_since = None;
        }
        self.next_look = now + grace / 4;
    }
}

/// The cgroup `rel`, if it is still `id`, owned by a trusted owner and marked by `memqos run`.
fn marked(root: &Root, rel: &str, id: u64) -> Option<(Kind, Dir)> {
    let dir = root.cgroup(rel).ok().filter(|d| d.id() == id)?;
    crate::observe::trusted(root, &dir).ok()?;
    let kind = match dir.xattr_bytes(MADE_BY_RUN_XATTR, 16).ok()??.as_slice() {
        b if b == MADE_CALL.as_bytes() => Kind::Call,
        b if b == MADE_SESSION.as_bytes() => Kind::Session,
        _ => return None,
    };
    Some((kind, dir))
}

/// No process in it or below (an unreadable cgroup.events counts as populated) and no child.
fn idle(dir: &Dir) -> bool {
    !dir.is_populated().unwrap_or(true) && memqos_cgroupfs::beneath::subdirs(dir.fd()).is_ok_and(|s| s.is_empty())
}

/// An exclusive `flock` on the directory's own descriptor, without waiting: false while a
/// creator (a call) or any call of a session holds its lock. Released when `dir` is dropped.
fn lock_exclusive(dir: &Dir) -> bool {
    // SAFETY: a valid fd.
    unsafe { libc::flock(dir.fd().as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}
