//! Where a result came from: the commit and whether the tree was dirty, digests of the
//! scenario and of the configs the arms ran with, the replay speed, the kernel, the host's
//! load and how much of the host's CPU other work took while the guest ran. Collected on the
//! host before a guest boots, handed to the guest in `$MEMQOS_PROVENANCE`, stamped into every
//! arm result and written beside the results, so a table can say which build made a series
//! instead of a reader guessing it from git history.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

pub use memqos_vmtest::HostCpu;

/// The environment variable the host hands the guest its provenance in.
pub const ENV: &str = "MEMQOS_PROVENANCE";

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    /// `git rev-parse HEAD` of the checkout the experiment ran from; `None` outside git.
    pub commit: Option<String>,
    /// Tracked files differed from the commit (`git status --porcelain --untracked-files=no`).
    pub dirty: Option<bool>,
    /// sha256 of the scenario file, of the memqos daemon config and of the oomd ruleset.
    pub scenario_sha256: Option<String>,
    pub daemon_config_sha256: Option<String>,
    #[serde(default)]
    pub oomd_config_sha256: Option<String>,
    pub speed: Option<f64>,
    /// The guest kernel's release (a bench over several guests: the series it was asked for).
    pub kernel: String,
    /// Host /proc/loadavg before the guest booted, and after it ended (written on the host).
    pub host_load_before: String,
    #[serde(default)]
    pub host_load_after: Option<String>,
    #[serde(default)]
    pub guest_wall_s: Option<f64>,
    /// The host's CPU during the guest (written on the host): the load average cannot tell a
    /// guest slowed by other host work from a clean one, this can. Absent in results from
    /// before it was recorded, and where the host has no /proc/stat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_cpu: Option<HostCpu>,
    /// The commit the running memqos-lab binary was built from, and whether tracked files
    /// differed from it then (`build.rs`); absent in results from before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_commit: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_dirty: Option<bool>,
}

/// The commit this binary was built from, and whether the tree was dirty then.
pub fn this_build() -> (Option<&'static str>, Option<bool>) {
    (option_env!("MEMQOS_BUILD_COMMIT"), option_env!("MEMQOS_BUILD_DIRTY").map(|d| d == "true"))
}

impl Provenance {
    /// The provenance of a series about to run from the checkout at `repo` on `kernel`.
    pub fn collect(repo: &Path, kernel: &str) -> Provenance {
        let git = |args: &[&str]| -> Option<String> {
            // Never rewrite the index (see crates/lab/build.rs): a status refresh would make
            // the next cargo run rebuild this crate and everything above it.
            let out = Command::new("git").arg("--no-optional-locks").arg("-C").arg(repo).args(args).output().ok()?;
            out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        };
        let (build_commit, build_dirty) = this_build();
        let p = Provenance {
            commit: git(&["rev-parse", "HEAD"]),
            dirty: git(&["status", "--porcelain", "--untracked-files=no"]).map(|s| !s.is_empty()),
            kernel: kernel.to_string(),
            host_load_before: std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim().to_string(),
            build_commit: build_commit.map(str::to_owned),
            build_dirty,
            ..Provenance::default()
        };
        if let Some(warning) = p.mismatch() {
            eprintln!("memqos-lab: {warning}");
        }
        p
    }

    /// Why the checkout and the binary's build disagree, if they do: the results record both,
    /// and the build column names the binary's.
    pub fn mismatch(&self) -> Option<String> {
        let (built, at) = (self.build_commit.as_deref()?, self.commit.as_deref()?);
        (built != at).then(|| {
            format!(
                "this binary was built from {} but the checkout is at {}: the results record both, and their build is the binary's",
                &built[..built.len().min(7)],
                &at[..at.len().min(7)]
            )
        })
    }

    /// The build as a table shows it: the short commit the binary was built from (the
    /// checkout's, for results from before builds were recorded), "+dirty" if the tree was.
    pub fn build(&self) -> Option<String> {
        let (c, dirty) = match self.build_commit.as_deref() {
            Some(b) => (b, self.build_dirty),
            None => (self.commit.as_deref()?, self.dirty),
        };
        Some(format!("{}{}", &c[..c.len().min(7)], if dirty == Some(true) { "+dirty" } else { "" }))
    }
}

/// Lowercase hex sha256 of `bytes` (coreutils `sha256sum`, on every host that runs guests).
pub fn sha256_hex(bytes: &[u8]) -> Result<String> {
    let mut child = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("running sha256sum (coreutils)")?;
    child.stdin.take().expect("piped").write_all(bytes)?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("sha256sum failed with {}", out.status);
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let hex = text.split_whitespace().next().unwrap_or("");
    if hex.len() != 64 {
        bail!("sha256sum printed {text:?}");
    }
    Ok(hex.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_of_known_inputs() {
        // FIPS 180-2 test vectors.
        assert_eq!(sha256_hex(b"abc").unwrap(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert_eq!(sha256_hex(b"").unwrap(), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    }

    #[test]
    fn collect_reads_the_checkout_and_builds_a_label() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let p = Provenance::collect(&root, "7.2.13");
        // This test runs in a git checkout (CI and the build machines); outside one the
        // commit is None, and the label too.
        if let Some(c) = &p.commit {
            assert_eq!(c.len(), 40, "{c}");
            let b = p.build().unwrap();
            // The label is the build's (when this binary knows its build) or else the
            // checkout's: compare with the same one, so editing a tracked file between
            // building and running this test does not fail it.
            let labelled_dirty = if p.build_commit.is_some() { p.build_dirty } else { p.dirty };
            let labelled_commit = p.build_commit.as_deref().unwrap_or(c);
            assert!(b.starts_with(&labelled_commit[..7]), "{b}");
            assert_eq!(b.ends_with("+dirty"), labelled_dirty == Some(true));
        } else {
            assert_eq!(p.build(), None);
        }
        assert_eq!(p.kernel, "7.2.13");
        let dirty = Provenance { commit: Some("0123456789abcdef".into()), dirty: Some(true), ..Default::default() };
        assert_eq!(dirty.build().as_deref(), Some("0123456+dirty"));
        assert_eq!(dirty.mismatch(), None, "no build recorded: nothing to compare");
    }

    #[test]
    fn the_binarys_build_wins_over_the_checkout_and_a_mismatch_is_named() {
        // This crate's build.rs ran in a git checkout (CI and the build machines).
        let (built, _) = this_build();
        if let Some(b) = built {
            assert_eq!(b.len(), 40, "{b}");
        }
        let p = Provenance {
            commit: Some("aaaaaaaaaaaaaaaa".into()),
            dirty: Some(true),
            build_commit: Some("bbbbbbbbbbbbbbbb".into()),
            build_dirty: Some(false),
            ..Default::default()
        };
        assert_eq!(p.build().as_deref(), Some("bbbbbbb"));
        let m = p.mismatch().expect("they differ");
        assert!(m.contains("built from bbbbbbb") && m.contains("checkout is at aaaaaaa"), "{m}");
        let same = Provenance { build_commit: p.commit.clone(), ..p.clone() };
        assert_eq!(same.mismatch(), None);
        // Older files have no build fields and keep their exact serialized form.
        let old = Provenance { commit: Some("c".into()), ..Default::default() };
        let json = serde_json::to_string(&old).unwrap();
        assert!(!json.contains("build_") && !json.contains("host_cpu"), "{json}");
        assert_eq!(serde_json::from_str::<Provenance>(&json).unwrap(), old);
    }

    #[test]
    fn host_cpu_round_trips_and_older_files_without_it_still_parse() {
        let p = Provenance { host_cpu: Some(HostCpu::new(100.0, 2, 166.0, 0.0, 150.0, 2.0)), ..Default::default() };
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(
            json["host_cpu"],
            serde_json::json!({"wall_s": 100.0, "cores": 2, "busy_s": 166.0, "steal_s": 0.0,
                "guest_s": 150.0, "own_s": 2.0, "other_s": 14.0})
        );
        assert_eq!(serde_json::from_value::<Provenance>(json).unwrap(), p);
        // A provenance.txt as series wrote them before the field existed.
        let old = r#"{"commit": null, "dirty": null, "scenario_sha256": null, "daemon_config_sha256": null,
            "speed": 10.0, "kernel": "7.2.13", "host_load_before": "0.9 1 1 1/2 3", "host_load_after": "1.2 1 1 1/2 3",
            "guest_wall_s": 403.0}"#;
        assert_eq!(serde_json::from_str::<Provenance>(old).unwrap().host_cpu, None);
    }
}
