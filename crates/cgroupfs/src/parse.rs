//! Pure parsers for the text formats of cgroup v2 memory files.
//!
//! Formats (Documentation/admin-guide/cgroup-v2.rst, "Interface Files"):
//! - single value, or the word `max`: memory.{high,max,low,min,swap.max}
//! - flat keyed `key value` lines: memory.stat, memory.events
//! - nested keyed `key sub=value ...` lines: memory.pressure
//!
//! Unknown keys are kept (flat keyed) or ignored (typed views); missing keys are `None`/0,
//! because the set of keys changes across kernel versions.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A memory limit as cgroup v2 files hold it (memory.high/max/low/min/swap.max): a byte count
/// or `max` (no limit). The one limit type of memqos: cgroupfs reads it, stats reports it, the
/// policy engine decides it and the daemon writes it.
///
/// The variant order makes `Bytes(_) < Max`, so `min`/`max`/`<` mean "tighter"/"looser" (an
/// `Option<u64>` with `None = max` would order the other way round). Serialized as a JSON
/// number or the string `"max"`, like the file contents.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Limit {
    /// A finite limit in bytes.
    Bytes(u64),
    /// No limit (`max` in the file).
    Max,
}

impl Limit {
    /// The finite value, or `None` for `max`.
    pub fn bytes(self) -> Option<u64> {
        match self {
            Limit::Bytes(b) => Some(b),
            Limit::Max => None,
        }
    }
}

impl fmt::Display for Limit {
    /// The exact text the kernel accepts when written back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limit::Bytes(b) => write!(f, "{b}"),
            Limit::Max => f.write_str("max"),
        }
    }
}

impl std::str::FromStr for Limit {
    type Err = ParseError;
    /// The file's text: `max` or a decimal byte count (surrounding whitespace ok).
    fn from_str(s: &str) -> Result<Limit, ParseError> {
        parse_limit(s)
    }
}

impl Serialize for Limit {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Limit::Bytes(b) => s.serialize_u64(*b),
            Limit::Max => s.serialize_str("max"),
        }
    }
}

impl<'de> Deserialize<'de> for Limit {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Limit;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a byte count or \"max\"")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Limit, E> {
                Ok(Limit::Bytes(v))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Limit, E> {
                match v {
                    "max" => Ok(Limit::Max),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Str(v), &self)),
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// Why a text could not be parsed; the caller adds the cgroup and file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("line {line}: expected {expected}, found {found:?}")]
    Unexpected { line: usize, expected: &'static str, found: String },
    #[error("empty file, expected {expected}")]
    Empty { expected: &'static str },
}

/// Decimal digits only, as the kernel prints counters: `str::parse` would also take a
/// leading `+`, which the byte-level parsers of the hot paths (stats) do not.
fn digits(t: &str) -> Option<u64> {
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    t.parse().ok()
}

/// Parses a single number, e.g. memory.current.
pub fn parse_u64(text: &str) -> Result<u64, ParseError> {
    // ASCII white space only, as everywhere in these formats (a U+00A0 is not the kernel's).
    let t = text.trim_ascii();
    if t.is_empty() {
        return Err(ParseError::Empty { expected: "a number" });
    }
    digits(t).ok_or_else(|| ParseError::Unexpected { line: 1, expected: "a number", found: t.into() })
}

/// Parses memory.{high,max,low,min}: a byte count or `max`.
pub fn parse_limit(text: &str) -> Result<Limit, ParseError> {
    let t = text.trim_ascii();
    match t {
        "" => Err(ParseError::Empty { expected: "a byte count or \"max\"" }),
        "max" => Ok(Limit::Max),
        _ => digits(t).map(Limit::Bytes).ok_or_else(|| ParseError::Unexpected {
            line: 1,
            expected: "a byte count or \"max\"",
            found: t.into(),
        }),
    }
}

/// Parses a flat keyed file (`key value` per line) in file order.
pub fn parse_flat_keyed(text: &str) -> Result<Vec<(&str, u64)>, ParseError> {
    flat_keyed(text).collect()
}

/// The `key value` lines of a flat keyed file, parsed lazily without allocating: the
/// hot path for callers that read memory.stat many times per second. Lines of the exact
/// form the kernel prints (`key` SP digits) are parsed in one pass over the bytes; anything
/// else goes through the whitespace-tolerant parse that reports errors.
pub fn flat_keyed(text: &str) -> FlatKeyed<'_> {
    FlatKeyed { text, pos: 0, line: 0 }
}

/// Iterator returned by [`flat_keyed`].
pub struct FlatKeyed<'a> {
    text: &'a str,
    pos: usize,
    line: usize,
}

impl<'a> Iterator for FlatKeyed<'a> {
    type Item = Result<(&'a str, u64), ParseError>;

    fn next(&mut self) -> Option<Self::Item> {
        let b = self.text.as_bytes();
        loop {
            if self.pos >= b.len() {
                return None;
            }
            self.line += 1;
            let start = self.pos;
            // Fast path: key (no ASCII whitespace, as the tolerant parse splits on all of
            // it: a CR inside a key must not make the two paths disagree), one space, at most
            // 19 digits (cannot overflow), then newline or end.
            let mut i = start;
            while i < b.len() && !b[i].is_ascii_whitespace() {
                i += 1;
            }
            if i > start && i < b.len() && b[i] == b' ' {
                let key_end = i;
                i += 1;
                let digits = i;
                let mut v: u64 = 0;
                while i < b.len() && b[i].is_ascii_digit() && i - digits < 19 {
                    v = v * 10 + (b[i] - b'0') as u64;
                    i += 1;
                }
                if i > digits && (i == b.len() || b[i] == b'\n') {
                    self.pos = i + 1;
                    return Some(Ok((&self.text[start..key_end], v)));
                }
            }
            let end = b[start..].iter().position(|&c| c == b'\n').map_or(b.len(), |p| start + p);
            self.pos = end + 1;
            let line = &self.text[start..end];
            if line.trim_ascii().is_empty() {
                continue;
            }
            return Some(parse_kv_line(line, self.line));
        }
    }
}

/// The tolerant parse of one `key value` line (any ASCII whitespace, range-checked value).
fn parse_kv_line(line: &str, line_no: usize) -> Result<(&str, u64), ParseError> {
    let mut it = line.split_ascii_whitespace();
    let (Some(key), Some(val), None) = (it.next(), it.next(), it.next()) else {
        return Err(ParseError::Unexpected { line: line_no, expected: "\"key value\"", found: line.into() });
    };
    let val = digits(val).ok_or_else(|| ParseError::Unexpected {
        line: line_no,
        expected: "an unsigned number after the key",
        found: line.into(),
    })?;
    Ok((key, val))
}

/// memory.events (or memory.events.local): how often each boundary was hit, as totals or as
/// increments between two readings ([`MemoryEvents::delta_since`]). The one events type of
/// memqos, from the cgroupfs reader to the policy engine's observations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MemoryEvents {
    /// Reclaimed despite being under memory.low: protection is overcommitted.
    pub low: u64,
    /// Went over memory.high (throttled by the kernel).
    pub high: u64,
    /// Hit memory.max (direct reclaim at the limit).
    pub max: u64,
    /// The OOM killer was invoked.
    pub oom: u64,
    /// Processes were OOM-killed.
    pub oom_kill: u64,
    /// Whole cgroups were OOM-killed (memory.oom.group; absent before 5.17).
    pub oom_group_kill: u64,
}

impl MemoryEvents {
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        let mut ev = MemoryEvents::default();
        for kv in flat_keyed(text) {
            let (k, v) = kv?;
            match k {
                "low" => ev.low = v,
                "high" => ev.high = v,
                "max" => ev.max = v,
                "oom" => ev.oom = v,
                "oom_kill" => ev.oom_kill = v,
                "oom_group_kill" => ev.oom_group_kill = v,
                _ => {}
            }
        }
        Ok(ev)
    }

    /// Counter increase since `earlier`; a counter that went backwards (cgroup recreated
    /// under the same path) counts from zero.
    pub fn delta_since(&self, earlier: &MemoryEvents) -> MemoryEvents {
        let d = |now: u64, then: u64| if now >= then { now - then } else { now };
        MemoryEvents {
            low: d(self.low, earlier.low),
            high: d(self.high, earlier.high),
            max: d(self.max, earlier.max),
            oom: d(self.oom, earlier.oom),
            oom_kill: d(self.oom_kill, earlier.oom_kill),
            oom_group_kill: d(self.oom_group_kill, earlier.oom_group_kill),
        }
    }
}

/// One line of a PSI file: share of wall time stalled over 10/60/300 s, and total stall in µs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PressureLine {
    pub avg10: f64,
    pub avg60: f64,
    pub avg300: f64,
    pub total_us: u64,
}

/// memory.pressure, /proc/pressure/memory (and the cpu/io files of the same format). `full` is
/// absent on some old kernels. The one pressure type of memqos.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Pressure {
    pub some: PressureLine,
    pub full: Option<PressureLine>,
}

impl Pressure {
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        let mut some = None;
        let mut full = None;
        for (i, line) in text.lines().enumerate() {
            let mut fields = line.split_ascii_whitespace();
            let slot = match fields.next() {
                Some("some") => &mut some,
                Some("full") => &mut full,
                Some(_) | None => continue,
            };
            let mut pl = PressureLine::default();
            for kv in fields {
                let bad = || ParseError::Unexpected { line: i + 1, expected: "key=value", found: kv.into() };
                let (k, v) = kv.split_once('=').ok_or_else(bad)?;
                match k {
                    "avg10" => pl.avg10 = v.parse().map_err(|_| bad())?,
                    "avg60" => pl.avg60 = v.parse().map_err(|_| bad())?,
                    "avg300" => pl.avg300 = v.parse().map_err(|_| bad())?,
                    "total" => pl.total_us = v.parse().map_err(|_| bad())?,
                    _ => {}
                }
            }
            *slot = Some(pl);
        }
        let some = some.ok_or(ParseError::Empty { expected: "a \"some\" line" })?;
        Ok(Pressure { some, full })
    }
}

/// Parses a space-separated controller list (cgroup.controllers, cgroup.subtree_control).
pub fn parse_controllers(text: &str) -> Vec<&str> {
    text.split_ascii_whitespace().collect()
}

/// Parses cgroup.procs: one pid per line.
pub fn parse_pids(text: &str) -> Result<Vec<u32>, ParseError> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim_ascii().is_empty())
        .map(|(i, l)| {
            digits(l.trim_ascii()).and_then(|v| u32::try_from(v).ok()).ok_or_else(|| ParseError::Unexpected {
                line: i + 1,
                expected: "a pid",
                found: l.into(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits() {
        assert_eq!(parse_limit("max\n").unwrap(), Limit::Max);
        assert_eq!(parse_limit("67108864\n").unwrap(), Limit::Bytes(64 << 20));
        assert_eq!(Limit::Bytes(5).to_string(), "5");
        assert_eq!(Limit::Max.to_string(), "max");
        assert!(matches!(parse_limit(""), Err(ParseError::Empty { .. })));
        assert!(matches!(parse_limit("-1"), Err(ParseError::Unexpected { .. })));
        // Found by the stats differential: "+0" was a number here and not in the stats parser.
        assert!(parse_limit("+0").is_err() && parse_u64("+0").is_err() && parse_flat_keyed("a +1\n").is_err());
        // And "\u{a0}0": only ASCII white space is trimmed, as in the stats parser.
        assert!(parse_limit("\u{a0}0").is_err() && parse_u64("\u{a0}0").is_err());
        assert!(Limit::Bytes(u64::MAX - 1) < Limit::Max);
        assert_eq!("max\n".parse::<Limit>(), Ok(Limit::Max));
    }

    #[test]
    fn limit_json_is_the_file_value() {
        let j = serde_json::to_string(&[Limit::Bytes(5), Limit::Max]).unwrap();
        assert_eq!(j, r#"[5,"max"]"#);
        assert_eq!(serde_json::from_str::<Vec<Limit>>(&j).unwrap(), vec![Limit::Bytes(5), Limit::Max]);
        assert!(serde_json::from_str::<Limit>(r#""64M""#).is_err());
        assert!(serde_json::from_str::<Limit>("-1").is_err());
    }

    #[test]
    fn flat_keyed_keeps_order_and_rejects_garbage() {
        let kv = parse_flat_keyed("anon 4096\nfile 0\n\nkernel 12\n").unwrap();
        assert_eq!(kv, vec![("anon", 4096), ("file", 0), ("kernel", 12)]);
        let err = parse_flat_keyed("anon 1\nfile x\n").unwrap_err();
        assert_eq!(
            err,
            ParseError::Unexpected { line: 2, expected: "an unsigned number after the key", found: "file x".into() }
        );
        assert!(parse_flat_keyed("anon 1 2\n").is_err());
        // Fast and slow paths agree; 20-digit values are range-checked.
        assert_eq!(parse_flat_keyed("a  7\n\tb 18446744073709551615 \n").unwrap(), vec![("a", 7), ("b", u64::MAX)]);
        assert!(parse_flat_keyed("a 18446744073709551616\n").is_err());
        assert!(parse_flat_keyed(" 5\n").is_err());
        assert_eq!(parse_flat_keyed("a 1").unwrap(), vec![("a", 1)], "no final newline");
        assert_eq!(parse_flat_keyed("a 1\r\n").unwrap(), vec![("a", 1)], "CR is whitespace");
        assert_eq!(parse_flat_keyed("a 00012345678901234567\n").unwrap(), vec![("a", 12345678901234567)]);
        // Found by proptest_flat_keyed_agrees_with_its_definition: the fast path took "\r"
        // (and form feed) as part of a key where the tolerant parse splits on it.
        assert!(parse_flat_keyed("\r 0").is_err());
        assert!(parse_flat_keyed("a\x0cb 0\n").is_err());
    }

    #[test]
    fn memory_events_6_12_and_unknown_keys() {
        // 6.12 layout; a future key must not break parsing.
        let ev =
            MemoryEvents::parse("low 0\nhigh 1459\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\nsock_throttled 9\n")
                .unwrap();
        assert_eq!(ev, MemoryEvents { low: 0, high: 1459, max: 3, oom: 1, oom_kill: 1, oom_group_kill: 0 });
        // Older kernels lack oom_group_kill.
        let old = MemoryEvents::parse("low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n").unwrap();
        assert_eq!(old.oom_group_kill, 0);
    }

    #[test]
    fn events_delta_handles_reset() {
        let a = MemoryEvents { high: 10, oom_kill: 1, ..Default::default() };
        let b = MemoryEvents { high: 15, oom_kill: 0, ..Default::default() };
        let d = b.delta_since(&a);
        assert_eq!(d.high, 5);
        assert_eq!(d.oom_kill, 0);
    }

    #[test]
    fn pressure_some_and_full() {
        let p = Pressure::parse(
            "some avg10=1.50 avg60=0.20 avg300=0.00 total=123456\nfull avg10=0.75 avg60=0.10 avg300=0.00 total=6543\n",
        )
        .unwrap();
        assert_eq!(p.some.avg10, 1.5);
        assert_eq!(p.some.total_us, 123456);
        assert_eq!(p.full.unwrap().total_us, 6543);
        let only_some = Pressure::parse("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n").unwrap();
        assert!(only_some.full.is_none());
        assert!(Pressure::parse("").is_err());
        assert!(Pressure::parse("some avg10=x\n").is_err());
    }

    #[test]
    fn pids_and_controllers() {
        assert_eq!(parse_pids("1\n22\n").unwrap(), vec![1, 22]);
        assert!(parse_pids("1\nabc\n").is_err());
        assert_eq!(parse_controllers("cpu io memory pids\n"), vec!["cpu", "io", "memory", "pids"]);
    }
}
