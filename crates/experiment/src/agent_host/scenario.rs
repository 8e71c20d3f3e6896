//! The agent-host scenario file (`experiments/agent-host/scenario.toml`): which traces make
//! the sessions, the host's budget, the concurrency levels and the arms.

use memqos_policy::size::ByteSize;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// How a host is set up for one arm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HostPolicy {
    /// Only the host budget (the parent's memory.max).
    None,
    /// Each session's memory.max at its peak plus 10% (the kube arm's request for a
    /// Guaranteed pod): what an operator sizing sandboxes by their peaks deploys. The peak is
    /// the larger of the trace's and the session's alone in the same run (`static_limit`).
    StaticPeak,
    /// The memqos daemon with the documented session config (crates/agent/session.example.toml).
    Memqos,
}

impl HostPolicy {
    pub fn name(self) -> &'static str {
        match self {
            HostPolicy::None => "none",
            HostPolicy::StaticPeak => "static-peak",
            HostPolicy::Memqos => "memqos",
        }
    }
}

impl fmt::Display for HostPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A parsed scenario; serializable so the host hands it to the guest.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HostScenario {
    pub file: PathBuf,
    pub description: String,
    /// The parent's memory.max: the memory every session on the host shares.
    pub host_budget_bytes: u64,
    pub speed: f64,
    pub baseline_mb: u64,
    /// A tool call is replayed in its own cgroup when its memory above the runtime's reaches
    /// this (smaller ones stay with the runtime: see `split`).
    pub min_call_bytes: u64,
    /// Session k of a level starts k * stagger_s seconds after the first (wall time).
    pub stagger_s: f64,
    /// Concurrent sessions per host, ascending.
    pub levels: Vec<usize>,
    /// Levels for one arm instead of `levels` (`--levels ARM=...`, `--refine`): steps of one
    /// session around each arm's own density.
    #[serde(default)]
    pub arm_levels: BTreeMap<HostPolicy, Vec<usize>>,
    pub policies: Vec<HostPolicy>,
    /// Session k of run r replays `traces[(k + r) % len]`.
    pub traces: Vec<String>,
    /// The memqos arm's daemon config text (its cgroup_root and state_dir are set by the
    /// runner) and the values the scenario sets in it (dotted keys).
    pub memqos_config: String,
    pub memqos_config_file: PathBuf,
    pub memqos_set: Vec<(String, toml::Value)>,
    pub guest_memory_mb: u64,
    /// A swap disk of this size in the guest (none by default), zswap in front of it, and
    /// how compressible the replayed pages are (`memqos-lab replay --compression-ratio`,
    /// given only with swap: without it nothing reads the pages back).
    #[serde(default)]
    pub swap_mb: Option<u64>,
    #[serde(default)]
    pub zswap: bool,
    #[serde(default)]
    pub compression_ratio: Option<f64>,
    /// Every arm's tool calls declare their peak (`memqos run --expect`): the call's peak in
    /// the trace plus 10%, what a platform that keeps each tool's past peaks would know. Only
    /// a daemon with `admission` uses it (a call waits for room for it); none cannot.
    #[serde(default)]
    pub declare_calls: bool,
}

#[derive(Debug, thiserror::Error)]
#[error("{file}: {message}")]
pub struct HostScenarioError {
    pub file: String,
    pub message: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    description: String,
    host_budget: ByteSize,
    speed: f64,
    #[serde(default)]
    baseline_mb: u64,
    min_call: ByteSize,
    stagger_s: f64,
    levels: Vec<usize>,
    policies: Vec<HostPolicy>,
    traces: Vec<String>,
    memqos_config: PathBuf,
    #[serde(default)]
    memqos_set: toml::Table,
    guest_memory_mb: Option<u64>,
    swap_mb: Option<u64>,
    #[serde(default)]
    zswap: bool,
    compression_ratio: Option<f64>,
    #[serde(default)]
    declare_calls: bool,
}

impl HostScenario {
    pub fn load(path: &Path) -> Result<HostScenario, HostScenarioError> {
        let err = |message: String| HostScenarioError { file: path.display().to_string(), message };
        let text = std::fs::read_to_string(path).map_err(|e| err(format!("cannot read: {e}")))?;
        let raw: Raw = toml::from_str(&text).map_err(|e| err(e.to_string()))?;
        if !(raw.speed.is_finite() && raw.speed > 0.0) {
            return Err(err(format!("speed must be a number > 0, not {}", raw.speed)));
        }
        if !(raw.stagger_s.is_finite() && raw.stagger_s >= 0.0) {
            return Err(err(format!("stagger_s must be a number ≥ 0, not {}", raw.stagger_s)));
        }
        if raw.levels.is_empty() || raw.levels.contains(&0) || !raw.levels.windows(2).all(|w| w[0] < w[1]) {
            return Err(err(format!("levels must be session counts ≥ 1 in ascending order, not {:?}", raw.levels)));
        }
        if raw.policies.is_empty() {
            return Err(err("policies: at least one of none, static-peak, memqos".into()));
        }
        if raw.traces.is_empty() {
            return Err(err("traces: at least one task folder".into()));
        }
        let budget = raw.host_budget.0;
        if budget < 64 << 20 {
            return Err(err(format!("host_budget {budget} B is below 64 MiB")));
        }
        if raw.swap_mb == Some(0) {
            return Err(err("swap_mb must be ≥ 1 (leave it out for a swapless guest)".into()));
        }
        if raw.zswap && raw.swap_mb.is_none() {
            return Err(err("zswap = true needs swap_mb: zswap is a cache in front of a swap device".into()));
        }
        let compression_ratio = match (raw.swap_mb, raw.compression_ratio) {
            (None, Some(_)) => {
                return Err(err("compression_ratio: only with swap_mb (without swap no page is compressed)".into()))
            }
            (None, None) => None,
            (Some(_), ratio) => {
                let ratio = ratio.unwrap_or_else(crate::scenario::default_compression_ratio);
                memqos_replay::memory::PageFill::new(ratio).map_err(|e| err(format!("compression_ratio: {e}")))?;
                Some(ratio)
            }
        };
        let config_file = path.parent().unwrap_or(Path::new(".")).join(&raw.memqos_config);
        let memqos_config = std::fs::read_to_string(&config_file)
            .map_err(|e| err(format!("memqos_config {}: {e}", config_file.display())))?;
        let mut memqos_set = Vec::new();
        flatten("", &raw.memqos_set, &mut memqos_set);
        let scenario = HostScenario {
            file: path.to_owned(),
            description: raw.description,
            host_budget_bytes: budget,
            speed: raw.speed,
            baseline_mb: raw.baseline_mb,
            min_call_bytes: raw.min_call.0,
            stagger_s: raw.stagger_s,
            levels: raw.levels,
            arm_levels: BTreeMap::new(),
            policies: raw.policies,
            traces: raw.traces,
            memqos_config,
            memqos_config_file: config_file,
            memqos_set,
            guest_memory_mb: raw.guest_memory_mb.unwrap_or((budget >> 20) + 1024),
            swap_mb: raw.swap_mb,
            zswap: raw.zswap,
            compression_ratio,
            declare_calls: raw.declare_calls,
        };
        // The daemon must accept what the memqos arm will give it: fail here, not in a guest.
        let text = scenario.daemon_config("/sys/fs/cgroup/check", "/run/check").map_err(err)?;
        let cfg = memqos_policy::Config::from_str(&text, &scenario.memqos_config_file.display().to_string())
            .map_err(|e| err(format!("memqos_config with memqos_set: {e}")))?;
        if scenario.declare_calls && !cfg.policy.admission {
            return Err(err("declare_calls: only a daemon with policy.admission waits for room for a declared peak: set policy = { admission = true } in memqos_set".into()));
        }
        Ok(scenario)
    }

    /// The memqos arm's daemon config for a host at `root` with state in `state_dir`.
    pub fn daemon_config(&self, root: &str, state_dir: &str) -> Result<String, String> {
        let mut table: toml::Table = self
            .memqos_config
            .parse()
            .map_err(|e| format!("memqos_config {}: {e}", self.memqos_config_file.display()))?;
        table.insert("cgroup_root".into(), root.into());
        table.insert("state_dir".into(), state_dir.into());
        for (key, value) in &self.memqos_set {
            let parts: Vec<&str> = key.split('.').collect();
            let (last, path) = parts.split_last().expect("flatten gives non-empty keys");
            let mut at = &mut table;
            let mut i = 0;
            while i < path.len() {
                let p = path[i];
                at = match at.entry(p.to_string()).or_insert_with(|| toml::Value::Table(Default::default())) {
                    toml::Value::Table(t) => t,
                    // `tier.NAME.KEY`: the `[[tier]]` named NAME.
                    toml::Value::Array(items) => {
                        i += 1;
                        let name = path.get(i).ok_or_else(|| {
                            format!("memqos_set {key}: {p} is a list; name one of its entries ({p}.NAME.KEY)")
                        })?;
                        items
                            .iter_mut()
                            .filter_map(|v| v.as_table_mut())
                            .find(|t| t.get("name").and_then(|n| n.as_str()) == Some(*name))
                            .ok_or_else(|| format!("memqos_set {key}: no {p} named {name:?} in memqos_config"))?
                    }
                    other => return Err(format!("memqos_set {key}: {p} is {other}, not a table")),
                };
                i += 1;
            }
            at.insert(last.to_string(), value.clone());
        }
        Ok(toml::to_string(&table).expect("a TOML table serializes"))
    }

    /// The levels `policy` runs at.
    pub fn levels_of(&self, policy: HostPolicy) -> &[usize] {
        self.arm_levels.get(&policy).unwrap_or(&self.levels)
    }

    /// Applies `--levels` specs: `3,6,9` for every arm, `none=9,10,11` for one arm (a later
    /// spec for the same arm wins).
    pub fn set_levels(&mut self, specs: &[String]) -> Result<(), String> {
        for spec in specs {
            let (arm, list) = match spec.split_once('=') {
                Some((a, l)) => {
                    let p = self
                        .policies
                        .iter()
                        .copied()
                        .find(|p| p.name() == a.trim())
                        .ok_or_else(|| format!("--levels {spec}: {a} is not an arm of this scenario"))?;
                    (Some(p), l)
                }
                None => (None, spec.as_str()),
            };
            let mut levels = list
                .split(',')
                .map(|n| n.trim().parse::<usize>().ok().filter(|&n| n >= 1))
                .collect::<Option<Vec<usize>>>()
                .ok_or_else(|| format!("--levels {spec}: session counts ≥ 1, separated by commas"))?;
            levels.sort_unstable();
            levels.dedup();
            match arm {
                Some(p) => {
                    self.arm_levels.insert(p, levels);
                }
                None => {
                    self.levels = levels;
                    self.arm_levels.clear();
                }
            }
        }
        Ok(())
    }

    /// The cpu.weight the memqos arm's daemon config gives each cgroup of a session (the
    /// runner writes the same in the other arms).
    pub fn cpu_weights(&self) -> Result<CpuWeights, String> {
        let text = self.daemon_config("/sys/fs/cgroup/check", "/run/check")?;
        let config = memqos_policy::Config::from_str(&text, &self.memqos_config_file.display().to_string())
            .map_err(|e| e.to_string())?;
        Ok(CpuWeights { config })
    }

    /// The trace session `k` replays in run `run` (1-based).
    pub fn trace_of(&self, run: usize, k: usize) -> &str {
        &self.traces[(k + run - 1) % self.traces.len()]
    }
}

/// The tiers' `cpu_weight` of the memqos arm's config.
pub struct CpuWeights {
    config: memqos_policy::Config,
}

impl CpuWeights {
    /// The weight of the cgroup at `rel` below the host (`s0/runtime`, `s0/tool.42`), `None`
    /// where its tier sets none.
    pub fn of(&self, rel: &str) -> Option<u32> {
        let tiers = &self.config.tiers;
        tiers.classify(rel).and_then(|i| tiers.get(i)).and_then(|t| t.cpu_weight)
    }
}

/// `{signals = {sampling_interval_ms = 100}}` as `[("signals.sampling_interval_ms", 100)]`.
fn flatten(prefix: &str, table: &toml::Table, out: &mut Vec<(String, toml::Value)>) {
    for (k, v) in table {
        let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
        match v {
            toml::Value::Table(t) => flatten(&key, t, out),
            other => out.push((key, other.clone())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, text: &str) -> PathBuf {
        std::fs::write(dir.join("daemon.toml"), "cgroup_root = \"/x\"\n[[tier]]\nname = \"runtime\"\nmatch = [\"*/runtime\"]\nprotect = \"low\"\n[[tier]]\nname = \"tool\"\nmatch = [\"**\"]\nthrottle = true\n").unwrap();
        let p = dir.join("scenario.toml");
        std::fs::write(&p, text).unwrap();
        p
    }

    const GOOD: &str = r#"
description = "d"
host_budget = "3G"
speed = 25
min_call = "16M"
stagger_s = 0.5
levels = [4, 8]
policies = ["none", "static-peak", "memqos"]
traces = ["a", "b", "c"]
memqos_config = "daemon.toml"
memqos_set = { signals = { sampling_interval_ms = 100 } }
"#;

    #[test]
    fn a_scenario_loads_and_its_daemon_config_has_the_runners_root_and_the_scenarios_values() {
        let dir = tempfile::tempdir().unwrap();
        let s = HostScenario::load(&write(dir.path(), GOOD)).unwrap();
        assert_eq!(s.host_budget_bytes, 3 << 30);
        assert_eq!(s.guest_memory_mb, 3 * 1024 + 1024);
        let text = s.daemon_config("/sys/fs/cgroup/h", "/run/s").unwrap();
        let cfg = memqos_policy::Config::from_str(&text, "t").unwrap();
        assert_eq!(cfg.cgroup_root, PathBuf::from("/sys/fs/cgroup/h"));
        assert_eq!(cfg.signals.sampling_interval_ms, 100);
        assert_eq!((s.swap_mb, s.zswap, s.compression_ratio), (None, false, None), "swapless unless asked");
        let z = HostScenario::load(&write(
            dir.path(),
            &GOOD.replace("stagger_s = 0.5", "stagger_s = 0.5\nswap_mb = 1024\nzswap = true"),
        ))
        .unwrap();
        assert_eq!(
            (z.swap_mb, z.zswap, z.compression_ratio),
            (Some(1024), true, Some(3.0)),
            "pages compress 3:1 by default"
        );
        // Sessions rotate through the traces from run to run.
        assert_eq!([s.trace_of(1, 0), s.trace_of(1, 4), s.trace_of(2, 0)], ["a", "b", "b"]);
    }

    #[test]
    fn bad_scenarios_are_named_with_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        for (from, to, says) in [
            ("levels = [4, 8]", "levels = [8, 4]", "ascending"),
            ("speed = 25", "speed = 0", "speed"),
            ("policies = [\"none\", \"static-peak\", \"memqos\"]", "policies = [\"oomd\"]", "unknown variant"),
            ("\"daemon.toml\"", "\"missing.toml\"", "missing.toml"),
            ("sampling_interval_ms = 100", "sampling_interval_ms = \"fast\"", "memqos_set"),
            ("= 100 } }", "= 100 }, tier = { nosuch = { queue_held = true } } }", "no tier named \"nosuch\""),
            ("= 100 } }", "= 100 }, tier = { tool = { queue_held = 3 } } }", "queue_held"),
            ("stagger_s = 0.5", "stagger_s = 0.5\nzswap = true", "needs swap_mb"),
            ("stagger_s = 0.5", "stagger_s = 0.5\ncompression_ratio = 3", "only with swap_mb"),
            ("stagger_s = 0.5", "stagger_s = 0.5\nswap_mb = 1024\ncompression_ratio = 0.5", "compression_ratio"),
            ("stagger_s = 0.5", "stagger_s = 0.5\nswap_mb = 0", "swap_mb must be"),
            ("stagger_s = 0.5", "stagger_s = 0.5\ndeclare_calls = true", "declare_calls"),
        ] {
            let e = HostScenario::load(&write(dir.path(), &GOOD.replace(from, to))).unwrap_err().to_string();
            assert!(e.contains("scenario.toml") && e.contains(says), "{to}: {e}");
        }
    }

    #[test]
    fn memqos_set_reaches_a_tier_by_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let text = GOOD.replace("= 100 } }", "= 100 }, tier = { tool = { queue_held = true } } }");
        let s = HostScenario::load(&write(dir.path(), &text)).unwrap();
        let cfg =
            memqos_policy::Config::from_str(&s.daemon_config("/sys/fs/cgroup/h", "/run/s").unwrap(), "t").unwrap();
        let queued: Vec<(&str, bool)> = cfg.tiers.iter().map(|(_, t)| (t.name.as_str(), t.queue_held)).collect();
        assert_eq!(queued, [("runtime", false), ("tool", true)]);
    }

    #[test]
    fn levels_are_set_for_every_arm_or_for_one() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = HostScenario::load(&write(dir.path(), GOOD)).unwrap();
        s.set_levels(&["10,9,11".into(), "memqos=12,13".into()]).unwrap();
        assert_eq!(s.levels_of(HostPolicy::None), [9, 10, 11]);
        assert_eq!(s.levels_of(HostPolicy::Memqos), [12, 13]);
        // The host hands the scenario to the guest as JSON: the per-arm levels go with it.
        let back: HostScenario = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(back.levels_of(HostPolicy::Memqos), [12, 13]);
        assert_eq!(back.levels_of(HostPolicy::StaticPeak), [9, 10, 11]);
        for bad in ["oomd=3", "3,x", "0"] {
            let e = s.set_levels(&[bad.into()]).unwrap_err();
            assert!(e.contains(bad), "{bad}: {e}");
        }
    }

    #[test]
    fn the_shipped_session_config_sets_no_cpu_weight_and_a_tier_weight_reaches_its_cgroups() {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let s = HostScenario::load(&repo.join("experiments/agent-host/scenario.toml")).unwrap();
        let w = s.cpu_weights().unwrap();
        assert_eq!([w.of("s0/runtime"), w.of("s3/tool.42")], [None, None]);
        let dir = tempfile::tempdir().unwrap();
        let mut s = HostScenario::load(&write(dir.path(), GOOD)).unwrap();
        s.memqos_config = s.memqos_config.replace("throttle = true", "throttle = true\ncpu_weight = 50");
        let w = s.cpu_weights().unwrap();
        assert_eq!([w.of("s0/runtime"), w.of("s0/tool.42")], [None, Some(50)]);
    }

    #[test]
    fn the_committed_scenarios_load_and_every_session_has_tool_calls_to_replay() {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let traces = repo.join("traces/agent-haiku");
        for name in [
            "scenario.toml",
            "smoke.toml",
            "admission.toml",
            "admission-declared.toml",
            "admission-declared-long-wait.toml",
            "admission-declared-largest.toml",
        ] {
            let s = HostScenario::load(&repo.join("experiments/agent-host").join(name)).unwrap();
            let daemon = s.daemon_config("/sys/fs/cgroup/agents", "/var/lib/memqos").unwrap();
            let cfg = memqos_policy::Config::from_str(&daemon, name).unwrap();
            assert_eq!(cfg.policy.admission, name.starts_with("admission"), "{name}: armed ceilings only where asked");
            assert_eq!(
                s.declare_calls,
                name.starts_with("admission-declared"),
                "{name}: declared peaks only where asked"
            );
            let largest = cfg.policy.admission_regrowth == memqos_policy::AdmissionRegrowth::Largest;
            assert_eq!(largest, name == "admission-declared-largest.toml", "{name}: admission_regrowth");
            let plans = crate::agent_host::runner::plans(&s, &traces).unwrap();
            for p in &plans {
                assert!(!p.calls.is_empty(), "{name}: {} has no call of {} B or more", p.trace, s.min_call_bytes);
                assert!(p.runtime_peak_bytes() < p.peak_bytes, "{name}: {}", p.trace);
            }
        }
    }
}
