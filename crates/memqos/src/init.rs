//! `memqos init --profile NAME`: doctor's checks, then the profile (embedded in the binary,
//! `memqos_policy::config::profiles`) written as the daemon's config, checked as `memqos daemon
//! --check` checks it, and what was chosen and why.

use anyhow::{bail, Context, Result};
use clap::Args;
use memqos_doctor::{self as doctor, DoctorReport, Finding, Severity, Verdict};
use memqos_policy::config::profiles::{self, Profile};
use memqos_policy::Config;
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};

const DEFAULT_OUTPUT: &str = "/etc/memqos/memqos.toml";

#[derive(Args)]
#[command(after_help = after_help())]
pub struct InitArgs {
    /// The kind of host: systemd, kubernetes or agent-host (listed below).
    #[arg(long, value_name = "NAME")]
    profile: String,
    /// Replace the file at --output if there is one.
    #[arg(long)]
    force: bool,
    /// Where to write the config.
    #[arg(long, value_name = "PATH", default_value = DEFAULT_OUTPUT)]
    output: PathBuf,
    /// The managed subtree (absolute), instead of the profile's cgroup_root.
    #[arg(long, value_name = "PATH")]
    cgroup_root: Option<PathBuf>,
    /// Print what was done as JSON.
    #[arg(long)]
    json: bool,
}

fn after_help() -> String {
    let mut s = String::from("Profiles (configs/<name>.toml, also in /usr/share/memqos/profiles/):\n");
    for p in profiles::PROFILES {
        s.push_str(&format!("  {:<11} {}\n", p.name, p.summary));
    }
    s.push_str(
        "\nNothing is written when the file exists (without --force) or the result would not pass \
         `memqos daemon --check`. Exit status 0 once the file is written and checked, whatever doctor's \
         verdict (printed, with the findings that matter for the profile); 1 on an error.",
    );
    s
}

/// What `init` did and why: printed, or as JSON with `--json`.
#[derive(Serialize)]
struct Outcome {
    profile: &'static str,
    summary: &'static str,
    /// The profile's file in the repository (the binary carries its text).
    source: &'static str,
    output: PathBuf,
    replaced: bool,
    cgroup_root: PathBuf,
    /// "profile" or "--cgroup-root".
    cgroup_root_from: &'static str,
    tiers: usize,
    /// doctor's verdict and headline.
    verdict: Verdict,
    headline: String,
    /// doctor's findings that matter for this profile, then the profile's own.
    findings: Vec<Finding>,
    /// Topics of doctor's other findings (BPF, `memqos stat`, dirty limits: not used by the profiles).
    other_findings: Vec<&'static str>,
    next: Vec<String>,
}

pub fn run(a: InitArgs) -> Result<u8> {
    let host = || doctor::collect_with(&doctor::SystemPaths::default(), Some(&doctor::privileges::Host));
    let outcome = init(&a, &host)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&outcome)?);
    } else {
        print!("{}", render(&outcome));
    }
    Ok(0)
}

/// Everything but the printing; `doctor` reads the host (a fake tree in tests).
fn init(a: &InitArgs, doctor: &dyn Fn() -> DoctorReport) -> Result<Outcome> {
    let profile = profiles::profile(&a.profile).with_context(|| {
        format!(
            "unknown profile {:?}; the profiles are: {} (memqos init --help says what each is for)",
            a.profile,
            profiles::names()
        )
    })?;
    refuse_existing(&a.output, a.force)?;
    let text = with_root(profile.text, a.cgroup_root.as_deref())?;
    // Checked before anything is written: a bad --cgroup-root leaves no file behind.
    let cfg = Config::from_str(&text, &a.output.display().to_string()).map_err(|e| anyhow::anyhow!("{e}"))?;
    let report = doctor();
    let replaced = write(&a.output, &text, a.force)?;
    // As `memqos daemon --check` reads it: the file on disk through the daemon's loader.
    let checked = memqos_daemon::load_config(&a.output)?;
    let (findings, other_findings) = findings(profile, &cfg, &report);
    Ok(Outcome {
        profile: profile.name,
        summary: profile.summary,
        source: profile.file,
        output: a.output.clone(),
        replaced,
        cgroup_root: checked.cgroup_root.clone(),
        cgroup_root_from: if a.cgroup_root.is_some() { "--cgroup-root" } else { "profile" },
        tiers: checked.tiers.len(),
        verdict: report.verdict,
        headline: report.headline,
        findings,
        other_findings,
        next: next_steps(profile, &a.output),
    })
}

fn refuse_existing(path: &Path, force: bool) -> Result<()> {
    // symlink_metadata: a dangling link is a file someone put there too.
    if !force && path.symlink_metadata().is_ok() {
        let why =
            if path == Path::new(DEFAULT_OUTPUT) { " (the package installs it from the systemd profile)" } else { "" };
        bail!(
            "{} exists and memqos init does not overwrite it{why}: pass --force to replace it, or --output PATH to \
             write elsewhere",
            path.display()
        );
    }
    Ok(())
}

/// The profile's text with `cgroup_root` replaced by `root`; the profile's value stays in a
/// comment on the line.
fn with_root(text: &str, root: Option<&Path>) -> Result<String> {
    let Some(root) = root else { return Ok(text.to_string()) };
    let root = root.to_str().with_context(|| format!("--cgroup-root {}: not UTF-8", root.display()))?;
    // A JSON string is a valid TOML basic string (the same escapes).
    let quoted = serde_json::to_string(root)?;
    let (mut replaced, mut in_table) = (false, false);
    let mut out = String::with_capacity(text.len() + 80);
    for line in text.split_inclusive('\n') {
        in_table |= line.trim_start().starts_with('[');
        let key = line.split('=').next().unwrap_or("").trim();
        if !replaced && !in_table && key == "cgroup_root" {
            let was = line.split_once('=').map(|(_, v)| v.split('#').next().unwrap_or("").trim()).unwrap_or("");
            out.push_str(&format!("cgroup_root = {quoted}   # memqos init --cgroup-root; the profile's: {was}\n"));
            replaced = true;
        } else {
            out.push_str(line);
        }
    }
    if !replaced {
        bail!("the profile has no top-level cgroup_root line to replace");
    }
    Ok(out)
}

/// Writes `text` to `path` (parents made); with `force` through a temporary file renamed over
/// it, so a reader never sees half a config. True when a file was replaced.
fn write(path: &Path, text: &str, force: bool) -> Result<bool> {
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let existed = path.symlink_metadata().is_ok();
    let target = if force { path.with_extension("memqos-init.tmp") } else { path.to_path_buf() };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(!force)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .open(&target)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => {
                anyhow::anyhow!(
                    "{} appeared while memqos init ran; not overwritten (--force replaces it)",
                    path.display()
                )
            }
            _ => anyhow::Error::new(e).context(format!("creating {}", target.display())),
        })?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .with_context(|| format!("writing {}", target.display()))?;
    if force {
        std::fs::rename(&target, path)
            .with_context(|| format!("renaming {} to {}", target.display(), path.display()))?;
    }
    Ok(existed)
}

/// doctor's findings that matter for `profile` (blockers; PSI, protection, swap, write access,
/// descriptors), then the profile's own; and the topics of the rest.
fn findings(profile: &Profile, cfg: &Config, report: &DoctorReport) -> (Vec<Finding>, Vec<&'static str>) {
    const MATTER: &[&str] = &["PSI", "PSI triggers", "protection", "swap", "write access", "open-file limit"];
    let (mut matter, rest): (Vec<Finding>, Vec<Finding>) =
        report.findings.iter().cloned().partition(|f| f.severity == Severity::Blocker || MATTER.contains(&f.topic));
    matter.retain(|f| !(f.topic == "open-file limit" && f.severity == Severity::Note));
    matter.extend(root_findings(profile, &cfg.cgroup_root));
    if profile.name == "agent-host" {
        matter.push(agent_swap(report));
    }
    matter.sort_by_key(|f| std::cmp::Reverse(f.severity));
    let mut other: Vec<&'static str> = rest.iter().map(|f| f.topic).collect();
    other.sort_unstable();
    other.dedup();
    (matter, other)
}

fn note(severity: Severity, topic: &'static str, message: String, advice: &str) -> Finding {
    Finding { severity, topic, message, advice: (!advice.is_empty()).then(|| advice.to_string()) }
}

/// The managed root: there, and (on an agent host) with the budget that admission needs.
fn root_findings(profile: &Profile, root: &Path) -> Vec<Finding> {
    let shown = root.display();
    if !root.join("cgroup.controllers").exists() {
        let advice = match profile.name {
            "agent-host" => "create it: mkdir, +memory in its cgroup.subtree_control, its memory.max the agents' budget (README, \"Quick start: an agent host\")",
            "kubernetes" => "is this a Kubernetes node with kubelet's systemd cgroup driver? On a cluster, deploy/kubernetes/daemonset.yaml carries this profile",
            _ => "point --cgroup-root at the cgroup2 tree to manage",
        };
        let message =
            format!("cgroup_root {shown} is not a cgroup v2 directory here: the daemon will not start until it is");
        return vec![note(Severity::Blocker, "cgroup root", message, advice)];
    }
    let max = std::fs::read_to_string(root.join("memory.max")).unwrap_or_default();
    if profile.name == "agent-host" && max.trim() == "max" {
        let message = format!(
            "{shown}/memory.max is max: with no finite limit on the root the daemon publishes no room, so no tool call is \
             armed or waits (policy.admission)"
        );
        return vec![note(
            Severity::Note,
            "cgroup root",
            message,
            "set it to the agents' budget: echo 16G > .../memory.max",
        )];
    }
    Vec::new()
}

/// What the agent-host series say about this host's swap.
fn agent_swap(report: &DoctorReport) -> Finding {
    if report.swap.devices.is_empty() {
        return note(
            Severity::Note,
            "agent host, no swap",
            "no swap: keep queue_held off (without swap it killed more calls than no policy: agent-host-admission-queue), \
             and have tool calls declare their peaks with `memqos run --expect` (agent-host-admission-declared-kept); \
             undeclared calls on a swapless host were killed more often with admission than without (agent-host-admission)"
                .into(),
            "or add swap with zswap in front of it and uncomment queue_held = true on the tool tier (agent-host-admission-zswap-queue-kept)",
        );
    }
    let zswap = match report.zswap_enabled {
        Some(true) => "zswap on",
        Some(false) => "zswap off: the series ran with it (echo Y > /sys/module/zswap/parameters/enabled)",
        None => "no zswap in this kernel; the series ran with it",
    };
    note(
        Severity::Note,
        "agent host, swap",
        format!("swap is active ({} KiB, {zswap})", report.swap.total_kib),
        "uncomment queue_held = true on the tool tier, as the zswap series ran (agent-host-admission-zswap-queue-kept)",
    )
}

fn next_steps(profile: &Profile, output: &Path) -> Vec<String> {
    let c = output.display();
    let mut next = vec![
        format!("sudo memqos daemon --dry-run --duration 60 --config {c}   # logs every write it would make"),
        "sudo systemctl enable --now memqos   # or restart it if it runs".to_string(),
    ];
    if profile.name == "agent-host" {
        next.push(
            "sudo memqos run --runtime --session s1 -- my-agent ...   # then tool calls: memqos run -- CMD".into(),
        );
    }
    next
}

fn render(o: &Outcome) -> String {
    let mut s = format!("memqos init: profile {} ({})\n", o.profile, o.summary);
    let verb = if o.replaced { "replaced" } else { "wrote" };
    s.push_str(&format!("  {verb} {} from {} (carried in this binary)\n", o.output.display(), o.source));
    s.push_str(&format!("  cgroup_root {} (from the {})\n", o.cgroup_root.display(), o.cgroup_root_from));
    s.push_str(&format!("  checked as `memqos daemon --check` does: ok, {} tiers\n", o.tiers));
    s.push_str(&format!("  doctor: {}\n", o.headline));
    if !o.findings.is_empty() {
        s.push_str("\nFor this profile:\n");
    }
    for f in &o.findings {
        let sev = match f.severity {
            Severity::Blocker => "blocker",
            Severity::Degraded => "degraded",
            Severity::Note => "note",
        };
        s.push_str(&format!("  [{sev}] {}: {}\n", f.topic, f.message));
        if let Some(a) = &f.advice {
            s.push_str(&format!("      -> {a}\n"));
        }
    }
    if !o.other_findings.is_empty() {
        s.push_str(&format!(
            "\nNot needed by this profile (memqos doctor explains them): {}\n",
            o.other_findings.join(", ")
        ));
    }
    s.push_str("\nNext:\n");
    for n in &o.next {
        s.push_str(&format!("  {n}\n"));
    }
    s
}

#[cfg(test)]
mod tests;
