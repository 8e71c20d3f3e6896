//! Property tests of the agent-trace parsers (issue 28, item 8): `resources.json` (podman
//! sizes, samples), `tool_calls.json` (UTC times). Any text gives a trace or an error naming
//! the file and the field, never a panic; what a well-formed file says parses back exactly;
//! a parsed trace always schedules or gives a clean error.
//!
//! The long run: `scripts/fuzz-long.sh`.

use memqos_replay::schedule::{build, ScheduleOptions};
use memqos_replay::tool_calls::{parse_tool_calls, parse_utc};
use memqos_replay::trace::parse_trace;
use memqos_replay::units::{parse_mem_usage, parse_size, unit_multiplier};
use memqos_replay::InputError;
use proptest::prelude::*;

const UNITS: [&str; 10] = ["B", "kB", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB"];

/// Civil date of a day count since 1970-01-01 (the proleptic Gregorian calendar), written
/// here independently of the parser's own calendar arithmetic as its reference.
fn civil(days: i64) -> (i64, i64, i64) {
    let mut y = 1970;
    let mut d = days;
    let leap = |y: i64| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    loop {
        let len = if leap(y) { 366 } else { 365 };
        if d >= len {
            d -= len;
            y += 1;
        } else if d < 0 {
            y -= 1;
            d += if leap(y) { 366 } else { 365 };
        } else {
            break;
        }
    }
    let months = [31, if leap(y) { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    let mut m = 0;
    while d >= months[m] {
        d -= months[m];
        m += 1;
    }
    (y, m as i64 + 1, d + 1)
}

/// JSON-ish text: brackets, keys the parsers look for, numbers, sizes, and anything.
fn jsonish() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            3 => prop::sample::select(vec![
                "{", "}", "[", "]", ",", ":", "\"samples\"", "\"epoch\"", "\"mem_usage\"", "\"0B / 0B\"",
                "\"1.5MB / 2GiB\"", "\"tool\"", "\"timestamp\"", "\"end_timestamp\"", "null", "true",
                "\"2026-02-07T01:47:17.879Z\"", "1e308", "-1", "1.7976931348623157e309",
            ]).prop_map(str::to_owned),
            1 => "[0-9]{1,25}(\\.[0-9]{1,5})?",
            1 => "\"[0-9. ]{0,12}[kKMGTi]{0,2}B? / [0-9.]{0,12}[kKMGTi]{0,2}B?\"",
            1 => any::<String>(),
        ],
        0..40,
    )
    .prop_map(|p| p.concat())
}

fn assert_named(e: &InputError, file: &str) -> Result<(), TestCaseError> {
    let shown = e.to_string();
    prop_assert!(shown.starts_with(file), "{}", shown);
    Ok(())
}

proptest! {
    #[test]
    fn proptest_podman_sizes_agree_with_their_units(
        n in prop_oneof![0u64..1 << 53, any::<u64>()],
        unit in 0..UNITS.len(),
        frac in prop::option::of(0u32..1000),
        junk in any::<String>(),
    ) {
        let u = UNITS[unit];
        let mult = unit_multiplier(u).unwrap();
        let text = format!("{n}{u}");
        // Exact in f64 below 2^53; above it the parser may round but must not panic.
        match n.checked_mul(mult) {
            Some(want) if want < 1 << 53 => prop_assert_eq!(parse_size(&text), Ok(want)),
            _ => { let _ = parse_size(&text); }
        }
        if let Some(f) = frac {
            let v = parse_size(&format!("1.{f:03}{u}"));
            let want = ((1.0 + f as f64 / 1000.0) * mult as f64).round() as u64;
            prop_assert_eq!(v, Ok(want));
        }
        let _ = parse_size(&junk);
        let _ = parse_mem_usage(&junk);
    }

    #[test]
    fn proptest_resources_json_any_text_is_a_trace_or_a_named_error(text in jsonish()) {
        match parse_trace("t/resources.json", &text) {
            Ok(t) => {
                prop_assert!(!t.samples.is_empty());
                prop_assert!(t.samples.windows(2).all(|w| w[0].epoch <= w[1].epoch));
                let _ = build(&t, None, &ScheduleOptions::default());
            }
            Err(e) => assert_named(&e, "t/resources.json")?,
        }
    }

    #[test]
    fn proptest_resources_json_round_trips(
        samples in prop::collection::vec((0.0f64..1e6, any::<u64>(), 1u64..1 << 50, any::<bool>()), 1..30),
        baseline in prop_oneof![Just(0u64), any::<u64>()],
        speed in prop_oneof![Just(1.0f64), 0.001f64..1000.0, Just(f64::MIN_POSITIVE)],
    ) {
        let mut epoch = 1.7e9;
        let mut docs = Vec::new();
        let mut want = Vec::new();
        for (dt, used, limit, kib) in &samples {
            epoch += dt;
            // Exact in f64 up to 2^53; used is kept below that so the bytes round-trip.
            let used = used >> 11;
            let text = if *kib { format!("{}KiB / {limit}B", used >> 10) } else { format!("{used}B / {limit}B") };
            want.push(if *kib { (used >> 10) << 10 } else { used });
            docs.push(format!(r#"{{"epoch": {epoch:?}, "mem_usage": "{text}"}}"#));
        }
        let t = parse_trace("r.json", &format!(r#"{{"samples": [{}]}}"#, docs.join(","))).unwrap();
        prop_assert_eq!(t.samples.iter().map(|s| s.used_bytes).collect::<Vec<_>>(), want);
        prop_assert_eq!(t.samples.iter().map(|s| s.limit_bytes).collect::<Vec<_>>(), samples.iter().map(|s| s.2).collect::<Vec<_>>());
        // Scheduling: a plan, or the one overflow error when the baseline cannot be added.
        let opts = ScheduleOptions { speed, baseline_bytes: baseline };
        match build(&t, None, &opts) {
            Ok(s) => prop_assert!(s.peak_target_bytes() >= t.max_used_bytes()),
            Err(e) => prop_assert!(e.to_string().contains("overflows"), "{}", e),
        }
    }

    #[test]
    fn proptest_utc_times_round_trip(
        secs in -62_135_596_800i64..253_402_300_799,
        millis in 0u32..1000,
        zone in prop_oneof![Just(None), (any::<bool>(), 0i64..=23, 0i64..60).prop_map(Some)],
        colon in any::<bool>(),
        junk in prop_oneof![any::<String>(), "[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{0,4})?[Zz+-]?[0-9:]{0,6}"],
    ) {
        let (offset, zone_text) = match zone {
            None => (0, "Z".to_owned()),
            Some((west, h, m)) => {
                let (sign, off) = if west { ('-', -(h * 3600 + m * 60)) } else { ('+', h * 3600 + m * 60) };
                let sep = if colon { ":" } else { "" };
                (off, format!("{sign}{h:02}{sep}{m:02}"))
            }
        };
        // The local wall time that is `secs` in UTC at this offset.
        let local = secs + offset;
        let (y, mo, d) = civil(local.div_euclid(86_400));
        let tod = local.rem_euclid(86_400);
        if (0..=9999).contains(&y) {
            let text = format!("{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}{zone_text}", tod / 3600, tod / 60 % 60, tod % 60);
            let got = parse_utc(&text).unwrap();
            prop_assert!((got - (secs as f64 + millis as f64 / 1000.0)).abs() < 1e-3, "{} -> {}", text, got);
        }
        let _ = parse_utc(&junk);
        // A tool-calls file built from any such strings parses or names the file and entry.
        let doc = format!(r#"[{{"tool": "x", "timestamp": {junk:?}, "end_timestamp": {junk:?}}}]"#);
        match parse_tool_calls("calls.json", &doc) {
            Ok(calls) => prop_assert!(calls[0].end >= calls[0].start),
            Err(e) => assert_named(&e, "calls.json")?,
        }
    }

    #[test]
    fn proptest_tool_calls_any_text_is_ok_or_a_named_error(text in jsonish()) {
        if let Err(e) = parse_tool_calls("calls.json", &text) {
            assert_named(&e, "calls.json")?;
        }
    }
}
