//! `tool_calls.json`: the agent's tool calls, `[{"timestamp", "end_timestamp", "tool", ...}]`
//! with UTC ISO-8601 times (`2026-02-07T01:47:17.879Z`). Only the times and the tool name
//! are read.
//!
//! The times are turned into Unix seconds here (a few lines of calendar arithmetic rather
//! than a date crate) so they compare with `resources.json`'s `epoch`.

use serde_json::Value;
use std::path::Path;

#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// Position in the file.
    pub index: usize,
    pub tool: String,
    /// Unix seconds.
    pub start: f64,
    /// Unix seconds, `>= start`.
    pub end: f64,
}

pub type ToolCallsError = crate::InputError;

pub fn load_tool_calls(path: &Path) -> Result<Vec<ToolCall>, ToolCallsError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|error| ToolCallsError::Io { file: file.clone(), error })?;
    parse_tool_calls(&file, &text)
}

pub fn parse_tool_calls(file: &str, text: &str) -> Result<Vec<ToolCall>, ToolCallsError> {
    let invalid = |at: String, problem: String| ToolCallsError::Invalid { file: file.to_owned(), at, problem };
    let root: Value = serde_json::from_str(text)
        .map_err(|e| ToolCallsError::Json { file: file.to_owned(), message: e.to_string() })?;
    let Value::Array(items) = root else {
        return Err(invalid("(top level)".into(), "expected an array of tool calls".into()));
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, v) in items.iter().enumerate() {
        let Value::Object(obj) = v else {
            return Err(invalid(format!("[{i}]"), "expected an object".into()));
        };
        let string = |key: &str| match obj.get(key) {
            Some(Value::String(s)) => Ok(s.as_str()),
            None | Some(Value::Null) => Err(invalid(format!("[{i}].{key}"), "missing".into())),
            Some(_) => Err(invalid(format!("[{i}].{key}"), "expected a string".into())),
        };
        let time = |key: &str| {
            let s = string(key)?;
            parse_utc(s).map_err(|problem| invalid(format!("[{i}].{key}"), format!("cannot parse {s:?}: {problem}")))
        };
        let tool = string("tool")?.to_owned();
        let start = time("timestamp")?;
        let end = time("end_timestamp")?;
        if end < start {
            return Err(invalid(format!("[{i}].end_timestamp"), "before timestamp".into()));
        }
        out.push(ToolCall { index: i, tool, start, end });
    }
    Ok(out)
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.fff…](Z|±HH:MM|±HHMM)` into Unix seconds. A time without a
/// zone is refused: `resources.json`'s `timestamp` is exactly that, local time of an unknown
/// zone, and reading it as UTC would shift every mark by hours.
pub fn parse_utc(s: &str) -> Result<f64, String> {
    let b = s.as_bytes();
    let digits = |from: usize, n: usize| -> Result<i64, String> {
        let part = b.get(from..from + n).ok_or_else(|| "too short".to_owned())?;
        if !part.iter().all(u8::is_ascii_digit) {
            return Err(format!("expected {n} digits at offset {from}"));
        }
        Ok(part.iter().fold(0i64, |acc, d| acc * 10 + i64::from(d - b'0')))
    };
    let expect = |at: usize, want: &[u8]| -> Result<(), String> {
        match b.get(at) {
            Some(c) if want.contains(c) => Ok(()),
            _ => Err(format!("expected '{}' at offset {at}", want[0] as char)),
        }
    };
    if b.len() < 20 {
        return Err("too short for YYYY-MM-DDTHH:MM:SS plus a zone".into());
    }
    let year = digits(0, 4)?;
    expect(4, b"-")?;
    let month = digits(5, 2)?;
    expect(7, b"-")?;
    let day = digits(8, 2)?;
    expect(10, b"Tt ")?;
    let (hour, min) = (digits(11, 2)?, digits(14, 2)?);
    expect(13, b":")?;
    expect(16, b":")?;
    let sec = digits(17, 2)?;
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return Err("no such date".into());
    }
    // 60 is a leap second; Unix time folds it into the next minute.
    if hour > 23 || min > 59 || sec > 60 {
        return Err("no such time of day".into());
    }
    let mut pos = 19;
    let mut frac = 0.0;
    if b.get(pos) == Some(&b'.') {
        let start = pos + 1;
        let len = b[start..].iter().take_while(|c| c.is_ascii_digit()).count();
        if len == 0 {
            return Err("expected digits after '.'".into());
        }
        frac = format!("0.{}", &s[start..start + len]).parse::<f64>().map_err(|e| e.to_string())?;
        pos = start + len;
    }
    let offset_s = match b.get(pos) {
        Some(b'Z' | b'z') if pos + 1 == b.len() => 0,
        Some(&sign @ (b'+' | b'-')) => {
            let h = digits(pos + 1, 2)?;
            let colon = usize::from(b.get(pos + 3) == Some(&b':'));
            let m = digits(pos + 3 + colon, 2)?;
            if pos + 5 + colon != b.len() {
                return Err("trailing characters after the zone offset".into());
            }
            if h > 23 || m > 59 {
                return Err("bad zone offset".into());
            }
            let off = h * 3600 + m * 60;
            if sign == b'+' {
                off
            } else {
                -off
            }
        }
        None => return Err("no time zone (expected Z or ±HH:MM)".into()),
        Some(_) => return Err(format!("unexpected characters {:?}", &s[pos..])),
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + min * 60 + sec - offset_s;
    Ok(secs as f64 + frac)
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant, "chrono-Compatible
/// Low-Level Date Algorithms").
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_times() {
        assert_eq!(parse_utc("1970-01-01T00:00:00Z"), Ok(0.0));
        assert_eq!(parse_utc("2000-03-01T00:00:00Z"), Ok(951_868_800.0));
        // The first sample of dask__dask-11628 is epoch 1770428831.545477, local 17:47:11
        // (UTC-8); its first tool call starts six seconds later.
        let t = parse_utc("2026-02-07T01:47:17.879Z").unwrap();
        assert!((t - 1_770_428_837.879).abs() < 1e-6, "{t}");
        assert_eq!(parse_utc("2026-02-06T17:47:17.879-08:00"), Ok(t));
        assert_eq!(parse_utc("2026-02-07T02:47:17.879+0100"), Ok(t));
        assert_eq!(parse_utc("2024-02-29T12:00:00Z"), Ok(1_709_208_000.0));
    }

    #[test]
    fn bad_times() {
        for (s, why) in [
            ("2026-02-06T17:47:11.545465", "no time zone"),
            ("2026-02-07", "too short"),
            ("2026-13-01T00:00:00Z", "no such date"),
            ("2023-02-29T00:00:00Z", "no such date"),
            ("2026-02-07T24:00:00Z", "no such time"),
            ("2026-02-07T01:47:17.Z", "digits after"),
            ("2026-02-07T01:47:17Zx", "unexpected"),
            ("2026/02/07T01:47:17Z", "expected '-' at offset 4"),
            ("2026-02-07 01:47:17", "too short"),
            ("2026-02-07X01:47:17Z", "expected 'T' at offset 10"),
            ("2026-02-07T01:47:17+01:00x", "trailing"),
        ] {
            let e = parse_utc(s).unwrap_err();
            assert!(e.contains(why), "{s}: {e}");
        }
    }

    #[test]
    fn tool_calls_file() {
        let text = r#"[
            {"timestamp": "2026-02-07T01:47:17.879Z", "tool": "TodoWrite", "id": "a", "input": "{}",
             "end_timestamp": "2026-02-07T01:47:17.906Z", "result_preview": "ok"},
            {"timestamp": "2026-02-07T01:47:20.000Z", "tool": "Bash", "end_timestamp": "2026-02-07T01:47:22.500Z"}
        ]"#;
        let calls = parse_tool_calls("tool_calls.json", text).unwrap();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[1].tool, "Bash");
        assert!((calls[1].end - calls[1].start - 2.5).abs() < 1e-9);
    }

    #[test]
    fn bad_tool_calls() {
        let e = |text: &str| parse_tool_calls("tool_calls.json", text).unwrap_err().to_string();
        assert_eq!(e("{}"), "tool_calls.json: (top level): expected an array of tool calls");
        assert_eq!(e("[1]"), "tool_calls.json: [0]: expected an object");
        assert_eq!(e(r#"[{"timestamp": "2026-02-07T01:47:17Z"}]"#), "tool_calls.json: [0].tool: missing");
        assert_eq!(
            e(r#"[{"tool": "Bash", "timestamp": "2026-02-07T01:47:17Z", "end_timestamp": null}]"#),
            "tool_calls.json: [0].end_timestamp: missing"
        );
        assert_eq!(
            e(r#"[{"tool": "Bash", "timestamp": "yesterday at 10:00 UTC", "end_timestamp": "2026-02-07T01:47:17Z"}]"#),
            "tool_calls.json: [0].timestamp: cannot parse \"yesterday at 10:00 UTC\": expected 4 digits at offset 0"
        );
        assert_eq!(
            e(r#"[{"tool": "Bash", "timestamp": "2026-02-07T01:47:18Z", "end_timestamp": "2026-02-07T01:47:17Z"}]"#),
            "tool_calls.json: [0].end_timestamp: before timestamp"
        );
        assert!(e("[").starts_with("tool_calls.json: not valid JSON"));
    }
}
