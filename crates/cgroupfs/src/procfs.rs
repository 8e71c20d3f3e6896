//! Pure parsers for the /proc files that describe cgroups and memory: mountinfo,
//! /proc/cgroups and /proc/swaps (proc(5)). `memqos doctor` reads them.

use serde::Serialize;
use std::path::PathBuf;

/// One line of `/proc/self/mountinfo`: the fields memqos needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    pub root: String,
    pub mount_point: PathBuf,
    pub fstype: String,
    pub super_options: String,
}

/// Parses `/proc/self/mountinfo` (proc(5)): `id parent maj:min root mount-point options
/// [optional fields...] - fstype source super-options`. Lines that do not fit are skipped.
pub fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let sep = fields.iter().position(|&f| f == "-")?;
            if sep < 6 || fields.len() < sep + 4 {
                return None;
            }
            Some(MountEntry {
                root: unescape_octal(fields[3]),
                mount_point: PathBuf::from(unescape_octal(fields[4])),
                fstype: fields[sep + 1].to_string(),
                super_options: fields[sep + 3].to_string(),
            })
        })
        .collect()
}

/// Undoes the kernel's `\ooo` escaping of space, tab, newline and backslash in mount fields.
pub fn unescape_octal(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            let v = (b[i + 1] - b'0') as u32 * 64 + (b[i + 2] - b'0') as u32 * 8 + (b[i + 3] - b'0') as u32;
            if let Ok(byte) = u8::try_from(v) {
                out.push(byte);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One controller's line of `/proc/cgroups`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ControllerLine {
    /// Non-zero: the id of the cgroup v1 hierarchy the controller is bound to.
    pub hierarchy: u32,
    pub num_cgroups: u64,
    pub enabled: bool,
}

/// One line of `/proc/swaps`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SwapDevice {
    pub name: String,
    pub kind: String,
    pub size_kib: u64,
    pub used_kib: u64,
    pub priority: i64,
}

/// The line for `controller` in `/proc/cgroups`
/// (`#subsys_name hierarchy num_cgroups enabled`).
pub fn parse_proc_cgroups(text: &str, controller: &str) -> Option<ControllerLine> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 4 || f[0] != controller {
            return None;
        }
        Some(ControllerLine { hierarchy: f[1].parse().ok()?, num_cgroups: f[2].parse().ok()?, enabled: f[3] == "1" })
    })
}

/// Parses `/proc/swaps` (`Filename Type Size Used Priority`, sizes in KiB).
pub fn parse_swaps(text: &str) -> Result<Vec<SwapDevice>, String> {
    text.lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let bad = || format!("/proc/swaps: cannot parse line {l:?}");
            if f.len() < 5 {
                return Err(bad());
            }
            Ok(SwapDevice {
                name: unescape_octal(f[0]),
                kind: f[1].to_string(),
                size_kib: f[2].parse().map_err(|_| bad())?,
                used_kib: f[3].parse().map_err(|_| bad())?,
                priority: f[4].parse().map_err(|_| bad())?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn parsers() {
        let m = parse_mountinfo(
            "36 35 98:0 /mnt1 /mnt\\040two rw,noatime master:1 shared:2 - cgroup cgroup rw,cpu,memory\nbad line\n",
        );
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].mount_point, Path::new("/mnt two"));
        assert_eq!(
            (m[0].root.as_str(), m[0].fstype.as_str(), m[0].super_options.as_str()),
            ("/mnt1", "cgroup", "rw,cpu,memory")
        );
        assert_eq!(unescape_octal("a\\134b\\011"), "a\\b\t");
        assert_eq!(unescape_octal("trailing\\04"), "trailing\\04");

        let c = parse_proc_cgroups("#subsys_name\thierarchy\tnum_cgroups\tenabled\nmemory\t4\t48\t1\n", "memory");
        assert_eq!(c, Some(ControllerLine { hierarchy: 4, num_cgroups: 48, enabled: true }));
        assert_eq!(parse_proc_cgroups("#h\ncpu 1 1 1\n", "memory"), None);

        let s = parse_swaps("Filename Type Size Used Priority\n/swap\\040file file 100 5 -2\n").unwrap();
        assert_eq!(
            s[0],
            SwapDevice { name: "/swap file".into(), kind: "file".into(), size_kib: 100, used_kib: 5, priority: -2 }
        );
        assert!(parse_swaps("Filename Type Size Used Priority\n/dev/x partition big 0 -2\n").is_err());
        assert!(parse_swaps("Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n").unwrap().is_empty());
    }
}
