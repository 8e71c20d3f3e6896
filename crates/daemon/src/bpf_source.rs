//! The BPF signal source: thresholds on protected cgroups' reclaim, over-high, scan and
//! fault counts, counted in the kernel (memqos-bpf `pressure`), delivered through a ring
//! buffer whose fd sits in the daemon's poll set, so a crossing wakes the loop at once.

use memqos_bpf::pressure::{self, Kind, Options, PressureSource, Thresholds};
use memqos_bpf::Btf;
use memqos_policy::{BpfKind, CgroupId, SignalEvent};
use memqos_schema::events::BpfHooks;
use std::collections::HashMap;
use std::os::fd::RawFd;

pub struct BpfSource {
    src: PressureSource,
    /// Watched protected cgroups: cgroup id (inode) -> relative path, for the log.
    watched: HashMap<CgroupId, String>,
}

/// One crossing, as the daemon logs it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Crossing {
    pub cgroup: String,
    pub cgroup_id: CgroupId,
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

    /// Watches exactly the `protected` cgroups (id, path) (a recreated cgroup has a new id
    /// and is watched anew); forgets vanished ones.
    pub fn sync(&mut self, protected: &[(CgroupId, String)]) {
        let wanted: HashMap<CgroupId, &str> = protected.iter().map(|(id, p)| (*id, p.as_str())).collect();
        let gone: Vec<CgroupId> = self.watched.keys().filter(|id| !wanted.contains_key(id)).copied().collect();
        for id in gone {
            self.watched.remove(&id);
            self.src.unwatch(id.get());
        }
        for (id, p) in protected {
            if let Some(path) = self.watched.get_mut(id) {
                path.clone_from(p);
                continue;
            }
            self.watched.insert(*id, p.clone());
            let _ = self.src.watch(id.get(), &Thresholds::PROTECTED);
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
                let id = CgroupId(ev.cgroup_id);
                let path = self.watched.get(&id)?;
                Some(Crossing {
                    cgroup: path.clone(),
                    cgroup_id: id,
                    kind: ev.kind,
                    value: ev.value,
                    ktime_ns: ev.ktime_ns,
                })
            })
            .collect()
    }

    /// The engine's view of a crossing: its value and which counter crossed.
    pub fn signal(c: &Crossing) -> SignalEvent {
        SignalEvent::BpfThreshold { value: c.value, counter: Some(counter(c.kind)) }
    }

    /// Counters of every watched cgroup (for status and tests), by path.
    pub fn counters(&self) -> Vec<(String, pressure::Counters)> {
        self.watched.iter().filter_map(|(id, path)| Some((path.clone(), self.src.counters(id.get())?))).collect()
    }

    pub fn stats(&self) -> pressure::Stats {
        self.src.stats()
    }
}

/// The BPF source's kind as the engine's word for it.
fn counter(kind: Kind) -> BpfKind {
    match kind {
        Kind::Reclaim => BpfKind::Reclaim,
        Kind::OverHigh => BpfKind::OverHigh,
        Kind::Scan => BpfKind::Scan,
        Kind::Fault => BpfKind::Fault,
        Kind::MajFault => BpfKind::MajFault,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_keeps_its_name_as_a_counter() {
        for kind in Kind::ALL {
            let logged = serde_json::to_value(kind).unwrap();
            assert_eq!(
                logged.as_str(),
                Some(counter(kind).as_str()),
                "the bpf event's kind and the trigger's counter agree"
            );
        }
    }
}
