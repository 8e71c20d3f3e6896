//! The file as written (every field optional, spans kept) and its validation into `Config`.

use std::ops::Range;
use std::path::PathBuf;

use globset::{GlobBuilder, GlobSetBuilder};
use serde::Deserialize;
use toml::Spanned;

use super::error::Source;
use super::{
    AdmissionRegrowth, Config, ConfigError, Control, Dirty, DirtyMax, ForeignKnobs, Metrics, Policy, Protect, Signals,
    StallAction, StallBound, SwapMax, Tier, Tiers,
};
use crate::size::{parse_size, ByteSize, Limit};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    cgroup_root: Option<Spanned<String>>,
    state_dir: Option<Spanned<String>>,
    history_file: Option<Spanned<String>>,
    #[serde(default)]
    signals: RawSignals,
    #[serde(default)]
    tier: Vec<RawTier>,
    #[serde(default)]
    policy: RawPolicy,
    #[serde(default)]
    metrics: RawMetrics,
    #[serde(default)]
    control: RawControl,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawControl {
    group: Option<Spanned<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawMetrics {
    listen: Option<Spanned<String>>,
    textfile: Option<Spanned<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawSignals {
    psi: Option<bool>,
    events: Option<bool>,
    bpf: Option<bool>,
    sampling_interval_ms: Option<Spanned<u64>>,
    calm_interval_ms: Option<Spanned<u64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTier {
    name: Spanned<String>,
    #[serde(rename = "match")]
    patterns: Spanned<Vec<Spanned<String>>>,
    protect: Option<Protect>,
    throttle: Option<bool>,
    freeze: Option<Spanned<bool>>,
    queue_held: Option<Spanned<bool>>,
    freeze_thrashing: Option<Spanned<bool>>,
    kill: Option<Spanned<bool>>,
    dirty: Option<RawDirty>,
    oom_score_adj: Option<Spanned<i64>>,
    cpu_weight: Option<Spanned<i64>>,
    stall: Option<Spanned<RawStall>>,
    xattr: Option<Spanned<Vec<Spanned<String>>>>,
    expected_peak: Option<Spanned<ByteSize>>,
    learn_peak: Option<Spanned<bool>>,
    default_peak: Option<Spanned<ByteSize>>,
    first_sight_growth: Option<Spanned<f64>>,
    swap_max: Option<Spanned<RawSwapMax>>,
}

/// `"keep"`, `"max"`, or a byte size (integer or string).
#[derive(Deserialize)]
#[serde(untagged)]
enum RawSwapMax {
    Int(i64),
    Text(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStall {
    after_ms: Option<Spanned<u64>>,
    action: Option<StallAction>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDirty {
    max: Option<Spanned<RawDirtyMax>>,
    min: Option<Spanned<ByteSize>>,
}

/// A float is a ratio, an integer or a size string is bytes.
enum RawDirtyMax {
    Bytes(u64),
    Ratio(f64),
}

impl<'de> Deserialize<'de> for RawDirtyMax {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de;
        struct V;
        impl de::Visitor<'_> for V {
            type Value = RawDirtyMax;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(
                    "a byte size (\"8M\" or an integer) or a ratio of the host's dirty threshold (a float in (0, 1])",
                )
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<RawDirtyMax, E> {
                Ok(RawDirtyMax::Bytes(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<RawDirtyMax, E> {
                u64::try_from(v)
                    .map(RawDirtyMax::Bytes)
                    .map_err(|_| E::custom(format!("byte size must not be negative, got {v}")))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<RawDirtyMax, E> {
                Ok(RawDirtyMax::Ratio(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawDirtyMax, E> {
                parse_size(v).map(RawDirtyMax::Bytes).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// Smallest accepted `dirty.max` in bytes: below this the kernel's per-memcg limit is a
/// handful of pages and the cgroup would be throttled on nearly every write.
const MIN_DIRTY_MAX: u64 = 64 << 10;

fn dirty(src: &Source, i: usize, d: Option<RawDirty>) -> Result<Dirty, ConfigError> {
    let Some(d) = d else {
        return Ok(Dirty::default());
    };
    let field = |f: &str| format!("tier[{i}].dirty.{f}");
    let max = match d.max {
        None => None,
        Some(m) => {
            let span = m.span();
            match m.into_inner() {
                RawDirtyMax::Bytes(b) if b >= MIN_DIRTY_MAX => Some(DirtyMax::Bytes(b)),
                RawDirtyMax::Bytes(b) => {
                    return Err(src.at(Some(span), &field("max"), format!("{b} bytes is too small (at least {MIN_DIRTY_MAX})")))
                }
                RawDirtyMax::Ratio(r) if r > 0.0 && r <= 1.0 => Some(DirtyMax::Ratio(r)),
                RawDirtyMax::Ratio(r) => {
                    return Err(src.at(
                        Some(span),
                        &field("max"),
                        format!("ratio {r} is out of range (0, 1] (a fraction of the host's dirty threshold; use a size like \"8M\" for bytes)"),
                    ))
                }
            }
        }
    };
    let min_span = d.min.as_ref().map(|m| m.span());
    let min = match d.min {
        None => None,
        Some(m) if m.get_ref().0 >= 4096 => Some(m.get_ref().0),
        Some(m) => {
            return Err(src.at(
                Some(m.span()),
                &field("min"),
                format!("{} bytes is too small (at least 4096)", m.get_ref().0),
            ))
        }
    };
    if let (Some(DirtyMax::Bytes(hi)), Some(lo)) = (max, min) {
        if lo > hi {
            return Err(src.at(
                min_span,
                &field("min"),
                format!("dirty.min ({lo} bytes) is above dirty.max ({hi} bytes)"),
            ));
        }
    }
    Ok(Dirty { max, min })
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    pressure_psi_some_avg10: Option<Spanned<f64>>,
    pressure_stall_pct: Option<Spanned<f64>>,
    pressure_refault_rate: Option<Spanned<ByteSize>>,
    thrash_refault_rate: Option<Spanned<ByteSize>>,
    hold_ms: Option<Spanned<u64>>,
    headroom_guard: Option<Spanned<ByteSize>>,
    min_high: Option<Spanned<ByteSize>>,
    step_ratio: Option<Spanned<f64>>,
    release_ratio: Option<Spanned<f64>>,
    min_write_interval_ms: Option<Spanned<u64>>,
    freeze_after_ms: Option<Spanned<u64>>,
    kill_after_ms: Option<Spanned<u64>>,
    stall_psi_full_avg10: Option<Spanned<f64>>,
    ws_window_ms: Option<Spanned<u64>>,
    ws_margin: Option<Spanned<f64>>,
    ws_granularity: Option<Spanned<ByteSize>>,
    park_room: Option<Spanned<ByteSize>>,
    park_with_swap: Option<bool>,
    foreign_knobs: Option<ForeignKnobs>,
    admission: Option<bool>,
    admission_share: Option<Spanned<f64>>,
    admission_floor: Option<Spanned<ByteSize>>,
    admission_wait_ms: Option<Spanned<u64>>,
    admission_regrowth: Option<AdmissionRegrowth>,
    remove_leftovers_after_ms: Option<Spanned<u64>>,
}

pub(super) fn parse(text: &str, file: &str) -> Result<Config, ConfigError> {
    let src = Source { text, file };
    let raw: RawConfig = toml::from_str(text).map_err(|e| src.toml_error(&e))?;
    let cgroup_root = match raw.cgroup_root {
        Some(p) => absolute(&src, p, "cgroup_root")?,
        None => {
            return Err(src.at(
                None,
                "cgroup_root",
                "missing (the managed subtree, e.g. \"/sys/fs/cgroup/agents\")".into(),
            ))
        }
    };
    let state_dir = match raw.state_dir {
        Some(p) => absolute(&src, p, "state_dir")?,
        None => PathBuf::from(memqos_schema::state::DEFAULT_STATE_DIR),
    };
    let history_file = raw.history_file.map(|p| absolute(&src, p, "history_file")).transpose()?;
    Ok(Config {
        cgroup_root,
        state_dir,
        history_file,
        signals: signals(&src, raw.signals)?,
        tiers: tiers(&src, raw.tier)?,
        policy: policy(&src, raw.policy)?,
        metrics: metrics(&src, raw.metrics)?,
        control: control(&src, raw.control)?,
    })
}

/// `[control]`: a group name as getgrnam(3) takes it (checked against the system's groups
/// when the daemon creates the socket, not here: a config is validated without the host).
fn control(src: &Source, r: RawControl) -> Result<Control, ConfigError> {
    let group = match r.group {
        None => None,
        Some(g) => {
            let name = g.get_ref();
            let valid = !name.is_empty()
                && name.len() <= 32
                && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
            if !valid {
                return Err(src.at(
                    Some(g.span()),
                    "control.group",
                    format!("{name:?} is not a group name (letters, digits, '_', '-', '.'; at most 32)"),
                ));
            }
            Some(g.into_inner())
        }
    };
    Ok(Control { group })
}

/// `[metrics]`: both off unless given.
fn metrics(src: &Source, r: RawMetrics) -> Result<Metrics, ConfigError> {
    let listen = match r.listen {
        None => None,
        Some(l) => Some(l.get_ref().parse::<std::net::SocketAddr>().map_err(|e| {
            src.at(
                Some(l.span()),
                "metrics.listen",
                format!("{:?} is not an address:port ({e}), e.g. \"127.0.0.1:9590\"", l.get_ref()),
            )
        })?),
    };
    let textfile = match r.textfile {
        None => None,
        Some(p) => Some(absolute(src, p, "metrics.textfile")?),
    };
    Ok(Metrics { listen, textfile })
}

fn absolute(src: &Source, p: Spanned<String>, field: &str) -> Result<PathBuf, ConfigError> {
    if p.get_ref().starts_with('/') {
        return Ok(PathBuf::from(p.into_inner()));
    }
    Err(src.at(Some(p.span()), field, format!("must be an absolute path, got {:?}", p.get_ref())))
}

fn signals(src: &Source, r: RawSignals) -> Result<Signals, ConfigError> {
    let d = Signals::default();
    let sampling_interval_ms =
        int(src, r.sampling_interval_ms, "signals.sampling_interval_ms", d.sampling_interval_ms, 10..=60_000)?;
    let calm_span = r.calm_interval_ms.as_ref().map(|c| c.span());
    // Unset: the default, but never shorter than the sampling interval.
    let calm_default = d.calm_interval_ms.max(sampling_interval_ms);
    let calm_interval_ms = int(src, r.calm_interval_ms, "signals.calm_interval_ms", calm_default, 0..=600_000)?;
    if calm_interval_ms != 0 && calm_interval_ms < sampling_interval_ms {
        return Err(src.at(
            calm_span,
            "signals.calm_interval_ms",
            format!(
                "{calm_interval_ms} is shorter than sampling_interval_ms ({sampling_interval_ms}); use 0 to sample the whole tree every interval"
            ),
        ));
    }
    Ok(Signals {
        psi: r.psi.unwrap_or(d.psi),
        events: r.events.unwrap_or(d.events),
        bpf: r.bpf.unwrap_or(d.bpf),
        sampling_interval_ms,
        calm_interval_ms,
    })
}

fn tiers(src: &Source, raw: Vec<RawTier>) -> Result<Tiers, ConfigError> {
    if raw.is_empty() {
        return Err(ConfigError {
            file: src.file.to_string(),
            position: None,
            field: Some("tier".into()),
            message: "at least one [[tier]] is required".into(),
        });
    }
    let mut tiers: Vec<Tier> = Vec::new();
    let mut matchers = Vec::new();
    for (i, t) in raw.into_iter().enumerate() {
        let at = |span: Range<usize>, field: &str, msg: String| src.at(Some(span), &format!("tier[{i}].{field}"), msg);
        let name = t.name.get_ref().trim();
        if name.is_empty() {
            return Err(at(t.name.span(), "name", "must not be empty".into()));
        }
        if let Some(j) = tiers.iter().position(|o| o.name == name) {
            return Err(at(t.name.span(), "name", format!("duplicate tier name {name:?} (also tier[{j}])")));
        }
        if t.patterns.get_ref().is_empty() {
            return Err(at(t.patterns.span(), "match", "needs at least one glob".into()));
        }
        let mut set = GlobSetBuilder::new();
        for g in t.patterns.get_ref() {
            let pat = g.get_ref();
            if pat.starts_with('/') {
                return Err(at(
                    g.span(),
                    "match",
                    format!("glob {pat:?} must be relative to cgroup_root (drop the leading '/')"),
                ));
            }
            let glob = GlobBuilder::new(pat)
                .literal_separator(true)
                .build()
                .map_err(|e| at(g.span(), "match", format!("invalid glob {pat:?}: {}", e.kind())))?;
            set.add(glob);
        }
        let set = set.build().map_err(|e| at(t.patterns.span(), "match", e.to_string()))?;
        let throttle = t.throttle.unwrap_or(false);
        for (flag, field) in [
            (&t.freeze, "freeze"),
            (&t.queue_held, "queue_held"),
            (&t.freeze_thrashing, "freeze_thrashing"),
            (&t.kill, "kill"),
        ] {
            if let Some(f) = flag {
                if *f.get_ref() && !throttle {
                    return Err(at(f.span(), field, "needs throttle = true (it escalates throttling)".into()));
                }
            }
        }
        let dirty = dirty(src, i, t.dirty)?;
        let oom_score_adj = match t.oom_score_adj {
            None => None,
            Some(v) if (-999..=1000).contains(v.get_ref()) => Some(*v.get_ref() as i32),
            Some(v) if *v.get_ref() == -1000 => {
                return Err(at(
                    v.span(),
                    "oom_score_adj",
                    "-1000 exempts the processes from the OOM killer entirely, and a memcg OOM with nothing killable stalls the charging task instead; use -999".into(),
                ))
            }
            Some(v) => {
                return Err(at(
                    v.span(),
                    "oom_score_adj",
                    format!("{} is out of range -999..=1000", v.get_ref()),
                ))
            }
        };
        let cpu_weight = match t.cpu_weight {
            None => None,
            Some(v) if (1..=10000).contains(v.get_ref()) => Some(*v.get_ref() as u32),
            Some(v) => {
                return Err(at(
                    v.span(),
                    "cpu_weight",
                    format!("{} is out of range 1..=10000 (cgroup v2 cpu.weight; the default is 100)", v.get_ref()),
                ))
            }
        };
        let xattrs = xattrs(src, i, t.xattr)?;
        let protect = t.protect.unwrap_or(Protect::None);
        // Both sizes reserve room for a protected cgroup's growth: the same rules.
        let peak = |v: Option<Spanned<ByteSize>>, field: &str| match v {
            None => Ok(None),
            Some(v) if protect == Protect::None => Err(at(
                v.span(),
                field,
                "needs protect = \"low\" or \"min\" (a protected tier reserves room for its expected peak)".into(),
            )),
            Some(v) if v.get_ref().0 < crate::size::PAGE => {
                Err(at(v.span(), field, format!("{} bytes is below one page", v.get_ref().0)))
            }
            Some(v) => Ok(Some(v.get_ref().0)),
        };
        let expected_peak = peak(t.expected_peak, "expected_peak")?;
        let default_peak = peak(t.default_peak, "default_peak")?;
        let first_sight_growth = match t.first_sight_growth {
            None => None,
            Some(v) if protect == Protect::None => {
                return Err(at(
                    v.span(),
                    "first_sight_growth",
                    "needs protect = \"low\" or \"min\" (a protected tier reserves room for its expected peak)".into(),
                ))
            }
            Some(v) if *v.get_ref() > 1.0 && *v.get_ref() <= 16.0 => Some(*v.get_ref()),
            Some(v) => {
                return Err(at(
                    v.span(),
                    "first_sight_growth",
                    format!(
                        "{} is out of range (1, 16]: a growing cgroup expects this many times its peak so far",
                        v.get_ref()
                    ),
                ))
            }
        };
        let learn_peak = match t.learn_peak {
            Some(v) if *v.get_ref() && protect == Protect::None => {
                return Err(at(
                    v.span(),
                    "learn_peak",
                    format!("tier {name:?} does not protect: learn_peak needs protect = \"low\" or \"min\" (a protected tier reserves room for its expected peak)"),
                ))
            }
            v => v.is_some_and(|v| *v.get_ref()),
        };
        let swap_max = match t.swap_max {
            None => SwapMax::default_for(protect),
            Some(v) => {
                let parsed = match v.get_ref() {
                    RawSwapMax::Int(n) => {
                        u64::try_from(*n).map(|b| SwapMax::Set(Limit::Bytes(b))).map_err(|_| format!("{n} is negative"))
                    }
                    RawSwapMax::Text(s) if s.trim() == "keep" => Ok(SwapMax::Keep),
                    RawSwapMax::Text(s) if s.trim() == "max" => Ok(SwapMax::Set(Limit::Max)),
                    RawSwapMax::Text(s) => crate::size::parse_size(s).map(|b| SwapMax::Set(Limit::Bytes(b))),
                };
                parsed.map_err(|e| {
                    at(v.span(), "swap_max", format!("{e}: expected \"keep\", \"max\" or a size such as 0 or \"512M\""))
                })?
            }
        };
        let stall = match t.stall {
            None => StallBound::default(),
            Some(s) if !throttle => {
                return Err(at(
                    s.span(),
                    "stall",
                    "needs throttle = true (memqos bounds the stalls its own memory.high causes)".into(),
                ))
            }
            Some(s) => {
                let s = s.into_inner();
                let d = StallBound::default();
                StallBound {
                    after_ms: int(
                        src,
                        s.after_ms,
                        &format!("tier[{i}].stall.after_ms"),
                        d.after_ms,
                        1_000..=86_400_000,
                    )?,
                    action: s.action.unwrap_or(d.action),
                }
            }
        };
        tiers.push(Tier {
            name: name.to_string(),
            patterns: t.patterns.into_inner().into_iter().map(Spanned::into_inner).collect(),
            protect,
            throttle,
            freeze: t.freeze.is_some_and(|f| *f.get_ref()),
            queue_held: t.queue_held.is_some_and(|f| *f.get_ref()),
            freeze_thrashing: t.freeze_thrashing.is_some_and(|f| *f.get_ref()),
            kill: t.kill.is_some_and(|f| *f.get_ref()),
            dirty,
            oom_score_adj,
            cpu_weight,
            xattrs,
            stall,
            expected_peak,
            learn_peak,
            default_peak,
            first_sight_growth,
            swap_max,
        });
        matchers.push(set);
    }
    Ok(Tiers { tiers, matchers })
}

/// `xattr`: names in the `user.` namespace, the only one cgroupfs lets userspace set
/// (systemd's `user.oomd_avoid`, `user.oomd_omit`).
fn xattrs(src: &Source, i: usize, raw: Option<Spanned<Vec<Spanned<String>>>>) -> Result<Vec<String>, ConfigError> {
    let Some(raw) = raw else {
        return Ok(Vec::new());
    };
    if raw.get_ref().is_empty() {
        return Err(src.at(
            Some(raw.span()),
            &format!("tier[{i}].xattr"),
            "needs at least one name (or leave xattr out)".into(),
        ));
    }
    let mut out = Vec::new();
    for x in raw.into_inner() {
        let name = x.get_ref();
        if !name.starts_with("user.") || name.len() == "user.".len() || name.contains(['/', '\0']) {
            return Err(src.at(
                Some(x.span()),
                &format!("tier[{i}].xattr"),
                format!("{name:?} is not a user.* extended attribute name (cgroupfs only has user.* ones, e.g. \"user.oomd_omit\")"),
            ));
        }
        out.push(x.into_inner());
    }
    Ok(out)
}

fn policy(src: &Source, r: RawPolicy) -> Result<Policy, ConfigError> {
    let d = Policy::default();
    let f = |name: &str| format!("policy.{name}");
    Ok(Policy {
        pressure_psi_some_avg10: ratio(
            src,
            r.pressure_psi_some_avg10,
            &f("pressure_psi_some_avg10"),
            d.pressure_psi_some_avg10,
            (0.0, 100.0),
            true,
        )?,
        pressure_stall_pct: ratio(
            src,
            r.pressure_stall_pct,
            &f("pressure_stall_pct"),
            d.pressure_stall_pct,
            (0.0, 100.0),
            true,
        )?,
        pressure_refault_rate: size(
            src,
            r.pressure_refault_rate,
            &f("pressure_refault_rate"),
            d.pressure_refault_rate,
            0,
        )?,
        thrash_refault_rate: size(src, r.thrash_refault_rate, &f("thrash_refault_rate"), d.thrash_refault_rate, 0)?,
        hold_ms: int(src, r.hold_ms, &f("hold_ms"), d.hold_ms, 0..=3_600_000)?,
        headroom_guard: size(src, r.headroom_guard, &f("headroom_guard"), d.headroom_guard, 0)?,
        min_high: size(src, r.min_high, &f("min_high"), d.min_high, 4096)?,
        step_ratio: ratio(src, r.step_ratio, &f("step_ratio"), d.step_ratio, (0.0, 1.0), false)?,
        release_ratio: ratio(src, r.release_ratio, &f("release_ratio"), d.release_ratio, (0.0, 10.0), true)?,
        min_write_interval_ms: int(
            src,
            r.min_write_interval_ms,
            &f("min_write_interval_ms"),
            d.min_write_interval_ms,
            0..=3_600_000,
        )?,
        freeze_after_ms: int(src, r.freeze_after_ms, &f("freeze_after_ms"), d.freeze_after_ms, 1..=86_400_000)?,
        kill_after_ms: int(src, r.kill_after_ms, &f("kill_after_ms"), d.kill_after_ms, 1..=86_400_000)?,
        stall_psi_full_avg10: ratio(
            src,
            r.stall_psi_full_avg10,
            &f("stall_psi_full_avg10"),
            d.stall_psi_full_avg10,
            (0.0, 100.0),
            true,
        )?,
        ws_window_ms: int(src, r.ws_window_ms, &f("ws_window_ms"), d.ws_window_ms, 1..=86_400_000)?,
        ws_margin: margin(src, r.ws_margin, &f("ws_margin"), d.ws_margin)?,
        ws_granularity: size(src, r.ws_granularity, &f("ws_granularity"), d.ws_granularity, 4096)?,
        park_room: size(src, r.park_room, &f("park_room"), d.park_room, 0)?,
        park_with_swap: r.park_with_swap.unwrap_or(d.park_with_swap),
        foreign_knobs: r.foreign_knobs.unwrap_or(d.foreign_knobs),
        admission: r.admission.unwrap_or(d.admission),
        admission_share: ratio(src, r.admission_share, &f("admission_share"), d.admission_share, (0.0, 1.0), true)?,
        admission_floor: size(src, r.admission_floor, &f("admission_floor"), d.admission_floor, 4096)?,
        admission_wait_ms: int(src, r.admission_wait_ms, &f("admission_wait_ms"), d.admission_wait_ms, 0..=3_600_000)?,
        admission_regrowth: r.admission_regrowth.unwrap_or(d.admission_regrowth),
        remove_leftovers_after_ms: int(
            src,
            r.remove_leftovers_after_ms,
            &f("remove_leftovers_after_ms"),
            d.remove_leftovers_after_ms,
            0..=86_400_000,
        )?,
    })
}

fn int(
    src: &Source,
    v: Option<Spanned<u64>>,
    field: &str,
    default: u64,
    range: std::ops::RangeInclusive<u64>,
) -> Result<u64, ConfigError> {
    let Some(v) = v else { return Ok(default) };
    if range.contains(v.get_ref()) {
        return Ok(*v.get_ref());
    }
    Err(src.at(Some(v.span()), field, format!("{} is out of range {}..={}", v.get_ref(), range.start(), range.end())))
}

fn size(src: &Source, v: Option<Spanned<ByteSize>>, field: &str, default: u64, min: u64) -> Result<u64, ConfigError> {
    let Some(v) = v else { return Ok(default) };
    let b = v.get_ref().0;
    if b >= min {
        return Ok(b);
    }
    Err(src.at(Some(v.span()), field, format!("{b} bytes is too small (at least {min})")))
}

/// A float in `(lo, hi)` or `(lo, hi]` when `hi_inclusive`.
fn ratio(
    src: &Source,
    v: Option<Spanned<f64>>,
    field: &str,
    default: f64,
    (lo, hi): (f64, f64),
    hi_inclusive: bool,
) -> Result<f64, ConfigError> {
    let Some(v) = v else { return Ok(default) };
    let x = *v.get_ref();
    let ok = x > lo && (x < hi || (hi_inclusive && x == hi));
    if ok {
        return Ok(x);
    }
    let close = if hi_inclusive { ']' } else { ')' };
    Err(src.at(Some(v.span()), field, format!("{x} is out of range ({lo}, {hi}{close}")))
}

fn margin(src: &Source, v: Option<Spanned<f64>>, field: &str, default: f64) -> Result<f64, ConfigError> {
    let Some(v) = v else { return Ok(default) };
    let x = *v.get_ref();
    if (1.0..=4.0).contains(&x) {
        return Ok(x);
    }
    Err(src.at(Some(v.span()), field, format!("{x} is out of range [1, 4]")))
}

/// The raw structs' fields by table (`""`: the top level; `tier.stall`: an inline table), for
/// the test that the parser and the reference (`keys::KEYS`) name the same keys.
#[cfg(test)]
pub(super) fn tables() -> Vec<(&'static str, &'static [&'static str])> {
    use super::keys::tests::fields_of as f;
    vec![
        ("", f::<RawConfig>()),
        ("signals", f::<RawSignals>()),
        ("tier", f::<RawTier>()),
        ("tier.stall", f::<RawStall>()),
        ("tier.dirty", f::<RawDirty>()),
        ("policy", f::<RawPolicy>()),
        ("metrics", f::<RawMetrics>()),
        ("control", f::<RawControl>()),
    ]
}
