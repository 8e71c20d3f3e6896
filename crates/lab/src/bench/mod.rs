//! `memqos-lab bench`: figures with medians and spread, never pass/fail.

pub mod churn;
pub mod faults;
pub mod limits;
pub mod reaction;
pub mod run;
pub mod stats;

/// The file `name` a guest wrote into its results directory; if it wrote none, an error
/// naming the kernel and the guest's exit with the console's last 40 lines.
pub(crate) fn guest_result(
    kernel: &memqos_vmtest::Kernel,
    run: &memqos_vmtest::GuestRun,
    name: &str,
) -> anyhow::Result<String> {
    use anyhow::Context as _;
    let file = run.results_dir.join(name);
    std::fs::read_to_string(&file).with_context(|| {
        let lines: Vec<&str> = run.console.lines().collect();
        format!(
            "guest on {} wrote no {} (exit {}); console:\n{}",
            kernel.release(),
            file.display(),
            run.exit_code,
            lines[lines.len().saturating_sub(40)..].join("\n")
        )
    })
}

/// Writes a bench's result document to `path` (its directory made if missing), pretty JSON
/// with a final newline, and says so on stderr.
pub(crate) fn write_result(path: &std::path::Path, doc: &serde_json::Value) -> anyhow::Result<()> {
    use anyhow::Context as _;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(path, serde_json::to_string_pretty(doc)? + "\n")
        .with_context(|| format!("writing {}", path.display()))?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

/// A per-kernel result of a bench that writes one JSON file for every kernel it measured.
pub(crate) trait PerKernel: serde::Serialize + serde::de::DeserializeOwned {
    fn kernel(&self) -> &str;
}

/// `fresh` plus the kernels of the earlier file at `path` that this run did not measure, in
/// kernel order: running `--kernel 6.12` and then `--kernel 7` builds the same file as
/// `--kernel all`. An unreadable or older-format file contributes nothing.
pub(crate) fn keep_earlier_kernels<T: PerKernel>(path: &std::path::Path, fresh: Vec<T>) -> Vec<T> {
    let earlier: Vec<T> = std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|old| serde_json::from_value(old["kernels"].clone()).ok())
        .unwrap_or_default();
    let mut all: Vec<T> = earlier.into_iter().filter(|k| !fresh.iter().any(|n| n.kernel() == k.kernel())).collect();
    all.extend(fresh);
    all.sort_by(|a, b| a.kernel().cmp(b.kernel()));
    all
}
