//! memory.swap.max of a tier's cgroups (the tier's `swap_max`).
//!
//! Where the host swaps (a swap device, zswap in front of it, zram), reclaim under the
//! parent's limit takes anonymous pages from whichever cgroup its LRU walk offers: a protected
//! cgroup's pages go out too and come back as major faults, a slowdown its memory PSI may not
//! show (a swap-in of a page outside its working set counts as IO). memory.swap.max = 0 keeps
//! a protected tier's pages in memory, so the lower tiers' memory.high pushes their pages out
//! instead. Static per tier; like every knob it is journaled before the first write and
//! restored. Nothing is written while the host has no active swap (the knob would change
//! nothing) or on a kernel without swap accounting (no such file); each is said once.

use crate::actuator::{Actuator, Request, Target};
use crate::beneath::FileError;
use memqos_policy::knobs::{swap_max, StaticDecision, TierStatic};
use memqos_policy::{Config, Observation};
use memqos_schema::KnobFile;
use std::collections::HashSet;
use std::path::PathBuf;

pub const FILE: &str = KnobFile::SwapMax.name();
const PROC_SWAPS: &str = "/proc/swaps";

pub struct SwapMaxes {
    swaps: PathBuf,
    /// Whether the last look at /proc/swaps found active swap (None: not looked yet).
    swap_on: Option<bool>,
    /// The kernel has no memory.swap.max: nothing more to do for this run.
    unsupported: bool,
    /// Cgroups already reported as unreadable: one message each, not one per tick.
    reported: HashSet<u64>,
    pub notes: Vec<String>,
}

impl SwapMaxes {
    /// None when every tier keeps memory.swap.max as found.
    pub fn new(cfg: &Config) -> Option<SwapMaxes> {
        cfg.tiers.iter().any(|(_, t)| t.swap_max.target().is_some()).then(|| SwapMaxes {
            swaps: PathBuf::from(PROC_SWAPS),
            swap_on: None,
            unsupported: false,
            reported: HashSet::new(),
            notes: Vec::new(),
        })
    }

    /// The writes that bring each observed cgroup's memory.swap.max to its tier's value, on
    /// the periodic path (/proc/swaps and one small file per cgroup of such a tier).
    pub fn plan(&mut self, cfg: &Config, obs: &Observation, act: &mut Actuator) -> Vec<Request> {
        if self.unsupported || !self.swap_active() {
            return Vec::new();
        }
        let mut writes = Vec::new();
        for c in &obs.cgroups {
            let Some(tier) = cfg.tiers.get(c.tier).filter(|t| TierStatic::SwapMax.target(t).is_some()) else {
                continue;
            };
            let current = match act.read(&c.path, c.id.get(), FILE) {
                Ok(v) => v,
                // The cgroup is there but has no memory.swap.max: the kernel does not account
                // swap per cgroup. Gone with its directory: a short-lived cgroup, nothing to say.
                Err(FileError::Vanished) => {
                    if act.read(&c.path, c.id.get(), "memory.current").is_ok() {
                        self.unsupported = true;
                        self.notes.push(format!(
                            "swap_max not applied: {} has no {FILE} (a kernel without swap accounting: CONFIG_MEMCG_SWAP off, or swapaccount=0 on its command line)",
                            memqos_cgroupfs::name::fs_path(&cfg.cgroup_root, &c.path).display()
                        ));
                        return Vec::new();
                    }
                    continue;
                }
                Err(FileError::Io(e)) => {
                    if self.reported.insert(c.id.get()) {
                        self.notes.push(format!(
                            "swap_max not applied to {}: cannot read {FILE}: {e}",
                            memqos_cgroupfs::name::fs_path(&cfg.cgroup_root, &c.path).display()
                        ));
                    }
                    continue;
                }
            };
            // Journaled: memqos wrote it, so a value other than the kernel's is not foreign.
            let ours = act.journal().original(c.id.get(), FILE).is_some();
            if let Some(StaticDecision::Write { value, reason }) =
                swap_max(tier, &current, ours, cfg.policy.foreign_knobs)
            {
                let target = Target::Cgroup { path: c.path.clone(), id: c.id.get() };
                writes.push(Request::new(target, FILE, value, reason));
            }
        }
        writes
    }

    /// Reads /proc/swaps; notes when swap goes off or on (and that swap_max waits for it).
    fn swap_active(&mut self) -> bool {
        let on = match std::fs::read_to_string(&self.swaps) {
            Ok(text) => active(&text),
            Err(e) => Err(format!("{}: {e}", self.swaps.display())),
        };
        let (on, why) = match on {
            Ok(on) => (on, None),
            Err(e) => (false, Some(e)),
        };
        let note = match (self.swap_on, on, why) {
            (Some(before), _, _) if before == on => None,
            (None, true, _) => None,
            (Some(_), true, _) => Some("swap is active now: swap_max applied".to_string()),
            (_, false, Some(e)) => Some(format!("swap_max not applied: cannot tell whether swap is active ({e})")),
            (_, false, None) => Some(
                "swap_max not applied: no active swap in /proc/swaps (it would change nothing); applied once there is"
                    .to_string(),
            ),
        };
        self.notes.extend(note);
        self.swap_on = Some(on);
        on
    }
}

/// Whether /proc/swaps lists an active device (zswap only works in front of one).
fn active(text: &str) -> Result<bool, String> {
    memqos_cgroupfs::procfs::parse_swaps(text).map(|d| !d.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swap_is_active_when_proc_swaps_lists_a_device() {
        let header = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n";
        assert_eq!(active(header), Ok(false));
        assert_eq!(active(&format!("{header}/dev/zram0 partition 4194300 0 100\n")), Ok(true));
        assert!(active(&format!("{header}/dev/x partition big 0 -2\n")).is_err());
    }

    #[test]
    fn swap_off_and_on_are_said_once_each() {
        let dir = tempfile::tempdir().unwrap();
        let swaps = dir.path().join("swaps");
        let header = "Filename Type Size Used Priority\n";
        let cfg = Config::from_str(
            "cgroup_root = \"/x\"\n[[tier]]\nname = \"a\"\nmatch = [\"a\"]\nprotect = \"low\"\n",
            "t.toml",
        )
        .unwrap();
        let mut s = SwapMaxes::new(&cfg).expect("a protected tier sets 0 by default");
        s.swaps = swaps.clone();
        std::fs::write(&swaps, header).unwrap();
        assert!(!s.swap_active() && !s.swap_active());
        assert_eq!(s.notes.len(), 1, "{:?}", s.notes);
        assert!(s.notes[0].contains("no active swap"), "{:?}", s.notes);
        std::fs::write(&swaps, format!("{header}/swap file 1024 0 -2\n")).unwrap();
        assert!(s.swap_active() && s.swap_active());
        assert_eq!(s.notes.len(), 2);
        assert!(s.notes[1].contains("active now"), "{:?}", s.notes);
        std::fs::remove_file(&swaps).unwrap();
        assert!(!s.swap_active());
        assert!(s.notes[2].contains("cannot tell"), "{:?}", s.notes);

        let keep = Config::from_str(
            "cgroup_root = \"/x\"\n[[tier]]\nname = \"a\"\nmatch = [\"a\"]\nprotect = \"low\"\nswap_max = \"keep\"\n",
            "t.toml",
        )
        .unwrap();
        assert!(SwapMaxes::new(&keep).is_none(), "nothing to do when every tier keeps it");
    }
}
