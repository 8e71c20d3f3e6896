//! Byte quantities: cgroup limits (`max` or bytes) and human sizes ("64M") in the config.

use std::fmt;

use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

/// Page size used to round the limits we compute. The kernel rounds memory.* writes down to
/// pages anyway; rounding here keeps what we log equal to what the kernel will hold.
pub const PAGE: u64 = 4096;

/// A memory limit as cgroup v2 files hold it: a byte count or `max`.
///
/// The variant order makes `Bytes(_) < Max`, so `min`/`max`/`<` mean "tighter"/"looser"
/// (an `Option<u64>` with `None = max` would order the other way round).
/// Serialized as a JSON number or the string `"max"`, like the file contents.
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

    /// `None` means `max`.
    pub fn from_option(v: Option<u64>) -> Limit {
        v.map_or(Limit::Max, Limit::Bytes)
    }

    /// Parses a cgroup file value: `max` or a decimal byte count (surrounding whitespace ok).
    pub fn parse(s: &str) -> Option<Limit> {
        match s.trim() {
            "max" => Some(Limit::Max),
            t => t.parse().ok().map(Limit::Bytes),
        }
    }
}

impl fmt::Display for Limit {
    /// The exact text to write into a memory.* file.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limit::Bytes(b) => write!(f, "{b}"),
            Limit::Max => f.write_str("max"),
        }
    }
}

impl Serialize for Limit {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Limit::Bytes(b) => s.serialize_u64(*b),
            Limit::Max => s.serialize_str("max"),
        }
    }
}

impl<'de> Deserialize<'de> for Limit {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = Limit;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a byte count or \"max\"")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Limit, E> {
                Ok(Limit::Bytes(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Limit, E> {
                if v == "max" {
                    return Ok(Limit::Max);
                }
                parse_size(v).map(Limit::Bytes).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// A byte count in the config: an integer, or a string with an optional binary suffix
/// (`"64M"`, `"1G"`, `"512KiB"`, `"4096"`). Suffixes are powers of 1024, as in cgroupfs tools.
/// The string `"max"` is accepted only where a [`Limit`] is expected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteSize(pub u64);

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a byte size: an integer or a string like \"64M\" or \"1G\"")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ByteSize, E> {
                Ok(ByteSize(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ByteSize, E> {
                u64::try_from(v)
                    .map(ByteSize)
                    .map_err(|_| E::custom(format!("byte size must not be negative, got {v}")))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ByteSize, E> {
                parse_size(v).map(ByteSize).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// Parses `"64M"`, `"1G"`, `"1GiB"`, `"4096"`, case-insensitive suffix, binary multiples.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, suffix) = t.split_at(digits_end);
    if num.is_empty() {
        return Err(format!("invalid byte size {s:?}: expected digits then K/M/G/T"));
    }
    let shift = match suffix.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "ki" | "kib" | "kb" => 10,
        "m" | "mi" | "mib" | "mb" => 20,
        "g" | "gi" | "gib" | "gb" => 30,
        "t" | "ti" | "tib" | "tb" => 40,
        _ => return Err(format!("invalid byte size {s:?}: unknown suffix {suffix:?}")),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1u64 << shift))
        .ok_or_else(|| format!("byte size {s:?} is too large"))
}

/// Human form for log lines: `300M`, `1.5G`, `4096` (binary units, one decimal at most).
pub fn human(bytes: u64) -> String {
    const UNITS: [(u64, &str); 4] = [(1 << 40, "T"), (1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")];
    for (unit, name) in UNITS {
        if bytes >= unit {
            // (`is_multiple_of` would need Rust 1.87; the workspace supports 1.82.)
            let (whole, rest) = (bytes / unit, bytes % unit);
            return if rest == 0 {
                format!("{whole}{name}")
            } else {
                format!("{:.1}{name}", bytes as f64 / unit as f64)
            };
        }
    }
    bytes.to_string()
}

/// Rounds down to a page boundary.
pub fn page_down(bytes: u64) -> u64 {
    bytes - bytes % PAGE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sizes() {
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("1gib"), Ok(1 << 30));
        assert_eq!(parse_size("512K"), Ok(512 << 10));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("").is_err());
        assert!(parse_size("M").is_err());
        assert!(parse_size("1.5G").is_err());
        assert!(parse_size("64X").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn limit_orders_max_last_and_round_trips() {
        assert!(Limit::Bytes(u64::MAX) < Limit::Max);
        assert_eq!(Limit::parse("max\n"), Some(Limit::Max));
        assert_eq!(Limit::parse("123"), Some(Limit::Bytes(123)));
        assert_eq!(Limit::parse("-1"), None);
        assert_eq!(Limit::Bytes(5).to_string(), "5");
        let j = serde_json::to_string(&[Limit::Bytes(5), Limit::Max]).unwrap();
        assert_eq!(j, r#"[5,"max"]"#);
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human(300 << 20), "300M");
        assert_eq!(human(3 << 29), "1.5G");
        assert_eq!(human(100), "100");
    }
}
