//! The hints a cgroup's creator gives in extended attributes (its tier flags,
//! `user.memqos.expected_peak`, `user.memqos.workload`), honoured only from trusted owners,
//! and the tier classification that reads them. Read through descriptors beneath the root.

use memqos_cgroupfs::beneath::{Dir, Root};
use memqos_policy::{Config, TierIndex, EXPECTED_PEAK_XATTR, WORKLOAD_XATTR};
use std::collections::HashMap;

/// A protected cgroup's declared expected peak ([`EXPECTED_PEAK_XATTR`]), read on every full
/// sample so a declaration made after the mkdir counts. A value that is not a size is ignored
/// with one `degraded` line naming the cgroup and the value (`bad`: what was said, per id).
pub(super) fn declaration(
    bad: &mut HashMap<u64, String>,
    notes: &mut Vec<String>,
    cg: &Dir,
    id: u64,
    rel: &str,
) -> Option<u64> {
    // A size with padding fits many times over.
    let attr = Xattr { cg, id, rel, name: EXPECTED_PEAK_XATTR, max: 256 };
    attr.parsed(bad, notes, memqos_policy::size::parse_size)
}

/// A cgroup's workload key ([`WORKLOAD_XATTR`]), read on every full sample like
/// declarations. A key that is not valid (`check_workload_key`, or longer than can be read)
/// is ignored with one `degraded` line per cgroup and value.
pub(super) fn workload(
    bad: &mut HashMap<u64, String>,
    notes: &mut Vec<String>,
    cg: &Dir,
    id: u64,
    rel: &str,
) -> Option<String> {
    let attr = Xattr { cg, id, rel, name: WORKLOAD_XATTR, max: 4 * memqos_policy::obs::MAX_WORKLOAD_KEY };
    attr.parsed(bad, notes, |v| memqos_policy::check_workload_key(v).map(|()| v.to_owned()))
}

/// A hint a cgroup's creator left in an extended attribute.
struct Xattr<'a> {
    cg: &'a Dir,
    id: u64,
    rel: &'a str,
    name: &'a str,
    /// Read up to this many bytes: past any valid value, so an overlong one is reported
    /// rather than silently taken as unset.
    max: usize,
}

impl Xattr<'_> {
    /// The value, trimmed and parsed; `None` when unset, unreadable (gone, no xattrs here) or
    /// invalid. An invalid value (overlong, not UTF-8, rejected by `parse`) gets one
    /// `degraded` line per cgroup and value (`bad`: what was said, per id).
    fn parsed<T>(
        &self,
        bad: &mut HashMap<u64, String>,
        notes: &mut Vec<String>,
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> Option<T> {
        let (shown, why) = match self.cg.xattr_bytes(self.name, self.max) {
            Ok(None) => return None,
            Err(e) if e.raw_os_error() == Some(libc::ERANGE) => {
                ("(overlong)".to_owned(), format!("longer than {} bytes", self.max))
            }
            Err(_) => return None,
            Ok(Some(bytes)) => match String::from_utf8(bytes) {
                Err(e) => (String::from_utf8_lossy(e.as_bytes()).into_owned(), "not UTF-8".to_owned()),
                Ok(v) => match parse(v.trim()) {
                    Ok(t) => return Some(t),
                    Err(e) => (v.trim().to_owned(), e),
                },
            },
        };
        if bad.get(&self.id) != Some(&shown) {
            notes.push(format!("{}: {} = {shown:?} ignored: {why}", self.rel, self.name));
            bad.insert(self.id, shown);
        }
        None
    }
}

/// Whether hints in the xattrs of the cgroup at `dir` are honoured: only from cgroups owned
/// by root or by the owner of `cgroup_root` (the user the tree was delegated to), as
/// systemd-oomd does. A tenant given a subtree of its own owns its cgroups and may set
/// `user.*` xattrs on them; it must not thereby pick its tier or reserve room that holds
/// everyone else back. `Ok(uid)`: the trusted owner; `Err(uid)`: the untrusted one.
pub(crate) fn trusted(root: &Root, dir: &Dir) -> Result<u32, u32> {
    match (dir.owner().ok(), root.owner().ok()) {
        (Some(0), _) => Ok(0),
        (Some(uid), Some(root_uid)) if uid == root_uid => Ok(uid),
        (Some(uid), _) => Err(uid),
        (None, _) => Err(u32::MAX),
    }
}

/// The tier of the cgroup at `rel`: by path and, where the config uses them, its xattrs.
/// Both count in full only on [`trusted`] cgroups: a tenant who owns its cgroups in a
/// delegated subtree chooses their names, so a name alone must not give it protection or a
/// negative oom_score_adj (`Tiers::classify_owned`), as a hint alone must not.
pub(crate) fn classify(cfg: &Config, root: Option<&Root>, rel: &str) -> Option<TierIndex> {
    if !cfg.tiers.uses_xattrs() && !cfg.tiers.any_privileged() {
        return cfg.tiers.classify(rel);
    }
    // A cgroup that cannot be opened (gone, or a symlink) has no owner to trust.
    let dir = root.and_then(|r| Some((r, r.cgroup(rel).ok()?)));
    let honoured = dir.as_ref().filter(|(r, d)| trusted(r, d).is_ok()).map(|(_, d)| d);
    cfg.tiers.classify_owned(rel, honoured.is_some(), |name| honoured.is_some_and(|d| d.xattr_flag(name)))
}

/// A learned-history key per owner: a key given by a delegated user is its own namespace,
/// so one user's runs never set the expectation of another's (root's keys stay as given).
pub(super) fn owned_key(uid: u32, key: String) -> String {
    if uid == 0 {
        key
    } else {
        format!("uid{uid}:{key}")
    }
}
