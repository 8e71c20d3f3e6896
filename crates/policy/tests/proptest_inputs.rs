//! Property tests of the policy crate's parsers of outside input (issue 28, item 8): byte
//! sizes (config values and the `user.memqos.expected_peak` xattr), workload keys (the
//! `user.memqos.workload` xattr) and the whole config file. Any text gives Ok or an error
//! that names the file, never a panic; sizes round-trip and agree with a reference. Also the
//! host's /proc/vmstat and /proc/zoneinfo, which the dirty-limit rule reads (issue 53, 7).
//!
//! The long run: `scripts/fuzz-long.sh`.

use memqos_policy::dirty::host_from;
use memqos_policy::size::{human, page_down, parse_size, ByteSize};
use memqos_policy::{check_workload_key, Config};
use proptest::prelude::*;

const SUFFIXES: [(&str, u32); 17] = [
    ("", 0),
    ("b", 0),
    ("k", 10),
    ("ki", 10),
    ("kib", 10),
    ("kb", 10),
    ("m", 20),
    ("mi", 20),
    ("mib", 20),
    ("mb", 20),
    ("g", 30),
    ("gi", 30),
    ("gib", 30),
    ("gb", 30),
    ("t", 40),
    ("tib", 40),
    ("tb", 40),
];

/// The shipped configs, as seeds for mutation: most random text is not TOML at all and would
/// only exercise the TOML lexer.
const SEEDS: [&str; 2] =
    [include_str!("../../../configs/systemd.toml"), include_str!("../../../configs/kubernetes.toml")];

/// A token that is likely to matter to the config's validator.
fn config_token() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "\n[[tier]]\nname = \"x\"\nmatch = [\"**\"]\n",
            "throttle = true\n",
            "protect = \"min\"\n",
            "protect = \"low\"\n",
            "min_high = \"0\"\n",
            "min_high = \"18446744073709551615\"\n",
            "expected_peak = \"99999999999T\"\n",
            "expected_peak = -1\n",
            "freeze = true\n",
            "learn_peak = true\n",
            "xattr = [\"user.x\"]\n",
            "\n[signals]\n",
            "sampling_interval_ms = 0\n",
            "calm_interval_ms = 18446744073709551615\n",
            "\n[policy]\n",
            "hold_ms = 9223372036854775807\n",
            "\n[metrics]\nlisten = \"[::1]:0\"\n",
            "match = [\"[\"]\n",
            "match = []\n",
            "cgroup_root = \"\"\n",
            "state_dir = \"relative\"\n",
            "=",
            "\"",
            "[",
            "]",
            "\n",
        ])
        .prop_map(str::to_owned),
        "[a-z_]{1,12} = [0-9]{1,20}\n",
        "[a-z_]{1,12} = \"[0-9]{1,6}[KMGT]?\"\n",
        any::<String>(),
    ]
}

/// A shipped config with a few spans replaced by tokens.
fn mutated_config() -> impl Strategy<Value = String> {
    (
        prop::sample::select(SEEDS.to_vec()),
        prop::collection::vec((any::<prop::sample::Index>(), 0usize..40, config_token()), 1..6),
    )
        .prop_map(|(seed, edits)| {
            let mut text = seed.to_owned();
            for (at, len, token) in edits {
                let mut start = at.index(text.len() + 1);
                while !text.is_char_boundary(start) {
                    start -= 1;
                }
                let mut end = (start + len).min(text.len());
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                text.replace_range(start..end, &token);
            }
            text
        })
}

/// The reference for a workload key, from its documentation.
fn workload_key_ok(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= memqos_policy::obs::MAX_WORKLOAD_KEY
        && !k.chars().any(char::is_control)
        && k.trim() == k
}

proptest! {
    #[test]
    fn proptest_parse_size_agrees_with_its_definition(
        n in prop_oneof![any::<u64>(), 0u64..100_000],
        suffix in 0..SUFFIXES.len(),
        upper in any::<bool>(),
        pad in "[ \t]{0,2}",
        inner in "[ ]{0,1}",
    ) {
        let (s, shift) = SUFFIXES[suffix];
        let s = if upper { s.to_ascii_uppercase() } else { s.to_owned() };
        let text = format!("{pad}{n}{inner}{s}{pad}");
        let want = n.checked_mul(1u64 << shift);
        match parse_size(&text) {
            Ok(v) => prop_assert_eq!(Some(v), want, "{:?}", text),
            Err(e) => {
                prop_assert_eq!(want, None, "{:?}: {}", text, e);
                prop_assert!(e.contains("too large"), "{}", e);
            }
        }
    }

    #[test]
    fn proptest_parse_size_never_panics_and_errors_quote_the_input(s in any::<String>()) {
        match parse_size(&s) {
            // Ok only for digits (then a known suffix): nothing else is a size.
            Ok(_) => prop_assert!(s.trim().starts_with(|c: char| c.is_ascii_digit())),
            Err(e) => prop_assert!(e.contains(&format!("{s:?}")), "{}", e),
        }
    }

    #[test]
    fn proptest_human_sizes_round_trip(b in any::<u64>(), unit in 0u32..5, n in 0u64..1 << 20) {
        // A size printed without a fraction is exact and parses back to itself.
        let exact = n << (10 * unit);
        for v in [b, exact] {
            let h = human(v);
            prop_assert!(!h.is_empty() && h.matches('.').count() <= 1);
            if !h.contains('.') {
                prop_assert_eq!(parse_size(&h), Ok(v), "{}", h);
            }
        }
        // page_down never rounds up, nor by a page or more.
        let h = human(b);
        prop_assert!(!h.is_empty());
        prop_assert!(page_down(b) <= b && b - page_down(b) < memqos_policy::size::PAGE);
    }

    #[test]
    fn proptest_byte_size_from_toml(v in any::<i64>(), s in "[0-9]{1,22}[kKmMgGtT]?") {
        #[derive(serde::Deserialize)]
        struct T {
            x: ByteSize,
        }
        let r = toml::from_str::<T>(&format!("x = {v}"));
        prop_assert_eq!(r.map(|t| t.x.0).ok(), u64::try_from(v).ok());
        let r = toml::from_str::<T>(&format!("x = {s:?}"));
        prop_assert_eq!(r.map(|t| t.x.0).ok(), parse_size(&s).ok());
    }

    #[test]
    fn proptest_workload_key_agrees_with_its_definition(
        k in prop_oneof![any::<String>(), "[ a-z\t\n\u{7f}\u{85}]{0,300}", "[a-z]{250,260}"],
    ) {
        let r = check_workload_key(&k);
        prop_assert_eq!(r.is_ok(), workload_key_ok(&k), "{:?}: {:?}", k, r);
    }

    #[test]
    fn proptest_config_any_text_is_ok_or_a_named_error(text in prop_oneof![any::<String>(), mutated_config()]) {
        if let Err(e) = Config::from_str(&text, "fuzz.toml") {
            let shown = e.to_string();
            prop_assert!(shown.starts_with("fuzz.toml"), "{}", shown);
            // A position, when given, lies inside the text.
            if let Some((line, col)) = e.position {
                prop_assert!(line >= 1 && col >= 1 && line <= text.lines().count().max(1) + 1, "{}", shown);
            }
        }
    }

    #[test]
    fn proptest_vmstat_and_zoneinfo_agree_with_their_definition(
        vmstat in prop::collection::vec((prop::sample::select(VMSTAT_KEYS.to_vec()), value()), 0..12),
        zones in prop::collection::vec((prop::option::of(value()), prop::collection::vec(value(), 0..5)), 0..5),
        junk in prop_oneof![Just(String::new()), any::<String>(), "(Node [0-9], zone +[A-Za-z]+\n)?( +(high|protection:|min) +[0-9(), ]{0,30}\n){0,4}"],
    ) {
        let vmstat_text: String = vmstat.iter().map(|(k, v)| format!("{k} {v}\n")).collect();
        let mut zoneinfo = String::new();
        for (high, protection) in &zones {
            zoneinfo.push_str("Node 0, zone   Normal\n  pages free     3840\n        min      13\n");
            if let Some(h) = high {
                zoneinfo.push_str(&format!("        high     {h}\n"));
            }
            let p: Vec<&str> = protection.iter().map(String::as_str).collect();
            zoneinfo.push_str(&format!("        protection: ({})\n", p.join(", ")));
        }
        // Hostile or future text after the zones (and as a whole vmstat) never panics either.
        let _ = host_from(&junk, &junk);
        let zoneinfo = zoneinfo + &junk;
        let r = host_from(&vmstat_text, &zoneinfo);
        // The first line of each key whose value is a number; every key is needed.
        let get = |key: &str| vmstat.iter().find_map(|(k, v)| (*k == key).then(|| v.trim().parse::<u64>().ok()).flatten());
        let want = (|| {
            let free = get("nr_free_pages")?.saturating_add(get("nr_inactive_file")?).saturating_add(get("nr_active_file")?);
            Some((get("nr_dirty_threshold")?, get("nr_dirty_background_threshold")?, free))
        })();
        match (r, want) {
            (Ok(h), Some((thresh, bg, free))) => {
                prop_assert_eq!((h.thresh_pages, h.bg_thresh_pages), (thresh, bg));
                prop_assert!(h.dirtyable_pages >= 1 && h.dirtyable_pages <= free.max(1));
                if !zoneinfo.contains("Node ") || (junk.is_empty() && zones.is_empty()) {
                    prop_assert_eq!(h.dirtyable_pages, free.max(1));
                }
                if junk.is_empty() {
                    // Per zone: its high watermark plus its largest lowmem reserve.
                    let reserve = zones.iter().fold(0u64, |sum, (high, protection)| {
                        let high = high.as_deref().and_then(|h| h.trim().parse::<u64>().ok()).unwrap_or(0);
                        // The numbers in the list (the kernel prints non-negative longs).
                        let p = protection
                            .iter()
                            .flat_map(|p| p.split(|c: char| !c.is_ascii_digit()).filter_map(|n| n.parse::<u64>().ok()))
                            .max()
                            .unwrap_or(0);
                        sum.saturating_add(high).saturating_add(p)
                    });
                    prop_assert_eq!(h.dirtyable_pages, free.saturating_sub(reserve).max(1));
                }
            }
            (Err(e), None) => prop_assert!(e.starts_with("/proc/vmstat has no "), "{}", e),
            (r, want) => prop_assert!(false, "host_from gave {:?}, expected {:?}", r, want),
        }
    }
}

const VMSTAT_KEYS: [&str; 9] = [
    "nr_free_pages",
    "nr_inactive_file",
    "nr_active_file",
    "nr_dirty_threshold",
    "nr_dirty_background_threshold",
    "nr_free_pages_blocks",
    "nr_dirty",
    "nr_active_file_x",
    "pgfault",
];

/// A value as /proc prints it, or not quite: huge numbers (the sums must not overflow), signs,
/// words.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (0u64..1 << 24).prop_map(|v| v.to_string()),
        2 => any::<u64>().prop_map(|v| v.to_string()),
        1 => prop::sample::select(vec!["-1", "", "x", "18446744073709551616", " 7"]).prop_map(str::to_owned),
    ]
}
