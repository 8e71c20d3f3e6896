//! The memqos config file (TOML): managed subtree, signal sources, tiers, policy numbers.
//!
//! Parsing is a pure function of the text (`Config::from_str(text, file_name)`); the daemon
//! reads the file. Every error names `file:line:col` and the field (see [`ConfigError`]).
//! `memqos.example.toml` next to this crate's Cargo.toml shows every field with its default,
//! and a test parses it. [`keys::KEYS`] documents every key (the generated reference,
//! docs/guide/configuration.md and memqos.toml(5)), checked against this parser by tests;
//! [`profiles`] carries the shipped configs (`configs/*.toml`) for `memqos init`.

mod error;
pub mod keys;
pub mod profiles;
mod raw;
pub mod reference;

use std::fmt;
use std::path::PathBuf;

use globset::GlobSet;
use serde::{Deserialize, Serialize};

use crate::size::Limit;

pub use error::ConfigError;

/// A parsed, validated config.
#[derive(Clone, Debug)]
pub struct Config {
    /// `cgroup_root` (required, absolute): the managed subtree. Its memory.max/high bound
    /// everyone below it; tier patterns match paths relative to it.
    pub cgroup_root: PathBuf,
    /// `state_dir` (default `/run/memqos`, absolute): where the daemon journals original
    /// knob values so they can be restored after a crash, and keeps its event log, status,
    /// control socket and admission file. Boot-scoped by default (a journal of another boot
    /// is never restored; a tmpfs keeps disk I/O off the reaction path). Unused by the engine.
    pub state_dir: PathBuf,
    /// `history_file` (optional, absolute path; default `<state_dir>/history.json`, or
    /// `/var/lib/memqos/history.json` when `state_dir` is the boot-scoped default): where
    /// the daemon keeps the peaks of past lifetimes per workload key (`user.memqos.workload`)
    /// for `learn_peak` tiers. Written atomically after each recorded lifetime; a missing
    /// file is an empty history, an unreadable one is moved aside to `<file>.bad` with a
    /// warning. Unused by the engine.
    pub history_file: Option<PathBuf>,
    /// `[signals]`: which pressure sources to use.
    pub signals: Signals,
    /// `[[tier]]`, in priority order (first = highest). At least one.
    pub tiers: Tiers,
    /// `[policy]`: thresholds, step sizes and timers.
    pub policy: Policy,
    /// `[metrics]`: Prometheus exposition (docs/metrics.md); off by default.
    pub metrics: Metrics,
    /// `[control]`: who may use the daemon's control socket (`memqos explain`).
    pub control: Control,
}

/// `[control]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Control {
    /// `group` (optional, a group name): the control socket `<state_dir>/control.sock` is
    /// created mode 0660 owned by this group, so its members may run `memqos explain`
    /// (they also need search permission on `state_dir`). Unset: mode 0600, root only.
    pub group: Option<String>,
}

/// `[metrics]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Metrics {
    /// `listen` (optional, "address:port"): serve `GET /metrics` there. Bound at start-up, so
    /// an address in use is a start-up error. Keep it on localhost or a node-local address.
    pub listen: Option<std::net::SocketAddr>,
    /// `textfile` (optional, absolute path ending in `.prom`): written atomically once a
    /// second, for node_exporter's textfile collector.
    pub textfile: Option<PathBuf>,
}

impl Config {
    /// Where the history of `learn_peak` tiers lives: `history_file`, else `history.json`
    /// in `state_dir` (the daemon's, which the command line may override), except in the
    /// default state directory, which a reboot empties: then in `/var/lib/memqos`.
    pub fn history_path(&self, state_dir: &std::path::Path) -> PathBuf {
        use memqos_schema::state::{DEFAULT_HISTORY_DIR, DEFAULT_STATE_DIR, HISTORY_FILE};
        if let Some(file) = &self.history_file {
            return file.clone();
        }
        if state_dir == std::path::Path::new(DEFAULT_STATE_DIR) {
            return PathBuf::from(DEFAULT_HISTORY_DIR).join(HISTORY_FILE);
        }
        state_dir.join(HISTORY_FILE)
    }

    /// Where the tiers' learned recent peaks live: `tier-peaks.json` in `state_dir`, except
    /// in the default state directory, which a reboot empties: then in `/var/lib/memqos`.
    pub fn tier_peaks_path(&self, state_dir: &std::path::Path) -> PathBuf {
        use memqos_schema::state::{DEFAULT_HISTORY_DIR, DEFAULT_STATE_DIR, TIER_PEAKS_FILE};
        if state_dir == std::path::Path::new(DEFAULT_STATE_DIR) {
            return PathBuf::from(DEFAULT_HISTORY_DIR).join(TIER_PEAKS_FILE);
        }
        state_dir.join(TIER_PEAKS_FILE)
    }

    /// True when some tier learns expected peaks.
    pub fn learns_peaks(&self) -> bool {
        self.tiers.iter().any(|(_, t)| t.learn_peak)
    }

    /// Parses and validates `text`; `file_name` only appears in error messages.
    #[allow(clippy::should_implement_trait)] // two arguments: the file name is for errors.
    pub fn from_str(text: &str, file_name: &str) -> Result<Config, ConfigError> {
        raw::parse(text, file_name)
    }
}

/// `[signals]`: each pressure source can be switched off; the engine then ignores its inputs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Signals {
    /// `psi` (default true): memory.pressure averages, stall totals and PSI trigger wakeups.
    pub psi: bool,
    /// `events` (default true): memory.events deltas (`low` of protected cgroups, `max`/`oom`
    /// of the parent).
    pub events: bool,
    /// `bpf` (default false): threshold events from the BPF source (reclaim entry, over-high,
    /// scans, major faults of protected cgroups counted in the kernel; docs/bpf-signals.md).
    /// If BPF cannot load, the daemon logs one line and runs on the other sources.
    pub bpf: bool,
    /// `sampling_interval_ms` (default 500, 10..=60000): how often the daemon observes and
    /// calls `Engine::tick`. The engine itself only uses the `now_ms` it is given.
    pub sampling_interval_ms: u64,
    /// `calm_interval_ms` (default 5000; 0 = off; otherwise at least `sampling_interval_ms`):
    /// while nothing is throttled or frozen, no pressure was seen for `hold_ms` and the
    /// parent is not near its limit, the whole tree is sampled only this often; every
    /// sampling interval in between, only the parent is read (its usage against the limit
    /// and the headroom guard, its memory.events), and any sign of trouble brings the full
    /// sample back at once. Pressure signals are handled as they arrive either way.
    pub calm_interval_ms: u64,
}

impl Default for Signals {
    fn default() -> Self {
        Signals { psi: true, events: true, bpf: false, sampling_interval_ms: 500, calm_interval_ms: 5000 }
    }
}

/// What `protect` does for a tier's cgroups.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protect {
    /// No protection knob is written; the tier's pressure does not throttle anyone.
    None,
    /// memory.low follows the working set (best-effort protection: reclaim skips the cgroup
    /// while it is below low unless nothing else is reclaimable).
    Low,
    /// memory.min follows the working set (hard protection: never reclaimed below min; an
    /// overcommitted min makes the kernel OOM-kill elsewhere, so prefer `low`).
    Min,
}

/// One `[[tier]]`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Tier {
    /// `name` (required, unique).
    pub name: String,
    /// `match` (required, non-empty): globs on the cgroup path relative to `cgroup_root`.
    /// `*` and `?` do not cross `/`; `**` does (`"**"` matches everything at any depth).
    pub patterns: Vec<String>,
    /// `protect` (default `"none"`): `none | low | min`. A tier with `low`/`min` is
    /// *protected*: its working set is protected and its pressure throttles lower tiers.
    pub protect: Protect,
    /// `throttle` (default false): memory.high may be lowered while a higher protected tier is
    /// under pressure or the parent is near its limit.
    pub throttle: bool,
    /// `freeze` (default false, needs `throttle`): opt-in escalation, freeze a cgroup of this
    /// tier while a higher protected cgroup keeps stalling despite throttling.
    pub freeze: bool,
    /// `queue_held` (default false, needs `throttle`): cgroups of this tier held at a
    /// memory.high memqos set take turns: the oldest grows, the others are frozen until it
    /// is no longer held or has ended, each at most its `stall.after_ms` (`engine::queue`).
    /// For work that can wait, such as tool calls, where two held at once would run the
    /// host's room or swap out together.
    pub queue_held: bool,
    /// `freeze_thrashing` (default false, needs `throttle`): a cgroup of this tier that
    /// thrashes (its own memory.pressure `full avg10` at or above `stall_psi_full_avg10`:
    /// its tasks are stalled on memory most of the time, so it makes almost no progress)
    /// while a protected cgroup of a higher tier runs is frozen, at most its
    /// `stall.after_ms` at a time (`engine::thrash`): its reclaim and swap traffic take CPU
    /// and disk from the protected cgroup, which memory.low cannot keep.
    pub freeze_thrashing: bool,
    /// `kill` (default false, needs `throttle`): last-resort escalation via cgroup.kill.
    /// Never happens unless set.
    pub kill: bool,
    /// `dirty` (optional inline table `{ max = ..., min = ... }`): bounds on the dirty page
    /// cache of each of the tier's cgroups (see docs/dirty-isolation.md).
    pub dirty: Dirty,
    /// `oom_score_adj` (optional, -999..=1000): set on every process of the tier's cgroups
    /// while memqos runs, original journaled and restored. memory.low/min do not steer the
    /// memcg OOM killer: when the parent hits memory.max with nothing reclaimable it kills
    /// the largest task, often the protected one. A negative value on protected tiers
    /// (e.g. -900) makes an unavoidable kill land on a lower tier. A process already further
    /// in that direction (an administrator's -1000, say) is left alone.
    pub oom_score_adj: Option<i32>,
    /// `cpu_weight` (optional, 1..=10000): cpu.weight of each of the tier's cgroups while
    /// memqos runs, original journaled and restored. A growing task spends its allocation
    /// latency faulting in and zeroing pages, which is CPU: under CPU contention a memory
    /// policy alone cannot keep it fast (docs/experiments.md measures this). Needs the cpu
    /// controller enabled for the cgroups; without it the daemon says so once and goes on.
    pub cpu_weight: Option<u32>,
    /// `xattr` (optional, `user.*` names): the tier only takes cgroups that also carry one of
    /// these extended attributes (set, and not "0"). systemd writes `user.oomd_omit` and
    /// `user.oomd_avoid` on a unit's cgroup for `ManagedOOMPreference=omit|avoid`, so a tier
    /// listed before the others can honour systemd-oomd's preferences as tier hints.
    pub xattrs: Vec<String>,
    /// `stall` (optional inline table `{ after_ms = 30000, action = "relieve" }`, throttle
    /// tiers only): the bound on a stall memqos's own throttling causes. A cgroup of this tier
    /// whose memory.high memqos lowered and that makes no progress (memory.events `high`
    /// rising, usage pinned at high, its own PSI `full avg10` at or above
    /// `policy.stall_psi_full_avg10`) for `after_ms` gets `action`, logged with the reason:
    /// see [`StallBound`]. Always on for throttle tiers; these are the defaults.
    pub stall: StallBound,
    /// `expected_peak` (optional size, protected tiers only): how large each of the tier's
    /// cgroups is expected to grow (its request). A cgroup's own `user.memqos.expected_peak`
    /// xattr overrides it. Room up to it is reserved from the start: protection covers it and
    /// the lower tiers' memory.high are capped so that they fit in what the reservation
    /// leaves under the parent's limit (`engine::reserve`). On a swapless host the anonymous
    /// memory a lower tier has taken cannot be given back, so a protected cgroup that grows
    /// past what the others left would end in an OOM kill: the reservation delays the others
    /// instead. Unset: the reservation follows the recent working set only.
    pub expected_peak: Option<u64>,
    /// `learn_peak` (default false, protected tiers only): each of the tier's cgroups that
    /// names its workload (`user.memqos.workload` xattr) has its lifetime peak recorded in
    /// `history_file` when it ends; a later cgroup with the same key and no declaration of
    /// its own (no xattr, no tier `expected_peak`) gets the largest of that key's last five
    /// recorded peaks plus 10% as its expected peak, reserved as above. A declaration always
    /// wins over history. Learned only from an explicit key, never from a path: a name
    /// reused by an unrelated cgroup inherits nothing.
    pub learn_peak: bool,
    /// `default_peak` (optional size, protected tiers only): the expected peak of a tier's
    /// cgroup that has nothing better: no declaration (xattr or tier `expected_peak`), no
    /// history of its workload key and no recent peaks of its tier (`learn_peak`). The
    /// weakest source: an operator's guess for the tier, reserved like a declaration.
    /// Unset: such a cgroup reserves what its protection covers, nothing more.
    pub default_peak: Option<u64>,
    /// `first_sight_growth` (optional factor in (1, 16], protected tiers only): the expected
    /// peak of a tier's cgroup that has no other source (no declaration, no history, no
    /// recent peaks of its tier, no `default_peak`) while it is still growing: this many
    /// times its peak so far. "Still growing": its working-set peak rose by at least
    /// `policy.ws_granularity` within the last `policy.hold_ms`; once it levels off for that
    /// long it reserves only what its protection covers again. This is foresight at first
    /// sight: without it the lower tiers are held back only when the protected cgroup's
    /// growth is already running into the limit, and on a swapless host what they took by
    /// then cannot be given back (docs/experiments.md, "Expectation sources"). Unset: off.
    pub first_sight_growth: Option<f64>,
    /// `swap_max` (optional: `"keep"`, `"max"` or a size; default `0` on protected tiers,
    /// `"keep"` on the others): memory.swap.max of each of the tier's cgroups while memqos
    /// runs, original journaled and restored. Where the host has swap (or zswap in front of
    /// it), a protected cgroup's pages stay in memory (its own misses are its latency) while
    /// a lower tier's memory.high pushes its pages out instead of stalling it; `"keep"`
    /// leaves the file as found. Not applied while /proc/swaps lists no active swap, nor on
    /// kernels without swap accounting (no memory.swap.max); the daemon says so once. A
    /// value someone else set (not `max` when first seen: a unit's `MemorySwapMax=`) is left
    /// alone under `policy.foreign_knobs = "respect"`.
    pub swap_max: SwapMax,
}

/// A tier's `swap_max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SwapMax {
    /// memory.swap.max is left as found.
    Keep,
    /// memory.swap.max is this while memqos runs.
    Set(Limit),
}

impl SwapMax {
    /// The default: protected tiers keep their pages in memory, others are left alone.
    pub fn default_for(protect: Protect) -> SwapMax {
        match protect {
            Protect::None => SwapMax::Keep,
            Protect::Low | Protect::Min => SwapMax::Set(Limit::Bytes(0)),
        }
    }

    /// The value to write, if any.
    pub fn target(self) -> Option<Limit> {
        match self {
            SwapMax::Keep => None,
            SwapMax::Set(l) => Some(l),
        }
    }
}

/// A throttle tier's bound on a throttling stall (`engine::stall`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct StallBound {
    /// `after_ms` (default 30000, 1000..=86400000): how long a stall may last.
    pub after_ms: u64,
    /// `action` (default `"relieve"`).
    pub action: StallAction,
}

impl Default for StallBound {
    fn default() -> Self {
        StallBound { after_ms: 30_000, action: StallAction::Relieve }
    }
}

/// What ends a stall that reached its bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StallAction {
    /// Raise memory.high one release step (`policy.release_ratio`), even while a protected
    /// tier is under pressure, and cut it no further for another `after_ms`. On a swapless
    /// host a high below the working set frees nothing: only more room lets the task run.
    /// If the parent then fills up, the kernel's OOM killer decides (steered by
    /// `oom_score_adj`), which ends the stall too. Repeated each bound, it reaches the
    /// original high in a few steps, so no stall lasts indefinitely.
    Relieve,
    /// cgroup.kill: the tier's work is disposable (a retried tool call); the explicit opt-in.
    Kill,
}

/// A tier's dirty page-cache bounds, enforced through the kernel's per-memcg dirty domain
/// (the daemon sizes memory.high so that balance_dirty_pages() throttles the cgroup itself
/// at its ceiling, and keeps the host's dirty pool below the freerun ceiling for floors).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Dirty {
    /// `dirty.max`: ceiling on each cgroup's dirty + writeback page cache.
    pub max: Option<DirtyMax>,
    /// `dirty.min` (bytes, >= 4K): floor; while each such cgroup holds less than this, it
    /// should never be throttled in balance_dirty_pages() because of other cgroups. The
    /// floors of all present cgroups are reserved out of the host's freerun ceiling, and
    /// `dirty.max` cgroups share what is left.
    pub min: Option<u64>,
}

impl Dirty {
    /// True when the tier has a ceiling or a floor.
    pub fn is_set(&self) -> bool {
        self.max.is_some() || self.min.is_some()
    }
}

/// `dirty.max`: bytes (`"8M"`, an integer, >= 64K) or a ratio (a float in (0, 1]) of the
/// host's dirty threshold (vm.dirty_bytes, or vm.dirty_ratio of dirtyable memory).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DirtyMax {
    Bytes(u64),
    Ratio(f64),
}

impl DirtyMax {
    /// The ceiling in bytes for a host whose dirty threshold is `host_thresh_bytes`.
    pub fn bytes(self, host_thresh_bytes: u64) -> u64 {
        match self {
            DirtyMax::Bytes(b) => b,
            DirtyMax::Ratio(r) => (host_thresh_bytes as f64 * r) as u64,
        }
    }
}

impl Tier {
    /// True when `protect` is `low` or `min`.
    pub fn is_protected(&self) -> bool {
        self.protect != Protect::None
    }

    /// True when the tier gives its cgroups something at the others' expense: protection, or
    /// a negative `oom_score_adj` (the OOM killer looks elsewhere). Such a tier is entitled
    /// by ownership, not by a name a tenant can choose: [`Tiers::classify_owned`].
    pub fn is_privileged(&self) -> bool {
        self.is_protected() || self.oom_score_adj.is_some_and(|adj| adj < 0)
    }
}

/// Position of a tier in the config; smaller is higher priority.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TierIndex(pub usize);

impl fmt::Display for TierIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tier[{}]", self.0)
    }
}

/// The tiers in priority order, with their compiled globs.
#[derive(Clone, Debug)]
pub struct Tiers {
    tiers: Vec<Tier>,
    matchers: Vec<GlobSet>,
}

impl Tiers {
    /// The first tier (in priority order) with a pattern matching `relative_path`.
    /// A leading `/` is ignored, so `"/prod/a"` and `"prod/a"` classify alike. Tiers with
    /// `xattr` are skipped (see [`Tiers::classify_with`]).
    pub fn classify(&self, relative_path: &str) -> Option<TierIndex> {
        self.classify_with(relative_path, |_| false)
    }

    /// Like `classify`, for a cgroup whose extended attributes `has_xattr(name)` reports: a
    /// tier with `xattr` needs its glob to match and one of its attributes to be set. Asked
    /// only for the attributes of tiers whose glob matches, in tier order.
    pub fn classify_with(&self, relative_path: &str, has_xattr: impl FnMut(&str) -> bool) -> Option<TierIndex> {
        self.classify_owned(relative_path, true, has_xattr)
    }

    /// Like `classify_with`, for a cgroup whose owner is `trusted` or not (the daemon's rule:
    /// owned by root or by the owner of `cgroup_root`). An untrusted cgroup (a tenant's, in a
    /// subtree delegated to it) names itself: its path alone must not buy it a
    /// [privileged](Tier::is_privileged) tier, so those are skipped and it takes the next tier
    /// that matches (or none). Its xattrs are never asked for either.
    pub fn classify_owned(
        &self,
        relative_path: &str,
        trusted: bool,
        mut has_xattr: impl FnMut(&str) -> bool,
    ) -> Option<TierIndex> {
        let p = relative_path.trim_start_matches('/');
        let entitled = |t: &Tier| trusted || !t.is_privileged();
        let hinted = |t: &Tier, has: &mut dyn FnMut(&str) -> bool| {
            t.xattrs.is_empty() || (trusted && t.xattrs.iter().any(|x| has(x)))
        };
        self.matchers
            .iter()
            .zip(&self.tiers)
            .position(|(m, t)| m.is_match(p) && entitled(t) && hinted(t, &mut has_xattr))
            .map(TierIndex)
    }

    /// True when some tier is [privileged](Tier::is_privileged): the daemon then reads each
    /// new cgroup's owner.
    pub fn any_privileged(&self) -> bool {
        self.tiers.iter().any(Tier::is_privileged)
    }

    /// True when some tier classifies by extended attribute (the daemon then reads them).
    pub fn uses_xattrs(&self) -> bool {
        self.tiers.iter().any(|t| !t.xattrs.is_empty())
    }

    /// The tier at `index`, if it exists.
    pub fn get(&self, index: TierIndex) -> Option<&Tier> {
        self.tiers.get(index.0)
    }

    /// The index of the tier called `name`.
    pub fn by_name(&self, name: &str) -> Option<TierIndex> {
        self.tiers.iter().position(|t| t.name == name).map(TierIndex)
    }

    /// Number of tiers (at least one).
    pub fn len(&self) -> usize {
        self.tiers.len()
    }

    /// Always false for a validated config; here for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        self.tiers.is_empty()
    }

    /// The first pattern of tier `index` that matches `relative_path` (for `memqos explain`).
    pub fn matching_pattern(&self, index: TierIndex, relative_path: &str) -> Option<&str> {
        let p = relative_path.trim_start_matches('/');
        let first = *self.matchers.get(index.0)?.matches(p).first()?;
        self.tiers[index.0].patterns.get(first).map(String::as_str)
    }

    /// Where a cgroup of tier `old_index` of `old` stands in these tiers after a reload: the
    /// tier with the same name and the same settings (its patterns may differ), if any. A
    /// cgroup keeps its state and knobs only if it lands in that tier again.
    pub fn carry_over(&self, old: &Tiers, old_index: TierIndex) -> Option<TierIndex> {
        let before = old.get(old_index)?;
        let (i, now) = self.iter().find(|(_, t)| t.name == before.name)?;
        let same = Tier { patterns: Vec::new(), ..now.clone() } == Tier { patterns: Vec::new(), ..before.clone() };
        same.then_some(i)
    }

    /// Tiers with their indexes, highest priority first.
    pub fn iter(&self) -> impl Iterator<Item = (TierIndex, &Tier)> {
        self.tiers.iter().enumerate().map(|(i, t)| (TierIndex(i), t))
    }
}

/// `[policy]`: all numbers the engine uses. Ranges are checked when parsing.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Policy {
    /// `pressure_psi_some_avg10` (default 5.0, 0<x<=100): a protected cgroup whose
    /// memory.pressure `some avg10` is at or above this (and that stalled at all since the last
    /// tick, so the tail of a stale 10 s average is ignored) is under pressure.
    pub pressure_psi_some_avg10: f64,
    /// `pressure_stall_pct` (default 10.0, 0<x<=100): the same from the `some total` delta, in
    /// percent of wall time since the previous tick; reacts faster than avg10.
    pub pressure_stall_pct: f64,
    /// `pressure_refault_rate` (default "8M", bytes per second; 0 = off): a protected cgroup
    /// refaulting at least this much per second since the previous periodic tick (memory.stat
    /// `workingset_refault_anon` + `workingset_refault_file`: its pages were reclaimed or
    /// swapped out and are needed again) is under pressure. Thrashing through swap can leave
    /// memory PSI low: a swap-in counts as a memory stall only for a page that was active
    /// when it went out, and a zswap load is short even when there are thousands a second.
    /// 8 MiB/s is 2048 4 KiB pages a second: far above the trickle of a working set that fits.
    pub pressure_refault_rate: u64,
    /// `thrash_refault_rate` (default "8M", bytes per second; 0 = only PSI counts): a cgroup
    /// of a `freeze_thrashing` tier refaulting this much per second, averaged like PSI's
    /// avg10 (over about ten seconds), thrashes (`engine::thrash`). Its memory PSI alone can
    /// miss it for the reason given at `pressure_refault_rate`: the RFC demo's swapping low
    /// side refaulted about 18 MiB/s at a memory PSI full avg10 of 2% (7.2).
    pub thrash_refault_rate: u64,
    /// `hold_ms` (default 5000): how long pressure must be gone before releasing throttles.
    /// Any new pressure restarts it. Skipped when every protected cgroup that was running at
    /// the last pressure has emptied or gone (nothing left to hold room for).
    pub hold_ms: u64,
    /// `headroom_guard` (default "64M"): when the parent's limit (min of its memory.max and
    /// memory.high) is finite and its usage is above `limit - headroom_guard`, throttleable
    /// tiers are cut, lowest first, so their total fits below that line. 0 disables the guard.
    /// On a host with no active swap a cgroup the cut reaches is capped at its usage instead
    /// (anonymous memory cannot be reclaimed; a lower high would only freeze the task holding
    /// it). Make it larger than what the subtree can allocate in `min_write_interval_ms`.
    pub headroom_guard: u64,
    /// `min_high` (default "32M", >= 4K): memory.high is never lowered below this.
    pub min_high: u64,
    /// `step_ratio` (default 0.1, 0<x<1): each throttle step lowers a cgroup's memory.high by
    /// this fraction of its usage. High at 90 % of usage already costs an allocating task
    /// ~0.8 s of sleep per return to user mode (see `engine::throttle`).
    pub step_ratio: f64,
    /// `release_ratio` (default 0.5, 0<x<=10): each release step raises memory.high by this
    /// fraction (geometric), never leaving it below current usage.
    pub release_ratio: f64,
    /// `min_write_interval_ms` (default 1000): no knob of a cgroup is written more often.
    pub min_write_interval_ms: u64,
    /// `freeze_after_ms` (default 10000, >0): a protected cgroup stalling continuously this
    /// long despite throttling makes the engine freeze one cgroup of a `freeze = true` tier,
    /// and one more each further period.
    pub freeze_after_ms: u64,
    /// `kill_after_ms` (default 30000, >0): the same for `kill = true` tiers and cgroup.kill.
    pub kill_after_ms: u64,
    /// `stall_psi_full_avg10` (default 40.0, 0<x<=100): a throttled cgroup whose own
    /// memory.pressure `full avg10` is at or above this (with `high` events rising and usage
    /// at memory.high) makes no progress: its tier's `stall` bound runs.
    pub stall_psi_full_avg10: f64,
    /// `ws_window_ms` (default 60000, >0): working set = peak usage over this sliding window.
    pub ws_window_ms: u64,
    /// `ws_margin` (default 1.1, 1<=x<=4): protection = working set times this.
    pub ws_margin: f64,
    /// `ws_granularity` (default "16M", >= 4K): protection is rounded up to a multiple of this,
    /// so it moves in steps instead of on every page.
    pub ws_granularity: u64,
    /// `park_room` (default "128M"; "0" turns parking off): while a protected cgroup's
    /// expected peak is reserved (`engine::park`), the throttle-tier cgroups below it are
    /// admitted oldest first, as many as get at least this much free room above what they
    /// hold; the others are parked (memory.high capped at what they hold) and admitted one
    /// per tick as room frees. 0: every one is admitted and they share the room equally.
    /// Not where the host is known to have active swap, unless `park_with_swap`.
    pub park_room: u64,
    /// `park_with_swap` (default false): park (see `park_room`) also where the host has active
    /// swap (/proc/swaps lists a device; a host whose /proc/swaps cannot be read parks). There
    /// a member capped at its share pushes its own cold pages out and goes on, so by
    /// default nobody is parked and the lower cgroups share the room: they keep about their
    /// unmanaged speed, and the protected cgroup's tail latency pays for their swapping (issue
    /// 30's declared tight sweep with zswap, docs/experiments.md). True holds all but the
    /// oldest back instead: the protected cgroup's latency stays near its solo figure and the
    /// lower tiers wait.
    pub park_with_swap: bool,
    /// `foreign_knobs` (default `"respect"`): a memory.high, or a memory.low/min, that was not
    /// the kernel default before memqos first wrote it was set by someone else (a unit's
    /// MemoryHigh=/MemoryLow=, kubelet's MemoryQoS, a tenant writing its own cgroup's file in a
    /// delegated subtree). `respect`: a foreign memory.high is a ceiling, not an exemption:
    /// memqos still throttles the cgroup, writing the lower of its cut and their value, never
    /// raises it above theirs, and puts theirs back when done (a tenant cannot opt out of
    /// throttling by writing its own memory.high); a foreign memory.low/min is never written
    /// (low and min count as one protection). `override` manages them like any other knob,
    /// restoring the foreign value when done. Whatever this says, a value someone else writes
    /// over one memqos wrote, to any knob memqos writes, becomes theirs: memqos forgets its
    /// original and never writes it back (`KnobFile::watched`).
    pub foreign_knobs: ForeignKnobs,
    /// `admission` (default false): publish, on every tick, what a new cgroup of each
    /// throttle tier may charge before the daemon has seen it (`<state_dir>/admission.json`,
    /// `engine::admit`); `memqos run` arms a tool call's memory.high at its tier's allowance
    /// before the call starts, so a burst shorter than a sampling interval is throttled by the
    /// kernel rather than ending in an OOM kill. The daemon manages an armed memory.high like
    /// its own cut (raised as room frees, `max` again when it stops; the tier's stall bound
    /// applies). A call whose burst is larger than its allowance waits; on a swapless host it
    /// waits until room frees or its stall bound acts.
    pub admission: bool,
    /// `admission_share` (default 0.5, 0<x<=1): the part of the room under the guard line
    /// (after the protected tiers' expected regrowth) that one new cgroup may take: calls that
    /// start within one sampling interval all see the same allowance.
    pub admission_share: f64,
    /// `admission_floor` (default "64M", >= 4K): no allowance is smaller, so a small call is
    /// never held by its armed ceiling, however full the host.
    pub admission_floor: u64,
    /// `admission_wait_ms` (default 30000, 0: never wait): how long `memqos run` holds back a
    /// call whose tier's allowance says there is no room for it (`engine::admit`) before it
    /// starts it anyway, armed at the allowance of that moment.
    pub admission_wait_ms: u64,
    /// `admission_regrowth` (default `"all"`): how much of the protected cgroups' expected
    /// regrowth (their protection or expected peak above what they use) the room for new
    /// calls keeps back. `all`: the sum, as the guard line does: safe with a few protected
    /// cgroups. `largest`: the largest one's only, for a host of many protected cgroups that
    /// do not all grow back at once (an agent host's runtimes, each protected at 1.1x its
    /// peak: their sum can exceed the budget and leave no room for any call); when several
    /// regrow together, the OOM killer's victim is a call (oom_score_adj), not a runtime.
    pub admission_regrowth: AdmissionRegrowth,
    /// `remove_leftovers_after_ms` (default 30000; 0 = never): the daemon removes a cgroup
    /// `memqos run` made (its `user.memqos.made_by_run` xattr, from a trusted owner) once it
    /// has been empty and unlocked this long: a tool call's whose `memqos run` was killed, a
    /// session's with no calls left. Nothing else is ever removed; a dry run only logs.
    pub remove_leftovers_after_ms: u64,
}

/// `policy.admission_regrowth`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AdmissionRegrowth {
    All,
    Largest,
}

/// `policy.foreign_knobs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ForeignKnobs {
    Respect,
    Override,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            pressure_psi_some_avg10: 5.0,
            pressure_stall_pct: 10.0,
            pressure_refault_rate: 8 << 20,
            thrash_refault_rate: 8 << 20,
            hold_ms: 5_000,
            headroom_guard: 64 << 20,
            min_high: 32 << 20,
            step_ratio: 0.1,
            release_ratio: 0.5,
            min_write_interval_ms: 1_000,
            freeze_after_ms: 10_000,
            kill_after_ms: 30_000,
            stall_psi_full_avg10: 40.0,
            ws_window_ms: 60_000,
            ws_margin: 1.1,
            ws_granularity: 16 << 20,
            park_room: 128 << 20,
            park_with_swap: false,
            foreign_knobs: ForeignKnobs::Respect,
            admission: false,
            admission_share: 0.5,
            admission_floor: 64 << 20,
            admission_wait_ms: 30_000,
            admission_regrowth: AdmissionRegrowth::All,
            remove_leftovers_after_ms: 30_000,
        }
    }
}
