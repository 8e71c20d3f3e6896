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

use crate::actuator::Actuator;
use crate::tier_static::{Missing, StaticKnob, TierStatics};
use memqos_policy::knobs::TierStatic;
use memqos_policy::{CgroupObs, Config};
use memqos_schema::KnobFile;
use std::path::Path;

pub const FILE: &str = KnobFile::SwapMax.name();
/// Where the host lists its active swap devices (`Options::proc_swaps` by default).
pub const PROC_SWAPS: &str = "/proc/swaps";

/// memory.swap.max on every cgroup of a tier that does not keep it.
pub type SwapMaxes = TierStatics<SwapMax>;

pub struct SwapMax {
    /// /proc/swaps as the periodic sample last read it (`read_swaps`): the daemon hands it
    /// over before each plan, so the file is read once per tick.
    pub(crate) now: Result<bool, String>,
    /// Whether the last look at /proc/swaps found active swap (None: not looked yet).
    swap_on: Option<bool>,
    /// The kernel has no memory.swap.max: nothing more to do for this run.
    unsupported: bool,
}

impl Default for SwapMax {
    fn default() -> Self {
        SwapMax { now: Err("not read yet".into()), swap_on: None, unsupported: false }
    }
}

impl StaticKnob for SwapMax {
    const KNOB: TierStatic = TierStatic::SwapMax;

    fn active(&mut self, notes: &mut Vec<String>) -> bool {
        !self.unsupported && self.swap_active(notes)
    }

    // The cgroup is there but has no memory.swap.max: the kernel does not account swap per
    // cgroup. Gone with its directory: a short-lived cgroup, nothing to say.
    fn missing(&mut self, cfg: &Config, c: &CgroupObs, _: bool, act: &mut Actuator) -> Missing {
        if act.read(&c.path, c.id.get(), "memory.current").is_err() {
            return Missing::Gone;
        }
        self.unsupported = true;
        Missing::Unsupported(format!(
            "swap_max not applied: {} has no {FILE} (a kernel without swap accounting: CONFIG_MEMCG_SWAP off, or swapaccount=0 on its command line)",
            memqos_cgroupfs::name::fs_path(&cfg.cgroup_root, &c.path).display()
        ))
    }

    fn unreadable(path: &std::path::Path, why: &str) -> String {
        format!("swap_max not applied to {}: cannot read {FILE}: {why}", path.display())
    }
}

impl SwapMax {
    /// Whether swap is active (`now`); notes when it goes off or on (and that swap_max waits
    /// for it).
    fn swap_active(&mut self, notes: &mut Vec<String>) -> bool {
        let (on, why) = match self.now.clone() {
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
        notes.extend(note);
        self.swap_on = Some(on);
        on
    }
}

/// Whether /proc/swaps lists an active device (zswap only works in front of one).
fn active(text: &str) -> Result<bool, String> {
    memqos_cgroupfs::procfs::parse_swaps(text).map(|d| !d.is_empty())
}

/// Reads `swaps` (/proc/swaps): whether it lists an active device, or why that cannot be told.
/// The one reader of the file: the periodic sample calls it, and both the engine
/// (`ParentObs::swapless`) and swap_max use the answer.
pub(crate) fn read_swaps(swaps: &Path) -> Result<bool, String> {
    let text = std::fs::read_to_string(swaps).map_err(|e| format!("{}: {e}", swaps.display()))?;
    active(&text)
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
    fn the_host_is_swapless_only_when_proc_swaps_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let swaps = dir.path().join("swaps");
        assert!(read_swaps(&swaps).is_err(), "unreadable: cannot tell");
        std::fs::write(&swaps, "Filename Type Size Used Priority\n").unwrap();
        assert_eq!(read_swaps(&swaps), Ok(false));
        std::fs::write(&swaps, "Filename Type Size Used Priority\n/swap file 1024 0 -2\n").unwrap();
        assert_eq!(read_swaps(&swaps), Ok(true));
        std::fs::write(&swaps, "Filename Type Size Used Priority\n/x partition big 0 -2\n").unwrap();
        assert!(read_swaps(&swaps).is_err(), "malformed: cannot tell");
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
        // What the daemon does each tick: the sample's reading, handed over.
        let active = |s: &mut SwapMaxes| {
            s.knob.now = read_swaps(&swaps);
            s.knob.swap_active(&mut s.notes)
        };
        std::fs::write(&swaps, header).unwrap();
        assert!(!active(&mut s) && !active(&mut s));
        assert_eq!(s.notes.len(), 1, "{:?}", s.notes);
        assert!(s.notes[0].contains("no active swap"), "{:?}", s.notes);
        std::fs::write(&swaps, format!("{header}/swap file 1024 0 -2\n")).unwrap();
        assert!(active(&mut s) && active(&mut s));
        assert_eq!(s.notes.len(), 2);
        assert!(s.notes[1].contains("active now"), "{:?}", s.notes);
        std::fs::remove_file(&swaps).unwrap();
        assert!(!active(&mut s));
        assert!(s.notes[2].contains("cannot tell"), "{:?}", s.notes);

        let keep = Config::from_str(
            "cgroup_root = \"/x\"\n[[tier]]\nname = \"a\"\nmatch = [\"a\"]\nprotect = \"low\"\nswap_max = \"keep\"\n",
            "t.toml",
        )
        .unwrap();
        assert!(SwapMaxes::new(&keep).is_none(), "nothing to do when every tier keeps it");
    }
}
