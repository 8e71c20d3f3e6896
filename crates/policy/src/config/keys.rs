//! Every config key with its default, allowed values, effect and the series that measured it:
//! the one table the configuration reference (docs/guide/configuration.md, memqos.toml(5)) is
//! generated from. Tests check it against the parser: the same keys, each documented default
//! parses to what leaving the key out gives, and each range's bounds are the parser's.

/// One key of the config file.
#[derive(Clone, Copy, Debug)]
pub struct KeyDoc {
    /// Dotted path: `cgroup_root`, `signals.psi`, `tier.protect` (a key of each `[[tier]]`),
    /// `tier.stall.after_ms` (a key of a tier's inline table).
    pub key: &'static str,
    /// The TOML value it takes, in words.
    pub kind: &'static str,
    pub default: KeyDefault,
    pub allowed: Allowed,
    /// What it does.
    pub effect: &'static str,
    /// The experiment series that measured a value of it (docs/results/evidence.md names
    /// them), and the value; empty when none did.
    pub measured: &'static str,
}

/// A key's default.
#[derive(Clone, Copy, Debug)]
pub enum KeyDefault {
    /// The key must be given.
    Required,
    /// The default as a TOML value: writing it gives the same config as leaving the key out.
    Value(&'static str),
    /// Unset, and what that means.
    Unset(&'static str),
    /// Depends on other keys, as described.
    Depends(&'static str),
}

/// The values the parser accepts.
#[derive(Clone, Copy, Debug)]
pub enum Allowed {
    Bool,
    /// An integer in `min..=max`.
    Int(i64, i64),
    /// A float between the bounds; `true` when the bound itself is allowed.
    Float {
        min: (f64, bool),
        max: (f64, bool),
    },
    /// A byte size (`"64M"`, `"1G"` or an integer) of at least this many bytes.
    Size(u64),
    /// One of these strings.
    OneOf(&'static [&'static str]),
    /// An absolute path.
    AbsolutePath,
    /// Described in words (checked by the parser, not by the table's tests).
    Other(&'static str),
}

impl KeyDefault {
    /// As the reference prints it.
    pub fn text(&self) -> String {
        match self {
            KeyDefault::Required => "none, required".into(),
            KeyDefault::Value(v) => format!("`{v}`"),
            KeyDefault::Unset(what) => format!("unset: {what}"),
            KeyDefault::Depends(what) => (*what).into(),
        }
    }
}

impl Allowed {
    /// As the reference prints it.
    pub fn text(&self) -> String {
        let bound = |(x, incl): (f64, bool), open: char, closed: char| (if incl { closed } else { open }, x);
        match self {
            Allowed::Bool => "`true`, `false`".into(),
            Allowed::Int(lo, hi) => format!("{lo} to {hi}"),
            Allowed::Float { min, max } => {
                let (l, lo) = bound(*min, '(', '[');
                let (r, hi) = bound(*max, ')', ']');
                format!("{l}{lo}, {hi}{r}")
            }
            Allowed::Size(0) => "a size: `\"64M\"`, `\"1G\"` or bytes".into(),
            Allowed::Size(min) => format!("a size, at least {}", human(*min)),
            Allowed::OneOf(values) => values.iter().map(|v| format!("`\"{v}\"`")).collect::<Vec<_>>().join(", "),
            Allowed::AbsolutePath => "an absolute path".into(),
            Allowed::Other(what) => (*what).into(),
        }
    }
}

fn human(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}K", b >> 10),
        b => format!("{b} bytes"),
    }
}

/// The sections in file order, with what each holds.
pub const SECTIONS: &[(&str, &str)] = &[
    ("", "The managed subtree and where the daemon keeps its state."),
    ("signals", "`[signals]`: which pressure sources the daemon uses and how often it samples."),
    (
        "tier",
        "`[[tier]]`, one per tier in priority order (first = highest): a cgroup below `cgroup_root` joins the first tier whose `match` glob fits its path (and, with `xattr`, one of whose attributes it carries); a cgroup matching no tier is left alone.",
    ),
    ("policy", "`[policy]`: thresholds, steps and timers of the engine, and the opt-ins that are not per tier."),
    ("metrics", "`[metrics]`: Prometheus exposition (docs/metrics.md); off unless set."),
    ("control", "`[control]`: who may use the control socket (`memqos explain`)."),
];

impl KeyDoc {
    /// The section the key is in (`""` for the top level).
    pub fn section(&self) -> &'static str {
        match self.key.split_once('.') {
            Some((s, _)) => s,
            None => "",
        }
    }
}

mod table;
pub use table::KEYS;

#[cfg(test)]
pub(super) mod tests;
