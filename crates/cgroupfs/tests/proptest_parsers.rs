//! Property tests of every cgroupfs and /proc parser (issue 28, item 8): any text gives a
//! value or a clean error, never a panic, and what the kernel's formats would print parses
//! back to the values printed. Each parser is also compared with a plain reference
//! implementation written from the format's definition, so the fast paths cannot drift.
//!
//! The default case count keeps the whole file well under a second; the long run is
//! `scripts/fuzz-long.sh` (PROPTEST_CASES=...).

use memqos_cgroupfs::mounts::{cgroup2_of, parse_cgroup2};
use memqos_cgroupfs::parse::{
    parse_controllers, parse_flat_keyed, parse_limit, parse_pids, parse_u64, Limit, MemoryEvents, ParseError, Pressure,
};
use memqos_cgroupfs::procfs::{parse_mountinfo, parse_proc_cgroups, parse_swaps, unescape_octal};
use proptest::prelude::*;
use std::path::Path;

/// Text that looks like cgroupfs files more often than random strings do: digits, keys,
/// `max`, whitespace of every ASCII kind, `=`, and arbitrary characters.
fn cgroupish() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            4 => "[a-z_]{1,8}",
            4 => "[+-]?[0-9]{1,21}",
            2 => Just(" ".to_owned()),
            2 => Just("\n".to_owned()),
            1 => prop::sample::select(vec!["\t", "\r", "\x0b", "\x0c", "\u{a0}", "=", "max", "some", "full", "avg10=", "total="])
                .prop_map(str::to_owned),
            1 => any::<String>(),
        ],
        0..40,
    )
    .prop_map(|parts| parts.concat())
}

/// The format's definition of one flat keyed file (cgroup-v2.rst): lines of exactly two
/// ASCII-whitespace-separated fields, the second an unsigned 64-bit number in decimal digits;
/// blank lines skipped.
fn flat_keyed_reference(text: &str) -> Option<Vec<(&str, u64)>> {
    let mut out = Vec::new();
    for line in text.split('\n') {
        let fields: Vec<&str> = line.split_ascii_whitespace().collect();
        match fields.as_slice() {
            [] => {}
            [k, v] if v.bytes().all(|b| b.is_ascii_digit()) => out.push((*k, v.parse().ok()?)),
            _ => return None,
        }
    }
    Some(out)
}

/// How the kernel escapes a mount field (`\ooo` for space, tab, newline, backslash).
fn mount_escape(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        match c {
            ' ' | '\t' | '\n' | '\\' => out.push_str(&format!("\\{:03o}", c as u32)),
            _ => out.push(c),
        }
    }
    out
}

fn limit() -> impl Strategy<Value = Limit> {
    prop_oneof![Just(Limit::Max), any::<u64>().prop_map(Limit::Bytes), (0u64..1 << 40).prop_map(Limit::Bytes)]
}

proptest! {
    #[test]
    fn proptest_single_values_agree_with_std(text in cgroupish()) {
        let t = text.trim_ascii();
        // Digits only: the kernel prints no sign (str::parse would take a leading '+').
        let reference = if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) { None } else { t.parse::<u64>().ok() };
        prop_assert_eq!(parse_u64(&text).ok(), reference);
        let limit_reference = if t == "max" { Some(Limit::Max) } else { reference.map(Limit::Bytes) };
        prop_assert_eq!(parse_limit(&text).ok(), limit_reference);
        // An error names the line and what was expected, with the text it found.
        if let Err(ParseError::Unexpected { line, found, .. }) = parse_limit(&text) {
            prop_assert_eq!(line, 1);
            prop_assert_eq!(found, t);
        }
    }

    #[test]
    fn proptest_limit_round_trips_through_file_text_and_json(l in limit(), pad in "[ \t\n]{0,3}") {
        prop_assert_eq!(parse_limit(&format!("{pad}{l}{pad}")), Ok(l));
        prop_assert_eq!(format!("{l}\n").parse::<Limit>(), Ok(l));
        let json = serde_json::to_string(&l).unwrap();
        prop_assert_eq!(serde_json::from_str::<Limit>(&json).unwrap(), l);
    }

    #[test]
    fn proptest_flat_keyed_agrees_with_its_definition(text in cgroupish()) {
        let got = parse_flat_keyed(&text).ok();
        prop_assert_eq!(got, flat_keyed_reference(&text), "text {:?}", text);
    }

    #[test]
    fn proptest_flat_keyed_round_trips(
        kv in prop::collection::vec(("[a-z_]{1,24}", any::<u64>()), 0..60),
        final_newline in any::<bool>(),
    ) {
        let mut text: String = kv.iter().map(|(k, v)| format!("{k} {v}\n")).collect();
        if !final_newline {
            text.pop();
        }
        let want: Vec<(&str, u64)> = kv.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        prop_assert_eq!(parse_flat_keyed(&text).unwrap(), want);
    }

    #[test]
    fn proptest_memory_events_parse_agrees_with_flat_keyed(text in cgroupish()) {
        let got = MemoryEvents::parse(&text);
        match parse_flat_keyed(&text) {
            Err(e) => prop_assert_eq!(got, Err(e)),
            Ok(kv) => {
                // The last line of a key wins, unknown keys are ignored, missing ones are 0.
                let last = |key: &str| kv.iter().rev().find(|(k, _)| *k == key).map_or(0, |(_, v)| *v);
                let want = MemoryEvents {
                    low: last("low"),
                    high: last("high"),
                    max: last("max"),
                    oom: last("oom"),
                    oom_kill: last("oom_kill"),
                    oom_group_kill: last("oom_group_kill"),
                };
                prop_assert_eq!(got, Ok(want));
            }
        }
    }

    #[test]
    fn proptest_memory_events_round_trip(
        v in any::<[u64; 6]>(),
        extra in prop::collection::vec(("sock_[a-z]{1,6}", any::<u64>()), 0..3),
    ) {
        let ev = MemoryEvents { low: v[0], high: v[1], max: v[2], oom: v[3], oom_kill: v[4], oom_group_kill: v[5] };
        let mut text = format!(
            "low {}\nhigh {}\nmax {}\noom {}\noom_kill {}\noom_group_kill {}\n",
            v[0], v[1], v[2], v[3], v[4], v[5]
        );
        for (k, x) in extra {
            text.push_str(&format!("{k} {x}\n"));
        }
        prop_assert_eq!(MemoryEvents::parse(&text), Ok(ev));
        // delta_since never panics and is the plain difference when counters only grew.
        let later = MemoryEvents { high: ev.high.saturating_add(7), ..ev };
        prop_assert_eq!(later.delta_since(&ev).high, later.high - ev.high);
        prop_assert!(ev.delta_since(&later).high <= ev.high);
    }

    #[test]
    fn proptest_pressure_never_panics(text in cgroupish()) {
        if let Ok(p) = Pressure::parse(&text) {
            // Ok only if there was a "some" line.
            prop_assert!(text.lines().any(|l| l.split_ascii_whitespace().next() == Some("some")));
            let _ = p.full;
        }
    }

    #[test]
    fn proptest_pressure_round_trips(
        some in (0u32..10_000, 0u32..10_000, 0u32..10_000, any::<u64>()),
        full in prop::option::of((0u32..10_000, 0u32..10_000, 0u32..10_000, any::<u64>())),
    ) {
        // The kernel prints averages as LOAD_INT.LOAD_FRAC: two decimals, 0.00 to 100.00.
        let line = |name: &str, (a, b, c, t): (u32, u32, u32, u64)| {
            format!("{name} avg10={}.{:02} avg60={}.{:02} avg300={}.{:02} total={t}\n", a / 100, a % 100, b / 100, b % 100, c / 100, c % 100)
        };
        let mut text = line("some", some);
        if let Some(f) = full {
            text.push_str(&line("full", f));
        }
        let p = Pressure::parse(&text).unwrap();
        let check = |pl: memqos_cgroupfs::PressureLine, (a, b, c, t): (u32, u32, u32, u64)| {
            (pl.avg10 - a as f64 / 100.0).abs() < 1e-9
                && (pl.avg60 - b as f64 / 100.0).abs() < 1e-9
                && (pl.avg300 - c as f64 / 100.0).abs() < 1e-9
                && pl.total_us == t
        };
        prop_assert!(check(p.some, some));
        prop_assert_eq!(p.full.is_some(), full.is_some());
        if let (Some(pl), Some(f)) = (p.full, full) {
            prop_assert!(check(pl, f));
        }
    }

    #[test]
    fn proptest_pids_and_controllers_round_trip(
        pids in prop::collection::vec(any::<u32>(), 0..50),
        names in prop::collection::vec("[a-z_]{1,12}", 0..10),
        sep in "[ \t\n]{1,3}",
        junk in cgroupish(),
    ) {
        let text: String = pids.iter().map(|p| format!("{p}\n")).collect();
        prop_assert_eq!(parse_pids(&text).unwrap(), pids);
        let joined = names.join(&sep);
        prop_assert_eq!(parse_controllers(&joined), names.iter().map(String::as_str).collect::<Vec<_>>());
        // Any text: a clean result, and Ok only if every non-blank line is a pid.
        let pid = |l: &str| !l.is_empty() && l.bytes().all(|b| b.is_ascii_digit()) && l.parse::<u32>().is_ok();
        let ok = junk.lines().all(|l| l.trim_ascii().is_empty() || pid(l.trim_ascii()));
        prop_assert_eq!(parse_pids(&junk).is_ok(), ok);
        prop_assert!(parse_controllers(&junk).iter().all(|c| !c.is_empty()));
    }

    #[test]
    fn proptest_octal_unescape_inverts_the_kernels_escape(s in any::<String>()) {
        prop_assert_eq!(unescape_octal(&mount_escape(&s)), s.clone());
        let _ = unescape_octal(&s);
    }

    #[test]
    fn proptest_mountinfo_round_trips(
        mounts in prop::collection::vec(
            (
                "/[a-z \\\\]{0,12}",
                "/[a-z \t]{0,12}",
                prop::sample::select(vec!["cgroup2", "cgroup", "tmpfs"]),
                prop::collection::vec("[a-z_]{1,8}", 1..4),
                prop::collection::vec("(shared|master):[0-9]{1,3}", 0..3),
            ),
            0..6,
        ),
        junk in cgroupish(),
    ) {
        let mut text = String::new();
        for (i, (root, mp, fstype, opts, optional)) in mounts.iter().enumerate() {
            let optional: String = optional.iter().map(|o| format!("{o} ")).collect();
            text.push_str(&format!(
                "{} 1 0:{} {} {} rw,nosuid {optional}- {fstype} none {}\n",
                20 + i,
                i,
                mount_escape(root),
                mount_escape(mp),
                opts.join(",")
            ));
        }
        let parsed = parse_mountinfo(&text);
        prop_assert_eq!(parsed.len(), mounts.len());
        for (p, (root, mp, fstype, opts, _)) in parsed.iter().zip(&mounts) {
            prop_assert_eq!(&p.root, root);
            prop_assert_eq!(p.mount_point.to_str(), Some(mp.as_str()));
            prop_assert_eq!(&p.fstype, fstype);
            prop_assert_eq!(&p.super_options, &opts.join(","));
        }
        let v2 = parse_cgroup2(&text);
        prop_assert_eq!(v2.len(), mounts.iter().filter(|m| m.2 == "cgroup2").count());
        for m in &v2 {
            // A path below a cgroup2 mount finds a mount at least as specific, and its
            // kernel path starts with that mount's root.
            let below = m.mount_point.join("x");
            let found = cgroup2_of(&text, &below).unwrap();
            prop_assert!(below.starts_with(&found.mount_point));
            prop_assert!(found.mount_point.as_os_str().len() >= m.mount_point.as_os_str().len());
            let kp = m.kernel_path(&below).unwrap();
            prop_assert!(kp.ends_with("/x") && kp.starts_with('/'), "{:?}", kp);
        }
        // Any text: parsers return, and every entry has the fields a line must have.
        let _ = parse_cgroup2(&junk);
        let _ = cgroup2_of(&junk, Path::new("/sys/fs/cgroup/a"));
        prop_assert!(parse_mountinfo(&junk).iter().all(|m| !m.fstype.contains(' ')));
    }

    #[test]
    fn proptest_proc_cgroups_and_swaps_round_trip(
        rows in prop::collection::vec(("[a-z_]{1,10}", any::<u32>(), any::<u64>(), any::<bool>()), 0..8),
        swaps in prop::collection::vec(("/[a-z \\\\]{1,12}", any::<u64>(), any::<u64>(), any::<i64>()), 0..5),
        junk in cgroupish(),
    ) {
        let mut text = "#subsys_name\thierarchy\tnum_cgroups\tenabled\n".to_owned();
        for (name, h, n, en) in &rows {
            text.push_str(&format!("{name}\t{h}\t{n}\t{}\n", u8::from(*en)));
        }
        for (name, h, n, en) in &rows {
            // The first line of a name is the one reported.
            if rows.iter().find(|r| &r.0 == name).map(|r| (r.1, r.2, r.3)) == Some((*h, *n, *en)) {
                let c = parse_proc_cgroups(&text, name).unwrap();
                prop_assert_eq!((c.hierarchy, c.num_cgroups, c.enabled), (*h, *n, *en));
            }
        }
        let _ = parse_proc_cgroups(&junk, "memory");

        let mut st = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n".to_owned();
        for (name, size, used, prio) in &swaps {
            st.push_str(&format!("{}\tfile\t\t{size}\t{used}\t{prio}\n", mount_escape(name)));
        }
        let parsed = parse_swaps(&st).unwrap();
        prop_assert_eq!(parsed.len(), swaps.len());
        for (p, (name, size, used, prio)) in parsed.iter().zip(&swaps) {
            prop_assert_eq!((&p.name, p.size_kib, p.used_kib, p.priority), (name, *size, *used, *prio));
        }
        if let Err(e) = parse_swaps(&junk) {
            prop_assert!(e.starts_with("/proc/swaps: cannot parse line"), "{}", e);
        }
    }
}
