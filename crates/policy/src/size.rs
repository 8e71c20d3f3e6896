//! Byte quantities: human sizes ("64M") in the config, page rounding, log formatting.

use std::fmt;

use serde::{de, Deserialize, Deserializer};

/// Page size used to round the limits we compute. The kernel rounds memory.* writes down to
/// pages anyway; rounding here keeps what we log equal to what the kernel will hold.
pub const PAGE: u64 = 4096;

/// Sizes for people, defined with the value types (the event schema's reasons use them).
pub use memqos_cgroupfs::units::{human, MIB};
/// The limit type is cgroupfs's: one type, one JSON encoding (a number or `"max"`) for the
/// reader, the engine and the daemon.
pub use memqos_cgroupfs::Limit;

/// A byte count in the config: an integer, or a string with an optional binary suffix
/// (`"64M"`, `"1G"`, `"512KiB"`, `"4096"`). Suffixes are powers of 1024, as in cgroupfs tools.
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
}
