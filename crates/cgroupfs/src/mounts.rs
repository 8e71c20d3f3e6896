//! The cgroup2 mount a path lives on, from `/proc/self/mountinfo`: its mount point, the
//! hierarchy path it shows (the kernel prints cgroup paths from the hierarchy's root, e.g.
//! in OOM reports) and its super options (`memory_recursiveprot`, `nsdelegate`).

use std::path::{Path, PathBuf};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cgroup2Mount {
    pub mount_point: PathBuf,
    /// The hierarchy path mounted there ("/" unless a sub-tree or a cgroup namespace).
    pub root: String,
    pub super_options: Vec<String>,
}

impl Cgroup2Mount {
    pub fn has_option(&self, name: &str) -> bool {
        self.super_options.iter().any(|o| o == name)
    }

    /// The hierarchy path of `path` (a directory below the mount point), as the kernel
    /// prints it: "/qos/low" for /sys/fs/cgroup/qos/low on a whole-hierarchy mount.
    pub fn kernel_path(&self, path: &Path) -> Option<String> {
        let rest = path.strip_prefix(&self.mount_point).ok()?;
        let mut p = self.root.trim_end_matches('/').to_owned();
        for c in rest.components() {
            p.push('/');
            p.push_str(&c.as_os_str().to_string_lossy());
        }
        Some(if p.is_empty() { "/".into() } else { p })
    }
}

/// Every cgroup2 mount in a mountinfo text.
pub fn parse_cgroup2(mountinfo: &str) -> Vec<Cgroup2Mount> {
    crate::procfs::parse_mountinfo(mountinfo)
        .into_iter()
        .filter(|m| m.fstype == "cgroup2")
        .map(|m| Cgroup2Mount {
            mount_point: m.mount_point,
            root: m.root,
            super_options: m.super_options.split(',').map(str::to_owned).collect(),
        })
        .collect()
}

/// The cgroup2 mount holding `path` (the one with the longest mount point that is a prefix;
/// the last such line wins, as the last mount hides earlier ones).
pub fn cgroup2_of(mountinfo: &str, path: &Path) -> Option<Cgroup2Mount> {
    parse_cgroup2(mountinfo).into_iter().filter(|m| path.starts_with(&m.mount_point)).fold(
        None,
        |best: Option<Cgroup2Mount>, m| match best {
            Some(b) if b.mount_point.as_os_str().len() > m.mount_point.as_os_str().len() => Some(b),
            _ => Some(m),
        },
    )
}

/// [`cgroup2_of`] on this process's mountinfo.
pub fn current_cgroup2_of(path: &Path) -> Option<Cgroup2Mount> {
    cgroup2_of(&std::fs::read_to_string("/proc/self/mountinfo").ok()?, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "\
24 1 0:22 / / rw,relatime shared:1 - ext4 /dev/vda rw
30 24 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
31 24 0:27 /kubepods /mnt/my\\040cg rw - cgroup2 none rw
32 24 0:28 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
";

    #[test]
    fn finds_the_mount_its_options_and_kernel_paths() {
        let m = cgroup2_of(INFO, Path::new("/sys/fs/cgroup/qos/low")).unwrap();
        assert_eq!(m.mount_point, PathBuf::from("/sys/fs/cgroup"));
        assert!(m.has_option("memory_recursiveprot") && m.has_option("nsdelegate"));
        assert_eq!(m.kernel_path(Path::new("/sys/fs/cgroup/qos/low")).as_deref(), Some("/qos/low"));
        assert_eq!(m.kernel_path(Path::new("/sys/fs/cgroup")).as_deref(), Some("/"));
        let sub = cgroup2_of(INFO, Path::new("/mnt/my cg/burstable")).unwrap();
        assert!(!sub.has_option("memory_recursiveprot"));
        assert_eq!(sub.kernel_path(Path::new("/mnt/my cg/burstable")).as_deref(), Some("/kubepods/burstable"));
        // A cgroup v1 mount is not a cgroup2 mount.
        assert_eq!(cgroup2_of(INFO, Path::new("/sys/fs/cgroup/memory/x")).unwrap().mount_point, m.mount_point);
        assert!(cgroup2_of(INFO, Path::new("/home")).is_none());
    }
}
