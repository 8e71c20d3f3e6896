//! Medians and spreads per kernel and policy, the targets, and the text table.

use super::guest::{GuestReport, Iteration};
use super::{Fs, Policy};
use serde::Serialize;

/// Median, minimum and maximum over the iterations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(values: impl IntoIterator<Item = f64>) -> Spread {
        let mut v: Vec<f64> = values.into_iter().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return Spread { median: f64::NAN, min: f64::NAN, max: f64::NAN };
        }
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let n = v.len();
        let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
        Spread { median, min: v[0], max: v[n - 1] }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub kernel: String,
    pub policy: Policy,
    pub fs: Fs,
    /// File system and io.max when not the defaults (empty: ext4, no io.max).
    pub variant: String,
    /// Whether io.max limited either cgroup or the disk's request size was capped (such arms are
    /// compared with plain stock).
    pub io_max: bool,
    pub n: usize,
    pub solo_iops: Spread,
    pub contended_iops: Spread,
    /// Contended IOPS / solo IOPS, per iteration.
    pub iops_retention: Spread,
    pub solo_p99_ms: Spread,
    pub contended_p99_ms: Spread,
    /// Contended p99 / solo p99, per iteration.
    pub p99_inflation: Spread,
    pub solo_p999_ms: Spread,
    pub contended_p999_ms: Spread,
    pub contended_max_ms: Spread,
    /// Noisy's writes reaching the disk during the contended window (io.stat).
    pub noisy_disk_kib_s: Spread,
    /// Noisy's write() rate during the contended window.
    pub noisy_dirtying_kib_s: Spread,
    pub victim_disk_kib_s: Spread,
    /// Sum of the pauses balance_dirty_pages() computed for the victim's cgroup during the
    /// contended phase (upper bound of its sleep there), and the tracepoint hits.
    pub victim_bdp_pause_ms: Spread,
    pub victim_bdp_events: Spread,
    pub noisy_bdp_pause_ms: Spread,
    /// Peak global dirty + writeback during the contended phase, MiB.
    pub peak_global_dirty_mib: Spread,
    /// Whether every daemon stop restored noisy's memory.high ("max").
    pub restored_on_stop: Option<bool>,
}

/// The targets for one kernel, memqos against stock.
#[derive(Clone, Debug, Serialize)]
pub struct Targets {
    pub kernel: String,
    /// The memqos arm's variant (see `Summary::variant`); stock is the same file system
    /// without io.max.
    pub variant: String,
    /// memqos contended IOPS / solo IOPS (median), target >= 0.9.
    pub victim_iops_retention: f64,
    /// memqos contended p99 / solo p99 (median), target <= 3.
    pub victim_p99_inflation: f64,
    /// memqos noisy disk KiB/s / stock noisy disk KiB/s (medians), target >= 0.8.
    pub noisy_bandwidth_kept: f64,
    pub met: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub summaries: Vec<Summary>,
    pub targets: Vec<Targets>,
    pub runs: Vec<GuestReport>,
}

fn paused(it: &Iteration, who: &str) -> f64 {
    it.contended_sleepers.by_cgroup.get(who).map(|s| s.pause_ms as f64).unwrap_or(0.0)
}

fn bdp_events(it: &Iteration, who: &str) -> f64 {
    it.contended_sleepers.by_cgroup.get(who).map(|s| s.events as f64).unwrap_or(0.0)
}

pub fn summarize(r: &GuestReport) -> Summary {
    let its = &r.iterations;
    let s = |f: &dyn Fn(&Iteration) -> f64| Spread::of(its.iter().map(f));
    Summary {
        kernel: r.kernel.clone(),
        policy: r.policy,
        fs: r.settings.fs,
        variant: r.settings.variant(),
        io_max: r.settings.victim_wbps.is_some()
            || r.settings.noisy_wbps.is_some()
            || r.settings.max_sectors_kb.is_some(),
        n: its.len(),
        solo_iops: s(&|i| i.solo.iops),
        contended_iops: s(&|i| i.contended.iops),
        iops_retention: s(&|i| i.contended.iops / i.solo.iops),
        solo_p99_ms: s(&|i| i.solo.p99_us / 1e3),
        contended_p99_ms: s(&|i| i.contended.p99_us / 1e3),
        p99_inflation: s(&|i| i.contended.p99_us / i.solo.p99_us),
        solo_p999_ms: s(&|i| i.solo.p999_us / 1e3),
        contended_p999_ms: s(&|i| i.contended.p999_us / 1e3),
        contended_max_ms: s(&|i| i.contended.max_us / 1e3),
        noisy_disk_kib_s: s(&|i| i.noisy_disk_kib_s),
        noisy_dirtying_kib_s: s(&|i| i.noisy_dirtying_kib_s),
        victim_disk_kib_s: s(&|i| i.victim_disk_kib_s),
        victim_bdp_pause_ms: s(&|i| paused(i, "victim")),
        victim_bdp_events: s(&|i| bdp_events(i, "victim")),
        noisy_bdp_pause_ms: s(&|i| paused(i, "noisy")),
        peak_global_dirty_mib: s(&|i| {
            i.samples
                .iter()
                .filter(|x| x.t >= 0.0)
                .map(|x| (x.global_dirty + x.global_writeback) as f64 / 1048576.0)
                .fold(0.0, f64::max)
        }),
        restored_on_stop: (r.policy == Policy::Memqos)
            .then(|| its.iter().all(|i| i.noisy_high_after_stop.as_deref() == Some("max"))),
    }
}

pub fn build(runs: Vec<GuestReport>) -> Report {
    let summaries: Vec<Summary> = runs.iter().map(summarize).collect();
    let mut targets = Vec::new();
    for m in summaries.iter().filter(|s| s.policy == Policy::Memqos) {
        let stock =
            summaries.iter().find(|s| s.policy == Policy::Stock && s.kernel == m.kernel && s.fs == m.fs && !s.io_max);
        let kept = stock.map(|s| m.noisy_disk_kib_s.median / s.noisy_disk_kib_s.median).unwrap_or(f64::NAN);
        let t = Targets {
            kernel: m.kernel.clone(),
            variant: m.variant.clone(),
            victim_iops_retention: m.iops_retention.median,
            victim_p99_inflation: m.p99_inflation.median,
            noisy_bandwidth_kept: kept,
            met: false,
        };
        let met = t.victim_iops_retention >= 0.9 && t.victim_p99_inflation <= 3.0 && t.noisy_bandwidth_kept >= 0.8;
        targets.push(Targets { met, ..t });
    }
    Report { summaries, targets, runs }
}

fn sp(s: &Spread, digits: usize) -> String {
    format!("{:.*} [{:.*}..{:.*}]", digits, s.median, digits, s.min, digits, s.max)
}

pub fn render(r: &Report) -> String {
    let mut out = String::new();
    out += "dirty-noisy-neighbour: victim = fio 4 KiB sequential buffered writes at 500 KiB/s, noisy = unlimited 4 KiB random buffered writes,\n";
    out += "256 KB/s disk (ext4 unless named), vm.dirty_bytes 32 MB, dirty_background_bytes 16 MB. Medians [min..max] over N iterations (TCG guest on a shared host).\n\n";
    for s in &r.summaries {
        let variant = if s.variant.is_empty() { String::new() } else { format!(" [{}]", s.variant) };
        out += &format!("kernel {} policy {:?}{variant} (N={})\n", s.kernel, s.policy, s.n);
        out += &format!(
            "  victim IOPS        solo {}   contended {}   retention {}\n",
            sp(&s.solo_iops, 1),
            sp(&s.contended_iops, 1),
            sp(&s.iops_retention, 3)
        );
        out += &format!(
            "  victim p99 ms      solo {}   contended {}   inflation {}x\n",
            sp(&s.solo_p99_ms, 2),
            sp(&s.contended_p99_ms, 2),
            sp(&s.p99_inflation, 2)
        );
        out += &format!(
            "  victim p99.9 ms    solo {}   contended {}   max {}\n",
            sp(&s.solo_p999_ms, 2),
            sp(&s.contended_p999_ms, 1),
            sp(&s.contended_max_ms, 0)
        );
        out += &format!(
            "  noisy KiB/s        to disk {}   write() {}   (victim to disk {})\n",
            sp(&s.noisy_disk_kib_s, 0),
            sp(&s.noisy_dirtying_kib_s, 0),
            sp(&s.victim_disk_kib_s, 0)
        );
        out += &format!(
            "  balance_dirty_pages (contended): victim {} pauses summing {} ms   noisy pauses summing {} ms\n",
            sp(&s.victim_bdp_events, 0),
            sp(&s.victim_bdp_pause_ms, 0),
            sp(&s.noisy_bdp_pause_ms, 0)
        );
        out += &format!("  peak global dirty+writeback MiB {}", sp(&s.peak_global_dirty_mib, 1));
        if let Some(ok) = s.restored_on_stop {
            out += &format!("   knobs restored on daemon stop: {}", if ok { "yes" } else { "NO" });
        }
        out += "\n\n";
    }
    for t in &r.targets {
        out += &format!(
            "targets on {}{}: victim IOPS retention {:.3} (>= 0.9), p99 inflation {:.2}x (<= 3), noisy disk bandwidth kept {:.2} (>= 0.8): {}\n",
            t.kernel,
            if t.variant.is_empty() { String::new() } else { format!(" [{}]", t.variant) },
            t.victim_iops_retention,
            t.victim_p99_inflation,
            t.noisy_bandwidth_kept,
            if t.met { "MET" } else { "MISSED" }
        );
    }
    out
}

/// The README's tables (docs/dirty/README.md embeds this output; scripts/dirty/run-all.sh).
pub fn render_markdown(r: &Report) -> String {
    let short = |k: &str| k.split('+').next().unwrap_or(k).to_string();
    let arm = |policy: Policy, variant: &str| {
        let p = format!("{policy:?}").to_lowercase();
        if variant.is_empty() {
            p
        } else {
            format!("{p} [{variant}]")
        }
    };
    let mut out = String::new();
    out += "| kernel | arm | N | victim IOPS solo → contended | retention | victim p99 ms solo → contended | p99 inflation | longest contended write() ms | victim in balance_dirty_pages (events) | noisy write() KiB/s | noisy → disk KiB/s | peak host dirty+wb MiB |\n";
    out += "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
    let mut sums: Vec<&Summary> = r.summaries.iter().collect();
    sums.sort_by_key(|s| (short(&s.kernel), s.variant.clone(), s.policy != Policy::Stock));
    for s in sums {
        out += &format!(
            "| {} | {} | {} | {:.1} → {} | {} | {:.2} → {} | {}x | {} | {} | {} | {} | {} |\n",
            short(&s.kernel),
            arm(s.policy, &s.variant),
            s.n,
            s.solo_iops.median,
            sp(&s.contended_iops, 1),
            sp(&s.iops_retention, 2),
            s.solo_p99_ms.median,
            sp(&s.contended_p99_ms, 2),
            sp(&s.p99_inflation, 2),
            sp(&s.contended_max_ms, 0),
            sp(&s.victim_bdp_events, 0),
            sp(&s.noisy_dirtying_kib_s, 0),
            sp(&s.noisy_disk_kib_s, 0),
            sp(&s.peak_global_dirty_mib, 1),
        );
    }
    out += "\n| kernel | memqos arm | victim IOPS retention (≥ 0.9) | p99 inflation (≤ 3x) | noisy disk bandwidth kept vs stock (≥ 0.8) | all met |\n";
    out += "| --- | --- | --- | --- | --- | --- |\n";
    for t in &r.targets {
        let mark = |ok: bool| if ok { "met" } else { "**missed**" };
        out += &format!(
            "| {} | {} | {:.3} {} | {:.2}x {} | {:.2} {} | {} |\n",
            short(&t.kernel),
            arm(Policy::Memqos, &t.variant),
            t.victim_iops_retention,
            mark(t.victim_iops_retention >= 0.9),
            t.victim_p99_inflation,
            mark(t.victim_p99_inflation <= 3.0),
            t.noisy_bandwidth_kept,
            if t.noisy_bandwidth_kept.is_nan() { "(no stock run)" } else { mark(t.noisy_bandwidth_kept >= 0.8) },
            if t.met { "yes" } else { "no" }
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guest(policy: Policy, iops: f64, noisy_disk: f64, victim_wbps: Option<u64>) -> GuestReport {
        let mut it = Iteration::default();
        it.solo.iops = 125.0;
        it.solo.p99_us = 1000.0;
        it.contended.iops = iops;
        it.contended.p99_us = 2000.0;
        it.noisy_disk_kib_s = noisy_disk;
        GuestReport {
            kernel: "6.12.117+deb12-amd64".into(),
            policy,
            settings: super::super::Settings {
                runs: 1,
                solo_secs: 15,
                fill_secs: 5,
                contended_secs: 30,
                victim_rate_kib: 500,
                lazytime: true,
                fs: Fs::Ext4,
                victim_wbps,
                noisy_wbps: None,
                max_sectors_kb: None,
            },
            dirty_threshold_pages: 8192,
            dirty_background_threshold_pages: 4096,
            iterations: vec![it],
        }
    }

    #[test]
    fn io_max_arm_is_judged_against_plain_stock() {
        let r = build(vec![
            guest(Policy::Stock, 60.0, 100.0, None),
            guest(Policy::Memqos, 57.5, 90.0, None),
            guest(Policy::Memqos, 125.0, 70.0, Some(131072)),
        ]);
        assert_eq!(r.targets.len(), 2);
        let io = r.targets.iter().find(|t| !t.variant.is_empty()).unwrap();
        assert_eq!(io.variant, "io.max wbps victim 128K noisy max");
        assert!((io.victim_iops_retention - 1.0).abs() < 1e-9 && (io.noisy_bandwidth_kept - 0.7).abs() < 1e-9);
        assert!(!io.met, "noisy kept 0.7 < 0.8");
        let md = render_markdown(&r);
        assert!(md.contains("| 6.12.117 | memqos [io.max wbps victim 128K noisy max] | 1.000 met | 2.00x met | 0.70 **missed** | no |"), "{md}");
        assert!(md.contains("| 6.12.117 | memqos | 0.460 **missed** |"), "{md}");
    }

    #[test]
    fn spread_median_even_and_odd() {
        assert_eq!(Spread::of([3.0, 1.0, 2.0]), Spread { median: 2.0, min: 1.0, max: 3.0 });
        assert_eq!(Spread::of([4.0, 1.0, 2.0, 3.0]).median, 2.5);
        assert!(Spread::of([f64::NAN]).median.is_nan());
    }
}
