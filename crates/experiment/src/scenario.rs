//! Scenario files (`experiments/*.toml`): which traces run in which tier, under which parent
//! limit, at which speed, and which policies are compared. Adding a scenario is adding a file.
//!
//! ```toml
//! description = "OOM pressure: ..."
//! parent_max = "1100M"          # or "90%": that share of the variant's total peak demand
//! speed = 50
//! baseline_mb = 100
//! policies = ["none", "static-max", "static-high", "memqos"]
//! static_high = "400M"          # memory.high of low-tier cgroups under static-high
//! memqos_config = "memqos-experiment.toml"   # daemon config, relative to this file
//! solo = true                   # also run each distinct trace alone
//! [[variant]]
//! name = "dask+github3"
//! high = "dask__dask-11628"
//! low = ["sigmavirus24__github3.py-673", "sigmavirus24__github3.py-673"]
//! ```

use memqos_policy::size::{parse_size, ByteSize};
use serde::Deserialize;
use std::fmt;
use std::path::{Path, PathBuf};

/// How the cgroups are set up for one arm of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// Children unlimited; only the parent's memory.max.
    None,
    /// Each child's memory.max = parent memory.max / number of children.
    StaticMax,
    /// The seed's static memory.high on the low tier, no daemon.
    StaticHigh,
    /// The memqos daemon manages the children (nothing set up front).
    Memqos,
    /// Diagnostic, not a memory policy: no memory knobs, the protected tier gets cpu.weight
    /// 10000 and the others 1. Shows how much of the protected task's slowdown is CPU (the
    /// replays fault in and zero every page they grow by) rather than memory.
    CpuWeight,
    /// The knobs a v1.37 kubelet writes with MemoryQoS, throttling factor 0.9 and tiered
    /// reservation: protected = Guaranteed, lows = Burstable (see kube.rs).
    KubeMemoryqos,
    /// Meta's oomd (the Debian package) with the scenario's ruleset: a userspace killer that
    /// kills from the low tier when the protected tier's memory pressure rises (see oomd.rs).
    Oomd,
    /// systemd's systemd-oomd (the Debian package) on a systemd host: the tiers are slices,
    /// the low slice has `ManagedOOMMemoryPressure=kill` (see systemd_oomd.rs). Its scenarios
    /// boot their guests with systemd as PID 1, every arm alike.
    SystemdOomd,
    /// Each task's `oom_score_adj` as memqos's config gives its tier, no daemon, no memory
    /// knob (see static_arms.rs).
    StaticAdj,
    /// The protected task's memory.min at its declared size (peak + 10%), the lows sharing the
    /// rest of the parent as memory.max (see static_arms.rs).
    StaticReserve,
}

impl Policy {
    /// The policies a scenario without a `policies` list runs (the diagnostic is opt-in).
    pub const ALL: [Policy; 4] = [Policy::None, Policy::StaticMax, Policy::StaticHigh, Policy::Memqos];

    pub fn name(self) -> &'static str {
        match self {
            Policy::None => "none",
            Policy::StaticMax => "static-max",
            Policy::StaticHigh => "static-high",
            Policy::Memqos => "memqos",
            Policy::CpuWeight => "cpu-weight",
            Policy::KubeMemoryqos => "kube-memoryqos",
            Policy::Oomd => "oomd",
            Policy::SystemdOomd => "systemd-oomd",
            Policy::StaticAdj => "static-adj",
            Policy::StaticReserve => "static-reserve",
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The parent's memory.max: fixed, a share of what the variant's tasks need at peak, or none
/// (`"max"`: the tasks share the whole guest, as in the RFC cover letter's demo).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, Deserialize)]
pub enum ParentMax {
    Bytes(u64),
    ShareOfDemand(f64),
    Unlimited,
}

/// What each task runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// `memqos-lab replay` of the task's agent trace.
    #[default]
    Replay,
    /// `stress-ng` with the scenario's `stress_args` (the task's trace name is only a label):
    /// the RFC cover letter's demo. Its throughput is stress-ng's bogo-ops/s.
    StressNg,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, Deserialize)]
pub struct Variant {
    pub name: String,
    pub high: String,
    pub low: Vec<String>,
}

impl Variant {
    /// (cgroup name, tier, trace) of each task: `high`, `low1`, `low2`, ...
    pub fn tasks(&self) -> Vec<(String, Tier, String)> {
        let mut v = vec![("high".to_string(), Tier::High, self.high.clone())];
        for (i, t) in self.low.iter().enumerate() {
            v.push((format!("low{}", i + 1), Tier::Low, t.clone()));
        }
        v
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    High,
    Low,
}

/// Serializable so the host can hand a parsed scenario to a guest (whose /tmp is its own).
#[derive(Clone, Debug, serde::Serialize, Deserialize)]
pub struct Scenario {
    /// File stem: `experiments/oom.toml` is scenario `oom`.
    pub name: String,
    pub file: PathBuf,
    pub description: String,
    pub parent_max: ParentMax,
    pub speed: f64,
    pub baseline_mb: u64,
    pub policies: Vec<Policy>,
    pub static_high: Option<u64>,
    /// Daemon config text; `cgroup_root` and `state_dir` are set by the runner.
    pub memqos_config: Option<String>,
    /// oomd ruleset (JSON) text for the oomd arm; its placeholders are filled by the runner.
    #[serde(default)]
    pub oomd_config: Option<String>,
    /// oomd's `--interval` (seconds; `oomd_interval_s`, default 1: what the Debian package's
    /// /etc/default/oomd passes to it, and the least oomd takes; its binary's
    /// default is 5).
    pub oomd_interval_s: u64,
    /// The systemd-oomd arm's settings (`[systemd_oomd]`).
    #[serde(default)]
    pub systemd_oomd: Option<crate::systemd_oomd::Settings>,
    /// Enable the cpu controller for the task cgroups in every arm (so arms differ only in
    /// what they set), for scenarios whose memqos config sets `cpu_weight`. Otherwise only the
    /// cpu-weight arm enables it.
    #[serde(default)]
    pub cpu_controller: bool,
    pub solo: bool,
    /// Guest RAM; default: the largest parent limit plus 1 GiB for the kernel and tools.
    pub guest_memory_mb: Option<u64>,
    #[serde(default)]
    pub workload: Workload,
    /// stress-ng's arguments for every task (`workload = "stress-ng"`).
    #[serde(default)]
    pub stress_args: Vec<String>,
    /// A swap disk of this size in the guest (none by default), and zswap in front of it.
    #[serde(default)]
    pub swap_mb: Option<u64>,
    #[serde(default)]
    pub zswap: bool,
    /// How compressible the replayed pages are (`memqos-lab replay --compression-ratio`): page
    /// size over what zswap stores. Default 3, the middle of the 2–4:1 zram reports for
    /// runtime heaps; results from before this field replayed a stamp and zeros (~100:1).
    #[serde(default = "default_compression_ratio")]
    pub compression_ratio: f64,
    /// In the memqos arm, the protected task's cgroup declares its expected peak
    /// (`user.memqos.expected_peak`): its replayed peak plus 10%, the request the
    /// kube-memoryqos arm gives its Guaranteed pod. Off: memqos learns from the working set.
    #[serde(default)]
    pub memqos_declares_peak: bool,
    /// In the memqos arm, every task's cgroup names its workload (`user.memqos.workload` =
    /// its trace), and the daemon config (which must set `learn_peak` on a tier and
    /// `history_file` to the runner's [`crate::runner::HISTORY_FILE`]) learns the protected
    /// task's peak: run 1 learns, later runs of the same guest boot reserve what it learned.
    #[serde(default)]
    pub memqos_learns_peak: bool,
    pub variants: Vec<Variant>,
}

fn default_compression_ratio() -> f64 {
    memqos_replay::memory::PageFill::DEFAULT_RATIO
}

#[derive(Debug, thiserror::Error)]
#[error("{file}: {message}")]
pub struct ScenarioError {
    pub file: String,
    pub message: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    description: String,
    parent_max: String,
    speed: f64,
    #[serde(default)]
    baseline_mb: u64,
    policies: Vec<Policy>,
    static_high: Option<ByteSize>,
    memqos_config: Option<PathBuf>,
    oomd_config: Option<PathBuf>,
    oomd_interval_s: Option<u64>,
    systemd_oomd: Option<RawSystemdOomd>,
    #[serde(default)]
    cpu_controller: bool,
    #[serde(default = "yes")]
    solo: bool,
    guest_memory_mb: Option<u64>,
    #[serde(default)]
    workload: Workload,
    #[serde(default)]
    stress_args: Vec<String>,
    swap_mb: Option<u64>,
    #[serde(default)]
    zswap: bool,
    compression_ratio: Option<f64>,
    #[serde(default)]
    memqos_declares_peak: bool,
    #[serde(default)]
    memqos_learns_peak: bool,
    variant: Vec<RawVariant>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSystemdOomd {
    memory_pressure_limit_percent: f64,
    memory_pressure_duration_s: u64,
}

fn yes() -> bool {
    true
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawVariant {
    name: String,
    high: String,
    #[serde(default)]
    low: Vec<String>,
}

impl Scenario {
    /// The guests of this scenario boot systemd as PID 1 (the systemd-oomd arm needs it).
    pub fn boots_systemd(&self) -> bool {
        self.policies.contains(&Policy::SystemdOomd)
    }

    pub fn load(file: &Path) -> Result<Scenario, ScenarioError> {
        let err = |message: String| ScenarioError { file: file.display().to_string(), message };
        let text = std::fs::read_to_string(file).map_err(|e| err(format!("cannot read: {e}")))?;
        let name = file
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".toml"))
            .ok_or_else(|| err("a scenario file must be named NAME.toml".into()))?
            .to_string();
        let config_text = |rel: &Path| {
            let path = file.parent().unwrap_or(Path::new(".")).join(rel);
            std::fs::read_to_string(&path).map_err(|e| err(format!("{}: {e}", path.display())))
        };
        Scenario::parse(&name, file, &text, &config_text)
    }

    /// Parses and validates `text`; `read_config` reads the `memqos_config` file it names.
    pub fn parse(
        name: &str,
        file: &Path,
        text: &str,
        read_config: &dyn Fn(&Path) -> Result<String, ScenarioError>,
    ) -> Result<Scenario, ScenarioError> {
        let err = |message: String| ScenarioError { file: file.display().to_string(), message };
        let raw: RawScenario = toml::from_str(text).map_err(|e| err(located_toml_error(text, &e)))?;
        let parent_max = parse_parent_max(&raw.parent_max).map_err(|m| err(format!("parent_max: {m}")))?;
        if !(raw.speed.is_finite() && raw.speed > 0.0) {
            return Err(err(format!("speed: must be a positive number, got {}", raw.speed)));
        }
        if raw.policies.is_empty() {
            return Err(err(
                "policies: list at least one of none, static-max, static-high, memqos, cpu-weight, kube-memoryqos, oomd, systemd-oomd"
                    .into(),
            ));
        }
        let mut seen = Vec::new();
        for p in &raw.policies {
            if seen.contains(p) {
                return Err(err(format!("policies: {p} is listed twice")));
            }
            seen.push(*p);
        }
        if raw.policies.contains(&Policy::StaticHigh) && raw.static_high.is_none() {
            return Err(err(
                "static_high: required when policies include static-high (the low tier's memory.high)".into()
            ));
        }
        let memqos_config = match (&raw.memqos_config, raw.policies.contains(&Policy::Memqos)) {
            (Some(p), _) => Some(read_config(p)?),
            (None, true) => return Err(err("memqos_config: required when policies include memqos".into())),
            (None, false) => None,
        };
        if raw.policies.contains(&Policy::StaticAdj) {
            // static-adj copies memqos's per-tier values: without memqos's config there are none.
            let template = memqos_config.as_deref().ok_or_else(|| {
                err("memqos_config: required when policies include static-adj (it takes each tier's oom_score_adj from it)"
                    .into())
            })?;
            crate::static_arms::adj_for(template, "high").map_err(|e| err(format!("static-adj: {e}")))?;
        }
        if raw.policies.contains(&Policy::StaticReserve) && parent_max == ParentMax::Unlimited {
            return Err(
                err("policies: static-reserve shares the parent's limit; parent_max = \"max\" has none".into()),
            );
        }
        let oomd_config = match (&raw.oomd_config, raw.policies.contains(&Policy::Oomd)) {
            (Some(p), _) => Some(read_config(p)?),
            (None, true) => return Err(err("oomd_config: required when policies include oomd (the ruleset)".into())),
            (None, false) => None,
        };
        let oomd_interval_s = raw.oomd_interval_s.unwrap_or(1);
        if oomd_interval_s == 0 {
            return Err(err("oomd_interval_s: oomd's --interval is whole seconds, at least 1".into()));
        }
        if raw.oomd_interval_s.is_some() && !raw.policies.contains(&Policy::Oomd) {
            return Err(err("oomd_interval_s: only with the oomd arm".into()));
        }
        let systemd_oomd = match (raw.systemd_oomd, raw.policies.contains(&Policy::SystemdOomd)) {
            (Some(r), _) => {
                let settings = crate::systemd_oomd::Settings {
                    memory_pressure_limit_percent: r.memory_pressure_limit_percent,
                    memory_pressure_duration_s: r.memory_pressure_duration_s,
                };
                settings.validate().map_err(|m| err(format!("systemd_oomd.{m}")))?;
                Some(settings)
            }
            (None, true) => {
                return Err(err(
                    "[systemd_oomd]: required when policies include systemd-oomd (memory_pressure_limit_percent, memory_pressure_duration_s)"
                        .into(),
                ))
            }
            (None, false) => None,
        };
        if systemd_oomd.is_some() && raw.policies.contains(&Policy::SystemdOomd) {
            // Its guests boot systemd as PID 1, which the harness sets up without swap or the
            // cpu controller for the tiers.
            if raw.swap_mb.is_some() {
                return Err(
                    err("swap_mb: not with the systemd-oomd arm (its systemd guests have no swap disk)".into()),
                );
            }
            if raw.cpu_controller {
                return Err(err(
                    "cpu_controller: not with the systemd-oomd arm (its tier slices get memory only)".into()
                ));
            }
        }
        if raw.workload == Workload::StressNg {
            if raw.stress_args.is_empty() {
                return Err(err(
                    "stress_args: required when workload = \"stress-ng\" (e.g. [\"--vm\", \"1\", ...])".into()
                ));
            }
            if let Some(p) = raw
                .policies
                .iter()
                .find(|p| matches!(p, Policy::StaticMax | Policy::KubeMemoryqos | Policy::StaticReserve))
            {
                return Err(err(format!(
                    "policies: {p} sizes its knobs from the traces; a stress-ng workload has none"
                )));
            }
            if matches!(parent_max, ParentMax::ShareOfDemand(_)) {
                return Err(err("parent_max: a share of peak demand needs traces; give bytes or \"max\"".into()));
            }
            if raw.guest_memory_mb.is_none() {
                return Err(err(
                    "guest_memory_mb: required with workload = \"stress-ng\" (its sizes are shares of it)".into(),
                ));
            }
        } else if !raw.stress_args.is_empty() {
            return Err(err("stress_args: only with workload = \"stress-ng\"".into()));
        }
        if raw.compression_ratio.is_some() && raw.workload == Workload::StressNg {
            return Err(err("compression_ratio: only with the replay workload (stress-ng fills its own pages)".into()));
        }
        let compression_ratio = raw.compression_ratio.unwrap_or_else(default_compression_ratio);
        memqos_replay::memory::PageFill::new(compression_ratio).map_err(|e| err(format!("compression_ratio: {e}")))?;
        if raw.zswap && raw.swap_mb.is_none() {
            return Err(err("zswap: needs swap_mb (zswap compresses pages on their way to a swap device)".into()));
        }
        if raw.memqos_declares_peak && (!raw.policies.contains(&Policy::Memqos) || raw.workload == Workload::StressNg) {
            return Err(err(
                "memqos_declares_peak: needs the memqos arm and a trace workload (the peak comes from the trace)"
                    .into(),
            ));
        }
        if raw.memqos_learns_peak {
            if !raw.policies.contains(&Policy::Memqos) || raw.workload == Workload::StressNg {
                return Err(err(
                    "memqos_learns_peak: needs the memqos arm and a trace workload (the trace names the workload)"
                        .into(),
                ));
            }
            if raw.memqos_declares_peak {
                return Err(err(
                    "memqos_learns_peak: not with memqos_declares_peak (a declaration always wins over what is learned)"
                        .into(),
                ));
            }
            let rendered = render_memqos_config(memqos_config.as_deref().unwrap_or(""), "/sys/fs/cgroup/x", "/run/x");
            let cfg = memqos_policy::Config::from_str(&rendered, "memqos_config")
                .map_err(|e| err(format!("memqos_learns_peak: {e}")))?;
            if !cfg.learns_peaks() || cfg.history_file.as_deref() != Some(Path::new(crate::runner::HISTORY_FILE)) {
                return Err(err(format!(
                    "memqos_learns_peak: the memqos_config must set learn_peak = true on a tier and history_file = \"{}\" (outside the state directory the runner wipes, so runs share it)",
                    crate::runner::HISTORY_FILE
                )));
            }
        }
        if raw.variant.is_empty() {
            return Err(err("[[variant]]: at least one variant (high = TRACE, low = [TRACE, ...]) is required".into()));
        }
        let mut variants = Vec::new();
        for (i, v) in raw.variant.into_iter().enumerate() {
            if v.name.is_empty() || v.name.contains('/') {
                return Err(err(format!("variant {}: name must be non-empty and contain no '/'", i + 1)));
            }
            if variants.iter().any(|w: &Variant| w.name == v.name) {
                return Err(err(format!("variant {}: name {:?} is used twice", i + 1, v.name)));
            }
            variants.push(Variant { name: v.name, high: v.high, low: v.low });
        }
        Ok(Scenario {
            name: name.to_string(),
            file: file.to_path_buf(),
            description: raw.description,
            parent_max,
            speed: raw.speed,
            baseline_mb: raw.baseline_mb,
            policies: raw.policies,
            static_high: raw.static_high.map(|b| b.0),
            memqos_config,
            oomd_config,
            oomd_interval_s,
            systemd_oomd,
            cpu_controller: raw.cpu_controller,
            solo: raw.solo,
            guest_memory_mb: raw.guest_memory_mb,
            workload: raw.workload,
            stress_args: raw.stress_args,
            swap_mb: raw.swap_mb,
            zswap: raw.zswap,
            compression_ratio,
            memqos_declares_peak: raw.memqos_declares_peak,
            memqos_learns_peak: raw.memqos_learns_peak,
            variants,
        })
    }
}

impl Scenario {
    /// How often `policy` looks and how long it waits before it acts in this scenario, in
    /// wall time, for the report: a comparison of peers at different speeds is only fair to
    /// read with these beside it.
    pub fn timing(&self, policy: Policy) -> Result<String, String> {
        let per_trace_s = 1.0 / self.speed;
        Ok(match policy {
            Policy::Memqos => {
                let text =
                    render_memqos_config(self.memqos_config.as_deref().unwrap_or(""), "/sys/fs/cgroup/x", "/run/x");
                let c = memqos_policy::Config::from_str(&text, "memqos_config").map_err(|e| e.to_string())?;
                format!(
                    "memqos: samples every {} ms (shipped default 500), PSI trigger wakeups {}, releases a throttle after {} ms without pressure, writes a cgroup's knob at most every {} ms",
                    c.signals.sampling_interval_ms,
                    if c.signals.psi { "on" } else { "off" },
                    c.policy.hold_ms,
                    c.policy.min_write_interval_ms
                )
            }
            Policy::Oomd => {
                let ruleset = self.oomd_config.as_deref().unwrap_or("");
                format!(
                    "oomd: --interval {} s (its binary's default 5 s; the Debian package's /etc/default/oomd passes 1 s, the least it takes); the ruleset's {}",
                    self.oomd_interval_s,
                    crate::oomd::durations(ruleset).unwrap_or_else(|e| format!("durations unreadable: {e}"))
                )
            }
            Policy::SystemdOomd => {
                let st = self.systemd_oomd.as_ref().ok_or("no [systemd_oomd] settings")?;
                format!(
                    "systemd-oomd: ManagedOOMMemoryPressureLimit={}% for DefaultMemoryPressureDurationSec={} s on the low slice (systemd's defaults: 60%, and 20 s from Debian 252's oomd.conf.d drop-in, 30 s compiled in); it reads PSI once a second (fixed) and compares its avg10, a 10 s average the replay's speed does not shorten",
                    st.memory_pressure_limit_percent, st.memory_pressure_duration_s
                )
            }
            p => format!("{p}: knobs set before the tasks start; nothing acts during the run"),
        } + &format!(" (speed {}x: a trace second is {:.3} s here)", self.speed, per_trace_s))
    }
}

/// The memqos daemon config of an arm: the template with its placeholders filled in.
pub fn render_memqos_config(template: &str, cgroup_root: &str, state_dir: &str) -> String {
    template.replace("@CGROUP_ROOT@", cgroup_root).replace("@STATE_DIR@", state_dir)
}

fn parse_parent_max(s: &str) -> Result<ParentMax, String> {
    if s.trim() == "max" {
        return Ok(ParentMax::Unlimited);
    }
    if let Some(pct) = s.trim().strip_suffix('%') {
        let v: f64 = pct.trim().parse().map_err(|_| format!("{s:?} is not a percentage like \"90%\""))?;
        if !(v > 0.0 && v <= 1000.0) {
            return Err(format!("{s:?}: the share must be in (0%, 1000%]"));
        }
        return Ok(ParentMax::ShareOfDemand(v / 100.0));
    }
    parse_size(s).map(ParentMax::Bytes)
}

/// toml's message with "line L, column C" made explicit even for errors it reports by span.
fn located_toml_error(text: &str, e: &toml::de::Error) -> String {
    let msg = e.message().to_string();
    match e.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
            format!("line {line}, column {col}: {msg}")
        }
        None => msg,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_config(_: &Path) -> Result<String, ScenarioError> {
        Ok("cgroup_root = \"/x\"".into())
    }

    fn parse(text: &str) -> Result<Scenario, ScenarioError> {
        Scenario::parse("t", Path::new("t.toml"), text, &no_config)
    }

    const GOOD: &str = r#"
description = "d"
parent_max = "1100M"
speed = 50
baseline_mb = 100
policies = ["none", "static-max", "static-high", "memqos"]
static_high = "400M"
memqos_config = "m.toml"
[[variant]]
name = "v"
high = "a"
low = ["b", "b"]
"#;

    #[test]
    fn parses_the_seed_shape() {
        let s = parse(GOOD).unwrap();
        assert_eq!(s.parent_max, ParentMax::Bytes(1100 << 20));
        assert_eq!(s.policies, Policy::ALL.to_vec());
        assert_eq!(s.static_high, Some(400 << 20));
        assert!(s.solo);
        let tasks = s.variants[0].tasks();
        assert_eq!(tasks.iter().map(|t| t.0.as_str()).collect::<Vec<_>>(), ["high", "low1", "low2"]);
        assert_eq!(tasks[2].1, Tier::Low);
    }

    #[test]
    fn a_declared_peak_needs_the_memqos_arm() {
        let declared = GOOD.replacen("[[variant]]", "memqos_declares_peak = true\n[[variant]]", 1);
        assert!(parse(&declared).unwrap().memqos_declares_peak);
        assert!(!parse(GOOD).unwrap().memqos_declares_peak);
        let e = parse(&declared.replace(", \"memqos\"]", "]").replace("memqos_config = \"m.toml\"\n", "")).unwrap_err();
        assert!(e.message.starts_with("memqos_declares_peak: needs the memqos arm"), "{e}");
    }

    #[test]
    fn a_learned_peak_needs_the_memqos_arm_a_learning_config_and_no_declaration() {
        let learning = |_: &Path| -> Result<String, ScenarioError> {
            Ok(format!(
                "cgroup_root = \"@CGROUP_ROOT@\"\nhistory_file = \"{}\"\n[[tier]]\nname = \"c\"\nmatch = [\"high*\"]\nprotect = \"low\"\nlearn_peak = true\n",
                crate::runner::HISTORY_FILE
            ))
        };
        let parse_with = |text: &str, config: &dyn Fn(&Path) -> Result<String, ScenarioError>| {
            Scenario::parse("t", Path::new("t.toml"), text, config)
        };
        let learns = GOOD.replacen("[[variant]]", "memqos_learns_peak = true\n[[variant]]", 1);
        assert!(parse_with(&learns, &learning).unwrap().memqos_learns_peak);
        assert!(!parse(GOOD).unwrap().memqos_learns_peak);
        let plain = |_: &Path| -> Result<String, ScenarioError> {
            Ok("cgroup_root = \"/x\"\n[[tier]]\nname = \"c\"\nmatch = [\"high*\"]\nprotect = \"low\"\n".into())
        };
        let e = parse_with(&learns, &plain).unwrap_err();
        assert!(e.message.starts_with("memqos_learns_peak: the memqos_config must set learn_peak"), "{e}");
        let e =
            parse_with(&learns.replace(", \"memqos\"]", "]").replace("memqos_config = \"m.toml\"\n", ""), &learning)
                .unwrap_err();
        assert!(e.message.starts_with("memqos_learns_peak: needs the memqos arm"), "{e}");
        let both = learns.replacen("[[variant]]", "memqos_declares_peak = true\n[[variant]]", 1);
        let e = parse_with(&both, &learning).unwrap_err();
        assert!(e.message.starts_with("memqos_learns_peak: not with memqos_declares_peak"), "{e}");
        assert!(
            !crate::runner::HISTORY_FILE.starts_with(&format!("{}/", crate::runner::STATE_DIR)),
            "the history must outlive the daemon's state directory"
        );
    }

    #[test]
    fn share_of_demand() {
        let s = parse(&GOOD.replace("\"1100M\"", "\"90%\"")).unwrap();
        assert_eq!(s.parent_max, ParentMax::ShareOfDemand(0.9));
        assert!(parse(&GOOD.replace("\"1100M\"", "\"x%\"")).unwrap_err().message.contains("percentage"));
    }

    #[test]
    fn errors_name_the_field_and_line() {
        let e = parse(&GOOD.replace("\"memqos\"]", "\"magic\"]")).unwrap_err();
        assert!(e.message.contains("line 6"), "{e}");
        assert!(e.message.contains("magic"), "{e}");
        let e = parse(&GOOD.replace("static_high = \"400M\"\n", "")).unwrap_err();
        assert!(e.message.starts_with("static_high:"), "{e}");
        let e = parse(&GOOD.replace("speed = 50", "speed = 0")).unwrap_err();
        assert!(e.message.starts_with("speed:"), "{e}");
        let e = parse(&GOOD.replace("memqos_config = \"m.toml\"\n", "")).unwrap_err();
        assert!(e.message.starts_with("memqos_config:"), "{e}");
        let e = parse(&GOOD.replace("\"none\", \"static-max\"", "\"none\", \"none\"")).unwrap_err();
        assert!(e.message.contains("twice"), "{e}");
        let e = parse(&format!("{GOOD}bogus = 1\n")).unwrap_err();
        assert!(e.message.contains("bogus"), "{e}");
    }

    #[test]
    fn stress_ng_scenarios_need_their_arguments_and_no_trace_sized_arm() {
        let base = r#"
description = "d"
parent_max = "max"
speed = 1
policies = ["none"]
workload = "stress-ng"
stress_args = ["--vm", "1"]
guest_memory_mb = 1536
swap_mb = 2048
[[variant]]
name = "v"
high = "a"
low = ["b"]
"#;
        let s = parse(base).unwrap();
        assert_eq!((s.workload, s.parent_max, s.swap_mb), (Workload::StressNg, ParentMax::Unlimited, Some(2048)));
        let e = parse(&base.replace("stress_args = [\"--vm\", \"1\"]\n", "")).unwrap_err();
        assert!(e.message.starts_with("stress_args:"), "{e}");
        let e = parse(&base.replace("[\"none\"]", "[\"none\", \"static-max\"]")).unwrap_err();
        assert!(e.message.contains("static-max"), "{e}");
        let e = parse(&base.replace("guest_memory_mb = 1536\n", "")).unwrap_err();
        assert!(e.message.starts_with("guest_memory_mb:"), "{e}");
        let e = parse(&base.replace("swap_mb = 2048", "zswap = true")).unwrap_err();
        assert!(e.message.starts_with("zswap:"), "{e}");
        let e = parse(&base.replace("swap_mb = 2048", "swap_mb = 2048\ncompression_ratio = 2")).unwrap_err();
        assert!(e.message.starts_with("compression_ratio: only with the replay"), "{e}");
        assert_eq!(parse(GOOD).unwrap().compression_ratio, 3.0);
        let r = parse(&GOOD.replace("baseline_mb = 100", "baseline_mb = 100\ncompression_ratio = 2.5")).unwrap();
        assert_eq!(r.compression_ratio, 2.5);
        let e = parse(&GOOD.replace("baseline_mb = 100", "baseline_mb = 100\ncompression_ratio = 0.5")).unwrap_err();
        assert!(e.message.starts_with("compression_ratio: compression ratio 0.5: must be between"), "{e}");
        let e = parse(&GOOD.replace("baseline_mb = 100", "baseline_mb = 100\nstress_args = [\"x\"]")).unwrap_err();
        assert!(e.message.starts_with("stress_args:"), "{e}");
    }

    #[test]
    fn static_arms_need_what_they_copy() {
        let real = |_: &Path| -> Result<String, ScenarioError> {
            Ok(std::fs::read_to_string(
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments/memqos-experiment.toml"),
            )
            .unwrap())
        };
        let with = |policies: &str| GOOD.replace("\"static-high\", \"memqos\"]", policies);
        let s = Scenario::parse(
            "t",
            Path::new("t.toml"),
            &with("\"static-high\", \"memqos\", \"static-adj\", \"static-reserve\"]"),
            &real,
        )
        .unwrap();
        assert!(s.policies.contains(&Policy::StaticAdj) && s.policies.contains(&Policy::StaticReserve));
        // static-adj without memqos's config has no values to copy.
        let text = with("\"static-high\", \"static-adj\"]").replace("memqos_config = \"m.toml\"\n", "");
        let e = Scenario::parse("t", Path::new("t.toml"), &text, &real).unwrap_err();
        assert!(e.message.starts_with("memqos_config:") && e.message.contains("static-adj"), "{e}");
        // static-reserve without a parent limit has nothing to share.
        let text =
            with("\"static-high\", \"static-reserve\"]").replace("parent_max = \"1100M\"", "parent_max = \"max\"");
        let e = Scenario::parse("t", Path::new("t.toml"), &text, &real).unwrap_err();
        assert!(e.message.contains("static-reserve"), "{e}");
        assert_eq!(Policy::StaticAdj.name(), "static-adj");
        assert_eq!(Policy::StaticReserve.name(), "static-reserve");
    }

    #[test]
    fn each_arm_states_its_intervals_from_what_it_is_given() {
        let text = r#"
description = "d"
parent_max = "1100M"
speed = 50
policies = ["none", "memqos", "oomd", "systemd-oomd"]
memqos_config = "m.toml"
oomd_config = "o.json"
oomd_interval_s = 5
[systemd_oomd]
memory_pressure_limit_percent = 60
memory_pressure_duration_s = 20
[[variant]]
name = "v"
high = "a"
"#;
        let read = |p: &Path| -> Result<String, ScenarioError> {
            Ok(match p.to_str().unwrap() {
                "o.json" => r#"{"rulesets": [{"name": "r", "detectors": [["g", {"name": "pressure_above", "args": {"cgroup": "x", "resource": "memory", "threshold": "60", "duration": "30"}}]], "actions": [{"name": "kill_by_memory_size_or_growth", "args": {"cgroup": "x/low*"}}]}]}"#.into(),
                _ => "cgroup_root = \"@CGROUP_ROOT@\"\nstate_dir = \"@STATE_DIR@\"\n[[tier]]\nname = \"c\"\nmatch = [\"high*\"]\nprotect = \"low\"\n".into(),
            })
        };
        let s = Scenario::parse("t", Path::new("t.toml"), text, &read).unwrap_or_else(|e| panic!("{e}"));
        let memqos = s.timing(Policy::Memqos).unwrap();
        assert!(memqos.starts_with("memqos: samples every 500 ms") && memqos.contains("speed 50x"), "{memqos}");
        let oomd = s.timing(Policy::Oomd).unwrap();
        assert!(oomd.contains("--interval 5 s") && oomd.contains("pressure_above 30 s"), "{oomd}");
        let sd = s.timing(Policy::SystemdOomd).unwrap();
        assert!(sd.contains("Limit=60%") && sd.contains("DurationSec=20 s"), "{sd}");
        assert!(s.timing(Policy::None).unwrap().starts_with("none: knobs set before"));
    }

    /// Issue 29.2: the real-time scenarios run at 1x with every arm at its shipped defaults;
    /// compressed ones give each peer the shortest interval it takes.
    #[test]
    fn real_time_scenarios_use_the_defaults_and_compressed_ones_the_shortest_intervals() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments");
        let mut realtime = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            if !name.ends_with(".toml") || name.starts_with("memqos-") {
                continue;
            }
            let s = Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"));
            if s.workload == Workload::StressNg {
                continue;
            }
            let detector_waits = || {
                let v: serde_json::Value = serde_json::from_str(s.oomd_config.as_deref().unwrap()).unwrap();
                let mut waits = Vec::new();
                for r in v["rulesets"].as_array().unwrap() {
                    for g in r["detectors"].as_array().unwrap() {
                        for p in g.as_array().unwrap().iter().skip(1) {
                            waits.extend(p["args"]["duration"].as_str().map(str::to_string));
                        }
                    }
                }
                waits
            };
            if name.ends_with("-realtime.toml") {
                realtime += 1;
                assert_eq!(s.speed, 1.0, "{name}");
                let memqos = s.timing(Policy::Memqos).unwrap();
                assert!(memqos.contains("every 500 ms") && memqos.contains("after 5000 ms"), "{name}: {memqos}");
                if s.policies.contains(&Policy::Oomd) {
                    assert_eq!(s.oomd_interval_s, 1, "{name}: the Debian package's --interval");
                    assert!(detector_waits().contains(&"30".to_string()), "{name}: the shipped 30 s pressure trigger");
                }
                if let Some(st) = s.systemd_oomd {
                    assert_eq!((st.memory_pressure_limit_percent, st.memory_pressure_duration_s), (60.0, 20), "{name}");
                }
            } else if s.speed > 1.0 {
                if s.policies.contains(&Policy::Oomd) {
                    assert_eq!(s.oomd_interval_s, 1, "{name}");
                    assert!(detector_waits().iter().all(|w| w == "1"), "{name}: {:?}", detector_waits());
                }
                if let Some(st) = s.systemd_oomd {
                    assert_eq!(st.memory_pressure_duration_s, 1, "{name}");
                }
            }
        }
        assert!(realtime >= 2, "oom-realtime and sweep-tight-realtime at least, found {realtime}");
    }

    #[test]
    fn the_repository_scenarios_parse() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            if name.ends_with(".toml") && !name.starts_with("memqos-") {
                let s = Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"));
                if let Some(cfg) = &s.memqos_config {
                    let cfg = render_memqos_config(cfg, "/sys/fs/cgroup/x", "/run/x");
                    memqos_policy::Config::from_str(&cfg, "memqos_config")
                        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                }
                n += 1;
            }
        }
        assert!(n >= 5, "expected the seed's three scenarios, overhead and the sweep, found {n}");
    }
}
