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
/// sequence `encode` never makes is kept as written.
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
            (b'\\', Some(b'x')) => match carried.get(i + 2..i + 4).and_then(|h| u8::from_str_radix(h, 16).ok()) {
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

    #[test]
    fn control_characters_are_escaped_for_display() {
        assert_eq!(display("job\u{1b}[2J"), "job\\u{1b}[2J");
        assert_eq!(display("plain"), "plain");
        assert_eq!(terminal_safe("a\u{9b}b\n\u{7}".into()), "a\\u{9b}b\n\\u{7}");
    }
}
