//! The BPF signal source: thresholds on protected cgroups' reclaim, over-high, scan and
//! fault counts, counted in the kernel (memqos-bpf `pressure`), delivered through a ring
//! buffer whose fd sits in the daemon's poll set, so a crossing wakes the loop at once.

use memqos_bpf::pressure::{self, Kind, Options, PressureSource, Thresholds};
use memqos_bpf::Btf;
use memqos_policy::SignalEvent;
use std::collections::HashMap;
use std::os::fd::RawFd;
use std::path::Path;

pub struct BpfSource {
    src: PressureSource,
    /// Watched protected cgroups: relative id -> cgroup id (inode).
    watched: HashMap<String, u64>,
}

/// One crossing, as the daemon logs it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Crossing {
    pub cgroup: String,
    pub kind: Kind,
    pub value: u64,
    /// CLOCK_MONOTONIC ns of the crossing in the kernel.
    pub ktime_ns: u64,
}

impl BpfSource {
    /// Loads and attaches the programs this kernel supports. The error is one sentence for
    /// the log: why the source is off.
    pub fn start() -> Result<BpfSource, String> {
        let path = std::env::var_os("MEMQOS_VMLINUX_BTF")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| memqos_bpf::btf::VMLINUX_BTF.into());
        let btf = Btf::load(&path).map_err(|e| pressure::LoadError::NoBtf(format!("{e}")).to_string())?;
        let src = PressureSource::load(&btf, Options::default()).map_err(|e| e.to_string())?;
        Ok(BpfSource { src, watched: HashMap::new() })
    }

    /// `program -> target` of every attached program, and attach errors, for the log.
    pub fn describe(&self) -> serde_json::Value {
        let attached: Vec<String> = self
            .src
            .hooks()
            .iter()
            .filter(|h| h.attached == Some(Ok(())))
            .map(|h| format!("{} ({})", h.program, h.target))
            .collect();
        let failed: Vec<String> = self
            .src
            .hooks()
            .iter()
            .filter_map(|h| match &h.attached {
                Some(Err(e)) => Some(format!("{}: {e}", h.program)),
                _ => None,
            })
            .collect();
        serde_json::json!({"attached": attached, "attach_failed": failed})
    }

    /// Watches exactly the `protected` cgroups below `root` (a recreated cgroup gets a new
    /// id and is re-watched); forgets vanished ones.
    pub fn sync(&mut self, root: &Path, protected: &[String]) {
        let gone: Vec<String> = self.watched.keys().filter(|id| !protected.contains(id)).cloned().collect();
        for id in gone {
            if let Some(cg) = self.watched.remove(&id) {
                self.src.unwatch(cg);
            }
        }
        for id in protected {
            let Ok(cg) = pressure::cgroup_id(&root.join(id)) else { continue };
            if self.watched.get(id) == Some(&cg) {
                continue;
            }
            if let Some(old) = self.watched.insert(id.clone(), cg) {
                self.src.unwatch(old);
            }
            let _ = self.src.watch(cg, &Thresholds::PROTECTED);
        }
    }

    pub fn fd(&self) -> RawFd {
        self.src.fd()
    }

    /// Events waiting in the ring, mapped to managed cgroups (others are dropped).
    pub fn drain(&mut self) -> Vec<Crossing> {
        let events = self.src.drain();
        events
            .into_iter()
            .filter_map(|ev| {
                let (id, _) = self.watched.iter().find(|(_, &cg)| cg == ev.cgroup_id)?;
                Some(Crossing { cgroup: id.clone(), kind: ev.kind, value: ev.value, ktime_ns: ev.ktime_ns })
            })
            .collect()
    }

    /// The engine's view of a crossing.
    pub fn signal(c: &Crossing) -> SignalEvent {
        SignalEvent::BpfThreshold { value: c.value }
    }

    /// Counters of every watched cgroup (for status and tests).
    pub fn counters(&self) -> Vec<(String, pressure::Counters)> {
        self.watched.iter().filter_map(|(id, &cg)| Some((id.clone(), self.src.counters(cg)?))).collect()
    }

    pub fn stats(&self) -> pressure::Stats {
        self.src.stats()
    }
}
