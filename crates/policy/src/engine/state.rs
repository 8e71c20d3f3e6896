//! Per-cgroup memory of the engine: write times, working-set window, freeze cause.

use std::collections::VecDeque;

use crate::config::TierIndex;
use crate::decision::{Action, Knob};
use crate::obs::Knobs;

/// What the engine remembers about a cgroup between ticks. Dropped when the cgroup vanishes
/// or changes tier, so a cgroup that comes back starts fresh.
#[derive(Debug)]
pub(crate) struct CgState {
    pub tier: TierIndex,
    /// Where the cgroup is (kept by the engine's map under its kernel id), for status and
    /// reload.
    pub path: String,
    pub ws: WindowMax,
    /// Last write time per knob, indexed by `Knob as usize`.
    last_write: [Option<u64>; 5],
    /// Set while a freeze we wrote is in force: the stalling cgroup that caused it.
    pub frozen_by: Option<String>,
    /// Originals and the values we believe are in force (observed, then our own writes).
    pub original: Knobs,
    pub current: Knobs,
    /// Seen with a process in it at least once (`CgroupObs::populated` not `Some(false)`):
    /// a declared cgroup that has not run yet is about to, and reserves its room already.
    pub has_run: bool,
    /// When the engine first saw it (engine ms): a reservation by a cgroup that never runs
    /// expires (`engine::UNSTARTED_RESERVATION_MS`).
    pub first_seen_ms: u64,
    /// How it grows, for a first-sight expectation (`Tier::first_sight_growth`).
    pub growth: Growth,
}

/// The largest working set a cgroup has had since the engine first saw it, and when that
/// last rose by a whole step (`ws_granularity`): a cgroup whose peak creeps up a page at a
/// time is not "still growing".
#[derive(Debug, Default)]
pub(crate) struct Growth {
    pub peak: u64,
    step_from: u64,
    pub grew_ms: Option<u64>,
}

impl Growth {
    pub fn push(&mut self, now: u64, value: u64, step: u64) {
        self.peak = self.peak.max(value);
        if value >= self.step_from.saturating_add(step.max(1)) {
            self.step_from = value;
            self.grew_ms = Some(now);
        }
    }

    /// The first sample of a cgroup that was already running when the engine started (a
    /// daemon start or restart): where it stands now is where steps count from, not growth.
    pub fn adopt(&mut self, value: u64) {
        self.peak = self.peak.max(value);
        self.step_from = self.step_from.max(value);
    }

    /// True when the peak rose by a step within `within_ms` before `now`.
    pub fn growing(&self, now: u64, within_ms: u64) -> bool {
        self.grew_ms.is_some_and(|t| now.saturating_sub(t) < within_ms)
    }
}

impl CgState {
    pub fn new(
        tier: TierIndex,
        path: String,
        window_ms: u64,
        original: Knobs,
        current: Knobs,
        first_seen_ms: u64,
    ) -> CgState {
        CgState {
            tier,
            path,
            ws: WindowMax::new(window_ms),
            last_write: [None; 5],
            frozen_by: None,
            original,
            current,
            has_run: false,
            first_seen_ms,
            growth: Growth::default(),
        }
    }

    /// True unless this knob was written less than `interval_ms` ago.
    pub fn may_write(&self, knob: Knob, now: u64, interval_ms: u64) -> bool {
        self.last_write[knob as usize].is_none_or(|t| now.saturating_sub(t) >= interval_ms)
    }

    /// True once this engine has written `knob` of this cgroup.
    pub fn ever_wrote(&self, knob: Knob) -> bool {
        self.last_write[knob as usize].is_some()
    }

    /// Records a write and its value.
    pub fn wrote(&mut self, action: Action, now: u64) {
        self.last_write[action.knob() as usize] = Some(now);
        match action {
            Action::High(l) => self.current.high = l,
            Action::Low(l) => self.current.low = l,
            Action::Min(l) => self.current.min = l,
            Action::Freeze(b) => self.current.frozen = b,
            Action::Kill => {}
        }
    }
}

/// Maximum of the samples of the last `window_ms`, in O(1) amortized per sample
/// (monotonic deque: values only ever decrease from front to back).
#[derive(Debug)]
pub(crate) struct WindowMax {
    window_ms: u64,
    samples: VecDeque<(u64, u64)>,
}

impl WindowMax {
    pub fn new(window_ms: u64) -> WindowMax {
        WindowMax { window_ms, samples: VecDeque::new() }
    }

    /// A reload changed `ws_window_ms`: samples older than the new window age out.
    pub fn set_window(&mut self, window_ms: u64) {
        self.window_ms = window_ms;
    }

    pub fn push(&mut self, now: u64, value: u64) {
        while self.samples.back().is_some_and(|&(_, v)| v <= value) {
            self.samples.pop_back();
        }
        self.samples.push_back((now, value));
        while self.samples.front().is_some_and(|&(t, _)| now.saturating_sub(t) >= self.window_ms) {
            self.samples.pop_front();
        }
    }

    /// The peak of the window; 0 before the first sample.
    pub fn max(&self) -> u64 {
        self.samples.front().map_or(0, |&(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_max_slides() {
        let mut w = WindowMax::new(1000);
        w.push(0, 5);
        w.push(400, 3);
        assert_eq!(w.max(), 5);
        w.push(999, 1);
        assert_eq!(w.max(), 5);
        w.push(1000, 2); // the 5 from t=0 is now 1000 ms old: out
        assert_eq!(w.max(), 3);
        w.push(1500, 0);
        assert_eq!(w.max(), 2);
        w.push(1501, 9);
        assert_eq!(w.max(), 9);
    }

    #[test]
    fn growth_counts_whole_steps_only() {
        let mut g = Growth::default();
        g.push(0, 10, 16);
        assert!(!g.growing(0, 1000), "not a whole step yet");
        g.push(100, 20, 16);
        assert!(g.growing(100, 1000) && g.peak == 20);
        // Creeping up by less than a step from the last mark is not growth.
        g.push(1200, 30, 16);
        assert!(!g.growing(1200, 1000));
        g.push(1300, 36, 16);
        assert!(g.growing(1300, 1000));
        // Shrinking keeps the peak; growth ends once a window passes without a step.
        g.push(2400, 5, 16);
        assert!(!g.growing(2400, 1000) && g.peak == 36);
    }

    #[test]
    fn an_adopted_size_is_where_steps_start_not_growth() {
        let mut g = Growth::default();
        g.adopt(500);
        assert!(!g.growing(0, 1000) && g.peak == 500);
        g.push(100, 510, 16);
        assert!(!g.growing(100, 1000), "less than a step above where it stood");
        g.push(200, 520, 16);
        assert!(g.growing(200, 1000) && g.peak == 520);
    }

    #[test]
    fn rate_limit_per_knob() {
        let mut s = CgState::new(TierIndex(0), "a".into(), 1000, Knobs::default(), Knobs::default(), 0);
        assert!(s.may_write(Knob::High, 0, 1000));
        s.wrote(Action::High(crate::Limit::Bytes(1)), 100);
        assert!(!s.may_write(Knob::High, 1099, 1000));
        assert!(s.may_write(Knob::High, 1100, 1000));
        assert!(s.may_write(Knob::Low, 100, 1000));
    }
}
