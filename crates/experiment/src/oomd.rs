//! The `oomd` arm: Meta's userspace OOM killer (Debian package `oomd`, 0.5) runs beside the
//! tasks with the scenario's ruleset (`experiments/oomd-experiment.json`), as an operator of
//! this layout would run it: kill from the low tier, by size or growth, when the protected
//! tier stalls on memory or the tenants' parent is nearly full.
//!
//! oomd is a plain process here (no systemd in the experiment guests): it needs only cgroup2
//! at /sys/fs/cgroup and PSI, both present in the guests. Its kills go to a file
//! (`--kmsg-override`) that the runner polls with its 50 ms samples, so each kill gets a time.

use crate::runner::DecisionMark;
use anyhow::{bail, Context, Result};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The plugins oomd 0.5 is built with (`oomd --list-plugins` of the Debian package): a
/// ruleset naming another is rejected before a guest boots.
pub const PLUGINS: [&str; 17] = [
    "systemd_restart",
    "kill_by_pressure",
    "kill_by_swap_usage",
    "continue",
    "exists",
    "stop",
    "kill_by_pg_scan",
    "dump_cgroup_overview",
    "nr_dying_descendants",
    "memory_above",
    "pressure_rising_beyond",
    "pressure_above",
    "memory_reclaim",
    "senpai",
    "kill_by_memory_size_or_growth",
    "swap_free",
    "kill_by_io_cost",
];

/// Share of the parent's memory.max at which the ruleset's "nearly full" detector fires.
pub const NEAR_FULL_SHARE: f64 = 0.95;

/// The ruleset with its placeholders filled: `@PARENT@` (the tenants' parent, relative to the
/// cgroup2 mount, as oomd wants it) and `@NEAR_FULL@` (95% of the parent's memory.max, in
/// MiB with oomd's `M` suffix: a bare number would also mean MiB to oomd, but says less).
/// A parent without a limit (`u64::MAX`) gets "100%" of the machine's memory, which a cgroup
/// cannot exceed: the detector stays silent, as it would for an operator with no limit.
pub fn render(template: &str, parent_rel: &str, parent_max: u64) -> String {
    let near_full = if parent_max == u64::MAX {
        "100%".to_string()
    } else {
        format!("{}M", (parent_max as f64 * NEAR_FULL_SHARE / (1 << 20) as f64).floor() as u64)
    };
    template.replace("@PARENT@", parent_rel).replace("@NEAR_FULL@", &near_full)
}

/// The ruleset's waits, for the report: every plugin's `duration` and every action's
/// `post_action_delay` (oomd's own default where an action leaves it out), e.g.
/// "pressure_above 1 s, memory_above 1 s, kill_by_memory_size_or_growth post_action_delay 5 s".
pub fn durations(text: &str) -> Result<String, String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let mut out = Vec::new();
    for r in v["rulesets"].as_array().ok_or("no \"rulesets\" array")? {
        for g in r["detectors"].as_array().into_iter().flatten() {
            for p in g.as_array().into_iter().flatten().skip(1) {
                if let (Some(name), Some(d)) = (p["name"].as_str(), p["args"]["duration"].as_str()) {
                    out.push(format!("{name} {d} s"));
                }
            }
        }
        for a in r["actions"].as_array().into_iter().flatten() {
            let name = a["name"].as_str().unwrap_or("?");
            if name.starts_with("kill") {
                match a["args"]["post_action_delay"].as_str() {
                    Some(d) => out.push(format!("{name} post_action_delay {d} s")),
                    None => out.push(format!("{name} post_action_delay oomd's default")),
                }
            }
        }
    }
    Ok(out.join(", "))
}

/// Checks a ruleset's shape (oomd 0.5's JSON front end): `rulesets`, each with a name,
/// detector groups `[name, plugin...]` and actions, every plugin a known one with string
/// arguments. The error names the ruleset and plugin.
pub fn validate(text: &str) -> Result<(), String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let rulesets = v["rulesets"].as_array().ok_or("no \"rulesets\" array")?;
    if rulesets.is_empty() {
        return Err("\"rulesets\" is empty".into());
    }
    let plugin = |p: &serde_json::Value, at: &str| -> Result<(), String> {
        let name = p["name"].as_str().ok_or_else(|| format!("{at}: a plugin without a \"name\""))?;
        if !PLUGINS.contains(&name) {
            return Err(format!("{at}: unknown plugin {name:?} (oomd 0.5 has: {})", PLUGINS.join(", ")));
        }
        if let Some(args) = p.get("args") {
            let args = args.as_object().ok_or_else(|| format!("{at}: {name}: \"args\" must be an object"))?;
            if let Some((k, _)) = args.iter().find(|(_, v)| !v.is_string()) {
                return Err(format!(
                    "{at}: {name}: argument {k:?} must be a string (oomd reads every argument as one)"
                ));
            }
        }
        Ok(())
    };
    for (i, r) in rulesets.iter().enumerate() {
        let name = r["name"].as_str().ok_or_else(|| format!("ruleset {}: no \"name\"", i + 1))?;
        let groups = r["detectors"].as_array().ok_or_else(|| format!("ruleset {name:?}: no \"detectors\""))?;
        for g in groups {
            let g = g.as_array().ok_or_else(|| format!("ruleset {name:?}: a detector group must be an array"))?;
            let gname = g.first().and_then(|n| n.as_str()).ok_or_else(|| {
                format!("ruleset {name:?}: a detector group must start with its name: [\"name\", {{plugin}}, ...]")
            })?;
            for p in &g[1..] {
                plugin(p, &format!("ruleset {name:?}, detector group {gname:?}"))?;
            }
        }
        let actions = r["actions"].as_array().ok_or_else(|| format!("ruleset {name:?}: no \"actions\""))?;
        for a in actions {
            plugin(a, &format!("ruleset {name:?}, actions"))?;
        }
    }
    Ok(())
}

/// oomd's binary: `$MEMQOS_OOMD`, else `oomd` on PATH.
pub fn binary() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("MEMQOS_OOMD") {
        return Ok(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/sbin:/usr/bin:/sbin:/bin".into());
    std::env::split_paths(&path).map(|d| d.join("oomd")).find(|p| p.is_file()).context(
        "the oomd arm needs Meta's oomd, which is not on PATH: apt-get install oomd (scripts/install-deps.sh does)",
    )
}

/// A running oomd and the kills it has logged so far.
pub struct OomdProcess {
    child: Child,
    log: PathBuf,
    kills: PathBuf,
    read_upto: u64,
    parent_rel: String,
}

impl OomdProcess {
    /// Writes the ruleset to `dir`, starts oomd on it (`interval_s` ticks: the scenario's
    /// `oomd_interval_s`), and waits until it says its engine runs, so the tasks do not start
    /// before it watches.
    pub fn start(ruleset: &str, dir: &Path, parent_rel: &str, interval_s: u64) -> Result<OomdProcess> {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let config = dir.join("oomd.json");
        std::fs::write(&config, ruleset)?;
        let log = dir.join("oomd.log");
        let kills = dir.join("kills");
        std::fs::write(&kills, "")?;
        let bin = binary()?;
        let child = Command::new(&bin)
            .arg("--config")
            .arg(&config)
            .arg("--interval")
            .arg(interval_s.to_string())
            .args(["--cgroup-fs", "/sys/fs/cgroup", "--runtime-dir"])
            .arg(dir.join("run"))
            .arg("--kmsg-override")
            .arg(&kills)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(dir.join("oomd.stdout"))?)
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let mut p = OomdProcess { child, log, kills, read_upto: 0, parent_rel: parent_rel.to_string() };
        let t0 = Instant::now();
        loop {
            if std::fs::read_to_string(&p.log).unwrap_or_default().contains("Running oomd") {
                return Ok(p);
            }
            if let Some(status) = p.child.try_wait()? {
                bail!(
                    "oomd exited at start ({status}): {}",
                    tail(&std::fs::read_to_string(&p.log).unwrap_or_default())
                );
            }
            if t0.elapsed() > Duration::from_secs(15) {
                let _ = p.child.kill();
                let _ = p.child.wait();
                bail!("oomd did not start its engine within 15 s: {}", tail(&std::fs::read_to_string(&p.log)?));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kills oomd logged since the last call, stamped `t_s` (seconds since the tasks started).
    pub fn poll(&mut self, t_s: f64) -> Vec<DecisionMark> {
        let mut text = String::new();
        if let Ok(mut f) = std::fs::File::open(&self.kills) {
            if f.seek(SeekFrom::Start(self.read_upto)).is_ok() && f.read_to_string(&mut text).is_ok() {
                // Only whole lines: a line being written is read on the next poll.
                let whole = text.rfind('\n').map_or(0, |i| i + 1);
                text.truncate(whole);
                self.read_upto += whole as u64;
            }
        }
        text.lines().filter_map(|l| kill_mark(l, t_s, &self.parent_rel)).collect()
    }

    /// SIGTERM, wait (SIGKILL after 5 s), and the kills logged since the last poll. oomd
    /// writes no knob, so there is nothing to restore; the returned flag says it was running
    /// until stopped (an oomd that died mid-run did not take part in the arm).
    pub fn stop(mut self, t_s: f64) -> Result<(Vec<DecisionMark>, bool)> {
        let alive = self.child.try_wait()?.is_none();
        // SAFETY: kill(2) on our own child's pid, which has not been reaped (try_wait above).
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let t0 = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait()? {
                break s;
            }
            if t0.elapsed() > Duration::from_secs(5) {
                let _ = self.child.kill();
                break self.child.wait()?;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let ended_by_us = alive && (status.success() || status.signal() == Some(libc::SIGTERM));
        Ok((self.poll(t_s), ended_by_us))
    }
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(5)..].join(" | ")
}

/// A kill line of oomd's kill log as a decision mark: the task cgroup is the path component
/// after the parent (`.../memqos-exp/low1` -> `low1`); the line itself is the reason.
fn kill_mark(line: &str, t_s: f64, parent_rel: &str) -> Option<DecisionMark> {
    let line = line.trim();
    if line.is_empty() {
        return None;
    }
    let key = format!("{parent_rel}/");
    let cgroup = line
        .find(&key)
        .map(|i| line[i + key.len()..].split(['/', ' ', ',', '"', '\'']).next().unwrap_or("").to_string())
        .unwrap_or_default();
    Some(DecisionMark { t_s, cgroup, file: "kill".into(), value: "SIGKILL".into(), reason: format!("oomd: {line}") })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The compressed scenarios' ruleset and the real-time scenarios' one.
    const RULESETS: [&str; 2] = ["oomd-experiment.json", "oomd-experiment-realtime.json"];

    fn repo_ruleset(name: &str) -> String {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments").join(name);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    #[test]
    fn the_repository_rulesets_are_valid_and_fully_rendered() {
        for name in RULESETS {
            let r = render(&repo_ruleset(name), "memqos-exp", 1100 << 20);
            validate(&r).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(!r.contains('@'), "{name}: a placeholder was left: {r}");
            // 95% of 1100 MiB
            assert!(r.contains("\"1045M\""), "{name}: {r}");
            assert!(r.contains("memqos-exp/high") && r.contains("memqos-exp/low*"), "{name}: {r}");
        }
    }

    #[test]
    fn the_rulesets_waits_are_named_for_the_report() {
        assert_eq!(
            durations(&repo_ruleset(RULESETS[0])).unwrap(),
            "pressure_above 1 s, memory_above 1 s, kill_by_memory_size_or_growth post_action_delay 5 s"
        );
        // The real-time ruleset: the Debian package's shipped pressure trigger (60 for 30 s
        // while reclaiming for 10 s) and oomd's own post_action_delay.
        assert_eq!(
            durations(&repo_ruleset(RULESETS[1])).unwrap(),
            "pressure_above 30 s, memory_reclaim 10 s, memory_above 1 s, kill_by_memory_size_or_growth post_action_delay oomd's default"
        );
    }

    #[test]
    fn the_installed_oomd_accepts_the_repository_rulesets() {
        // oomd's own parser is the authority; this machine's scripts/install-deps.sh installs it.
        let bin = binary().expect("oomd is installed by scripts/install-deps.sh");
        for name in RULESETS {
            let dir = std::env::temp_dir().join(format!("memqos-oomd-check-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let file = dir.join("oomd.json");
            std::fs::write(&file, render(&repo_ruleset(name), "memqos-exp", 1100 << 20)).unwrap();
            let out = Command::new(&bin).arg("--check-config").arg(&file).output().unwrap();
            let _ = std::fs::remove_dir_all(&dir);
            assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        }
    }

    #[test]
    fn bad_rulesets_are_named() {
        assert!(validate("{").unwrap_err().contains("not JSON"));
        assert!(validate(r#"{"rulesets": []}"#).unwrap_err().contains("empty"));
        let unknown = r#"{"rulesets": [{"name": "r", "detectors": [["g", {"name": "pressure_abvoe", "args": {}}]],
            "actions": []}]}"#;
        let e = validate(unknown).unwrap_err();
        assert!(e.contains("\"r\"") && e.contains("\"g\"") && e.contains("pressure_abvoe"), "{e}");
        let number = r#"{"rulesets": [{"name": "r", "detectors": [], "actions": [{"name": "kill_by_pressure",
            "args": {"post_action_delay": 5}}]}]}"#;
        let e = validate(number).unwrap_err();
        assert!(e.contains("post_action_delay") && e.contains("string"), "{e}");
        let unnamed = r#"{"rulesets": [{"name": "r", "detectors": [[{"name": "stop"}]], "actions": []}]}"#;
        assert!(validate(unnamed).unwrap_err().contains("start with its name"));
    }

    #[test]
    fn kill_lines_name_the_task_cgroup() {
        let m =
            kill_mark("oomd kill: 1.00 3.00 0.00 /sys/fs/cgroup/memqos-exp/low2 421527552", 3.5, "memqos-exp").unwrap();
        assert_eq!((m.cgroup.as_str(), m.file.as_str(), m.t_s), ("low2", "kill", 3.5));
        assert!(m.reason.starts_with("oomd: oomd kill:"));
        assert!(kill_mark("  ", 1.0, "memqos-exp").is_none());
    }

    #[test]
    fn near_full_is_95_percent_in_mib() {
        assert_eq!(render("@NEAR_FULL@ @PARENT@/x", "p", 1000 << 20), "950M p/x");
        assert_eq!(render("@NEAR_FULL@", "p", u64::MAX), "100%");
    }
}
