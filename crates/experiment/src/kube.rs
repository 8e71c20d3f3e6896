//! The `kube-memoryqos` arm: the knobs a v1.37 kubelet writes with MemoryQoS on, the
//! throttling factor set, and `memoryReservationPolicy: TieredReservation` (KEP-2570; the
//! Kubernetes blog posts "Quality-of-Service for Memory Resources" (v1.27), "Memory QoS tiered
//! protection" (v1.36) and "Memory QoS graduates to beta" (v1.37)):
//! - Guaranteed pod (requests = limits): memory.min = request, memory.max = limit, no
//!   memory.high (the formula gives the limit itself), oom_score_adj -997;
//! - Burstable pod: memory.low = request, memory.high =
//!   floor((request + factor x (limit or node allocatable - request)) / page) x page when that
//!   exceeds the request, oom_score_adj 1000 - 1000 x request / capacity, clamped to 2..=999.
//!
//! The layout maps the protected task to a Guaranteed pod and the low tasks to Burstable pods
//! without a limit; the experiment's parent cgroup is the node (allocatable = capacity = its
//! memory.max). Requests are what an operator sizing from observed usage would write: the
//! protected task's peak plus 10% (a Guaranteed pod's limit is its request, so it must cover
//! the peak and the process's own overhead, or its own limit kills it), each low task's median
//! usage (a typical-usage request). Both include the scenario's baseline.

/// The kubelet's throttling factor: v1.37's default is null (no memory.high at all), so the
/// arm sets the value the pre-1.37 alphas defaulted to and the v1.37 docs show.
pub const THROTTLING_FACTOR: f64 = 0.9;
const PAGE: u64 = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Knobs {
    pub memory_min: Option<u64>,
    pub memory_low: Option<u64>,
    pub memory_high: Option<u64>,
    pub memory_max: Option<u64>,
    pub oom_score_adj: i32,
}

/// A Guaranteed pod whose request and limit are `request`.
pub fn guaranteed(request: u64) -> Knobs {
    Knobs {
        memory_min: Some(request),
        memory_low: None,
        memory_high: None,
        memory_max: Some(request),
        oom_score_adj: -997,
    }
}

/// A Burstable pod with `request` and no limit on a node of `allocatable` (= capacity) bytes.
pub fn burstable(request: u64, allocatable: u64) -> Knobs {
    let span = allocatable.saturating_sub(request) as f64;
    let high = ((request as f64 + THROTTLING_FACTOR * span) / PAGE as f64).floor() as u64 * PAGE;
    let adj = 1000 - (1000 * request as i128 / allocatable.max(1) as i128) as i32;
    Knobs {
        memory_min: None,
        memory_low: Some(request),
        memory_high: (high > request).then_some(high),
        memory_max: None,
        oom_score_adj: adj.clamp(2, 999),
    }
}

/// The request of a task: its peak plus 10% (Guaranteed) or its median (Burstable) replayed
/// size, page aligned.
pub fn request(sizes: &[u64], guaranteed: bool) -> u64 {
    let mut v = sizes.to_vec();
    v.sort_unstable();
    let bytes = match (guaranteed, v.is_empty()) {
        (_, true) => 0,
        (true, false) => v[v.len() - 1] + v[v.len() - 1] / 10,
        (false, false) => v[v.len() / 2],
    };
    bytes.div_ceil(PAGE) * PAGE
}

#[cfg(test)]
mod tests {
    use super::*;

    use memqos_policy::size::MIB;

    #[test]
    fn guaranteed_pods_get_a_hard_floor_and_their_limit() {
        let k = guaranteed(421 * MIB);
        assert_eq!(
            (k.memory_min, k.memory_max, k.memory_high, k.oom_score_adj),
            (Some(421 * MIB), Some(421 * MIB), None, -997)
        );
    }

    #[test]
    fn burstable_pods_get_memory_low_and_the_throttling_formula() {
        // request 300 MiB on a 1100 MiB node: high = 300 + 0.9 x 800 = 1020 MiB (page aligned).
        let k = burstable(300 * MIB, 1100 * MIB);
        assert_eq!(k.memory_low, Some(300 * MIB));
        assert_eq!(k.memory_high, Some(1020 * MIB));
        assert_eq!(k.memory_high.unwrap() % PAGE, 0);
        // 1000 - 1000 x 300 / 1100 = 728 (integer division, as kubelet)
        assert_eq!(k.oom_score_adj, 728);
        // A request at the node's size: no room to throttle above it, and the score floor of 2.
        let k = burstable(1100 * MIB, 1100 * MIB);
        assert_eq!((k.memory_high, k.oom_score_adj), (None, 2));
    }

    #[test]
    fn requests_are_peak_or_median() {
        let p = PAGE;
        assert_eq!(request(&[5 * p, p, 10 * p, 3 * p], true), 11 * p);
        assert_eq!(request(&[5 * p, p, 9 * p, 3 * p, 7 * p], false), 5 * p);
        assert_eq!(request(&[p + 1], false), 2 * p, "page aligned up");
        assert_eq!(request(&[], false), 0);
    }
}
