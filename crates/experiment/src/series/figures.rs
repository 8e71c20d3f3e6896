//! Estimates as both reports and the docs' tables print them: a median with its interval,
//! a killed run's +infinity as "killed", a ratio with its `x`.

use crate::stats::{Estimate, KILLED};

/// A number, or "killed" for a killed run's +infinity.
fn num(x: f64, digits: usize, unit: &str) -> String {
    if x == KILLED {
        "killed".into()
    } else {
        format!("{x:.digits$}{unit}")
    }
}

/// How many of the runs were killed, where any were.
fn killed_note(e: &Estimate) -> String {
    if e.killed > 0 {
        format!(" ({} of {} killed)", e.killed, e.n)
    } else {
        String::new()
    }
}

/// A median with its 95% interval (from two runs up), and how many runs were killed.
pub(crate) fn est(e: &Option<Estimate>, digits: usize) -> String {
    match e {
        Some(e) if e.n > 1 => format!(
            "{} [{}–{}]{}",
            num(e.median, digits, ""),
            num(e.ci_low, digits, ""),
            num(e.ci_high, digits, ""),
            killed_note(e)
        ),
        Some(e) => format!("{}{}", num(e.median, digits, ""), killed_note(e)),
        None => "–".into(),
    }
}

/// [`est`] of a ratio: two digits and an `x` on the median.
pub(crate) fn ratio(e: &Option<Estimate>) -> String {
    match e {
        Some(e) if e.n > 1 => {
            format!("{} [{}–{}]{}", num(e.median, 2, "x"), num(e.ci_low, 2, ""), num(e.ci_high, 2, ""), killed_note(e))
        }
        Some(e) => format!("{}{}", num(e.median, 2, "x"), killed_note(e)),
        None => "–".into(),
    }
}

/// The median alone, as a ratio ("1.05x", "killed").
pub(crate) fn ratio_median(e: &Option<Estimate>) -> String {
    e.map(|e| num(e.median, 2, "x")).unwrap_or_else(|| "–".into())
}

/// A ratio's median with the range of its values ("1.05x [0.98–1.20]"): the agent host's
/// figures, whose values are sessions and calls rather than runs.
pub(crate) fn ratio_range(e: &Option<Estimate>) -> String {
    e.map(|e| format!("{:.2}x [{:.2}–{:.2}]", e.median, e.min, e.max)).unwrap_or_else(|| "–".into())
}

/// A whole amount (seconds, milliseconds), median [min–max]: `104 [96–138]`.
pub(crate) fn whole_range(e: &Option<Estimate>) -> String {
    e.map(|e| format!("{:.0} [{:.0}–{:.0}]", e.median, e.min, e.max)).unwrap_or_else(|| "–".into())
}

/// A share as a percentage, median [min–max]: `97% [95–99%]`.
pub(crate) fn percent_range(e: &Option<Estimate>) -> String {
    e.map(|e| format!("{:.0}% [{:.0}–{:.0}%]", e.median * 100.0, e.min * 100.0, e.max * 100.0))
        .unwrap_or_else(|| "–".into())
}
