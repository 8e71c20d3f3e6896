//! How often each arm looks and how long it waits before it acts, as a scenario runs it.

use super::{render_memqos_config, Policy, Scenario};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{ScenarioError, Workload};
    use std::path::Path;

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
}
