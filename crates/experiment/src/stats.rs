//! Medians with bootstrap confidence intervals: the summary statistic of every figure in the
//! report. With N = 5 runs a t-interval's normality assumption is unverifiable and one slow
//! run drags a mean; the median with a percentile-bootstrap interval says what is typical and
//! how sure five runs can make us.
//!
//! Every run counts: a task that was killed has no completion time, so its run enters the
//! median as +infinity ("killed", the worst rank) instead of being dropped. Dropping it would
//! report the survivors' times as the arm's and flatter the arm that lost the most tasks. A
//! median that is infinite means most runs were killed, and the report says "killed".

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    pub n: usize,
    /// +infinity where killed runs make it so (JSON: the string "killed").
    #[serde(with = "killed_or_number")]
    pub median: f64,
    /// 95% percentile-bootstrap interval of the median (2000 resamples, fixed seed).
    #[serde(with = "killed_or_number")]
    pub ci_low: f64,
    #[serde(with = "killed_or_number")]
    pub ci_high: f64,
    #[serde(with = "killed_or_number")]
    pub min: f64,
    #[serde(with = "killed_or_number")]
    pub max: f64,
    /// Of the `n` runs, how many were killed (entered as +infinity).
    #[serde(default)]
    pub killed: usize,
}

/// The value a killed run enters a median as.
pub const KILLED: f64 = f64::INFINITY;

/// JSON has no infinity (serde_json would write null and refuse to read it back): a killed
/// figure is the string "killed".
mod killed_or_number {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
        if x.is_infinite() && *x > 0.0 {
            s.serialize_str("killed")
        } else {
            s.serialize_f64(*x)
        }
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Number(f64),
        Text(String),
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        match Raw::deserialize(d)? {
            Raw::Number(x) => Ok(x),
            Raw::Text(t) if t == "killed" => Ok(super::KILLED),
            Raw::Text(t) => Err(serde::de::Error::custom(format!("expected a number or \"killed\", got {t:?}"))),
        }
    }
}

/// Median of `values` (mean of the middle two for even counts); `None` if empty.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 })
}

/// Median and its 95% bootstrap interval; NaN values are ignored; `None` if nothing is left.
pub fn estimate(values: &[f64]) -> Option<Estimate> {
    let v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    let m = median(&v)?;
    const RESAMPLES: usize = 2000;
    // xorshift64*: deterministic, so the same runs always give the same report.
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    let mut medians = Vec::with_capacity(RESAMPLES);
    let mut sample = vec![0.0; v.len()];
    for _ in 0..RESAMPLES {
        for x in sample.iter_mut() {
            *x = v[(next() % v.len() as u64) as usize];
        }
        medians.push(median(&sample).expect("non-empty"));
    }
    medians.sort_by(f64::total_cmp);
    let at = |q: f64| medians[((q * RESAMPLES as f64) as usize).min(RESAMPLES - 1)];
    Some(Estimate {
        n: v.len(),
        median: m,
        ci_low: at(0.025),
        ci_high: at(0.975),
        min: v.iter().copied().fold(f64::INFINITY, f64::min),
        max: v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        killed: v.iter().filter(|x| **x == KILLED).count(),
    })
}

/// Two-sided Fisher exact test of a 2x2 table `[[a, b], [c, d]]` (rows: two arms; columns:
/// runs with and without the event). The p-value sums the hypergeometric probabilities of
/// every table with the same margins that is no more likely than the one observed (R's
/// `fisher.test` rule, with the same relative tolerance for ties).
pub fn fisher_exact(a: u64, b: u64, c: u64, d: u64) -> f64 {
    let (row1, row2, col1) = (a + b, c + d, a + c);
    let n = row1 + row2;
    // log C(n, k) from ln-factorials summed once; n is a few dozen runs at most.
    let ln_fact: Vec<f64> = std::iter::once(0.0)
        .chain((1..=n).scan(0.0, |acc, i| {
            *acc += (i as f64).ln();
            Some(*acc)
        }))
        .collect();
    let ln_choose = |n: u64, k: u64| ln_fact[n as usize] - ln_fact[k as usize] - ln_fact[(n - k) as usize];
    let p = |x: u64| (ln_choose(row1, x) + ln_choose(row2, col1 - x) - ln_choose(n, col1)).exp();
    let observed = p(a);
    let (lo, hi) = (col1.saturating_sub(row2), col1.min(row1));
    let total: f64 = (lo..=hi).map(p).filter(|&q| q <= observed * (1.0 + 1e-7)).sum();
    total.min(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_odd_even_and_nan() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[f64::NAN, 5.0]), Some(5.0));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn interval_brackets_the_median_within_the_data() {
        let e = estimate(&[10.0, 11.0, 12.0, 13.0, 30.0]).unwrap();
        assert_eq!(e.median, 12.0);
        assert!(e.ci_low <= 12.0 && e.ci_high >= 12.0, "{e:?}");
        assert!(e.ci_low >= 10.0 && e.ci_high <= 30.0, "{e:?}");
        assert_eq!((e.min, e.max, e.n), (10.0, 30.0, 5));
        // With 9 runs a single outlier is the median of a resample (5 of 9 draws) far less
        // than 2.5% of the time, so it cannot reach the interval. (With 5 runs it can: 3 of 5
        // draws happen 5.8% of the time, which is why 5-run intervals are wide.)
        let e = estimate(&[10.0, 11.0, 12.0, 12.5, 13.0, 13.5, 14.0, 14.5, 30.0]).unwrap();
        assert!(e.ci_high < 30.0, "{e:?}");
    }

    #[test]
    fn constant_data_has_a_zero_width_interval() {
        let e = estimate(&[2.0; 5]).unwrap();
        assert_eq!((e.ci_low, e.median, e.ci_high), (2.0, 2.0, 2.0));
    }

    #[test]
    fn killed_runs_count_and_rank_last() {
        // 3 of 5 killed: the median run is a killed one.
        let e = estimate(&[1.05, 1.06, KILLED, KILLED, KILLED]).unwrap();
        assert_eq!((e.n, e.killed, e.median, e.max), (5, 3, KILLED, KILLED));
        // 2 of 5 killed: the median is the slowest survivor, not the survivors' median.
        let e = estimate(&[1.05, 1.06, 1.10, KILLED, KILLED]).unwrap();
        assert_eq!((e.median, e.killed), (1.10, 2));
        assert_eq!(e.ci_high, KILLED);
        // The JSON round trip keeps "killed".
        let json = serde_json::to_string(&e).unwrap();
        assert!(json.contains("\"ci_high\":\"killed\""), "{json}");
        assert_eq!(serde_json::from_str::<Estimate>(&json).unwrap(), e);
        // Summaries written before the field existed still read.
        let old = r#"{"n":2,"median":1.0,"ci_low":1.0,"ci_high":1.0,"min":1.0,"max":1.0}"#;
        assert_eq!(serde_json::from_str::<Estimate>(old).unwrap().killed, 0);
    }

    #[test]
    fn fisher_exact_matches_known_values() {
        // Fisher's tea-tasting table (R: fisher.test(matrix(c(3,1,1,3),2))$p.value).
        assert!((fisher_exact(3, 1, 1, 3) - 0.485_714_285_7).abs() < 1e-9);
        // R's documentation example, Agresti (1990) job satisfaction: p = 0.002759.
        assert!((fisher_exact(1, 9, 11, 3) - 0.002_759_456).abs() < 1e-8);
        // The issue's oom case: 0 of 5 runs with a kill against 3 of 5 (two-sided 1/6; the
        // issue's "p ~ 0.08" is the one-sided value).
        assert!((fisher_exact(0, 5, 3, 2) - 1.0 / 6.0).abs() < 1e-12);
        assert!((fisher_exact(0, 5, 5, 0) - 2.0 / 252.0).abs() < 1e-12);
        // Symmetric in the rows, and no difference at all is p = 1.
        assert_eq!(fisher_exact(3, 2, 0, 5), fisher_exact(0, 5, 3, 2));
        assert!((fisher_exact(0, 10, 0, 10) - 1.0).abs() < 1e-12);
        assert!((fisher_exact(2, 3, 2, 3) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn at_five_runs_only_a_difference_of_four_runs_is_significant() {
        // docs/experiments.md ("Statistics") and docs/results/evidence.md say so; this is the check.
        let mut significant = Vec::new();
        for a in 0..=5u64 {
            for c in a..=5u64 {
                if fisher_exact(a, 5 - a, c, 5 - c) < 0.05 {
                    significant.push((a, c));
                }
            }
        }
        assert_eq!(significant, vec![(0, 4), (0, 5), (1, 5)]);
    }

    #[test]
    fn deterministic() {
        let v = [1.0, 5.0, 2.0, 8.0, 3.0, 9.0];
        assert_eq!(estimate(&v), estimate(&v));
    }
}
