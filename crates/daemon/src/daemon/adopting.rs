//! The cgroups the loop's `adopt` step is still looking after: made since the last sample,
//! their tier's own knobs applied at once and their processes re-checked for a short while.

use std::time::{Duration, Instant};

/// A cgroup made since the last sample (or whose first process just joined) whose tier sets
/// knobs of its own (cpu_weight, oom_score_adj), re-checked for a short while: `memqos run`
/// and container runtimes move the first process in just after the mkdir.
pub(super) struct Adopting {
    pub(super) obs: memqos_policy::CgroupObs,
    pub(super) until: Instant,
    pub(super) weight_done: bool,
    /// When its processes are read next, and how many times they were.
    pub(super) due: Instant,
    pub(super) polls: u32,
}

impl Adopting {
    /// After a read: the next one comes twice as late as the last (10, 20, 40, ... ms).
    /// A joining process is caught by the cgroup.events watch anyway (`due` becomes now);
    /// the reads catch processes forked inside an already populated cgroup. At 100 new
    /// cgroups/s, reading every adopting cgroup every 10 ms cost the daemon most of its CPU.
    pub(super) fn polled(&mut self, now: Instant) {
        self.due = now + ADOPT_POLL * 2u32.pow(self.polls.min(8));
        self.polls += 1;
    }
}

/// How long a new cgroup is re-checked for processes to adjust, and the first interval
/// between checks (doubling): after that the periodic path handles it like any other.
pub(super) const ADOPT_FOR: Duration = Duration::from_millis(300);
const ADOPT_POLL: Duration = Duration::from_millis(10);
