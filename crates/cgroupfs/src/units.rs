//! Byte counts for people: the one unit constant and the one formatter every memqos crate uses
//! (log lines, `explain`, `memqos stat`'s table, the reasons in the event log).

/// One mebibyte: the unit of every size people read in memqos (configs, logs, reports).
pub const MIB: u64 = 1 << 20;

/// Human form for log lines, explanations and `memqos stat`'s table: `300M`, `1.5G`, `4096`
/// (binary units, one decimal at most).
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

/// Whole mebibytes, as `memqos status` and OOM reports show sizes side by side: `400M`,
/// `1024M` (rounded; one unit for every column).
pub fn mib(bytes: u64) -> String {
    format!("{:.0}M", bytes as f64 / MIB as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_sizes() {
        assert_eq!(human(300 << 20), "300M");
        assert_eq!(human(3 << 29), "1.5G");
        assert_eq!(human(100), "100");
        // `memqos stat`'s table cases (it had its own formatter, with one decimal always).
        assert_eq!(human(0), "0");
        assert_eq!(human(1536), "1.5K");
        assert_eq!(human(24 << 20), "24M");
        assert_eq!(human(3 << 30), "3G");
    }

    #[test]
    fn whole_mebibytes() {
        assert_eq!(mib(400 << 20), "400M");
        assert_eq!(mib(1 << 30), "1024M");
        assert_eq!(mib((5 << 20) / 4), "1M", "rounded, not ceiled");
        assert_eq!(mib(0), "0M");
    }
}
