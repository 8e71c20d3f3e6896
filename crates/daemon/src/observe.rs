//! Turns the cgroup tree into the policy engine's `Observation`, one sample per tick.

use crate::beneath::Root;
use crate::fast_read::{out_of_descriptors, FastFile, FastReader};
use crate::journal::Journal;
use anyhow::{anyhow, Context};
use memqos_cgroupfs::MemoryEvents;
use memqos_policy::{
    CgroupObs, Config, Knobs, Limit, Observation, ParentObs, TierIndex, EXPECTED_PEAK_XATTR, WORKLOAD_XATTR,
};
use memqos_schema::KnobFile;
use memqos_stats::{BackendChoice, CgroupStats, Snapshot, StatsSource};
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

mod hints;
pub(crate) use hints::{classify, trusted};
use hints::{declaration, owned_key, workload};

/// Reads the tree through memqos-stats (one snapshot per tick) and keeps the counters
/// needed to turn totals into deltas between ticks.
pub struct Sampler {
    backend: BackendChoice,
    source: Option<(PathBuf, Box<dyn StatsSource>)>,
    snap: Snapshot,
    /// Messages for the log's `degraded` lines.
    pub notes: Vec<String>,
    /// The fast path ran out of descriptors once (said once per run).
    fd_limit_noted: bool,
    /// Which backend the snapshots come from, and why not BPF under `auto`; taken once by
    /// the daemon for its `stats_backend` event.
    pub backend_report: Option<(&'static str, Option<String>)>,
    /// Keyed by cgroup id: a re-created cgroup starts without history.
    prev_events: HashMap<u64, MemoryEvents>,
    prev_psi_total: HashMap<u64, u64>,
    /// Protected cgroups' refault count (pages) and when it was read (`now_ms`).
    prev_refaults: HashMap<u64, (u64, u64)>,
    prev_parent_events: Option<MemoryEvents>,
    /// The parent as the calm path last read it (`parent_needs_look`), for the admission
    /// allowances of a light tick.
    pub calm_parent: Option<ParentObs>,
    /// Ids of the managed cgroups of the last sample.
    pub alive: HashSet<u64>,
    /// Each cgroup's tier, classified once (by path and, with xattr hints, its xattrs); a
    /// reload clears it (`reclassify`).
    tiers: HashMap<u64, Option<TierIndex>>,
    /// The last periodic sample's managed cgroups and parent: the fast path's base.
    last: Vec<CgroupObs>,
    last_parent: ParentObs,
    fast: FastReader,
    /// The root per-cgroup reads go through beneath (`dirs_root`).
    dirs: Option<Root>,
    /// Cgroups whose `user.memqos.expected_peak` did not parse, with the value (said once
    /// per value).
    bad_declarations: HashMap<u64, String>,
    /// The same for `user.memqos.workload` keys that are not valid.
    bad_workloads: HashMap<u64, String>,
    /// The valid workload keys of the last full sample's cgroups of `learn_peak` tiers, by
    /// cgroup id (for `learn::Learner`).
    pub workloads: HashMap<u64, String>,
    /// Managed cgroups left out of the samples, with why (said once per cgroup and reason):
    /// no memory controller, unreadable or malformed files. One cgroup never stops the
    /// daemon; the rest is managed as before.
    skipped: HashMap<u64, String>,
    /// The descriptor budget was found short of the tree (said once per run).
    budget_noted: bool,
    /// Cgroups left out of this sample that the last one managed: memqos puts back what it
    /// wrote to them rather than leave them throttled while it cannot see them.
    pub dropped: Vec<u64>,
    /// A cgroup was made whose memory knobs should not wait for the calm path's next full
    /// sample (see `Daemon::adopt`): the next periodic tick samples the whole tree.
    pub full_sample_due: bool,
    /// Where the periodic sample looks for active swap (`ParentObs::swapless`, swap_max).
    pub swaps: PathBuf,
    /// What it found there at the last periodic sample (`swap_max::read_swaps`).
    pub swap: Result<bool, String>,
}

/// Throttle candidates a fast reaction reads: the largest holders of the throttle tiers as
/// of the last periodic sample. Fixed, so a reaction costs the same at any tree size; the
/// next periodic tick (at most one sampling interval later) sees everyone.
pub const FAST_CANDIDATES: usize = 8;

impl Default for Sampler {
    fn default() -> Self {
        Sampler::new(BackendChoice::Text)
    }
}

/// One managed cgroup as last seen, for `memqos status`.
#[derive(Clone, Debug, Serialize)]
pub struct Seen {
    pub cgroup: String,
    pub cgroup_id: u64,
    pub tier: String,
    pub usage_bytes: u64,
    pub knobs: Knobs,
    pub original: Knobs,
    pub psi_some_avg10: f64,
    pub events: MemoryEvents,
}

/// The cgroup at `dir` is there and the memory controller is not enabled for it.
fn lacks_memory_controller(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("cgroup.controllers"))
        .is_ok_and(|text| !memqos_cgroupfs::parse::parse_controllers(&text).contains(&"memory"))
}

/// A write's value in `knobs` (files the engine does not read are ignored).
fn apply_write(knobs: &mut Knobs, w: &crate::events::WriteEvent) {
    if let Some(knob) = w.knob() {
        knobs.set(knob, &w.value);
    }
}

/// A value the snapshot must have for a managed cgroup; missing means the memory controller
/// is not enabled for it (or the kernel lacks the file).
fn need<T>(v: Option<T>, root: &Path, c: &CgroupStats, file: &str) -> anyhow::Result<T> {
    v.ok_or_else(|| {
        anyhow!(
            "cgroup {}: no {file} (is the memory controller enabled in its parent's cgroup.subtree_control?)",
            memqos_cgroupfs::name::fs_path(root, &c.path).display()
        )
    })
}

/// `read_freeze`: whether cgroup.freeze matters (a tier memqos may freeze, or a cgroup memqos
/// froze): it is a file of its own, three system calls per cgroup and tick, and the engine
/// acts on it only there. Elsewhere it counts as thawed.
fn knobs(root: &Path, dirs: Option<&Root>, c: &CgroupStats, read_freeze: bool) -> anyhow::Result<Knobs> {
    Ok(Knobs {
        high: need(c.high, root, c, "memory.high")?,
        max: need(c.max, root, c, "memory.max")?,
        low: need(c.low, root, c, "memory.low")?,
        min: need(c.min, root, c, "memory.min")?,
        // cgroup.freeze is a knob, not a memory statistic: read here, per managed leaf. The
        // root of a hierarchy has none; leaves always do.
        frozen: read_freeze
            && dirs.and_then(|r| r.cgroup(&c.path).ok()).is_some_and(|d| d.is_frozen().unwrap_or(false)),
    })
}

/// Originals: the journaled value where memqos has written the knob, else the current one.
fn originals(journal: &Journal, id: u64, current: &Knobs) -> Knobs {
    let mut originals = *current;
    for knob in KnobFile::ALL {
        if let Some(v) = journal.original(id, knob.name()) {
            originals.set(knob, v);
        }
    }
    originals
}

const PARENT: &[FastFile] = &[FastFile::Current, FastFile::Max, FastFile::High, FastFile::Events];
const SIGNALLED: &[FastFile] =
    &[FastFile::Current, FastFile::High, FastFile::Max, FastFile::Events, FastFile::Pressure];
const CANDIDATE: &[FastFile] = &[FastFile::Current, FastFile::High];

fn is_protected(cfg: &Config, c: &CgroupObs) -> bool {
    cfg.tiers.get(c.tier).is_some_and(|t| t.is_protected())
}

/// The throttle candidates of a fast reaction: the largest throttle-tier cgroups.
fn candidates<'a>(cfg: &Config, cgroups: &'a [CgroupObs]) -> Vec<&'a CgroupObs> {
    let mut v: Vec<&CgroupObs> = cgroups.iter().filter(|c| cfg.tiers.get(c.tier).is_some_and(|t| t.throttle)).collect();
    v.sort_by(|a, b| b.usage_bytes.cmp(&a.usage_bytes).then_with(|| a.path.cmp(&b.path)));
    v.truncate(FAST_CANDIDATES);
    v
}

/// Pages refaulted, from memory.stat: `workingset_refault_anon` + `workingset_refault_file`
/// (5.9 and later), or `workingset_refault` before the split; None when neither is there.
fn refaults(stat: &str) -> Option<u64> {
    let mut total = None;
    for (key, value) in memqos_cgroupfs::parse::flat_keyed(stat).flatten() {
        if matches!(key, "workingset_refault_anon" | "workingset_refault_file" | "workingset_refault") {
            total = Some(total.unwrap_or(0u64).saturating_add(value));
        }
    }
    total
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        p if p > 0 => p as u64,
        _ => 4096,
    }
}

impl Sampler {
    pub fn new(backend: BackendChoice) -> Sampler {
        Sampler {
            backend,
            source: None,
            snap: Snapshot::default(),
            notes: Vec::new(),
            fd_limit_noted: false,
            backend_report: None,
            prev_events: HashMap::new(),
            prev_psi_total: HashMap::new(),
            prev_refaults: HashMap::new(),
            prev_parent_events: None,
            calm_parent: None,
            alive: HashSet::new(),
            tiers: HashMap::new(),
            last: Vec::new(),
            last_parent: ParentObs::default(),
            fast: FastReader::default(),
            dirs: None,
            bad_declarations: HashMap::new(),
            bad_workloads: HashMap::new(),
            workloads: HashMap::new(),
            skipped: HashMap::new(),
            budget_noted: false,
            dropped: Vec::new(),
            full_sample_due: false,
            swaps: PathBuf::from(crate::swap_max::PROC_SWAPS),
            swap: Err("not read yet".into()),
        }
    }

    /// The last periodic sample found no active swap. Unreadable or malformed counts as "may
    /// swap": the engine's behaviour before it knew.
    fn swapless(&self) -> bool {
        self.swap == Ok(false)
    }

    /// The last periodic sample found active swap (`ParentObs::swap_active`); unreadable or
    /// malformed is neither this nor `swapless`.
    fn swap_active(&self) -> bool {
        self.swap == Ok(true)
    }

    /// Every cgroup of the last sample, the root ("") included: relative paths.
    pub fn dirs(&self) -> Vec<&str> {
        self.snap.cgroups.iter().map(|c| c.path.as_str()).collect()
    }

    /// The leaves of the last snapshot (cgroups without children, the root excepted), with
    /// their ids: where leftovers of `memqos run` are looked for.
    pub fn leaves(&self) -> Vec<(&str, u64)> {
        let cgs = &self.snap.cgroups;
        // Pre-order: a leaf is followed by a cgroup no deeper than itself (or nothing).
        let leaf = |i: usize| cgs.get(i + 1).is_none_or(|next| next.depth <= cgs[i].depth);
        (1..cgs.len()).filter(|&i| leaf(i)).map(|i| (cgs[i].path.as_str(), cgs[i].id)).collect()
    }

    /// A cgroup's tier, classified once per cgroup id (None: no tier).
    pub fn tier_of(&mut self, cfg: &Config, root: &Path, rel: &str, id: u64) -> Option<TierIndex> {
        let dirs = dirs_root(&mut self.dirs, root);
        *self.tiers.entry(id).or_insert_with(|| classify(cfg, dirs, rel))
    }

    /// The calm path's check, every sampling interval between full samples: reads only the
    /// parent. True when the whole tree should be looked at now: the parent hit its high or
    /// max, or OOM-killed, since the last full sample, or its usage plus `reserve` (the
    /// protected cgroups' room to grow back) comes within twice the headroom guard of its
    /// limit (within a tenth of the limit when the guard is off).
    pub fn parent_needs_look(
        &mut self,
        cfg: &Config,
        root: &Root,
        hierarchy_root: bool,
        reserve: u64,
    ) -> anyhow::Result<bool> {
        if hierarchy_root {
            return Ok(false); // no limit, no memory.events: pressure signals only
        }
        let s = match self.fast.read(root, "", 0, PARENT) {
            Ok(Some(s)) => s,
            Ok(None) => anyhow::bail!("cgroup_root {} vanished", root.path().display()),
            // Cannot look cheaply: look at everything.
            Err(e) if out_of_descriptors(&e) => {
                Self::note_fd_limit(&mut self.notes, &mut self.fd_limit_noted, &e);
                return Ok(true);
            }
            Err(e) => return Err(e),
        };
        if let (Some(ev), Some(prev)) = (s.events, self.prev_parent_events) {
            let d = ev.delta_since(&prev);
            if d.high > 0 || d.max > 0 || d.oom > 0 || d.oom_kill > 0 {
                return Ok(true);
            }
        }
        self.calm_parent = Some(ParentObs {
            usage_bytes: s.current.unwrap_or(0),
            max: s.max.unwrap_or(Limit::Max),
            high: s.high.unwrap_or(Limit::Max),
            events_delta: MemoryEvents::default(),
            swapless: self.swapless(),
            swap_active: self.swap_active(),
        });
        let limit = s.max.unwrap_or(Limit::Max).min(s.high.unwrap_or(Limit::Max));
        let Limit::Bytes(limit) = limit else { return Ok(false) };
        let guard = cfg.policy.headroom_guard;
        let margin = if guard > 0 { guard.saturating_mul(2) } else { limit / 10 };
        Ok(s.current.unwrap_or(0).saturating_add(reserve).saturating_add(margin) >= limit)
    }

    /// The calm path's check of the protected cgroups: reads the memory.current of each
    /// populated protected cgroup of the last full sample (one pread each). `None` when one
    /// of them now uses more than its protection (memory.low/min as last sampled, updated by
    /// memqos's own writes since: [`Sampler::note_written`]) covers, or is gone: the whole
    /// tree must be looked at. Otherwise the room they may grow back into (protection minus
    /// usage now, summed), for `parent_needs_look`.
    ///
    /// Usage must be read now. The engine reserves room for a protected cgroup's regrowth
    /// only from the peaks it saw, so a burst past the learned working set must be seen
    /// rather than come and go between two calm full samples; and the room computed from the
    /// last full sample (made during a burst) is almost nothing, so the lower tiers grow into
    /// the next burst's room unchecked (both seen in the controller scenario on 6.12: the
    /// protected task OOM-killed in its second burst). A protection changed by someone else
    /// is seen at the next full sample.
    pub fn protected_room(&mut self, cfg: &Config, root: &Root) -> anyhow::Result<Option<u64>> {
        let watched: Vec<(String, u64, u64)> = self
            .last
            .iter()
            .filter(|c| is_protected(cfg, c) && c.is_populated())
            .map(|c| (c.path.clone(), c.id.get(), c.current.low.max(c.current.min).bytes().unwrap_or(u64::MAX)))
            .collect();
        let mut room = 0u64;
        for (rel, id, protection) in watched {
            let s = match self.fast.read(root, &rel, id, &[FastFile::Current]) {
                Ok(Some(s)) => s,
                Ok(None) => return Ok(None), // gone or re-created: the tree changed
                Err(e) if out_of_descriptors(&e) => {
                    Self::note_fd_limit(&mut self.notes, &mut self.fd_limit_noted, &e);
                    return Ok(None); // cannot look cheaply: take the full sample
                }
                // Unreadable now: the full sample reads it (and says why, if it still is).
                Err(_) => return Ok(None),
            };
            let usage = s.current.unwrap_or(0);
            if usage > protection {
                return Ok(None);
            }
            room = room.saturating_add(protection - usage);
        }
        Ok(Some(room))
    }

    /// memqos's writes of this tick, into the last full sample's view (see
    /// `protected_room`), and into `seen` for status.json and the metrics, so that both show
    /// what the knobs hold now rather than what they held before the writes.
    pub fn note_written(&mut self, seen: &mut [Seen], wrote: &[crate::events::WriteEvent]) {
        for w in wrote.iter().filter(|w| w.outcome == crate::events::Outcome::Ok) {
            if let Some(s) = seen.iter_mut().find(|s| s.cgroup_id == w.cgroup_id && s.cgroup == w.cgroup) {
                apply_write(&mut s.knobs, w);
            }
            if let Some(c) = self.last.iter_mut().find(|c| c.id.get() == w.cgroup_id && c.path == w.cgroup) {
                apply_write(&mut c.current, w);
            }
        }
    }

    /// An armed memory.high taken over as memqos's own (`admission`): its original is `max`
    /// in the last full sample's view too, which the fast path's reactions start from.
    pub fn note_adopted(&mut self, id: u64) {
        if let Some(c) = self.last.iter_mut().find(|c| c.id.get() == id) {
            c.original.high = Limit::Max;
        }
    }

    /// Opens, on the periodic path, the descriptors a reaction would read now (the parent,
    /// every protected cgroup, the current candidates), so the fast path reads without
    /// opening. Cgroups that vanished meanwhile are skipped.
    pub fn warm_fast(&mut self, cfg: &Config, root: &Root, hierarchy_root: bool) -> anyhow::Result<()> {
        let mut wanted: Vec<(&str, u64, &[FastFile])> = Vec::new();
        if !hierarchy_root {
            wanted.push(("", 0, PARENT));
        }
        wanted.extend(
            self.last.iter().filter(|c| is_protected(cfg, c)).map(|c| (c.path.as_str(), c.id.get(), SIGNALLED)),
        );
        wanted.extend(candidates(cfg, &self.last).into_iter().map(|c| (c.path.as_str(), c.id.get(), CANDIDATE)));
        for (rel, id, files) in wanted {
            if let Err(e) = self.fast.prepare(root, rel, id, files) {
                // Not fatal: what is not open is opened when a reaction needs it, or left
                // to the periodic sample.
                if out_of_descriptors(&e) {
                    Self::note_fd_limit(&mut self.notes, &mut self.fd_limit_noted, &e);
                    break;
                }
                if rel.is_empty() {
                    return Err(e); // the root itself
                }
            }
        }
        Ok(())
    }

    /// One `degraded` line per run when the fast path runs out of descriptors.
    fn note_fd_limit(notes: &mut Vec<String>, noted: &mut bool, e: &anyhow::Error) {
        if !std::mem::replace(noted, true) {
            notes.push(format!(
                "{e:#}: the fast path keeps ~6 descriptors per protected cgroup; cgroups it cannot open wait for the periodic sample. Raise LimitNOFILE"
            ));
        }
    }

    /// Whether a reservation may be in force: a protected cgroup of the last full sample
    /// declares an expected peak (its own, learned, or its tier's).
    pub fn reservation_possible(&self, cfg: &Config) -> bool {
        self.last.iter().any(|c| {
            cfg.tiers
                .get(c.tier)
                .is_some_and(|t| t.is_protected() && (c.expected_peak_bytes.is_some() || t.expected_peak.is_some()))
        })
    }

    /// Snapshots from `backend` from the next sample on (a reload changed `signals.bpf`).
    pub fn set_backend(&mut self, backend: BackendChoice) {
        if backend != self.backend {
            self.backend = backend;
            self.source = None;
        }
    }

    /// Forgets every cgroup's tier (a reload may have changed the rules).
    pub fn reclassify(&mut self) {
        self.tiers.clear();
    }

    /// Takes one snapshot of the managed tree and turns it into an observation. Cgroups
    /// that vanish while being read are left out by the snapshot; a managed cgroup without
    /// memory files is an error naming it.
    pub fn sample(
        &mut self,
        cfg: &Config,
        root: &memqos_cgroupfs::Cgroup,
        journal: &Journal,
        now_ms: u64,
    ) -> anyhow::Result<(Observation, Vec<Seen>)> {
        let opened = self.source.as_ref().is_none_or(|(p, _)| p != root.path());
        let mut why_not_bpf = None;
        if opened {
            let mut source = memqos_stats::open(root.path(), self.backend, &mut |m| why_not_bpf = Some(m.to_owned()))
                .with_context(|| format!("opening stats for {}", root.path().display()))?;
            // The engine uses usage, events, limits and PSI; memory.stat would be read (and the
            // kernel's counters flushed) every tick for nothing.
            source.skip_statistics();
            self.source = Some((root.path().to_owned(), source));
        }
        let (_, source) = self.source.as_mut().expect("opened above");
        source.refresh(&mut self.snap)?;
        // One small read per periodic tick: swap can be turned on or off while memqos runs.
        self.swap = crate::swap_max::read_swaps(&self.swaps);
        if opened {
            self.backend_report = Some((self.snap.backend, why_not_bpf));
        }
        let per_cgroup = memqos_stats::FileSet::Knobs.files_per_cgroup() as u64;
        let bulk = memqos_cgroupfs::fds::budget() / 2;
        let cgroups = self.snap.cgroups.len() as u64;
        if self.snap.backend == "text" && cgroups * per_cgroup > bulk && !self.budget_noted {
            self.budget_noted = true;
            self.notes.push(format!(
                "descriptor budget: the open-file limit ({}) lets the files of about {} of these {cgroups} cgroups stay open; the others are opened at each sample (slower, not wrong). Raise LimitNOFILE (or the container's) to keep them all",
                memqos_cgroupfs::fds::open_file_limit(),
                bulk / per_cgroup
            ));
        }
        let snap = &self.snap;
        let top = snap.cgroups.first().ok_or_else(|| anyhow!("cgroup_root {} vanished", root.path().display()))?;
        let parent = if root.is_hierarchy_root() {
            // The hierarchy's root (a whole systemd host) has no memory.current/max/high/events:
            // no limit, so no headroom guard; usage is what the managed tree holds.
            let leaves = snap.cgroups.iter().skip(1).filter(|c| c.depth == 1).filter_map(|c| c.current);
            ParentObs {
                usage_bytes: leaves.sum(),
                swapless: self.swapless(),
                swap_active: self.swap_active(),
                ..ParentObs::default()
            }
        } else {
            let parent_ev = need(top.events, root.path(), top, "memory.events")?;
            let parent = ParentObs {
                usage_bytes: need(top.current, root.path(), top, "memory.current")?,
                max: need(top.max, root.path(), top, "memory.max")?,
                high: need(top.high, root.path(), top, "memory.high")?,
                events_delta: self.prev_parent_events.map(|p| parent_ev.delta_since(&p)).unwrap_or_default(),
                swapless: self.swapless(),
                swap_active: self.swap_active(),
            };
            self.prev_parent_events = Some(parent_ev);
            parent
        };

        let mut cgroups = Vec::new();
        let mut seen = Vec::new();
        let mut alive = HashSet::new();
        let mut workloads = HashMap::new();
        let dirs = dirs_root(&mut self.dirs, root.path());
        for (i, c) in snap.cgroups.iter().enumerate().skip(1) {
            // Pre-order: a leaf is followed by a cgroup no deeper than itself (or nothing).
            let leaf = snap.cgroups.get(i + 1).is_none_or(|next| next.depth <= c.depth);
            if !leaf {
                continue;
            }
            let tier = *self.tiers.entry(c.id).or_insert_with(|| classify(cfg, dirs, &c.path));
            let Some(tier) = tier else { continue };
            if let Some(error) = &c.error {
                Self::skip(&mut self.skipped, &mut self.notes, c, format!("unreadable: {error}"));
                continue;
            }
            let observed =
                Self::observe_one(&mut self.prev_events, &mut self.prev_psi_total, root.path(), dirs, c, journal, {
                    let tier_freezes =
                        cfg.tiers.get(tier).is_some_and(|t| t.freeze || t.queue_held || t.freeze_thrashing);
                    tier_freezes || journal.original(c.id, "cgroup.freeze").is_some()
                });
            let (mut obs, s) = match observed {
                Ok(o) => o,
                // A cgroup being removed loses its files before its directory (seen at 100
                // tool-call cgroups/s: the daemon stopped on "no memory.current"): it has
                // vanished. A cgroup still there without the memory controller (any tenant who
                // may mkdir can make one) is left unmanaged, said once; the rest is managed.
                Err(_) if !lacks_memory_controller(&memqos_cgroupfs::name::fs_path(root.path(), &c.path)) => continue,
                Err(_) => {
                    Self::skip(
                        &mut self.skipped,
                        &mut self.notes,
                        c,
                        "the memory controller is not enabled for it (its parent's cgroup.subtree_control lacks +memory)"
                            .into(),
                    );
                    continue;
                }
            };
            self.skipped.remove(&c.id);
            obs.tier = tier;
            // Only protected cgroups' emptiness changes a decision (regrowth room, protection).
            let protected = cfg.tiers.get(tier).is_some_and(|t| t.is_protected());
            // Refaults of a cgroup that may be frozen for thrashing (engine::thrash): its
            // memory PSI can miss the thrash too.
            let thrash_watch =
                cfg.policy.thrash_refault_rate > 0 && cfg.tiers.get(tier).is_some_and(|t| t.freeze_thrashing);
            if let Some(cg) = dirs.filter(|_| thrash_watch).and_then(|r| r.cgroup(&c.path).ok()) {
                Self::read_refaults(&mut self.prev_refaults, &cg, c.id, now_ms, &mut obs);
            }
            // A protected cgroup that cannot be opened now (gone) has no emptiness and no hints.
            if let Some((r, cg)) = dirs.filter(|_| protected).and_then(|r| Some((r, r.cgroup(&c.path).ok()?))) {
                obs.populated = cg.is_populated().ok();
                // Thrashing PSI can miss (Policy::pressure_refault_rate): memory.stat of the
                // protected cgroups (and freeze_thrashing ones, above) only, the rest of the
                // tree skips it (skip_statistics).
                if cfg.policy.pressure_refault_rate > 0 && !thrash_watch {
                    Self::read_refaults(&mut self.prev_refaults, &cg, c.id, now_ms, &mut obs);
                }
                match trusted(r, &cg) {
                    Ok(uid) => {
                        obs.expected_peak_bytes =
                            declaration(&mut self.bad_declarations, &mut self.notes, &cg, c.id, &c.path);
                        if cfg.tiers.get(tier).is_some_and(|t| t.learn_peak) {
                            if let Some(key) = workload(&mut self.bad_workloads, &mut self.notes, &cg, c.id, &c.path) {
                                workloads.insert(c.id, owned_key(uid, key));
                            }
                        }
                    }
                    Err(uid) => {
                        // Said once per cgroup, and only if it tries.
                        let tried =
                            [EXPECTED_PEAK_XATTR, WORKLOAD_XATTR].iter().any(|name| match cg.xattr_bytes(name, 1) {
                                Ok(v) => v.is_some(),
                                Err(e) => e.raw_os_error() == Some(libc::ERANGE), // set, and long
                            });
                        if tried && !self.bad_declarations.contains_key(&c.id) {
                            self.notes.push(format!(
                                "{}: hints ({EXPECTED_PEAK_XATTR}, {WORKLOAD_XATTR}) ignored: the cgroup is owned by uid {uid}; only root or the owner of cgroup_root may give them",
                                memqos_cgroupfs::name::display(&c.path)
                            ));
                            self.bad_declarations.insert(c.id, format!("untrusted uid {uid}"));
                        }
                    }
                }
            }
            let tier_name = cfg.tiers.get(tier).map(|t| t.name.clone()).unwrap_or_default();
            seen.push(Seen { tier: tier_name, ..s });
            alive.insert(c.id);
            cgroups.push(obs);
        }
        self.prev_events.retain(|k, _| alive.contains(k));
        self.prev_psi_total.retain(|k, _| alive.contains(k));
        self.prev_refaults.retain(|k, _| alive.contains(k));
        self.bad_declarations.retain(|k, _| alive.contains(k));
        self.bad_workloads.retain(|k, _| alive.contains(k));
        self.workloads = workloads;
        let present: HashSet<u64> = snap.cgroups.iter().map(|c| c.id).collect();
        self.tiers.retain(|k, _| present.contains(k));
        self.skipped.retain(|k, _| present.contains(k));
        self.fast.retain(&alive);
        self.dropped = self.skipped.keys().filter(|id| self.alive.contains(id)).copied().collect();
        let left_out = self.left_out_but_there(&present);
        self.dropped.extend(left_out);
        self.alive = alive;
        self.last.clone_from(&cgroups);
        self.last_parent = parent.clone();
        Ok((Observation { now_ms, parent, cgroups }, seen))
    }

    /// Managed cgroups of the last sample the snapshot leaves out while their directory with
    /// that id is still there: the statistics leave out a cgroup without memory.current (a
    /// tenant disabled the memory controller above it). Dropped like a skipped one (said
    /// once, its knobs put back), not left with memqos's values while unseen.
    fn left_out_but_there(&mut self, present: &HashSet<u64>) -> Vec<u64> {
        let Some(dirs) = &self.dirs else { return Vec::new() };
        let mut out = Vec::new();
        for c in self.last.iter().filter(|c| !present.contains(&c.id.get())) {
            if dirs.open_dir(&c.path, Some(c.id.get())).is_ok() {
                let name = memqos_cgroupfs::name::display(&c.path);
                self.notes.push(format!(
                    "cgroup {name} (id {}): not managed: it left the statistics while still there (no memory.current: its memory controller is disabled above it)",
                    c.id.get()
                ));
                out.push(c.id.get());
            }
        }
        out
    }

    /// The fast path's observation: the parent, the protected cgroups in `signalled`, and the
    /// [`FAST_CANDIDATES`] largest throttle-tier cgroups, read fresh through kept descriptors;
    /// everything else about them (originals, low/min, tier) comes from the last periodic
    /// sample. Deltas are taken against that sample and not stored, so the next periodic
    /// tick still measures its own interval (what `Engine::tick_fast` expects).
    pub fn sample_fast(
        &mut self,
        cfg: &Config,
        root: &Root,
        hierarchy_root: bool,
        signalled: &[memqos_policy::CgroupId],
        now_ms: u64,
    ) -> anyhow::Result<Observation> {
        let mut parent = self.last_parent.clone();
        if !hierarchy_root {
            let s = match self.fast.read(root, "", 0, PARENT) {
                Ok(Some(s)) => s,
                Ok(None) => anyhow::bail!("cgroup_root {} vanished", root.path().display()),
                // The parent as of the last periodic sample.
                Err(e) if out_of_descriptors(&e) => {
                    Self::note_fd_limit(&mut self.notes, &mut self.fd_limit_noted, &e);
                    Default::default()
                }
                Err(e) => return Err(e),
            };
            parent.usage_bytes = s.current.unwrap_or(parent.usage_bytes);
            parent.max = s.max.unwrap_or(parent.max);
            parent.high = s.high.unwrap_or(parent.high);
            if let (Some(ev), Some(prev)) = (s.events, self.prev_parent_events) {
                parent.events_delta = ev.delta_since(&prev);
            }
        }
        let mut wanted: Vec<(&CgroupObs, &[FastFile])> = Vec::new();
        for c in self.last.iter().filter(|c| is_protected(cfg, c) && signalled.contains(&c.id)) {
            wanted.push((c, SIGNALLED));
        }
        wanted.extend(candidates(cfg, &self.last).into_iter().map(|c| (c, CANDIDATE)));
        let mut cgroups = Vec::with_capacity(wanted.len());
        for (last, files) in wanted {
            let s = match self.fast.read(root, &last.path, last.id.get(), files) {
                Ok(Some(s)) => s,
                Ok(None) => continue, // vanished since the periodic sample
                Err(e) if out_of_descriptors(&e) => {
                    Self::note_fd_limit(&mut self.notes, &mut self.fd_limit_noted, &e);
                    continue;
                }
                // One cgroup unreadable: react with the others; the periodic sample says why.
                Err(_) => continue,
            };
            let mut c = last.clone();
            c.usage_bytes = s.current.unwrap_or(c.usage_bytes);
            c.current.high = s.high.unwrap_or(c.current.high);
            c.current.max = s.max.unwrap_or(c.current.max);
            c.events_delta = match (s.events, self.prev_events.get(&c.id.get())) {
                (Some(ev), Some(prev)) => ev.delta_since(prev),
                _ => Default::default(),
            };
            if let Some(psi) = s.pressure {
                let prev = self.prev_psi_total.get(&c.id.get()).copied();
                c.psi_some_delta_us = prev.map_or(0, |p| psi.some.total_us.saturating_sub(p));
                c.psi = psi;
            }
            c.signals.clear();
            // The refault rate is the periodic sample's (memory.stat is not read here).
            c.refault_window_ms = 0;
            cgroups.push(c);
        }
        Ok(Observation { now_ms, parent, cgroups })
    }

    /// Leaves a managed cgroup out of this sample, with one `degraded` line per cgroup and
    /// reason (a reason that keeps changing, like an errno, is said each time it changes).
    fn skip(skipped: &mut HashMap<u64, String>, notes: &mut Vec<String>, c: &CgroupStats, why: String) {
        if skipped.get(&c.id) != Some(&why) {
            let name = memqos_cgroupfs::name::display(&c.path);
            notes.push(format!("cgroup {name} (id {}): not managed: {why}", c.id));
            skipped.insert(c.id, why);
        }
    }

    /// The pages `cg` refaulted since the last read (memory.stat), into `obs` with the time
    /// they took; nothing on the first read or when memory.stat cannot be read.
    fn read_refaults(
        prev: &mut HashMap<u64, (u64, u64)>,
        cg: &memqos_cgroupfs::beneath::Dir,
        id: u64,
        now_ms: u64,
        obs: &mut CgroupObs,
    ) {
        let Some(pages) = cg.read_string("memory.stat").ok().as_deref().and_then(refaults) else { return };
        if let Some((before, at)) = prev.insert(id, (pages, now_ms)) {
            obs.refault_delta_bytes = pages.saturating_sub(before).saturating_mul(page_size());
            obs.refault_window_ms = now_ms.saturating_sub(at);
        }
    }

    fn observe_one(
        prev_events: &mut HashMap<u64, MemoryEvents>,
        prev_psi_total: &mut HashMap<u64, u64>,
        root: &Path,
        dirs: Option<&Root>,
        c: &CgroupStats,
        journal: &Journal,
        read_freeze: bool,
    ) -> anyhow::Result<(CgroupObs, Seen)> {
        let id = c.path.as_str();
        let usage = need(c.current, root, c, "memory.current")?;
        let ev = need(c.events, root, c, "memory.events")?;
        let psi = need(c.pressure, root, c, "memory.pressure")?;
        let current = knobs(root, dirs, c, read_freeze)?;
        let delta = prev_events.get(&c.id).map(|p| ev.delta_since(p)).unwrap_or_default();
        let psi_delta = prev_psi_total.get(&c.id).map(|p| psi.some.total_us.saturating_sub(*p)).unwrap_or(0);
        prev_events.insert(c.id, ev);
        prev_psi_total.insert(c.id, psi.some.total_us);
        let original = originals(journal, c.id, &current);
        let mut obs = CgroupObs::new(id, memqos_policy::TierIndex(0), usage);
        obs.id = memqos_policy::CgroupId(c.id);
        obs.current = current;
        obs.original = original;
        obs.events_delta = delta;
        obs.psi = psi;
        obs.psi_some_delta_us = psi_delta;
        let seen = Seen {
            cgroup: id.to_owned(),
            cgroup_id: c.id,
            tier: String::new(),
            usage_bytes: usage,
            knobs: current,
            original,
            psi_some_avg10: psi.some.avg10,
            events: ev,
        };
        Ok((obs, seen))
    }
}

/// The root the sampler's per-cgroup reads (tier xattrs and owners, cgroup.events,
/// cgroup.freeze) go through beneath, opened again when the root changes; None while it
/// cannot be opened (the snapshot then reports the root's loss).
fn dirs_root<'a>(slot: &'a mut Option<Root>, path: &Path) -> Option<&'a Root> {
    if slot.as_ref().is_none_or(|r| r.path() != path) {
        *slot = Root::open(path).ok();
    }
    slot.as_ref()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{Outcome, WriteEvent};

    fn write(cgroup: &str, id: u64, file: &str, value: &str, outcome: Outcome) -> WriteEvent {
        WriteEvent {
            cgroup: cgroup.into(),
            cgroup_id: id,
            pid: None,
            file: file.into(),
            value: value.into(),
            previous: None,
            outcome,
            reason: None,
            why: String::new(),
            dry_run: false,
            mono_ns: 0,
            mono_done_ns: 0,
        }
    }

    #[test]
    fn refaults_sum_anon_and_file_or_take_the_old_single_key() {
        let stat = "anon 10\nworkingset_refault_anon 7\nworkingset_refault_file 5\nworkingset_activate_anon 1\n";
        assert_eq!(refaults(stat), Some(12));
        assert_eq!(refaults("anon 1\nworkingset_refault 9\nworkingset_activate 3\n"), Some(9));
        assert_eq!(refaults("anon 1\nfile 2\n"), None);
    }

    #[test]
    fn written_knobs_show_in_the_status_view_and_nothing_else_does() {
        let seen = |cgroup: &str, id| Seen {
            cgroup: cgroup.into(),
            cgroup_id: id,
            tier: "t".into(),
            usage_bytes: 0,
            knobs: Knobs::default(),
            original: Knobs::default(),
            psi_some_avg10: 0.0,
            events: MemoryEvents::default(),
        };
        let mut v = vec![seen("db", 7), seen("job", 8)];
        Sampler::new(BackendChoice::Text).note_written(
            &mut v,
            &[
                write("db", 7, "memory.low", "117440512", Outcome::Ok),
                write("job", 8, "memory.high", "1048576", Outcome::DryRun),
                write("job", 9, "memory.min", "4096", Outcome::Ok), // a re-created name
                write("job", 8, "cgroup.freeze", "1", Outcome::Ok),
            ],
        );
        assert_eq!(v[0].knobs.low, Limit::Bytes(117440512));
        assert_eq!(v[1].knobs.high, Knobs::default().high, "a dry run wrote nothing");
        assert_eq!(v[1].knobs.min, Knobs::default().min, "another cgroup's write");
        assert!(v[1].knobs.frozen);
    }
}
