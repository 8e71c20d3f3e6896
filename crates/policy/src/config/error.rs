//! Config errors that point at `file:line:col` and name the field.

use std::fmt;
use std::ops::Range;

/// A config problem, displayed as `memqos.toml:12:3: tier[1].match: invalid glob "[": ...`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The file name given to `Config::from_str`.
    pub file: String,
    /// 1-based line and column of the offending value, when known.
    pub position: Option<(usize, usize)>,
    /// Dotted field path such as `tier[1].match` or `policy.hold_ms`, when known.
    pub field: Option<String>,
    /// What is wrong and, where possible, what was expected.
    pub message: String,
}

impl std::error::Error for ConfigError {}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some((line, col)) = self.position {
            write!(f, ":{line}:{col}")?;
        }
        if let Some(field) = &self.field {
            write!(f, ": {field}")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Builds errors for one file; knows the text so spans can become line/col.
pub(crate) struct Source<'a> {
    pub text: &'a str,
    pub file: &'a str,
}

impl Source<'_> {
    /// An error at `span` about `field` (exact path known by the caller).
    pub fn at(&self, span: Option<Range<usize>>, field: &str, message: String) -> ConfigError {
        ConfigError {
            file: self.file.to_string(),
            position: span.map(|s| line_col(self.text, s.start)),
            field: Some(field.to_string()),
            message,
        }
    }

    /// A toml/serde error: it has a span but no field path, so the path is recovered from the
    /// text around the span (best effort: the table header and key that enclose it).
    pub fn toml_error(&self, e: &toml::de::Error) -> ConfigError {
        let span = e.span();
        ConfigError {
            file: self.file.to_string(),
            position: span.clone().map(|s| line_col(self.text, s.start)),
            field: span.and_then(|s| key_path_at(self.text, s.start)),
            // toml's messages may span lines ("invalid array\nexpected `]`"): keep one line.
            message: e.message().trim().lines().map(str::trim).collect::<Vec<_>>().join("; "),
        }
    }
}

/// 1-based line and column (in characters) of a byte offset.
pub(crate) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

/// The dotted path of the key whose value contains `offset`, e.g. `tier[1].match`.
///
/// Walks the lines up to `offset`, remembering the last table header (`[[tier]]` headers are
/// counted so they become `tier[N]`) and the last bare `key =` line in that table; a value
/// spanning several lines (an array) thus keeps the key it started on. Quoted and dotted keys
/// are not resolved: this only decorates messages, the position is always exact.
pub(crate) fn key_path_at(text: &str, offset: usize) -> Option<String> {
    let mut table: Option<String> = None;
    let mut array_counts: Vec<(String, usize)> = Vec::new();
    let mut key: Option<String> = None;
    let mut pos = 0;
    for line in text.split_inclusive('\n') {
        if pos > offset {
            break;
        }
        let t = line.trim();
        if let Some(name) = t.strip_prefix("[[").and_then(|r| r.split("]]").next()) {
            let name = name.trim().to_string();
            let n = match array_counts.iter_mut().find(|(k, _)| *k == name) {
                Some((_, n)) => {
                    *n += 1;
                    *n
                }
                None => {
                    array_counts.push((name.clone(), 0));
                    0
                }
            };
            table = Some(format!("{name}[{n}]"));
            key = None;
        } else if let Some(name) = t.strip_prefix('[').and_then(|r| r.split(']').next()) {
            table = Some(name.trim().to_string());
            key = None;
        } else if let Some((k, _)) = t.split_once('=') {
            let k = k.trim();
            if !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
                key = Some(k.to_string());
            }
        }
        pos += line.len();
    }
    match (table, key) {
        (Some(t), Some(k)) => Some(format!("{t}.{k}")),
        (Some(t), None) => Some(t),
        (None, k) => k,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_and_column() {
        let t = "a = 1\nbb = [\n  2,\n]\n";
        assert_eq!(line_col(t, 0), (1, 1));
        assert_eq!(line_col(t, t.find("2,").unwrap()), (3, 3));
    }

    #[test]
    fn key_paths() {
        let t = "root = 1\n[[tier]]\nname = \"a\"\n[[tier]]\nmatch = [\n  \"x\",\n]\n[policy]\nhold_ms = 3\n";
        assert_eq!(key_path_at(t, 2).as_deref(), Some("root"));
        assert_eq!(key_path_at(t, t.find("\"a\"").unwrap()).as_deref(), Some("tier[0].name"));
        assert_eq!(key_path_at(t, t.find("\"x\"").unwrap()).as_deref(), Some("tier[1].match"));
        assert_eq!(key_path_at(t, t.find('3').unwrap()).as_deref(), Some("policy.hold_ms"));
    }
}
