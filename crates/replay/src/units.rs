//! Sizes as `podman stats` prints them: `185.5MB`, `1.055GB`, `0B`, `512KiB`.
//!
//! podman formats with docker/go-units: `HumanSize` gives decimal units (`kB`, `MB`, `GB`;
//! 1 MB = 10^6 bytes), `BytesSize` binary ones (`KiB`, `MiB`, `GiB`; 1 MiB = 2^20 bytes).
//! Both can appear depending on the podman version, so both are accepted, by their own
//! meaning. `KB` (upper-case K) is read as decimal, like `kB`: that is how go-units' parser
//! reads it. Units are case-sensitive otherwise, because `mB` or `Mb` are not something podman
//! prints and guessing would silently scale a trace by 8 or 10^9.

/// Why a size could not be parsed; the caller adds the file, sample index and field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error("empty size")]
    Empty,
    #[error("expected a number, found {0:?}")]
    MissingNumber(String),
    #[error("bad number {0:?}")]
    BadNumber(String),
    #[error("missing unit after {0:?}")]
    MissingUnit(String),
    #[error("unknown unit {0:?}")]
    UnknownUnit(String),
    #[error("{0:?} is too large")]
    TooLarge(String),
}

const UNITS: &[(&str, u64)] = &[
    ("B", 1),
    ("kB", 1_000),
    ("KB", 1_000),
    ("MB", 1_000_000),
    ("GB", 1_000_000_000),
    ("TB", 1_000_000_000_000),
    ("KiB", 1 << 10),
    ("MiB", 1 << 20),
    ("GiB", 1 << 30),
    ("TiB", 1 << 40),
];

/// Multiplier of a unit suffix, or `None` if it is not one podman prints.
pub fn unit_multiplier(unit: &str) -> Option<u64> {
    UNITS.iter().find(|(u, _)| *u == unit).map(|&(_, m)| m)
}

/// Parses one size such as `185.5MB` into bytes, rounded to the nearest byte.
///
/// The number is plain decimal (`123`, `1.5`, `.5`): no sign, no exponent, no `inf`/`NaN`,
/// none of which podman prints. Whitespace around the size and between number and unit is
/// allowed.
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let s = text.trim();
    if s.is_empty() {
        return Err(SizeError::Empty);
    }
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (num, unit) = (&s[..split], s[split..].trim_start());
    if num.is_empty() {
        return Err(SizeError::MissingNumber(unit.to_owned()));
    }
    if unit.is_empty() {
        return Err(SizeError::MissingUnit(num.to_owned()));
    }
    // Rust's float parser would also take "1.", "inf" and exponents; the split above already
    // rules out letters and signs, so only the shape of digits and dots is left to check.
    if num.matches('.').count() > 1 || num == "." {
        return Err(SizeError::BadNumber(num.to_owned()));
    }
    let mult = unit_multiplier(unit).ok_or_else(|| SizeError::UnknownUnit(unit.to_owned()))?;
    let value: f64 = num.parse().map_err(|_| SizeError::BadNumber(num.to_owned()))?;
    let bytes = (value * mult as f64).round();
    // u64::MAX as f64 rounds up to 2^64, so `<` (not `<=`) keeps the cast exact.
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(SizeError::TooLarge(s.to_owned()));
    }
    Ok(bytes as u64)
}

/// A `mem_usage` field: `"<used> / <limit>"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemUsage {
    pub used: u64,
    pub limit: u64,
}

impl MemUsage {
    /// podman prints `0B / 0B` when the container is gone (the last sample of many traces,
    /// taken after the agent exited): a reading of nothing, not of an empty container.
    pub fn is_no_container(&self) -> bool {
        self.limit == 0
    }
}

/// Why a `mem_usage` string could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MemUsageError {
    #[error("expected \"<used> / <limit>\"")]
    Shape,
    #[error("used: {0}")]
    Used(SizeError),
    #[error("limit: {0}")]
    Limit(SizeError),
}

impl MemUsageError {
    /// The innermost problem, for messages that already quote the whole field: an unknown
    /// unit reads better as `unknown unit "XB"` than `used: unknown unit "XB"`.
    pub fn size_error(&self) -> Option<&SizeError> {
        match self {
            MemUsageError::Shape => None,
            MemUsageError::Used(e) | MemUsageError::Limit(e) => Some(e),
        }
    }
}

pub fn parse_mem_usage(text: &str) -> Result<MemUsage, MemUsageError> {
    let mut parts = text.split('/');
    let (Some(used), Some(limit), None) = (parts.next(), parts.next(), parts.next()) else {
        return Err(MemUsageError::Shape);
    };
    let used = parse_size(used).map_err(MemUsageError::Used)?;
    let limit = parse_size(limit).map_err(MemUsageError::Limit)?;
    Ok(MemUsage { used, limit })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unit() {
        let cases = [
            ("0B", 0),
            ("17B", 17),
            ("1kB", 1_000),
            ("1KB", 1_000),
            ("1.5MB", 1_500_000),
            ("185.5MB", 185_500_000),
            ("1.055GB", 1_055_000_000),
            ("2TB", 2_000_000_000_000),
            ("1KiB", 1024),
            ("1.5MiB", 1_572_864),
            ("2GiB", 2 << 30),
            ("1TiB", 1 << 40),
            (".5kB", 500),
            ("12.96MB", 12_960_000),
        ];
        for (text, want) in cases {
            assert_eq!(parse_size(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn whitespace_is_tolerated() {
        assert_eq!(parse_size("  3 MB "), Ok(3_000_000));
    }

    #[test]
    fn bad_sizes_say_why() {
        assert_eq!(parse_size(""), Err(SizeError::Empty));
        assert_eq!(parse_size("   "), Err(SizeError::Empty));
        assert_eq!(parse_size("MB"), Err(SizeError::MissingNumber("MB".into())));
        assert_eq!(parse_size("12"), Err(SizeError::MissingUnit("12".into())));
        assert_eq!(parse_size("12.3XB"), Err(SizeError::UnknownUnit("XB".into())));
        assert_eq!(parse_size("12mb"), Err(SizeError::UnknownUnit("mb".into())));
        assert_eq!(parse_size("1.2.3MB"), Err(SizeError::BadNumber("1.2.3".into())));
        assert_eq!(parse_size(".MB"), Err(SizeError::BadNumber(".".into())));
        assert_eq!(parse_size("-5MB"), Err(SizeError::MissingNumber("-5MB".into())));
        assert_eq!(parse_size("1e3MB"), Err(SizeError::UnknownUnit("e3MB".into())));
        assert_eq!(parse_size("infMB"), Err(SizeError::MissingNumber("infMB".into())));
        assert!(matches!(parse_size("99999999999TB"), Err(SizeError::TooLarge(_))));
    }

    #[test]
    fn mem_usage() {
        assert_eq!(parse_mem_usage("185.5MB / 134.5GB"), Ok(MemUsage { used: 185_500_000, limit: 134_500_000_000 }));
        let gone = parse_mem_usage("0B / 0B").unwrap();
        assert!(gone.is_no_container());
        assert_eq!(parse_mem_usage("185.5MB"), Err(MemUsageError::Shape));
        assert_eq!(parse_mem_usage("1MB / 2MB / 3MB"), Err(MemUsageError::Shape));
        assert_eq!(parse_mem_usage("12.3XB / 134.5GB"), Err(MemUsageError::Used(SizeError::UnknownUnit("XB".into()))));
        assert_eq!(parse_mem_usage("1MB / "), Err(MemUsageError::Limit(SizeError::Empty)));
    }
}
