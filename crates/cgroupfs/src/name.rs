//! Cgroup names as memqos carries them: UTF-8 strings, relative to the cgroup root.
//!
//! The kernel allows any byte but `/` and NUL in a cgroup's name. A name that is not UTF-8
//! must not make a subtree invisible (a tenant would escape throttling by `mkdir`), so it is
//! escaped reversibly: each byte of an invalid sequence as `\xNN`, and `\` itself as `\\`.
//! Every valid UTF-8 name without a backslash is carried unchanged. [`fs_path`] turns a
//! carried name back into the bytes the filesystem knows; [`display`] escapes control
//! characters for a terminal.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// A directory entry's name as memqos carries it.
pub fn encode(name: &OsStr) -> String {
    let mut out = String::with_capacity(name.len());
    for chunk in name.as_bytes().utf8_chunks() {
        for c in chunk.valid().chars() {
            if c == '\\' {
                out.push_str("\\\\");
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// The bytes of a carried name or relative path (the inverse of [`encode`]). A backslash
/// sequence `encode` never makes is kept as written: `encode` escapes only bytes of invalid
/// UTF-8 (0x80 and above), so `\x2f`, `\x00` or `\x2e` are four literal characters, never a
/// `/`, a NUL or a dot. A name checked as carried is therefore the name decoded; the one
/// place that turns outside input into a path still checks after decoding
/// ([`checked_relative`]).
pub fn decode(carried: &str) -> OsString {
    if !carried.contains('\\') {
        return OsString::from(carried);
    }
    let bytes = carried.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], bytes.get(i + 1)) {
            (b'\\', Some(b'\\')) => {
                out.push(b'\\');
                i += 2;
            }
            (b'\\', Some(b'x')) => match carried
                .get(i + 2..i + 4)
                .filter(|h| h.bytes().all(|c| c.is_ascii_hexdigit()))
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .filter(|b| *b >= 0x80)
            {
                Some(b) => {
                    out.push(b);
                    i += 4;
                }
                None => {
                    out.push(b'\\');
                    i += 1;
                }
            },
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    OsString::from_vec(out)
}

/// The one place a carried relative path from outside (a user's argument, a journal entry, a
/// config) becomes filesystem bytes: decoded first, then each component checked (not empty,
/// not `.` or `..`, no NUL, no `/` inside), so what is checked is what is opened. "" is the
/// root. The error names the path as carried, escaped for a terminal.
pub fn checked_relative(rel: &str) -> Result<OsString, String> {
    if rel.starts_with('/') {
        return Err(format!("{:?} is an absolute path (must be relative to cgroup_root)", display(rel)));
    }
    if rel.is_empty() {
        return Ok(OsString::new()); // the root itself
    }
    let mut out = Vec::with_capacity(rel.len());
    for (i, comp) in rel.split('/').enumerate() {
        let bytes = decode(comp).into_vec();
        let why = match bytes.as_slice() {
            [] => Some("an empty path component".to_owned()),
            b"." | b".." => Some(format!("a {:?} component (must stay beneath cgroup_root)", display(comp))),
            b if b.contains(&0) => Some("a NUL byte".to_owned()),
            b if b.contains(&b'/') => Some(format!("a '/' inside the component {:?}", display(comp))),
            _ => None,
        };
        if let Some(why) = why {
            return Err(format!("{:?} has {why}", display(rel)));
        }
        if i > 0 {
            out.push(b'/');
        }
        out.extend_from_slice(&bytes);
    }
    Ok(OsString::from_vec(out))
}

/// The filesystem path of the cgroup carried as `rel` below `root` ("" is the root).
pub fn fs_path(root: &Path, rel: &str) -> PathBuf {
    if rel.is_empty() {
        root.to_owned()
    } else {
        root.join(decode(rel))
    }
}

/// A carried name for people: control characters (a terminal escape in a tenant's cgroup
/// name) shown as `\u{..}` instead of being sent to the terminal.
pub fn display(carried: &str) -> String {
    if !carried.chars().any(char::is_control) {
        return carried.to_owned();
    }
    carried.chars().map(|c| if c.is_control() { c.escape_unicode().to_string() } else { c.to_string() }).collect()
}

/// Text for a terminal built from names and messages memqos does not control: every control
/// character but the line breaks the text itself is laid out with is escaped.
pub fn terminal_safe(text: String) -> String {
    if !text.chars().any(|c| c.is_control() && c != '\n') {
        return text;
    }
    text.chars()
        .map(|c| if c.is_control() && c != '\n' { c.escape_unicode().to_string() } else { c.to_string() })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_names_are_carried_unchanged_and_odd_ones_round_trip() {
        assert_eq!(encode(OsStr::new("system.slice/db.service")), "system.slice/db.service");
        for raw in [&b"a\xffb"[..], b"\\", b"x\\xff", b"\xc3", b"caf\xc3\xa9", b"\x1b[31m"] {
            let carried = encode(OsStr::from_bytes(raw));
            assert!(std::str::from_utf8(carried.as_bytes()).is_ok());
            assert_eq!(decode(&carried).as_bytes(), raw, "{carried}");
        }
        assert_eq!(encode(OsStr::from_bytes(b"a\xffb")), "a\\xffb");
        assert_eq!(fs_path(Path::new("/r"), "a/b\\xff").as_os_str().as_bytes(), b"/r/a/b\xff");
        assert_eq!(fs_path(Path::new("/r"), ""), PathBuf::from("/r"));
    }

    /// An escape `encode` never makes cannot smuggle a separator, a NUL or a dot past a
    /// check of the carried name: `memqos explain 'system.slice\x2f..\x2f..\x2fetc'` named
    /// /etc once. Decoded first, checked after, such names are refused or stay literal.
    #[test]
    fn escapes_of_separators_nul_and_dots_stay_literal_and_traversal_is_refused() {
        assert_eq!(decode(r"a\x2fb").as_bytes(), br"a\x2fb");
        assert_eq!(decode(r"a\x00b").as_bytes(), br"a\x00b");
        let escaped = r"system.slice\x2f..\x2f..\x2fetc";
        assert_eq!(checked_relative(escaped).unwrap().as_bytes(), escaped.as_bytes(), "one component, literal");
        for bad in ["system.slice/../../etc", "a/./b", "a//b", "/etc", "a/\0/b", "..", "a/..", "a/"] {
            assert!(checked_relative(bad).is_err(), "{bad:?} accepted");
        }
        assert!(checked_relative(r"a/\x2e\x2e").unwrap().as_bytes().ends_with(br"\x2e\x2e"));
        assert_eq!(checked_relative(r"a/b\xff").unwrap().as_bytes(), b"a/b\xff");
        assert_eq!(checked_relative("").unwrap().as_bytes(), b"", "the root");
    }

    use proptest::strategy::Strategy as _;

    proptest::proptest! {
        /// Any bytes a directory entry may hold round-trip through encode and decode, and
        /// the carried name passes the check as that one component.
        #[test]
        fn proptest_any_entry_name_round_trips_and_passes_as_one_component(raw in proptest::collection::vec(1u8..=255, 1..24)) {
            let raw: Vec<u8> = raw.into_iter().filter(|b| *b != b'/').collect();
            proptest::prop_assume!(!raw.is_empty() && raw != b"." && raw != b"..");
            let carried = encode(OsStr::from_bytes(&raw));
            let (decoded, checked) = (decode(&carried), checked_relative(&carried).unwrap());
            proptest::prop_assert_eq!(decoded.as_bytes(), raw.as_slice());
            proptest::prop_assert_eq!(checked.as_bytes(), raw.as_slice());
        }

        /// Whatever is typed or tampered (escapes of `/`, NUL and dots included), a path the
        /// check accepts decodes to as many components as it carries, none of them `""`,
        /// `.` or `..`, none with a NUL.
        #[test]
        fn proptest_an_accepted_path_never_leaves_the_root(
            parts in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::string::string_regex("[a-z.]{0,3}").unwrap(),
                    proptest::sample::select(vec![
                        "/", r"\x2f", r"\x2F", r"\x00", r"\x2e", r"\x2e\x2e", "..", ".", r"\\", r"\xff", r"\x", r"\xZZ", r"\x+f", "\0",
                    ]).prop_map(String::from),
                ],
                0..8,
            )
        ) {
            let path = parts.concat();
            if let Ok(decoded) = checked_relative(&path) {
                let bytes = decoded.as_bytes();
                proptest::prop_assert!(!bytes.contains(&0));
                let comps: Vec<&[u8]> = if bytes.is_empty() { vec![] } else { bytes.split(|b| *b == b'/').collect() };
                let carried = if path.is_empty() { 0 } else { path.split('/').count() };
                proptest::prop_assert_eq!(comps.len(), carried, "a decoded '/' made an extra component");
                for c in comps {
                    proptest::prop_assert!(!c.is_empty() && c != b"." && c != b"..", "{:?}", c);
                }
            }
        }
    }

    #[test]
    fn control_characters_are_escaped_for_display() {
        assert_eq!(display("job\u{1b}[2J"), "job\\u{1b}[2J");
        assert_eq!(display("plain"), "plain");
        assert_eq!(terminal_safe("a\u{9b}b\n\u{7}".into()), "a\\u{9b}b\n\\u{7}");
    }
}
