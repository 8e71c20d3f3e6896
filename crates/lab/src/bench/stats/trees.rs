//! The cgroups measured: the live tree under ROOT/memqos-bench, fake trees of copied files,
//! and the scratch directories that hold them.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

pub(super) struct TempDir(pub(super) PathBuf);

impl TempDir {
    pub(super) fn new(tag: &str) -> Result<TempDir> {
        let base = if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
        let dir = base.join(format!("{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(TempDir(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The benchmark's cgroups in live mode; removed on drop (the process moved back first).
pub(super) struct LiveTree {
    base: PathBuf,
    original_cgroup: PathBuf,
    /// Touched memory charged to memqos-bench/one for the benchmark's duration.
    #[allow(dead_code)]
    ballast: Vec<u8>,
}

impl LiveTree {
    pub(super) fn create(root: &Path, sizes: &[usize]) -> Result<LiveTree> {
        let base = root.join("memqos-bench");
        let cg = |p: &Path| -> Result<()> {
            match std::fs::create_dir(p) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
                Err(e) => Err(e).with_context(|| format!("creating cgroup {}", p.display())),
            }
        };
        let enable = |p: &Path| {
            std::fs::write(p.join("cgroup.subtree_control"), "+memory")
                .with_context(|| format!("enabling memory in {}", p.display()))
        };
        let own = std::fs::read_to_string("/proc/self/cgroup")?;
        let rel = own.lines().find_map(|l| l.strip_prefix("0::")).unwrap_or("/").trim_start_matches('/').to_owned();
        let mut tree = LiveTree { base: base.clone(), original_cgroup: root.join(rel), ballast: Vec::new() };
        cg(&base)?;
        enable(&base)?;
        cg(&base.join("one"))?;
        for &n in sizes {
            let t = base.join(format!("t{n}"));
            cg(&t)?;
            if n > 1 {
                enable(&t)?;
                for i in 1..n {
                    cg(&t.join(format!("c{i:04}")))?;
                }
            }
        }
        // The process itself in "one", so its counters are a real process's, not zeros:
        // charges do not move with a process, so allocate and touch memory after joining.
        std::fs::write(base.join("one/cgroup.procs"), std::process::id().to_string())
            .context("joining memqos-bench/one")?;
        let mut ballast = vec![0u8; 16 << 20];
        for (i, b) in ballast.iter_mut().enumerate().step_by(4096) {
            *b = i as u8 | 1;
        }
        let cache = std::env::temp_dir().join(format!("memqos-bench-cache-{}", std::process::id()));
        std::fs::write(&cache, &ballast[..4 << 20])?;
        let _ = std::fs::remove_file(&cache);
        tree.ballast = ballast;
        Ok(tree)
    }
}

impl Drop for LiveTree {
    fn drop(&mut self) {
        let _ = std::fs::write(self.original_cgroup.join("cgroup.procs"), std::process::id().to_string());
        for d in dirs_below(&self.base).iter().rev() {
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// `root` and every directory below it, each before its subdirectories (a directory that
/// cannot be read counts, without what is below it).
pub(super) fn dirs_below(root: &Path) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        if let Ok(rd) = std::fs::read_dir(&d) {
            stack.extend(rd.flatten().filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false)).map(|e| e.path()));
        }
        dirs.push(d);
    }
    dirs
}

/// The files a template cgroup of the fake trees holds: the ones the text backend reads.
pub(super) const TEMPLATE_FILES: [&str; 9] = memqos_stats::FILES;

/// A fake tree of `n` cgroups (root + n-1 children) whose files are copies of `template`.
pub(super) fn fake_tree(dir: &Path, template: &Path, n: usize) -> Result<()> {
    let fill = |d: &Path| -> Result<()> {
        std::fs::create_dir_all(d)?;
        for f in TEMPLATE_FILES {
            let src = template.join(f);
            std::fs::copy(&src, d.join(f)).with_context(|| format!("copying {}", src.display()))?;
        }
        Ok(())
    };
    fill(dir)?;
    for i in 1..n {
        fill(&dir.join(format!("c{i:04}")))?;
    }
    // What a kernel's cgroup.stat says, so the text backend skips the directory walk as it
    // does on a live tree whose shape has not changed.
    std::fs::write(dir.join("cgroup.stat"), format!("nr_descendants {}\nnr_dying_descendants 0\n", n - 1))?;
    Ok(())
}
