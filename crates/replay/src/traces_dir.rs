//! Where the agent traces are: `$MEMQOS_TRACES` if set, else the `traces/agent-haiku` folder
//! that ships with the repository.

use std::path::{Path, PathBuf};

/// The trace set's folder inside the repository.
pub const IN_REPO: &str = "traces/agent-haiku";

/// Why no trace folder could be used.
#[derive(Debug, thiserror::Error)]
pub enum TracesDirError {
    #[error("{origin} = {}: {source}", path.display())]
    Unusable { origin: &'static str, path: PathBuf, source: std::io::Error },
    #[error(
        "cannot find the agent traces: no {IN_REPO} in the working directory or its parents, nor in \
         the source tree this binary was built from ({}); pass --traces DIR or set MEMQOS_TRACES",
        built_from.display()
    )]
    NotFound { built_from: PathBuf },
}

/// Resolves the trace folder, canonical (a guest sees the host root, not our symlinks):
/// an explicit `--traces` argument, else `$MEMQOS_TRACES`, else `traces/agent-haiku` in the
/// working directory or one of its parents, else the one in the source tree this crate was
/// built from (so tests and `cargo run` work from anywhere in the checkout).
pub fn resolve(explicit: Option<&Path>) -> Result<PathBuf, TracesDirError> {
    let canonical = |origin: &'static str, path: PathBuf| {
        std::fs::canonicalize(&path).map_err(|source| TracesDirError::Unusable { origin, path, source })
    };
    if let Some(p) = explicit {
        return canonical("--traces", p.to_path_buf());
    }
    if let Some(p) = std::env::var_os("MEMQOS_TRACES") {
        return canonical("MEMQOS_TRACES", PathBuf::from(p));
    }
    if let Ok(cwd) = std::env::current_dir() {
        if let Some(dir) = cwd.ancestors().map(|d| d.join(IN_REPO)).find(|c| c.is_dir()) {
            return canonical("traces folder", dir);
        }
    }
    let built_from = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(IN_REPO);
    if built_from.is_dir() {
        return canonical("traces folder", built_from);
    }
    Err(TracesDirError::NotFound { built_from })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_folder_wins_and_a_missing_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(resolve(Some(dir.path())).unwrap(), std::fs::canonicalize(dir.path()).unwrap());
        let missing = dir.path().join("nope");
        let err = resolve(Some(&missing)).unwrap_err().to_string();
        assert!(err.starts_with("--traces = ") && err.contains("nope"), "{err}");
    }

    #[test]
    fn the_repository_ships_the_traces() {
        let built_from = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(IN_REPO);
        let tasks = std::fs::read_dir(&built_from).unwrap().count();
        assert_eq!(tasks, 55, "{}", built_from.display());
    }
}
