//! Protection that cannot work: memory.low/min are hierarchical. The kernel caps a cgroup's
//! effective protection at its parent's effective protection (`effective_protection()` in
//! mm/page_counter.c), from the top level of the hierarchy down to the cgroup, so a
//! protected leaf below a slice whose memory.low and memory.min are 0 is protected only
//! against reclaim that starts inside that slice (its own memory.high/max); host-wide
//! reclaim and limits above the slice ignore it. A guest measured exactly this: a service's
//! memory.low below system.slice was swapped out far below its low.
//!
//! `memory_recursiveprot` (systemd mounts with it) is the other half: with it, protection
//! set on the slice also covers children that claim none. The daemon checks once at
//! start-up and after each reload, and logs one `protection_void` event per such ancestor.

use crate::mounts::Cgroup2Mount;
use crate::observe::Seen;
use memqos_cgroupfs::{Cgroup, Limit};
use memqos_policy::{Config, Protect};
use std::collections::BTreeMap;
use std::path::Path;

pub use memqos_schema::protection::Finding;

/// Up to this many cgroups are named per ancestor.
const NAMED: usize = 5;

/// The nearest unprotected ancestor of each protected cgroup, grouped by ancestor. `read`
/// returns (memory.low, memory.min) of a directory, None when it has none (the hierarchy
/// root).
pub fn check_with(
    cfg: &Config,
    root: &Path,
    seen: &[Seen],
    mount: &Cgroup2Mount,
    mut read: impl FnMut(&Path) -> Option<(Limit, Limit)>,
) -> Vec<Finding> {
    let recursiveprot = mount.has_option("memory_recursiveprot");
    let mut below: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for s in seen {
        let protected = cfg.tiers.iter().any(|(_, t)| t.name == s.tier && t.protect != Protect::None);
        if !protected {
            continue;
        }
        let path = root.join(&s.cgroup);
        // Ancestors from the parent up to a child of the hierarchy's root.
        for a in path.ancestors().skip(1) {
            if a == mount.mount_point || !a.starts_with(&mount.mount_point) {
                break;
            }
            match read(a) {
                Some((low, min)) if low == Limit::Bytes(0) && min == Limit::Bytes(0) => {
                    below.entry(a.display().to_string()).or_default().push(s.cgroup.clone());
                    break;
                }
                Some(_) => continue,
                None => break,
            }
        }
    }
    below
        .into_iter()
        .map(|(ancestor, mut protected)| {
            let n = protected.len();
            protected.truncate(NAMED);
            let more = if n > NAMED { format!(" and {} more", n - NAMED) } else { String::new() };
            let message = format!(
                "protection of {}{more} is capped by {ancestor}, whose memory.low and memory.min are 0: the kernel limits a cgroup's protection to its parent's, so host-wide reclaim (and any limit above {ancestor}) ignores it. Give {ancestor} a memory.low covering its protected children (systemd: MemoryLow= on the slice){}",
                protected.join(", "),
                if recursiveprot {
                    ""
                } else {
                    "; and mount cgroup2 with memory_recursiveprot (as systemd does) so that protection also covers children that set none"
                }
            );
            Finding { ancestor, protected, recursiveprot, message }
        })
        .collect()
}

/// [`check_with`] on the live tree.
pub fn check(cfg: &Config, root: &Path, seen: &[Seen], mount: &Cgroup2Mount) -> Vec<Finding> {
    check_with(cfg, root, seen, mount, |dir| {
        let cg = Cgroup::new(dir);
        Some((cg.limit("memory.low").ok()?, cg.limit("memory.min").ok()?))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use memqos_cgroupfs::MemoryEvents;
    use memqos_policy::Knobs;
    use std::path::PathBuf;

    fn seen(cgroup: &str, tier: &str) -> Seen {
        Seen {
            cgroup: cgroup.into(),
            cgroup_id: 1,
            tier: tier.into(),
            usage_bytes: 0,
            knobs: Knobs::default(),
            original: Knobs::default(),
            psi_some_avg10: 0.0,
            events: MemoryEvents::default(),
        }
    }

    #[test]
    fn names_the_nearest_unprotected_ancestor_of_protected_cgroups_only() {
        let cfg = Config::from_str(
            "cgroup_root = \"/sys/fs/cgroup\"\n[[tier]]\nname = \"system\"\nmatch = [\"system.slice/**\", \"top\"]\nprotect = \"low\"\n[[tier]]\nname = \"rest\"\nmatch = [\"**\"]\nthrottle = true\n",
            "t",
        )
        .unwrap();
        let mount = |opts: &[&str]| Cgroup2Mount {
            mount_point: PathBuf::from("/sys/fs/cgroup"),
            root: "/".into(),
            super_options: opts.iter().map(|s| s.to_string()).collect(),
        };
        let seen = [
            seen("system.slice/db.service", "system"),
            seen("system.slice/web.slice/web.service", "system"),
            seen("top", "system"),
            seen("user.slice/x.scope", "rest"),
        ];
        let lows: BTreeMap<&str, u64> = [("/sys/fs/cgroup/system.slice/web.slice", 1 << 30)].into();
        let read = |p: &Path| {
            let low = lows.get(p.to_str().unwrap()).copied().unwrap_or(0);
            Some((Limit::Bytes(low), Limit::Bytes(0)))
        };
        let f = check_with(&cfg, Path::new("/sys/fs/cgroup"), &seen, &mount(&[]), read);
        // web.slice protects web.service, but system.slice above it has nothing: the nearest
        // unprotected ancestor of both services is system.slice. `top` sits at the top level.
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].ancestor, "/sys/fs/cgroup/system.slice");
        assert_eq!(f[0].protected, ["system.slice/db.service", "system.slice/web.slice/web.service"]);
        assert!(f[0].message.contains("memory_recursiveprot") && !f[0].recursiveprot);
        let f = check_with(&cfg, Path::new("/sys/fs/cgroup"), &seen, &mount(&["memory_recursiveprot"]), read);
        assert!(f[0].recursiveprot && !f[0].message.contains("mount cgroup2"), "{}", f[0].message);
    }
}
