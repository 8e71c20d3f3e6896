//! The targets checked against each group's memqos arm.

use super::GroupSummary;
use crate::scenario::Workload;
use crate::series::figures::ratio;
use crate::stats::Estimate;
use serde::{Deserialize, Serialize};

/// A target's verdict for the report and the closing note.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Verdict {
    pub scenario: String,
    pub variant: String,
    pub kernel: String,
    pub target: String,
    pub measured: String,
    pub met: bool,
}

/// The targets, checked against the memqos arm of each group.
pub fn verdicts(groups: &[GroupSummary]) -> Vec<Verdict> {
    let mut v = Vec::new();
    for g in groups {
        let arm = |name: &str| g.arms.iter().find(|a| a.arm == name);
        let Some(m) = arm("memqos") else { continue };
        let mut push = |target: &str, measured: String, met: bool| {
            v.push(Verdict {
                scenario: g.scenario.clone(),
                variant: g.variant.clone(),
                kernel: g.kernel.clone(),
                target: target.into(),
                measured,
                met,
            })
        };
        let med = |e: &Option<Estimate>| e.map(|e| e.median);
        // `oom-cpu` has the targets of `oom`, `sweep-tight-declared` and `-learned` those of
        // `sweep-tight`.
        let base =
            ["-cpu", "-declared", "-learned"].iter().find_map(|x| g.scenario.strip_suffix(x)).unwrap_or(&g.scenario);
        if g.workload == Workload::StressNg {
            push(
                "memqos: no OOM kill in any run",
                format!("{} of {} runs with an OOM kill ({} kills)", m.runs_with_oom_kill, m.runs, m.oom_kills),
                m.runs_with_oom_kill == 0,
            );
            let h = med(&m.high_ops_vs_solo);
            push(
                "RFC demo: memqos high side ≥ 0.95x its solo throughput (bogo-ops/s)",
                format!(
                    "high {} of solo; low {} of solo, {} of none",
                    ratio(&m.high_ops_vs_solo),
                    ratio(&m.low_ops_vs_solo),
                    ratio(&m.low_ops_vs_none)
                ),
                h.is_some_and(|h| h >= 0.95),
            );
            continue;
        }
        if base != "overhead" {
            push(
                "memqos: no OOM kill in any run",
                format!("{} of {} runs with an OOM kill ({} kills)", m.runs_with_oom_kill, m.runs, m.oom_kills),
                m.runs_with_oom_kill == 0,
            );
            push(
                "memqos: the protected task finishes in every run",
                format!("{} of {} runs", m.high_finished, m.runs),
                m.high_finished == m.runs,
            );
            push(
                "memqos: every low-priority task finishes",
                format!("{} of {} finished", m.low_finished, m.low_started),
                m.low_finished == m.low_started,
            );
            let w = med(&m.high_wall_vs_solo);
            push("memqos: high completion ≤ 1.05x solo", ratio(&m.high_wall_vs_solo), w.is_some_and(|w| w <= 1.05));
            let p = med(&m.high_p95_vs_solo);
            push("memqos: high P95 latency ≤ 1.2x solo", ratio(&m.high_p95_vs_solo), p.is_some_and(|p| p <= 1.2));
            if let (Some(bound), Some(avoidable)) = (m.kill_bound, m.avoidable_kills) {
                push(
                    "memqos: no avoidable kill (kills above the clairvoyant bound)",
                    format!(
                        "{} kills, bound {}, {} avoidable in {} of {} runs",
                        m.task_kills,
                        bound,
                        avoidable,
                        m.runs_with_avoidable_kill.unwrap_or(0),
                        m.runs
                    ),
                    avoidable == 0,
                );
            }
        }
        // "Same or better": memqos's median within or below the peer's interval.
        let within = |mine: &Option<Estimate>, theirs: &Option<Estimate>| match (mine, theirs) {
            (Some(m), Some(t)) => m.median <= t.ci_high,
            _ => false,
        };
        // Issue 16: against Kubernetes MemoryQoS's knobs in the same runs.
        if let Some(k) = arm("kube-memoryqos") {
            if k.task_kills > 0 {
                push(
                    "vs kube-memoryqos: no OOM kill where it has one",
                    format!("memqos {} kills in {} runs; kube-memoryqos {} kills", m.task_kills, m.runs, k.task_kills),
                    m.task_kills == 0,
                );
            }
            push(
                "vs kube-memoryqos: high P95 vs solo no worse (memqos median ≤ its interval)",
                format!("memqos {} vs kube-memoryqos {}", ratio(&m.high_p95_vs_solo), ratio(&k.high_p95_vs_solo)),
                within(&m.high_p95_vs_solo, &k.high_p95_vs_solo),
            );
        }
        // Issue 16: against the userspace OOM killers a user would run instead, in the same runs.
        for peer in ["oomd", "systemd-oomd"] {
            let Some(o) = arm(peer) else { continue };
            push(
                &format!("vs {peer}: high completion vs solo same or better (memqos median ≤ {peer}'s interval)"),
                format!("memqos {} vs {peer} {}", ratio(&m.high_wall_vs_solo), ratio(&o.high_wall_vs_solo)),
                within(&m.high_wall_vs_solo, &o.high_wall_vs_solo),
            );
            push(
                &format!("vs {peer}: high P95 vs solo same or better (memqos median ≤ {peer}'s interval)"),
                format!("memqos {} vs {peer} {}", ratio(&m.high_p95_vs_solo), ratio(&o.high_p95_vs_solo)),
                within(&m.high_p95_vs_solo, &o.high_p95_vs_solo),
            );
            if o.task_kills > 0 {
                push(
                    &format!("vs {peer}: every low task finishes where {peer} kills"),
                    format!(
                        "memqos: {} of {} lows finished; {peer}: {} kills ({} by {peer}), {} of {} lows finished",
                        m.low_finished, m.low_started, o.task_kills, o.userspace_kills, o.low_finished, o.low_started
                    ),
                    m.low_finished == m.low_started,
                );
            }
        }
        // Issue 18, work conservation: where none killed nothing, memqos should not have cost
        // the lows more than 5% (there was nothing to prevent).
        if let Some(n) = arm("none") {
            if n.task_kills == 0 && g.workload == Workload::Replay && base != "overhead" {
                if let Some(l) = m.low_wall_vs_none {
                    push(
                        "work conservation: lows within 1.05x of none where none has no kill",
                        ratio(&m.low_wall_vs_none),
                        l.median <= 1.05,
                    );
                }
            }
        }
        if base == "oom" {
            if let Some(n) = arm("none") {
                push(
                    "none shows OOM kills (the seed's baseline)",
                    format!("{} of {} runs with an OOM kill", n.runs_with_oom_kill, n.runs),
                    n.runs_with_oom_kill > 0,
                );
            }
        }
        if base == "sweep-tight" {
            let w = med(&m.high_wall_vs_solo);
            push(
                "tight sweep: protected finishes in every run at ≤ 1.10x solo",
                format!("{} of {} runs, {}", m.high_finished, m.runs, ratio(&m.high_wall_vs_solo)),
                m.high_finished == m.runs && w.is_some_and(|w| w <= 1.10),
            );
            // The bound's kills are the lows that no policy could save (or the protected task).
            if let Some(bound) = m.kill_bound {
                let allowed = (m.low_started as u64).saturating_sub(bound);
                push(
                    "tight sweep: ≥ 90% of the low tasks the bound allows finish",
                    format!("{} of {} allowed", m.low_finished, allowed),
                    allowed == 0 || m.low_finished as f64 >= 0.9 * allowed as f64,
                );
            }
        }
        if base == "contention" {
            let p = med(&m.high_p95_vs_none);
            push("memqos: high P95 ≥ 50% below none", ratio(&m.high_p95_vs_none), p.is_some_and(|p| p <= 0.5));
        }
        if base == "overhead" {
            let p = med(&m.high_p50_vs_none);
            push(
                "overhead: P50 latency within 1% of daemon-off",
                ratio(&m.high_p50_vs_none),
                p.is_some_and(|p| (p - 1.0).abs() <= 0.01),
            );
            let w = med(&m.high_wall_vs_none);
            push(
                "overhead: completion within 1% of daemon-off",
                ratio(&m.high_wall_vs_none),
                w.is_some_and(|w| (w - 1.0).abs() <= 0.01),
            );
        }
    }
    v
}
