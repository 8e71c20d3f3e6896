//! The BPF signal source: thresholds on protected cgroups' reclaim, over-high, scan and
//! fault counts, counted in the kernel (memqos-bpf `pressure`), delivered through a ring
//! buffer whose fd sits in the daemon's poll set, so a crossing wakes the loop at once.

use memqos_bpf::pressure::{self, Kind, Options, PressureSource, Thresholds};
use memqos_bpf::Btf;
use memqos_policy::SignalEvent;
use memqos_schema::events::BpfHooks;
use std::collections::HashMap;
use std::os::fd::RawFd;

pub struct BpfSource {
    src: PressureSource,
    /// Watched protected cgroups: relative path -> cgroup id (inode), and back.
    watched: HashMap<String, u64>,
    by_id: HashMap<u64, String>,
}

/// One crossing, as the daemon logs it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Crossing {
    pub cgroup: String,
    pub cgroup_id: u64,
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
        Ok(BpfSource { src, watched: HashMap::new(), by_id: HashMap::new() })
    }

    /// `program -> target` of every attached program, and attach errors, for the log.
    pub fn describe(&self) -> BpfHooks {
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
        BpfHooks { attached, attach_failed: failed }
    }

    /// Watches exactly the `protected` cgroups (path, id) (a recreated cgroup has a new id
    /// and is re-watched); forgets vanished ones.
    pub fn sync(&mut self, protected: &[(String, u64)]) {
        let wanted: HashMap<&str, u64> = protected.iter().map(|(p, id)| (p.as_str(), *id)).collect();
        let gone: Vec<String> =
            self.watched.iter().filter(|(p, id)| wanted.get(p.as_str()) != Some(id)).map(|(p, _)| p.clone()).collect();
        for p in gone {
            if let Some(cg) = self.watched.remove(&p) {
                self.by_id.remove(&cg);
                self.src.unwatch(cg);
            }
        }
        for (p, cg) in protected {
            if self.watched.contains_key(p) {
                continue;
            }
            self.watched.insert(p.clone(), *cg);
            self.by_id.insert(*cg, p.clone());
            let _ = self.src.watch(*cg, &Thresholds::PROTECTED);
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
                let path = self.by_id.get(&ev.cgroup_id)?;
                Some(Crossing {
                    cgroup: path.clone(),
                    cgroup_id: ev.cgroup_id,
                    kind: ev.kind,
                    value: ev.value,
                    ktime_ns: ev.ktime_ns,
                })
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
