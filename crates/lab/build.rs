//! Records the commit this build was made from (and whether tracked files differed from it),
//! so a result's provenance names the build that produced it, not only the checkout the
//! command ran in: the two differ when binaries are built, then the checkout moves.

use std::process::Command;

/// `--no-optional-locks`: `git status` otherwise writes back the index it refreshed (always
/// in a fresh clone, whose entries are "racy"), and the index is one of the files this script
/// reruns on: every cargo command after the first then rebuilt this crate and all above it
/// (4.5 min of a fresh CI run's `cargo test`, after the same build had just been made).
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").arg("--no-optional-locks").args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    // Outside a git checkout (a source tarball) nothing is recorded: provenance says None.
    let Some(commit) = git(&["rev-parse", "HEAD"]) else { return };
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).map(|s| !s.is_empty());
    println!("cargo:rustc-env=MEMQOS_BUILD_COMMIT={commit}");
    if let Some(dirty) = dirty {
        println!("cargo:rustc-env=MEMQOS_BUILD_DIRTY={dirty}");
    }
    // Run again when HEAD moves (a commit, a checkout) or a tracked source changes.
    for path in ["HEAD", "index", "packed-refs"] {
        if let Some(p) = git(&["rev-parse", "--git-path", path]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]).and_then(|r| git(&["rev-parse", "--git-path", &r])) {
        println!("cargo:rerun-if-changed={r}");
    }
    for path in ["../../crates", "../../Cargo.toml", "../../Cargo.lock"] {
        println!("cargo:rerun-if-changed={path}");
    }
}
