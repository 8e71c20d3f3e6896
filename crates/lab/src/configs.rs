//! The daemon configs the lab runs with, as files (`crates/lab/configs/*.toml`, parsed by
//! `crates/policy/tests/config.rs` with the example config). A run that needs a variation
//! changes the parsed TOML as data ([`DaemonConfig::set`]), never the text.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// Every lab config: file name and contents (embedded, so a guest needs no checkout).
pub const FILES: &[(&str, &str)] = &[
    ("controller.toml", include_str!("../configs/controller.toml")),
    ("dirty.toml", include_str!("../configs/dirty.toml")),
    ("reaction.toml", include_str!("../configs/reaction.toml")),
    ("cpu-cost.toml", include_str!("../configs/cpu-cost.toml")),
    ("bpf-source.toml", include_str!("../configs/bpf-source.toml")),
    ("churn.toml", include_str!("../configs/churn.toml")),
    ("stall.toml", include_str!("../configs/stall.toml")),
    ("oom-report.toml", include_str!("../configs/oom-report.toml")),
    ("faults.toml", include_str!("../configs/faults.toml")),
];

/// A daemon config as TOML data.
#[derive(Clone, Debug)]
pub struct DaemonConfig {
    name: String,
    table: toml::Table,
}

impl DaemonConfig {
    /// One of [`FILES`] by name, e.g. `"controller.toml"`.
    pub fn named(name: &str) -> DaemonConfig {
        let (_, text) = FILES.iter().find(|(n, _)| *n == name).unwrap_or_else(|| panic!("no lab config {name}"));
        let table = text.parse().unwrap_or_else(|e| panic!("crates/lab/configs/{name}: {e}"));
        DaemonConfig { name: name.to_owned(), table }
    }

    /// Sets `key`, a dotted path through tables: `"signals.bpf"`, `"policy.hold_ms"`. Missing
    /// tables on the way are created. Tiers: [`DaemonConfig::set_tier`].
    pub fn set(mut self, key: &str, value: impl Into<toml::Value>) -> DaemonConfig {
        let parts: Vec<&str> = key.split('.').collect();
        let (last, path) = parts.split_last().expect("non-empty key");
        let mut at = &mut self.table;
        for p in path {
            at = match at.entry(p.to_string()).or_insert_with(|| toml::Value::Table(Default::default())) {
                toml::Value::Table(t) => t,
                other => panic!("{key}: {p} is {other}, not a table"),
            };
        }
        at.insert(last.to_string(), value.into());
        self
    }

    /// Sets `key` in the tier at `index` (`[[tier]]` order).
    pub fn set_tier(mut self, index: usize, key: &str, value: impl Into<toml::Value>) -> DaemonConfig {
        let tiers = self.table.get_mut("tier").and_then(|t| t.as_array_mut()).expect("a config with [[tier]]");
        let tier = tiers.get_mut(index).and_then(|t| t.as_table_mut()).unwrap_or_else(|| panic!("no tier {index}"));
        tier.insert(key.to_owned(), value.into());
        self
    }

    pub fn text(&self) -> String {
        toml::to_string(&self.table).expect("a TOML table serializes")
    }

    pub fn state_dir(&self) -> PathBuf {
        PathBuf::from(
            self.table.get("state_dir").and_then(|v| v.as_str()).unwrap_or(memqos_schema::state::DEFAULT_STATE_DIR),
        )
    }

    /// Checks the config the way the daemon will, then writes it to `path`.
    pub fn write(&self, path: &Path) -> Result<()> {
        let text = self.text();
        if let Err(e) = memqos_policy::Config::from_str(&text, &self.name) {
            bail!("lab config {} with its variations is invalid: {e}", self.name);
        }
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variations_are_data_and_stay_valid() {
        let c = DaemonConfig::named("controller.toml").set_tier(0, "oom_score_adj", -900).set("signals.bpf", true);
        let cfg = memqos_policy::Config::from_str(&c.text(), "controller.toml").unwrap();
        assert!(cfg.signals.bpf);
        let (_, critical) = cfg.tiers.iter().next().unwrap();
        assert_eq!(critical.oom_score_adj, Some(-900));
        assert_eq!(c.state_dir(), PathBuf::from("/run/memqos-controller"));
    }
}
