//! Kill avoidability: the fewest OOM kills *any* policy could achieve on a run's traces, if it
//! could pause any low-priority task at any instant, knew the future (clairvoyant), had no
//! swap, and could never take back anonymous memory a task already holds.
//!
//! The model (docs/experiments.md, "Kill avoidability", says why each choice is a relaxation):
//! - A task is its replayed schedule: after sample k it holds `sizes[k]` (the trace's `used`
//!   plus the baseline), from `times_s[k]` (trace seconds since its first sample; every task
//!   replays at the same speed, so the speed cancels out) until its next sample. At t = 0 it
//!   holds `sizes[0]`. Reaching its last sample is *finishing*: it exits and frees everything.
//! - The protected task is never paused: it follows its own clock. If it alone exceeds the
//!   limit at some sample, it is killed there (an unavoidable kill) and frees its memory.
//! - A low task may be paused at any instant and for any time. Paused, it keeps what it holds;
//!   resumed, it needs at least the trace's gap between two samples of running time to reach
//!   the next one (an agent cannot do its work faster than it did).
//! - A kill frees the victim's memory; the bound assumes victims die at t = 0 holding nothing.
//! - At every instant, what the live tasks hold must fit under the parent's limit.
//!
//! [`min_kills`] tries survivor sets from largest to smallest (exhaustive: fine for 2-3 lows)
//! and returns the first feasible one. A set is feasible if either
//! 1. *parking* works: every low stays at its first sample until the protected task ends, then
//!    the lows finish in some interleaving (an exact check in continuous time), or
//! 2. a search over a time grid of [`TICK_S`] finds a schedule. The grid is a relaxation: step
//!    times are rounded up to the grid, the required gaps rounded down, and the limit is
//!    checked at grid instants only, so every schedule feasible in continuous time has a
//!    feasible image on the grid. "Infeasible on the grid" therefore proves "infeasible".
//!
//! Hence the result is a lower bound on the kills of every policy within the model; kills above
//! it are avoidable in the model (an upper estimate where the search's relaxation is loose;
//! exact when parking proves zero).

use std::collections::{HashSet, VecDeque};

/// The search's time grid, in trace seconds. Samples are ~1.04 s apart, so every sample of the
/// protected task is seen at least once, and a low task may run at most 1/0.96 of its pace.
pub const TICK_S: f64 = 0.5;
/// Largest joint state space the grid search will walk (bits of one tick's reachable set).
pub const MAX_SEARCH_STATES: usize = 1 << 26;

/// One task's replayed memory over its own time.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    pub name: String,
    /// Seconds since the first sample, non-decreasing, starting at 0.
    pub times_s: Vec<f64>,
    /// Bytes held from the matching time on.
    pub sizes: Vec<u64>,
}

impl Profile {
    /// The replay's schedule for `trace` at speed 1: `used + baseline` at each sample.
    pub fn from_trace(trace: &memqos_replay::Trace, baseline_bytes: u64) -> Profile {
        let t0 = trace.samples[0].epoch;
        Profile {
            name: trace.name.clone(),
            times_s: trace.samples.iter().map(|s| s.epoch - t0).collect(),
            sizes: trace.samples.iter().map(|s| s.used_bytes.saturating_add(baseline_bytes)).collect(),
        }
    }

    fn check(&self) -> Result<(), BoundError> {
        let bad = |why: &str| Err(BoundError::BadProfile { task: self.name.clone(), why: why.to_string() });
        if self.times_s.is_empty() || self.times_s.len() != self.sizes.len() {
            return bad("needs as many times as sizes, and at least one");
        }
        if self.times_s[0] != 0.0
            || self.times_s.windows(2).any(|w| w[1] < w[0])
            || self.times_s.iter().any(|t| !t.is_finite())
        {
            return bad("times must start at 0 and never decrease");
        }
        Ok(())
    }
}

/// The most the tasks hold at once when every one starts at t = 0 and none is paused: the
/// scenario's demand on its parent as the traces give it, without the policy's timing. A
/// limit just above it is a margin emulation noise can cross either way.
pub fn concurrent_peak(profiles: &[Profile]) -> u64 {
    let mut times: Vec<f64> = profiles.iter().flat_map(|p| p.times_s.iter().copied()).collect();
    times.sort_by(f64::total_cmp);
    times.dedup();
    let held = |p: &Profile, t: f64| -> u64 {
        // A finished task has freed its memory: past its last sample it holds nothing.
        if t > *p.times_s.last().unwrap_or(&0.0) {
            return 0;
        }
        let i = p.times_s.partition_point(|&x| x <= t);
        p.sizes[i.saturating_sub(1)]
    };
    times.iter().map(|&t| profiles.iter().map(|p| held(p, t)).sum::<u64>()).max().unwrap_or(0)
}

#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    /// The parent's memory.max, bytes.
    pub limit: u64,
    pub high: Profile,
    pub lows: Vec<Profile>,
}

/// How feasibility of the surviving set was shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Proof {
    /// The lows wait at their first sample until the protected task ends (exact).
    Parking,
    /// The grid search found a schedule (the bound may be below the true minimum).
    Search,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Bound {
    /// The fewest kills, the protected task's own unavoidable kill included.
    pub kills: usize,
    /// The protected task alone exceeds the limit (so it dies whatever the policy does).
    pub high_killed: bool,
    /// Indices (into `Problem::lows`) of the lows that survive in the best case.
    pub survivors: Vec<usize>,
    pub proof: Proof,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BoundError {
    #[error("task {task}: {why}")]
    BadProfile { task: String, why: String },
    #[error("the grid search would need {states} joint states (more than {MAX_SEARCH_STATES}); too many low tasks or samples")]
    TooLarge { states: usize },
}

/// The fewest kills any pausing policy could achieve on `p`; see the module documentation.
pub fn min_kills(p: &Problem) -> Result<Bound, BoundError> {
    p.high.check()?;
    for l in &p.lows {
        l.check()?;
    }
    let high = HighTrack::new(&p.high, p.limit);
    let n = p.lows.len();
    for keep in (0..=n).rev() {
        for survivors in subsets(n, keep) {
            let lows: Vec<&Profile> = survivors.iter().map(|&i| &p.lows[i]).collect();
            let proof = if parking_works(&high, &lows, p.limit) {
                Some(Proof::Parking)
            } else if grid_search(&high, &lows, p.limit)? {
                Some(Proof::Search)
            } else {
                None
            };
            if let Some(proof) = proof {
                return Ok(Bound {
                    kills: n - keep + usize::from(high.killed),
                    high_killed: high.killed,
                    survivors,
                    proof,
                });
            }
        }
    }
    unreachable!("with no survivors the protected task is alone and, truncated at its kill, fits")
}

/// When a non-clairvoyant "park every low task" decision must come, at the latest.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum ParkDeadline {
    /// Every task can run unpaused to the end: nothing ever needs parking.
    Never,
    /// Letting every task run at its own pace until `trace_s` (trace seconds) and only then
    /// parking every low task where it stands (each keeps what it holds, the protected task
    /// runs on, the lows finish after it) is the first such moment that can no longer avoid a
    /// kill. `share` is `trace_s` over the protected task's duration.
    At { trace_s: f64, share: f64 },
}

/// The park deadline of `p` with all its lows (see [`ParkDeadline`]). It tells a policy how
/// early it has to act when it acts once and parks everyone: the clairvoyant bound says
/// whether a kill is avoidable at all, this says until when.
pub fn park_deadline(p: &Problem) -> Result<ParkDeadline, BoundError> {
    p.high.check()?;
    for l in &p.lows {
        l.check()?;
    }
    let high = HighTrack::new(&p.high, p.limit);
    let grids: Vec<LowGrid> = p.lows.iter().map(LowGrid::new).collect();
    let index_at = |times: &[f64], t: f64| times.partition_point(|&x| x <= t).saturating_sub(1);
    let mut events: Vec<f64> = high.times_s.clone();
    events.push(high.end_s);
    events.extend(p.lows.iter().flat_map(|l| l.times_s.iter().copied()));
    events.sort_by(f64::total_cmp);
    events.dedup();
    // The first event after which parking no longer works is the deadline; parking at t also
    // requires what runs at t to fit, so every earlier success means the unpaused run fit.
    for &t in &events {
        let ks: Vec<usize> = p.lows.iter().map(|l| index_at(&l.times_s, t)).collect();
        let held: u64 = ks.iter().zip(&grids).map(|(&k, g)| g.held[k]).sum();
        let high_rest = if t >= high.end_s || high.sizes.is_empty() {
            0
        } else {
            high.sizes[index_at(&high.times_s, t)..].iter().copied().max().unwrap_or(0)
        };
        if high_rest.saturating_add(held) > p.limit || !lows_can_finish(&grids, vec![ks], p.limit) {
            return Ok(ParkDeadline::At { trace_s: t, share: t / high.end_s.max(f64::MIN_POSITIVE) });
        }
    }
    Ok(ParkDeadline::Never)
}

/// The protected task's sizes up to when it finishes or is killed.
struct HighTrack {
    times_s: Vec<f64>,
    sizes: Vec<u64>,
    /// When it stops holding memory (its last sample, or the sample it alone exceeds the limit).
    end_s: f64,
    killed: bool,
}

impl HighTrack {
    fn new(h: &Profile, limit: u64) -> HighTrack {
        let over = h.sizes[..h.sizes.len() - 1].iter().position(|&s| s > limit);
        // Finishing at the last sample frees it at once, so the last size is never held.
        let end = over.unwrap_or(h.sizes.len() - 1);
        HighTrack {
            times_s: h.times_s[..end].to_vec(),
            sizes: h.sizes[..end].to_vec(),
            end_s: h.times_s[end],
            killed: over.is_some(),
        }
    }

    /// What it holds at instant `t` (right-continuous; 0 from `end_s` on).
    fn at(&self, t: f64) -> u64 {
        if t >= self.end_s {
            return 0;
        }
        let i = self.times_s.partition_point(|&x| x <= t);
        if i == 0 {
            0
        } else {
            self.sizes[i - 1]
        }
    }
}

fn subsets(n: usize, k: usize) -> Vec<Vec<usize>> {
    (0u32..1 << n)
        .filter(|m| m.count_ones() as usize == k)
        .map(|m| (0..n).filter(|i| m & (1 << i) != 0).collect())
        .collect()
}

/// A low task on the grid: how long it must run after each sample before the next.
struct LowGrid {
    /// Held at sample k; 0 at the last (finished).
    held: Vec<u64>,
    /// Ticks of running needed after sample k to reach k + 1 (the gap rounded down).
    wait: Vec<usize>,
    /// Local state index of (k, 0); states (k, c) for c in 0..=wait[k].
    offset: Vec<usize>,
    /// Local state index -> (sample, ticks since it).
    decode: Vec<(usize, usize)>,
}

impl LowGrid {
    fn new(p: &Profile) -> LowGrid {
        let n = p.sizes.len();
        let mut held = p.sizes.clone();
        held[n - 1] = 0;
        let wait: Vec<usize> = (0..n)
            .map(|k| if k + 1 < n { ((p.times_s[k + 1] - p.times_s[k]) / TICK_S).floor() as usize } else { 0 })
            .collect();
        let mut offset = Vec::with_capacity(n);
        let mut decode = Vec::new();
        for (k, &w) in wait.iter().enumerate() {
            offset.push(decode.len());
            decode.extend((0..=w).map(|c| (k, c)));
        }
        LowGrid { held, wait, offset, decode }
    }

    fn last(&self) -> usize {
        self.held.len() - 1
    }

    /// Samples reachable within one instant from a step just taken to `k`: each further sample
    /// whose gap is under one tick may be passed unobserved.
    fn chain(&self, k: usize) -> impl Iterator<Item = usize> + '_ {
        let mut end = k;
        while end < self.last() && self.wait[end] == 0 {
            end += 1;
        }
        k..=end
    }

    /// Local states one tick after (k, c): wait, or take the next sample (and its chain).
    fn next(&self, local: usize, out: &mut Vec<usize>) {
        out.clear();
        let (k, c) = self.decode[local];
        out.push(self.offset[k] + (c + 1).min(self.wait[k]));
        if k < self.last() && c + 1 >= self.wait[k] {
            out.extend(self.chain(k + 1).map(|j| self.offset[j]));
        }
    }
}

/// Exact: lows wait at their first sample while the protected task lives, then finish.
fn parking_works(high: &HighTrack, lows: &[&Profile], limit: u64) -> bool {
    let parked: u64 = lows.iter().map(|l| if l.sizes.len() == 1 { 0 } else { l.sizes[0] }).sum();
    let high_peak = high.sizes.iter().copied().max().unwrap_or(0);
    if high_peak.saturating_add(parked) > limit {
        return false;
    }
    let grids: Vec<LowGrid> = lows.iter().map(|l| LowGrid::new(l)).collect();
    lows_can_finish(&grids, vec![vec![0; lows.len()]], limit)
}

/// With the protected task gone the limit no longer changes with time, so only the order of
/// steps matters: breadth-first over every low's sample index from `starts`.
fn lows_can_finish(grids: &[LowGrid], starts: Vec<Vec<usize>>, limit: u64) -> bool {
    let held = |ks: &[usize]| -> u64 { ks.iter().zip(grids).map(|(&k, g)| g.held[k]).sum() };
    let mut seen: HashSet<Vec<usize>> = HashSet::new();
    let mut queue: VecDeque<Vec<usize>> = VecDeque::new();
    for s in starts {
        if held(&s) <= limit && seen.insert(s.clone()) {
            queue.push_back(s);
        }
    }
    while let Some(ks) = queue.pop_front() {
        if ks.iter().zip(grids).all(|(&k, g)| k == g.last()) {
            return true;
        }
        for (i, g) in grids.iter().enumerate() {
            if ks[i] == g.last() {
                continue;
            }
            for j in g.chain(ks[i] + 1) {
                let mut next = ks.clone();
                next[i] = j;
                if held(&next) <= limit && seen.insert(next.clone()) {
                    queue.push_back(next);
                }
            }
        }
    }
    false
}

/// The relaxed grid search: reachable joint states tick by tick while the protected task
/// lives, then [`lows_can_finish`] from every state reached.
fn grid_search(high: &HighTrack, lows: &[&Profile], limit: u64) -> Result<bool, BoundError> {
    let grids: Vec<LowGrid> = lows.iter().map(|l| LowGrid::new(l)).collect();
    let dims: Vec<usize> = grids.iter().map(|g| g.decode.len()).collect();
    let total = dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).unwrap_or(usize::MAX);
    if total > MAX_SEARCH_STATES {
        return Err(BoundError::TooLarge { states: total });
    }
    let encode = |locals: &[usize]| locals.iter().zip(&dims).fold(0, |acc, (&l, &d)| acc * d + l);
    let decode = |mut idx: usize, out: &mut [usize]| {
        for (o, &d) in out.iter_mut().zip(&dims).rev() {
            *o = idx % d;
            idx /= d;
        }
    };
    let held = |locals: &[usize]| -> u64 { locals.iter().zip(&grids).map(|(&l, g)| g.held[g.decode[l].0]).sum() };
    let end_tick = (high.end_s / TICK_S).ceil() as usize;
    // Tick 0: every low at its first sample (or past a chain of sub-tick gaps).
    let mut now = vec![0u64; total.div_ceil(64)];
    let mut options: Vec<Vec<usize>> = grids.iter().map(|g| g.chain(0).map(|k| g.offset[k]).collect()).collect();
    for_each_combination(&options, &mut |locals| {
        if high.at(0.0).saturating_add(held(locals)) <= limit {
            let i = encode(locals);
            now[i / 64] |= 1 << (i % 64);
        }
    });
    let mut locals = vec![0; grids.len()];
    for tick in 1..=end_tick {
        let h = high.at(tick as f64 * TICK_S);
        let mut next = vec![0u64; now.len()];
        let mut any = false;
        for (w, &word) in now.iter().enumerate() {
            let mut bits = word;
            while bits != 0 {
                let idx = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                decode(idx, &mut locals);
                for ((g, &l), opts) in grids.iter().zip(&locals).zip(options.iter_mut()) {
                    g.next(l, opts);
                }
                for_each_combination(&options, &mut |succ| {
                    if h.saturating_add(held(succ)) <= limit {
                        let i = encode(succ);
                        next[i / 64] |= 1 << (i % 64);
                        any = true;
                    }
                });
            }
        }
        if !any {
            return Ok(false);
        }
        now = next;
    }
    let mut starts = HashSet::new();
    for (w, &word) in now.iter().enumerate() {
        let mut bits = word;
        while bits != 0 {
            let idx = w * 64 + bits.trailing_zeros() as usize;
            bits &= bits - 1;
            decode(idx, &mut locals);
            starts.insert(locals.iter().zip(&grids).map(|(&l, g)| g.decode[l].0).collect::<Vec<_>>());
        }
    }
    let mut starts: Vec<Vec<usize>> = starts.into_iter().collect();
    starts.sort();
    Ok(lows_can_finish(&grids, starts, limit))
}

/// Calls `f` with every choice of one entry per list.
fn for_each_combination(lists: &[Vec<usize>], f: &mut dyn FnMut(&[usize])) {
    fn go(lists: &[Vec<usize>], chosen: &mut Vec<usize>, f: &mut dyn FnMut(&[usize])) {
        match lists.split_first() {
            None => f(chosen),
            Some((first, rest)) => {
                for &x in first {
                    chosen.push(x);
                    go(rest, chosen, f);
                    chosen.pop();
                }
            }
        }
    }
    go(lists, &mut Vec::with_capacity(lists.len()), f)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A profile with one sample per second.
    fn task(name: &str, sizes: &[u64]) -> Profile {
        Profile { name: name.into(), times_s: (0..sizes.len()).map(|i| i as f64).collect(), sizes: sizes.to_vec() }
    }

    #[test]
    fn concurrent_peak_sums_what_is_held_at_the_same_instant() {
        // Peaks at different times do not add up: 1 + 3 at t=0, 5 + 1 at t=1, 2 + 4 at t=2 (the
        // sum of the peaks, 9, is never held); a task past its last sample holds nothing.
        let a = task("a", &[1, 5, 2]);
        let b = task("b", &[3, 1, 4, 4, 4]);
        assert_eq!(concurrent_peak(&[a.clone(), b.clone()]), 6);
        let c = task("c", &[0, 0, 0, 10]);
        assert_eq!(concurrent_peak(&[a, b, c]), 14, "t=3: a has ended, b 4 + c 10");
        assert_eq!(concurrent_peak(&[]), 0);
    }

    fn bound(limit: u64, high: &[u64], lows: &[&[u64]]) -> Bound {
        let lows = lows.iter().enumerate().map(|(i, s)| task(&format!("low{}", i + 1), s)).collect();
        min_kills(&Problem { limit, high: task("high", high), lows }).unwrap()
    }

    #[test]
    fn everything_fits_without_pausing() {
        let b = bound(100, &[10, 20, 30, 0], &[&[10, 20, 30, 0], &[10, 20, 30, 0]]);
        assert_eq!((b.kills, b.high_killed, b.proof), (0, false, Proof::Parking));
        assert_eq!(b.survivors, [0, 1]);
    }

    #[test]
    fn parking_the_lows_until_the_protected_task_ends_avoids_the_kill() {
        // Running together they need 60 + 40 + 40 > 100; parked at 10 each, 80 fits, and
        // afterwards the two lows peak one after the other (40 + 10 or 0).
        let b = bound(100, &[10, 60, 60, 0], &[&[10, 40, 10, 0], &[10, 40, 10, 0]]);
        assert_eq!((b.kills, b.proof), (0, Proof::Parking));
    }

    #[test]
    fn a_low_that_finishes_before_the_protected_peak_survives_only_by_running_early() {
        // Parked, the low holds 30 when the protected task reaches 80 at t = 5: 110 > 100.
        // Run at once, it finishes at t = 2, long before.
        let b = bound(100, &[10, 10, 10, 10, 10, 80, 0], &[&[30, 30, 0]]);
        assert_eq!((b.kills, b.proof), (0, Proof::Search));
        // The same low with a trace too long to end before t = 5 must die.
        let b = bound(100, &[10, 10, 10, 10, 10, 80, 0], &[&[30, 30, 30, 30, 30, 30, 30, 0]]);
        assert_eq!((b.kills, b.survivors.len()), (1, 0));
    }

    #[test]
    fn memory_already_held_is_never_taken_back() {
        // The low starts at 50: no pause makes it smaller, and 60 + 50 > 100.
        let b = bound(100, &[10, 60, 0], &[&[50, 50, 0]]);
        assert_eq!(b.kills, 1);
    }

    #[test]
    fn the_cheapest_victim_is_chosen() {
        // Neither low can end before the protected peak (t in [1, 2)), and only one fits
        // beside it: exactly one kill, either victim.
        let b = bound(100, &[10, 60, 0], &[&[30, 30, 0], &[30, 30, 0]]);
        assert_eq!(b.kills, 1);
        assert_eq!(b.survivors.len(), 1);
        // Lows that end exactly when the peak starts are gone in time: no kill.
        assert_eq!(bound(100, &[10, 60, 0], &[&[30, 0], &[30, 0]]).kills, 0);
        // The low that holds less beside the peak survives, not the larger one.
        let b = bound(100, &[10, 60, 0], &[&[45, 45, 0], &[20, 20, 0]]);
        assert_eq!((b.kills, b.survivors.clone()), (1, vec![1]));
    }

    #[test]
    fn the_protected_task_alone_over_the_limit_is_an_unavoidable_kill() {
        let b = bound(100, &[10, 120, 10, 0], &[&[10, 0]]);
        assert!(b.high_killed);
        assert_eq!(b.kills, 1, "only the protected task; the low fits beside what it held before");
    }

    #[test]
    fn after_the_protected_task_lows_may_interleave() {
        // A and B both dip to 10 before rising to 50: run one after the other they need
        // 50 + 30 > 60, interleaved (both dip first) 50 + 10 fits.
        let b = bound(60, &[0, 0], &[&[30, 10, 50, 0], &[30, 10, 50, 0]]);
        assert_eq!(b.kills, 0);
    }

    #[test]
    fn the_grid_never_lets_a_low_outrun_its_trace() {
        // The low needs 3 s of running to finish (samples 1.2 s apart: 3 ticks each); the
        // protected peak of 90 comes at t = 2.5, so the low cannot be gone by then.
        let low = Profile { name: "low".into(), times_s: vec![0.0, 1.2, 2.4, 3.6], sizes: vec![20, 20, 20, 0] };
        let high = Profile { name: "high".into(), times_s: vec![0.0, 2.5, 4.0], sizes: vec![10, 90, 0] };
        let b = min_kills(&Problem { limit: 100, high: high.clone(), lows: vec![low.clone()] }).unwrap();
        assert_eq!(b.kills, 1);
        // With the peak at t = 4, after the low's 3.6 s, it finishes first: no kill.
        let high = Profile { times_s: vec![0.0, 4.0, 5.0], ..high };
        let b = min_kills(&Problem { limit: 100, high, lows: vec![low] }).unwrap();
        assert_eq!((b.kills, b.proof), (0, Proof::Search));
    }

    /// Soundness of the relaxation: for random instances, a random pausing schedule that is
    /// feasible in continuous time (the limit is set to its own peak) must never be declared
    /// impossible, so the bound is 0.
    #[test]
    fn a_feasible_continuous_schedule_is_never_declared_impossible() {
        let mut state: u64 = 0x2545_F491_4F6C_DD1D;
        let mut rand = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        let mut searched = 0;
        for case in 0..300 {
            let profile = |name: &str, samples: u64, rand: &mut dyn FnMut(u64) -> u64| {
                let mut t = 0.0;
                let mut times_s = Vec::new();
                let mut sizes = Vec::new();
                for _ in 0..samples {
                    times_s.push(t);
                    sizes.push(rand(100));
                    t += 0.6 + rand(100) as f64 / 100.0;
                }
                Profile { name: name.into(), times_s, sizes }
            };
            let high = profile("high", 3 + rand(6), &mut rand);
            let lows: Vec<Profile> = (0..2).map(|i| profile(&format!("low{i}"), 2 + rand(5), &mut rand)).collect();
            // Each low's step times: its gaps plus random pauses.
            let steps: Vec<Vec<f64>> = lows
                .iter()
                .map(|l| {
                    let mut e = vec![0.0];
                    for k in 1..l.times_s.len() {
                        let pause = if rand(2) == 0 { 0.0 } else { rand(300) as f64 / 100.0 };
                        e.push(e[k - 1] + (l.times_s[k] - l.times_s[k - 1]) + pause);
                    }
                    e
                })
                .collect();
            let held = |times: &[f64], sizes: &[u64], t: f64| -> u64 {
                let last = times.len() - 1;
                if t >= times[last] {
                    return 0;
                }
                sizes[times.partition_point(|&x| x <= t) - 1]
            };
            let mut events: Vec<f64> = high.times_s.clone();
            events.extend(steps.iter().flatten());
            let peak = events
                .iter()
                .map(|&t| {
                    held(&high.times_s, &high.sizes, t)
                        + lows.iter().zip(&steps).map(|(l, e)| held(e, &l.sizes, t)).sum::<u64>()
                })
                .max()
                .unwrap();
            let b = min_kills(&Problem { limit: peak, high: high.clone(), lows: lows.clone() }).unwrap();
            assert_eq!(b.kills, 0, "case {case}: {high:?} {lows:?} steps {steps:?} limit {peak}");
            searched += usize::from(b.proof == Proof::Search);
        }
        // Parking alone would pass trivially; the grid search must have been exercised.
        assert!(searched >= 30, "only {searched} of 300 cases needed the grid search");
    }

    #[test]
    fn the_park_deadline_is_the_first_moment_parking_everyone_fails() {
        let lows = |v: &[&[u64]]| v.iter().enumerate().map(|(i, s)| task(&format!("low{i}"), s)).collect();
        // Nothing to park: everything fits running together.
        let p = Problem { limit: 100, high: task("high", &[10, 20, 0]), lows: lows(&[&[10, 20, 0]]) };
        assert_eq!(park_deadline(&p).unwrap(), ParkDeadline::Never);
        // The low grows to 30 at t = 2; the protected task peaks at 75 at t = 4. Parked at
        // t = 0 or 1 (10 held) the low fits beside the peak; from t = 2 on it holds 30.
        let p = Problem {
            limit: 100,
            high: task("high", &[10, 10, 10, 10, 75, 0]),
            lows: lows(&[&[10, 10, 30, 30, 30, 30, 30, 0]]),
        };
        assert_eq!(park_deadline(&p).unwrap(), ParkDeadline::At { trace_s: 2.0, share: 0.4 });
        // The clairvoyant bound agrees that a kill was avoidable (park at t < 2).
        assert_eq!(min_kills(&p).unwrap().kills, 0);
    }

    #[test]
    fn bad_profiles_are_named() {
        let p = Problem {
            limit: 1,
            high: Profile { name: "h".into(), times_s: vec![0.0, 2.0, 1.0], sizes: vec![0, 0, 0] },
            lows: vec![],
        };
        let e = min_kills(&p).unwrap_err();
        assert!(e.to_string().contains("task h"), "{e}");
        let p = Problem {
            limit: 1,
            high: task("h", &[0]),
            lows: vec![Profile { name: "l".into(), times_s: vec![], sizes: vec![] }],
        };
        assert!(min_kills(&p).unwrap_err().to_string().contains("task l"));
    }

    #[test]
    fn the_repository_traces_give_a_bound() {
        // The seed's oom scenario: 1100 MiB for dask + 2 x github3 with a 100 MiB baseline.
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../traces/agent-haiku");
        let load = |n: &str| {
            let t = memqos_replay::trace::load_trace(&dir.join(n).join("resources.json")).unwrap();
            Profile::from_trace(&t, 100 << 20)
        };
        let (high, low) = (load("dask__dask-11628"), load("sigmavirus24__github3.py-673"));
        let p = Problem { limit: 1100 << 20, high: high.clone(), lows: vec![low.clone(), low.clone()] };
        assert_eq!(min_kills(&p).unwrap().kills, 0);
        // Under a limit below the protected task's own peak, its kill is certain.
        let p = Problem { limit: high.sizes.iter().max().unwrap() - 1, high, lows: vec![low.clone(), low] };
        let b = min_kills(&p).unwrap();
        assert!(b.high_killed && b.kills >= 1, "{b:?}");
    }
}
