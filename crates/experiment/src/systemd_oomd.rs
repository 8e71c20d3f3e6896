//! The `systemd-oomd` arm: systemd's userspace OOM killer (Debian package `systemd-oomd`,
//! 252) as an operator of a systemd host would deploy it for this layout: the tenants'
//! parent is a slice with the scenario's memory limit, each tier a slice below it, and the
//! low tier's slice has `ManagedOOMMemoryPressure=kill`. When that slice's memory pressure
//! stays above `ManagedOOMMemoryPressureLimit=` for `DefaultMemoryPressureDurationSec=` while
//! it reclaims, systemd-oomd kills the cgroup below it that reclaims fastest (its pgscan
//! rate). It watches the low tier's own pressure, not the protected tier's: that is the knob
//! systemd has (the oomd arm's ruleset watches the protected tier instead).
//!
//! systemd-oomd only watches units, so this arm needs systemd as PID 1: a scenario with it
//! boots its guests that way (`Guest::systemd`), every arm alike. The package is not
//! installed on the host (it would replace the host's systemd packages): scripts/install-deps.sh
//! downloads it to /var/cache/memqos, and the guest unpacks it into its own writable root.
//! Kills are read back from systemd-oomd's journal messages when the tasks have ended.
//!
//! The tasks' cgroups are made by the runner inside the tier slices (as a container runtime
//! makes its own below a slice), so the runner reads them exactly as in the other arms.

use crate::runner::DecisionMark;
use crate::scenario::Tier;
use anyhow::{bail, Context, Result};
use memqos_cgroupfs::Cgroup;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The tenants' parent: `memqosexp.slice` (no dash, so systemd puts it right below -.slice).
pub const SLICE: &str = "memqosexp.slice";
pub const PARENT: &str = "/sys/fs/cgroup/memqosexp.slice";
/// Where the runner's transient unit files go (runtime units: gone with the guest).
const UNIT_DIR: &str = "/run/systemd/system";
const CONF_DROP_IN: &str = "/etc/systemd/oomd.conf.d/50-memqos-experiment.conf";
/// Where scripts/install-deps.sh puts the package; `$MEMQOS_SYSTEMD_OOMD_DEB` overrides.
const DEB_DIR: &str = "/var/cache/memqos";
const BINARY: &str = "/lib/systemd/systemd-oomd";

/// What an operator tunes (the scenario's `[systemd_oomd]` table).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Settings {
    /// `ManagedOOMMemoryPressureLimit=` of the low slice, percent (systemd's default: 60).
    pub memory_pressure_limit_percent: f64,
    /// `DefaultMemoryPressureDurationSec=` in oomd.conf, seconds (Debian's default: 20; 1 is
    /// the least systemd-oomd accepts).
    pub memory_pressure_duration_s: u64,
}

impl Settings {
    /// The error names the field; `Ok` values are what systemd-oomd accepts.
    pub fn validate(&self) -> Result<(), String> {
        let l = self.memory_pressure_limit_percent;
        if !(l > 0.0 && l < 100.0) {
            return Err(format!("memory_pressure_limit_percent: must be in (0, 100), got {l}"));
        }
        if self.memory_pressure_duration_s < 1 {
            return Err("memory_pressure_duration_s: systemd-oomd needs at least 1 s".into());
        }
        Ok(())
    }
}

/// The slice of a tier.
pub fn tier_slice(tier: Tier) -> &'static str {
    match tier {
        Tier::High => "memqosexp-high.slice",
        Tier::Low => "memqosexp-low.slice",
    }
}

/// The cgroup of a tier's slice.
pub fn tier_cgroup(tier: Tier) -> Cgroup {
    Cgroup::new(Path::new(PARENT).join(tier_slice(tier)))
}

/// The unit files of the layout (name, text): the parent slice with the limit (`None`: no
/// limit), the protected slice, and the low slice systemd-oomd watches.
pub fn units(s: &Settings, parent_max: Option<u64>) -> Vec<(String, String)> {
    let header = "# Written by memqos-lab experiment (the systemd-oomd arm); removed when the arm ends.\n";
    let parent = match parent_max {
        Some(b) => format!("{header}[Slice]\nMemoryAccounting=yes\nMemoryMax={b}\n"),
        None => format!("{header}[Slice]\nMemoryAccounting=yes\n"),
    };
    vec![
        (SLICE.to_string(), parent),
        (tier_slice(Tier::High).to_string(), format!("{header}[Slice]\nMemoryAccounting=yes\n")),
        (
            tier_slice(Tier::Low).to_string(),
            format!(
                "{header}[Slice]\nMemoryAccounting=yes\nManagedOOMMemoryPressure=kill\nManagedOOMMemoryPressureLimit={}%\n",
                fmt_percent(s.memory_pressure_limit_percent)
            ),
        ),
    ]
}

/// systemd-oomd's drop-in: how long the pressure must stay above the limit.
pub fn oomd_conf(s: &Settings) -> String {
    format!(
        "# Written by memqos-lab experiment (the systemd-oomd arm).\n[OOM]\nDefaultMemoryPressureDurationSec={}s\n",
        s.memory_pressure_duration_s
    )
}

fn fmt_percent(p: f64) -> String {
    // systemd takes up to two decimals.
    let s = format!("{p:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn run(cmd: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(cmd).args(args).output().with_context(|| format!("running {cmd}"))?;
    if !out.status.success() {
        bail!("{cmd} {}: {}: {}", args.join(" "), out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The package to unpack: `$MEMQOS_SYSTEMD_OOMD_DEB`, else the newest in /var/cache/memqos.
fn deb() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("MEMQOS_SYSTEMD_OOMD_DEB") {
        return Ok(PathBuf::from(p));
    }
    let mut debs: Vec<PathBuf> =
        std::fs::read_dir(DEB_DIR).map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect()).unwrap_or_default();
    debs.retain(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("systemd-oomd_")));
    debs.sort();
    debs.pop().with_context(|| {
        format!("the systemd-oomd arm needs Debian's systemd-oomd package in {DEB_DIR} (scripts/install-deps.sh downloads it)")
    })
}

/// Makes sure systemd-oomd runs with the scenario's duration (once per guest boot; a later
/// call with the same settings only checks). Needs systemd as PID 1.
pub fn ensure_running(s: &Settings) -> Result<()> {
    let pid1 = std::fs::read_to_string("/proc/1/comm").unwrap_or_default();
    if pid1.trim() != "systemd" {
        bail!("the systemd-oomd arm needs systemd as PID 1 (PID 1 is {:?}): its guests boot with systemd", pid1.trim());
    }
    let conf = oomd_conf(s);
    let active = run("systemctl", &["is-active", "systemd-oomd.service"]).is_ok();
    if active && std::fs::read_to_string(CONF_DROP_IN).ok().as_deref() == Some(conf.as_str()) {
        return Ok(());
    }
    if !Path::new(BINARY).exists() {
        let deb = deb()?;
        // Through tar, keeping the root's directory symlinks: on a merged-/usr system /lib is
        // one, and `dpkg-deb -x` would replace it with a directory (and break every binary).
        run(
            "bash",
            &[
                "-o",
                "pipefail",
                "-c",
                "dpkg-deb --fsys-tarfile \"$0\" | tar -x --keep-directory-symlink -C /",
                &deb.to_string_lossy(),
            ],
        )
        .with_context(|| format!("unpacking {} into the guest's root", deb.display()))?;
        // The service runs as the systemd-oom user the package's sysusers.d file declares.
        run("systemd-sysusers", &["/usr/lib/sysusers.d/systemd-oom.conf"])?;
    }
    let dir = Path::new(CONF_DROP_IN).parent().expect("absolute path");
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::write(CONF_DROP_IN, &conf).with_context(|| format!("writing {CONF_DROP_IN}"))?;
    run("systemctl", &["daemon-reload"])?;
    // oomctl (the check that the low slice is watched) asks systemd-oomd over D-Bus.
    run("systemctl", &["start", "dbus.socket"]).context("starting D-Bus for oomctl")?;
    run("systemctl", &["restart", "systemd-oomd.socket", "systemd-oomd.service"])?;
    let t0 = Instant::now();
    while run("systemctl", &["is-active", "systemd-oomd.service"]).is_err() {
        if t0.elapsed() > Duration::from_secs(15) {
            let log = run("journalctl", &["-u", "systemd-oomd.service", "--no-pager", "-n", "10"]).unwrap_or_default();
            bail!("systemd-oomd did not become active within 15 s: {log}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// Writes the slices, starts them, gives the tier slices the memory controller for the task
/// cgroups the runner makes, and waits until systemd-oomd lists the low slice as watched.
pub fn set_up(s: &Settings, parent_max: Option<u64>) -> Result<Vec<DecisionMark>> {
    tear_down()?;
    let mut marks = Vec::new();
    for (name, text) in units(s, parent_max) {
        let path = Path::new(UNIT_DIR).join(&name);
        std::fs::write(&path, &text).with_context(|| format!("writing {}", path.display()))?;
        for line in text.lines().filter(|l| l.contains('=')) {
            let (k, v) = line.split_once('=').expect("has =");
            marks.push(DecisionMark {
                t_s: 0.0,
                cgroup: name.clone(),
                file: k.into(),
                value: v.into(),
                reason: "systemd-oomd arm: the slice an operator writes".into(),
            });
        }
    }
    run("systemctl", &["daemon-reload"])?;
    run("systemctl", &["start", tier_slice(Tier::High), tier_slice(Tier::Low)])?;
    for tier in [Tier::High, Tier::Low] {
        let cg = tier_cgroup(tier);
        if !cg.exists() {
            bail!("systemd did not create {}", cg.path().display());
        }
        cg.enable_controllers(&["memory"]).with_context(|| format!("{}: enabling memory", cg.path().display()))?;
    }
    if let Some(b) = parent_max {
        let set = Cgroup::new(PARENT).read_string("memory.max").unwrap_or_default();
        if set.trim() != b.to_string() {
            bail!("{PARENT}/memory.max is {:?}, the slice says MemoryMax={b}", set.trim());
        }
    }
    // systemd tells systemd-oomd about the slice over varlink; wait for it to be watched.
    let low = format!("/{SLICE}/{}", tier_slice(Tier::Low));
    let t0 = Instant::now();
    loop {
        let dump = run("oomctl", &["dump"]).unwrap_or_default();
        if dump.contains(&low) {
            break;
        }
        if t0.elapsed() > Duration::from_secs(15) {
            bail!("systemd-oomd does not watch {low} after 15 s (oomctl dump: {})", dump.trim());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(marks)
}

/// Removes what [`set_up`] made: the task cgroups left (deepest first), the slices, their
/// files. Nothing to restore besides: the slices are the arm's own.
pub fn tear_down() -> Result<()> {
    let parent = Cgroup::new(PARENT);
    if parent.exists() {
        for tier in [Tier::High, Tier::Low] {
            let cg = tier_cgroup(tier);
            if cg.exists() {
                let mut all = cg.descendants().unwrap_or_default();
                all.sort_by_key(|c| std::cmp::Reverse(c.path().components().count()));
                for c in all {
                    crate::series::remove_tree(&c)?;
                }
            }
        }
        let _ = run("systemctl", &["stop", SLICE]);
    }
    let mut removed = false;
    for name in [SLICE, tier_slice(Tier::High), tier_slice(Tier::Low)] {
        let path = Path::new(UNIT_DIR).join(name);
        if path.exists() {
            std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
            removed = true;
        }
    }
    if removed {
        run("systemctl", &["daemon-reload"])?;
    }
    Ok(())
}

/// The kills systemd-oomd logged since `since_epoch` (Unix s), as decision marks stamped
/// relative to `started_epoch`.
pub fn kills_since(since_epoch: f64, started_epoch: f64) -> Result<Vec<DecisionMark>> {
    let since = format!("@{}", since_epoch.floor() as u64);
    let out = run("journalctl", &["-u", "systemd-oomd.service", "-o", "json", "--no-pager", "--since", &since])?;
    Ok(out.lines().filter_map(|l| kill_mark(l, since_epoch, started_epoch)).collect())
}

/// A journal entry (JSON) of a kill as a decision mark: systemd-oomd 252 says
/// "Killed /memqosexp.slice/memqosexp-low.slice/low1 due to memory pressure for ...".
fn kill_mark(json: &str, since_epoch: f64, started_epoch: f64) -> Option<DecisionMark> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    let msg = v["MESSAGE"].as_str()?;
    let rest = msg.strip_prefix("Killed ")?;
    let path = rest.split_whitespace().next()?;
    let ts_s = v["__REALTIME_TIMESTAMP"].as_str()?.parse::<f64>().ok()? / 1e6;
    // --since has whole seconds: an entry of the second before the arm is not its own.
    if ts_s < since_epoch {
        return None;
    }
    Some(DecisionMark {
        t_s: ts_s - started_epoch,
        cgroup: path.rsplit('/').next().unwrap_or(path).to_string(),
        file: "kill".into(),
        value: "SIGKILL".into(),
        reason: format!("systemd-oomd: {msg}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Settings = Settings { memory_pressure_limit_percent: 10.0, memory_pressure_duration_s: 1 };

    #[test]
    fn the_low_slice_is_watched_and_the_parent_limited() {
        let u = units(&S, Some(1100 << 20));
        assert_eq!(
            u.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
            [SLICE, "memqosexp-high.slice", "memqosexp-low.slice"]
        );
        assert!(u[0].1.contains("MemoryMax=1153433600\n"), "{}", u[0].1);
        assert!(!u[1].1.contains("ManagedOOM"), "the protected slice is not a kill candidate");
        assert!(u[2].1.contains("ManagedOOMMemoryPressure=kill\nManagedOOMMemoryPressureLimit=10%\n"), "{}", u[2].1);
        assert!(!units(&S, None)[0].1.contains("MemoryMax"));
        let s = Settings { memory_pressure_limit_percent: 12.5, ..S };
        assert!(units(&s, None)[2].1.contains("Limit=12.5%\n"));
        assert!(oomd_conf(&S).contains("DefaultMemoryPressureDurationSec=1s\n"));
    }

    #[test]
    fn settings_out_of_range_are_named() {
        assert!(S.validate().is_ok());
        let e = Settings { memory_pressure_limit_percent: 100.0, ..S }.validate().unwrap_err();
        assert!(e.starts_with("memory_pressure_limit_percent"), "{e}");
        let e = Settings { memory_pressure_duration_s: 0, ..S }.validate().unwrap_err();
        assert!(e.starts_with("memory_pressure_duration_s"), "{e}");
    }

    #[test]
    fn kill_messages_name_the_task_and_its_time() {
        let line = r#"{"MESSAGE":"Killed /memqosexp.slice/memqosexp-low.slice/low2 due to memory pressure for /memqosexp.slice/memqosexp-low.slice being 43.12% > 10.00% for > 1s with reclaim activity","__REALTIME_TIMESTAMP":"1764000012500000"}"#;
        let m = kill_mark(line, 1764000000.0, 1764000010.0).unwrap();
        assert_eq!((m.cgroup.as_str(), m.file.as_str()), ("low2", "kill"));
        assert!((m.t_s - 2.5).abs() < 1e-6, "{}", m.t_s);
        assert!(m.reason.starts_with("systemd-oomd: Killed"));
        // Before the arm, other messages, and non-JSON lines are not kills of this arm.
        assert!(kill_mark(line, 1764000013.0, 1764000010.0).is_none());
        assert!(kill_mark(r#"{"MESSAGE":"Watching /x","__REALTIME_TIMESTAMP":"1"}"#, 0.0, 0.0).is_none());
        assert!(kill_mark("-- No entries --", 0.0, 0.0).is_none());
    }
}
