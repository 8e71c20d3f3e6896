//! Reload on SIGHUP (`systemctl reload memqos`): the config file is read and validated
//! whole, then either replaces the running one or is rejected, never half-applied.
//!
//! Validation covers the file (every field, as `--check` does) and what a running daemon
//! cannot change: `cgroup_root` and `state_dir` (the journal and the lock live there) need a
//! restart. Resources the new config needs (a new metrics listener, the control socket's
//! group) are acquired before anything changes, so a failure leaves the old config running.
//!
//! Once accepted, tiers are re-classified: a cgroup whose tier carries over (same name and
//! settings, `Tiers::carry_over`) and still matches it keeps its knobs and the engine's
//! history; every other cgroup memqos wrote to has its journaled originals written back
//! (through the actuator, so the journal entry goes once the write is done) and starts
//! afresh under its new tier, if any. SIGHUP (or `Handle::request_reload`) only sets a flag:
//! the loop reloads between two ticks, where no write is in flight.

use crate::actuator::{Actuator, Request, Target};
use crate::events::{self, Event};
use crate::journal::Journal;
use crate::{control, metrics, Options};
use anyhow::{bail, Result};
use memqos_cgroupfs::Cgroup;
use memqos_policy::{Config, Engine, Reason, TierIndex};
use memqos_schema::KnobFile;
use std::collections::BTreeMap;
use std::path::Path;

pub use memqos_schema::events::TierMove;

/// Reads and validates the config at `path` as a replacement for `old`. `state_dir_fixed`:
/// the command line overrides state_dir, so the file's value does not matter.
pub(crate) fn load(path: &Path, old: &Config, state_dir_fixed: bool) -> Result<Config> {
    let new = crate::load_config(path)?;
    if new.cgroup_root != old.cgroup_root {
        bail!(
            "{}: cgroup_root changed from {} to {}; a reload cannot move the managed subtree, restart the daemon (it restores everything first)",
            path.display(),
            old.cgroup_root.display(),
            new.cgroup_root.display()
        );
    }
    if !state_dir_fixed && new.state_dir != old.state_dir {
        bail!(
            "{}: state_dir changed from {} to {}; the journal and lock live there, restart the daemon to move it",
            path.display(),
            old.state_dir.display(),
            new.state_dir.display()
        );
    }
    Ok(new)
}

/// The tier of the cgroup at `relative` (under `root`) in `cfg`, reading its extended
/// attributes when a tier asks for them, as the sampler does.
pub(crate) fn classify(cfg: &Config, root: &Path, relative: &str) -> Option<TierIndex> {
    // The sampler's rule, trust included: a reload must not honour a tenant's own tier
    // hints, or its name for a privileged tier, that the running daemon ignores.
    let owners = cfg.tiers.uses_xattrs() || cfg.tiers.any_privileged();
    let opened = if owners { crate::beneath::Root::open(root).ok() } else { None };
    crate::observe::classify(cfg, opened.as_ref(), relative)
}

/// True when a cgroup at `relative` keeps its tier from `old` to `new`.
pub(crate) fn keeps_tier(old: &Config, new: &Config, root: &Path, relative: &str) -> bool {
    let before = classify(old, root, relative);
    let after = classify(new, root, relative);
    match before {
        Some(b) => new.tiers.carry_over(&old.tiers, b) == after,
        None => after.is_none(),
    }
}

/// The cgroups (among `candidates` and those in the journal) that change tier, and the
/// writes that put back what memqos wrote to them.
pub(crate) fn plan(
    old: &Config,
    new: &Config,
    root: &Path,
    journal: &Journal,
    candidates: &[String],
) -> (Vec<TierMove>, Vec<Request>) {
    let name = |cfg: &Config, i: Option<TierIndex>| i.and_then(|i| cfg.tiers.get(i)).map(|t| t.name.clone());
    let mut moved: BTreeMap<String, TierMove> = BTreeMap::new();
    let paths = candidates.iter().map(String::as_str).chain(journal.entries().map(|e| e.cgroup.as_str()));
    for path in paths {
        // "" is a process that left every managed cgroup: the adjuster puts it back itself.
        if path.is_empty() || moved.contains_key(path) || keeps_tier(old, new, root, path) {
            continue;
        }
        let m = TierMove {
            cgroup: path.to_owned(),
            from: name(old, classify(old, root, path)),
            to: name(new, classify(new, root, path)),
        };
        moved.insert(path.to_owned(), m);
    }
    let mut restores = Vec::new();
    for e in journal.entries().filter(|e| moved.contains_key(&e.cgroup)) {
        let m = &moved[&e.cgroup];
        let why = format!(
            "reload: {} left tier {} (now {}): original put back",
            e.cgroup,
            m.from.as_deref().unwrap_or("-"),
            m.to.as_deref().unwrap_or("unmanaged")
        );
        let target = match e.process {
            Some(process) => Target::Process { cgroup: e.cgroup.clone(), cgroup_id: e.cgroup_id, process },
            None => Target::Cgroup { path: e.cgroup.clone(), id: e.cgroup_id },
        };
        let Some(file) = static_file(&e.file) else { continue };
        let mut r = Request::new(target, file, e.original.clone(), why);
        r.reason = Some(Reason::Restore);
        r.restores = true;
        restores.push(r);
    }
    // Thaws first, as a stop restores them.
    restores.sort_by_key(|r| KnobFile::restore_rank(r.file));
    (moved.into_values().collect(), restores)
}

/// The actuator takes `&'static str` file names: the knobs memqos journals (cgroup.kill is
/// never journaled: it cannot be undone).
/// Requests putting back every journaled knob of the cgroups `ids` (memqos stops managing
/// them: they left their tier, or can no longer be read), thaws first.
pub(crate) fn restores_of(journal: &Journal, ids: &[u64], why: &dyn Fn(&str) -> String) -> Vec<Request> {
    let mut restores: Vec<Request> = journal
        .entries()
        .filter(|e| e.process.is_none() && ids.contains(&e.cgroup_id))
        .filter_map(|e| {
            let file = static_file(&e.file)?;
            let target = Target::Cgroup { path: e.cgroup.clone(), id: e.cgroup_id };
            let mut r = Request::new(target, file, e.original.clone(), why(&e.cgroup));
            r.reason = Some(Reason::Restore);
            r.restores = true;
            Some(r)
        })
        .collect();
    restores.sort_by_key(|r| KnobFile::restore_rank(r.file));
    restores
}

fn static_file(file: &str) -> Option<&'static str> {
    KnobFile::from_name(file).filter(|k| k.journaled()).map(KnobFile::name)
}

/// A reload: validates the config file whole and, if it is acceptable, runs it (see
/// `Daemon::reload`). Err: rejected, nothing changed. Ok(Some(exporter)): the metrics
/// exporter to use from now.
pub(crate) fn reload_config(
    opts: &Options,
    cfg: &mut Config,
    root: &Cgroup,
    act: &mut Actuator,
    engine: &mut Engine,
    exporter: Option<&mut metrics::Exporter>,
    control: Option<&control::Server>,
) -> Result<Option<Option<metrics::Exporter>>> {
    let new = load(&opts.config_path, cfg, opts.state_dir.is_some())?;
    // What can fail comes first, so a failure leaves the old config running untouched.
    if new.metrics.listen != cfg.metrics.listen {
        bail!(
            "metrics.listen changed from {:?} to {:?}; the listener is bound at start-up, restart the daemon to move it",
            cfg.metrics.listen,
            new.metrics.listen
        );
    }
    // The running exporter is changed only once nothing can fail any more (below).
    let (keep_exporter, new_exporter) = match &exporter {
        Some(_) if new.metrics.textfile.is_some() || new.metrics.listen.is_some() => (true, None),
        Some(_) => (false, Some(None)),
        None => (false, metrics::Exporter::start(&new.metrics)?.map(Some)),
    };
    let apply_control = control.map(|c| c.prepare_reload(&new)).transpose()?;
    let root_path = root.path().to_owned();
    // All or nothing: the knobs of cgroups that leave their tier are put back first; only if
    // every one of them was (or its cgroup is gone) does the engine take the new config.
    let leaving = engine.would_drop(&new, |id| classify(&new, &root_path, id));
    let (moved, restores) = plan(cfg, &new, &root_path, act.journal(), &leaving);
    let wrote = act.apply(restores)?;
    let failed: Vec<String> = wrote
        .iter()
        .filter_map(|w| match &w.outcome {
            events::Outcome::Error(e) => Some(format!("{}/{}: {e}", w.cgroup, w.file)),
            _ => None,
        })
        .collect();
    if !failed.is_empty() {
        bail!(
            "the knobs of cgroups leaving their tier could not all be put back ({}); the old config runs on",
            failed.join("; ")
        );
    }
    let dropped = engine.reconfigure(new.clone(), |id| classify(&new, &root_path, id));
    debug_assert_eq!(dropped.len(), leaving.len(), "would_drop and reconfigure agree");
    let restored = wrote.iter().filter(|w| w.outcome == events::Outcome::Ok).count();
    if let (true, Some(e)) = (keep_exporter, exporter) {
        e.set_textfile(new.metrics.textfile.clone());
    }
    if let Some(apply) = apply_control {
        if let Err(e) = apply() {
            act.emit(Event::Degraded { message: format!("control socket after reload: {e:#}") });
        }
    }
    let tiers = new.tiers.iter().map(|(_, t)| t.name.clone()).collect();
    *cfg = new;
    act.emit(Event::Reloaded { config: opts.config_path.clone(), tiers, moved, restored });
    Ok(new_exporter)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(tiers: &str) -> Config {
        let text = format!("cgroup_root = \"/sys/fs/cgroup/qos\"\n{tiers}");
        Config::from_str(&text, "t.toml").unwrap()
    }

    const BASE: &str = r#"
[[tier]]
name = "critical"
match = ["db*"]
protect = "low"
[[tier]]
name = "batch"
match = ["**"]
throttle = true
"#;

    #[test]
    fn a_cgroup_keeps_its_tier_only_if_name_settings_and_match_carry_over() {
        // Real directories: a protected tier takes only cgroups whose owner it can trust.
        let dir = tempfile::tempdir().unwrap();
        for d in ["db1", "job", "web", "job7", "other"] {
            std::fs::create_dir(dir.path().join(d)).unwrap();
        }
        let root = dir.path();
        let old = cfg(BASE);
        // Same tiers, a pattern added: db1 and job stay, web moves up.
        let wider = cfg(&BASE.replace(r#"["db*"]"#, r#"["db*", "web"]"#));
        assert!(keeps_tier(&old, &wider, root, "db1"));
        assert!(keeps_tier(&old, &wider, root, "job"));
        assert!(!keeps_tier(&old, &wider, root, "web"));
        // batch's settings change: its cgroups start afresh even though the name is the same.
        let no_throttle = cfg(&BASE.replace("throttle = true", "throttle = false"));
        assert!(!keeps_tier(&old, &no_throttle, root, "job"));
        assert!(keeps_tier(&old, &no_throttle, root, "db1"));
        // Reordering tiers keeps them (matched by name).
        let reordered = cfg(r#"
[[tier]]
name = "batch"
match = ["job*"]
throttle = true
[[tier]]
name = "critical"
match = ["db*"]
protect = "low"
"#);
        assert!(keeps_tier(&old, &reordered, root, "db1"));
        assert!(keeps_tier(&old, &reordered, root, "job7"));
        assert!(!keeps_tier(&old, &reordered, root, "other"), "left every tier");
    }

    #[test]
    fn a_reload_honours_tier_hints_only_where_the_sampler_does() {
        let root = std::env::temp_dir().join(format!("memqos-reload-trust-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for d in ["mine", "theirs"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
            let dir = memqos_cgroupfs::Cgroup::new(root.join(d));
            if dir.set_xattr("user.oomd_omit", "1").is_err() {
                eprintln!("no user xattrs on {}: nothing to check", root.display());
                return;
            }
        }
        // A delegated tenant (not root, not the root's owner) owns "theirs".
        std::os::unix::fs::chown(root.join("theirs"), Some(4242), Some(4242)).unwrap();
        let cfg = cfg(r#"
[[tier]]
name = "omitted"
match = ["**"]
xattr = ["user.oomd_omit"]
protect = "low"
[[tier]]
name = "batch"
match = ["**"]
throttle = true
"#);
        let omitted = cfg.tiers.by_name("omitted");
        assert_eq!(classify(&cfg, &root, "mine"), omitted, "a trusted hint counts");
        assert_ne!(classify(&cfg, &root, "theirs"), omitted, "an untrusted hint does not");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_tenants_own_cgroup_does_not_take_a_protected_tier_by_its_name() {
        let dir = tempfile::tempdir().unwrap();
        for d in ["db-mine", "db-theirs", "job-theirs"] {
            std::fs::create_dir(dir.path().join(d)).unwrap();
        }
        // A delegated tenant (not root, not the root's owner) made and owns these.
        for d in ["db-theirs", "job-theirs"] {
            std::os::unix::fs::chown(dir.path().join(d), Some(4242), Some(4242)).unwrap();
        }
        let cfg = cfg(BASE);
        let (critical, batch) = (cfg.tiers.by_name("critical"), cfg.tiers.by_name("batch"));
        assert_eq!(classify(&cfg, dir.path(), "db-mine"), critical, "trusted: its name counts");
        assert_eq!(classify(&cfg, dir.path(), "db-theirs"), batch, "untrusted: the next tier that matches");
        assert_eq!(classify(&cfg, dir.path(), "job-theirs"), batch, "an unprivileged tier is anyone's");
        // Gone (or never there): no owner to trust.
        assert_eq!(classify(&cfg, dir.path(), "db-gone"), batch);
    }

    #[test]
    fn load_rejects_what_needs_a_restart() {
        let dir = std::env::temp_dir().join(format!("memqos-reload-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.toml");
        let old = cfg(BASE);
        std::fs::write(&path, format!("cgroup_root = \"/sys/fs/cgroup/other\"\n{BASE}")).unwrap();
        let e = format!("{:#}", load(&path, &old, false).unwrap_err());
        assert!(e.contains("cgroup_root changed from /sys/fs/cgroup/qos to /sys/fs/cgroup/other"), "{e}");
        std::fs::write(&path, format!("cgroup_root = \"/sys/fs/cgroup/qos\"\nstate_dir = \"/tmp/x\"\n{BASE}")).unwrap();
        let e = format!("{:#}", load(&path, &old, false).unwrap_err());
        assert!(e.contains("state_dir changed"), "{e}");
        assert!(load(&path, &old, true).is_ok(), "--state-dir on the command line: the file's value is unused");
        std::fs::write(&path, "cgroup_root = \"/sys/fs/cgroup/qos\"\n[[tier]]\nname = \"a\"\nmatch = []\n").unwrap();
        assert!(load(&path, &old, false).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
