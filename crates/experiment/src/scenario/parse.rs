//! A scenario file parsed and validated: the raw TOML shape, then every rule a runnable
//! scenario keeps (which arms need which settings), with errors that name the field and line.

use super::{
    default_compression_ratio, render_memqos_config, ParentMax, Policy, Scenario, ScenarioError, Variant, Workload,
};
use memqos_policy::size::{parse_size, ByteSize};
use serde::Deserialize;
use std::path::{Path, PathBuf};

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
    #[serde(default)]
    stress_args_low: Vec<String>,
    swap_mb: Option<u64>,
    #[serde(default)]
    zswap: bool,
    compression_ratio: Option<f64>,
    #[serde(default)]
    memqos_declares_peak: bool,
    #[serde(default)]
    memqos_learns_peak: bool,
    #[serde(default)]
    memqos_learns_tier_peak: bool,
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
        if !raw.stress_args_low.is_empty() && raw.workload != Workload::StressNg {
            return Err(err("stress_args_low: only with workload = \"stress-ng\"".into()));
        }
        if raw.compression_ratio.is_some() && raw.workload == Workload::StressNg {
            return Err(err("compression_ratio: only with the replay workload (stress-ng fills its own pages)".into()));
        }
        let compression_ratio = raw.compression_ratio.unwrap_or_else(default_compression_ratio);
        memqos_replay::memory::PageFill::new(compression_ratio).map_err(|e| err(format!("compression_ratio: {e}")))?;
        if raw.zswap && raw.swap_mb.is_none() {
            return Err(err("zswap: needs swap_mb (zswap compresses pages on their way to a swap device)".into()));
        }
        // What a declared or learned peak needs: a memqos arm, and traces (they give the peak and
        // name the workload).
        let memqos_on_traces = raw.policies.contains(&Policy::Memqos) && raw.workload != Workload::StressNg;
        // The memqos config as the daemon will read it (placeholders filled with stand-ins), for
        // the checks of the options that need it to learn; parse errors named after `option`.
        let learning_config = |option: &str| {
            let rendered = render_memqos_config(memqos_config.as_deref().unwrap_or(""), "/sys/fs/cgroup/x", "/run/x");
            memqos_policy::Config::from_str(&rendered, "memqos_config").map_err(|e| err(format!("{option}: {e}")))
        };
        if raw.memqos_declares_peak && !memqos_on_traces {
            return Err(err(
                "memqos_declares_peak: needs the memqos arm and a trace workload (the peak comes from the trace)"
                    .into(),
            ));
        }
        if raw.memqos_learns_tier_peak {
            if !memqos_on_traces {
                return Err(err("memqos_learns_tier_peak: needs the memqos arm and a trace workload".into()));
            }
            if raw.memqos_declares_peak || raw.memqos_learns_peak {
                return Err(err(
                    "memqos_learns_tier_peak: not with memqos_declares_peak or memqos_learns_peak (a declaration or a workload key wins over the tier's peaks, so they would be what is measured)"
                        .into(),
                ));
            }
            if !learning_config("memqos_learns_tier_peak")?.learns_peaks() {
                return Err(err(
                    "memqos_learns_tier_peak: the memqos_config must set learn_peak = true on a tier (only such a tier records its peaks)"
                        .into(),
                ));
            }
        }
        if raw.memqos_learns_peak {
            if !memqos_on_traces {
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
            let cfg = learning_config("memqos_learns_peak")?;
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
            stress_args_low: raw.stress_args_low,
            swap_mb: raw.swap_mb,
            zswap: raw.zswap,
            compression_ratio,
            memqos_declares_peak: raw.memqos_declares_peak,
            memqos_learns_peak: raw.memqos_learns_peak,
            memqos_learns_tier_peak: raw.memqos_learns_tier_peak,
            variants,
        })
    }
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
    use crate::scenario::Tier;

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
    fn tier_peaks_need_the_memqos_arm_a_learning_tier_and_nothing_stronger() {
        let learning = |_: &Path| -> Result<String, ScenarioError> {
            Ok("cgroup_root = \"@CGROUP_ROOT@\"\n[[tier]]\nname = \"c\"\nmatch = [\"high*\"]\nprotect = \"low\"\nlearn_peak = true\n".into())
        };
        let plain = |_: &Path| -> Result<String, ScenarioError> {
            Ok("cgroup_root = \"/x\"\n[[tier]]\nname = \"c\"\nmatch = [\"high*\"]\nprotect = \"low\"\n".into())
        };
        let parse_with = |text: &str, config: &dyn Fn(&Path) -> Result<String, ScenarioError>| {
            Scenario::parse("t", Path::new("t.toml"), text, config)
        };
        let tier = GOOD.replacen("[[variant]]", "memqos_learns_tier_peak = true\n[[variant]]", 1);
        let s = parse_with(&tier, &learning).unwrap();
        assert!(s.memqos_learns_tier_peak && !s.memqos_learns_peak);
        assert!(!parse(GOOD).unwrap().memqos_learns_tier_peak);
        let e = parse_with(&tier, &plain).unwrap_err();
        assert!(e.message.starts_with("memqos_learns_tier_peak: the memqos_config must set learn_peak"), "{e}");
        let e = parse_with(&tier.replace(", \"memqos\"]", "]").replace("memqos_config = \"m.toml\"\n", ""), &learning)
            .unwrap_err();
        assert!(e.message.starts_with("memqos_learns_tier_peak: needs the memqos arm"), "{e}");
        for stronger in ["memqos_declares_peak", "memqos_learns_peak"] {
            let both = tier.replacen("[[variant]]", &format!("{stronger} = true\n[[variant]]"), 1);
            let e = parse_with(&both, &learning).unwrap_err();
            assert!(e.message.contains("memqos_learns_tier_peak: not with"), "{stronger}: {e}");
        }
        assert!(
            !crate::runner::TIER_PEAKS_KEPT.starts_with(&format!("{}/", crate::runner::STATE_DIR)),
            "the kept tier peaks must outlive the daemon's state directory"
        );
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

    /// A runnable stress-ng scenario, for the tests of its own fields.
    const STRESS_NG: &str = r#"
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

    #[test]
    fn stress_ng_scenarios_need_their_arguments_and_no_trace_sized_arm() {
        let base = STRESS_NG;
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
        let e = parse(&GOOD.replace("baseline_mb = 100", "baseline_mb = 100\nstress_args_low = [\"x\"]")).unwrap_err();
        assert!(e.message.starts_with("stress_args_low: only with"), "{e}");
    }

    #[test]
    fn the_low_tier_may_run_its_own_stressor() {
        let s = parse(STRESS_NG).unwrap();
        assert_eq!(s.stress_args_for(Tier::Low), s.stress_args.as_slice());
        let s = parse(
            &STRESS_NG
                .replace("guest_memory_mb", "stress_args_low = [\"--cpu\", \"1\", \"-t\", \"60\"]\nguest_memory_mb"),
        )
        .unwrap();
        assert_eq!(s.stress_args_for(Tier::High), ["--vm", "1"]);
        assert_eq!(s.stress_args_for(Tier::Low), ["--cpu", "1", "-t", "60"]);
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
