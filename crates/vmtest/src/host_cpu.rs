//! How busy the host's CPUs were while a guest ran, and who kept them busy. A TCG guest needs
//! the host's cores; when other host work takes them, every time measured inside the guest
//! stretches. The host's load average cannot tell that apart from the guest's own demand, so
//! the CPU the whole host spent (/proc/stat) is compared with what QEMU spent (it is a child
//! this process waits for, so `RUSAGE_CHILDREN` holds it once it has exited) and with what
//! this process spent beside it (`RUSAGE_SELF`); the rest is other host work.

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

const PROC_STAT: &str = "/proc/stat";

/// The host's CPU over one guest's lifetime, in seconds of CPU time unless named otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HostCpu {
    /// Host wall seconds from QEMU's start to its exit.
    pub wall_s: f64,
    /// Online CPUs: the host's capacity is `wall_s × cores`.
    pub cores: u32,
    /// Every CPU's user, nice, system, irq and softirq time: not idle, not iowait (a CPU
    /// waiting on a disk could have run QEMU) and not steal (a hypervisor's, below).
    pub busy_s: f64,
    /// Time a hypervisor under this host ran something else while this host wanted the CPU.
    pub steal_s: f64,
    /// QEMU's user and system time: the guest, its emulation and its I/O threads.
    pub guest_s: f64,
    /// This process's own time meanwhile (reading the console, copying results).
    pub own_s: f64,
    /// `busy_s − guest_s − own_s`, at least 0: CPU that other host work took.
    pub other_s: f64,
}

impl HostCpu {
    /// Derives `other_s` from the rest. Ticks are 1/USER_HZ s and rusage is exact, so the
    /// difference can come out slightly negative on an otherwise idle host: that is 0.
    pub fn new(wall_s: f64, cores: u32, busy_s: f64, steal_s: f64, guest_s: f64, own_s: f64) -> HostCpu {
        let r = |x: f64| (x * 100.0).round() / 100.0;
        HostCpu {
            wall_s: r(wall_s),
            cores,
            busy_s: r(busy_s),
            steal_s: r(steal_s),
            guest_s: r(guest_s),
            own_s: r(own_s),
            other_s: r((busy_s - guest_s - own_s).max(0.0)),
        }
    }

    /// Other host work as a share of the host's capacity (0.07: 7% of every core, on average).
    pub fn other_share(&self) -> Option<f64> {
        self.share(self.other_s)
    }

    /// Steal as a share of the host's capacity.
    pub fn steal_share(&self) -> Option<f64> {
        self.share(self.steal_s)
    }

    fn share(&self, secs: f64) -> Option<f64> {
        let capacity = self.wall_s * f64::from(self.cores);
        (capacity > 0.0).then(|| secs / capacity)
    }

    /// "other work took 7% of 2 cores during the guest, steal 0%".
    pub fn summary(&self) -> String {
        let pct = |s: Option<f64>| s.map_or("?".to_string(), |s| format!("{:.0}%", s * 100.0));
        format!(
            "other work took {} of {} cores during the guest, steal {}",
            pct(self.other_share()),
            self.cores,
            pct(self.steal_share())
        )
    }
}

/// The aggregate `cpu` line of /proc/stat, in USER_HZ ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuTicks {
    pub busy: u64,
    pub steal: u64,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StatError {
    #[error("{PROC_STAT}: no aggregate \"cpu\" line")]
    NoCpuLine,
    #[error("{PROC_STAT}: the \"cpu\" line has {0} fields, expected at least 8 (user nice system idle iowait irq softirq steal)")]
    Short(usize),
    #[error("{PROC_STAT}: field {index} of the \"cpu\" line is {value:?}, not a tick count")]
    NotANumber { index: usize, value: String },
}

/// The aggregate `cpu` line of /proc/stat's text. guest and guest_nice (fields 9 and 10) are
/// already counted in user and nice, so they are not added again.
pub fn parse_proc_stat(text: &str) -> Result<CpuTicks, StatError> {
    let line = text.lines().find(|l| l.split_whitespace().next() == Some("cpu")).ok_or(StatError::NoCpuLine)?;
    let fields: Vec<&str> = line.split_whitespace().skip(1).collect();
    if fields.len() < 8 {
        return Err(StatError::Short(fields.len()));
    }
    let mut ticks = [0u64; 8];
    for (i, (t, f)) in ticks.iter_mut().zip(&fields).enumerate() {
        *t = f.parse().map_err(|_| StatError::NotANumber { index: i + 1, value: f.to_string() })?;
    }
    let [user, nice, system, _idle, _iowait, irq, softirq, steal] = ticks;
    Ok(CpuTicks { busy: user + nice + system + irq + softirq, steal })
}

/// What [`Probe::start`] saw, to subtract from what [`Probe::finish`] sees.
#[derive(Debug)]
struct Sample {
    at: Instant,
    ticks: CpuTicks,
    children_s: f64,
    self_s: f64,
}

/// Started right before QEMU is spawned, finished right after it is waited for. `None` when
/// the host does not say (no /proc/stat): the guest's run goes on, unmeasured.
#[derive(Debug)]
pub struct Probe(Option<(Sample, u32)>);

impl Probe {
    pub fn start() -> Probe {
        Probe(sample().zip(online_cpus()))
    }

    /// Children waited for in between count as the guest: the only child a guest's run
    /// waits for is QEMU (a test harness running several guests at once would count them all).
    pub fn finish(self) -> Option<HostCpu> {
        let (before, cores) = self.0?;
        let after = sample()?;
        let hz = ticks_per_second();
        let secs = |a: u64, b: u64| a.saturating_sub(b) as f64 / hz;
        Some(HostCpu::new(
            after.at.duration_since(before.at).as_secs_f64(),
            cores,
            secs(after.ticks.busy, before.ticks.busy),
            secs(after.ticks.steal, before.ticks.steal),
            after.children_s - before.children_s,
            after.self_s - before.self_s,
        ))
    }
}

fn sample() -> Option<Sample> {
    static WARNED: AtomicBool = AtomicBool::new(false);
    let ticks = std::fs::read_to_string(PROC_STAT)
        .map_err(|e| format!("{PROC_STAT}: {e}"))
        .and_then(|t| parse_proc_stat(&t).map_err(|e| e.to_string()));
    let ticks = match ticks {
        Ok(t) => t,
        Err(e) => {
            if !WARNED.swap(true, Ordering::Relaxed) {
                eprintln!("memqos vm: warning: {e}; the host's CPU use during guests goes unrecorded");
            }
            return None;
        }
    };
    Some(Sample {
        at: Instant::now(),
        ticks,
        children_s: rusage_s(libc::RUSAGE_CHILDREN)?,
        self_s: rusage_s(libc::RUSAGE_SELF)?,
    })
}

/// User plus system seconds of `who`.
fn rusage_s(who: libc::c_int) -> Option<f64> {
    // SAFETY: getrusage only writes the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(who, &mut ru) } != 0 {
        return None;
    }
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Some(s(ru.ru_utime) + s(ru.ru_stime))
}

/// USER_HZ, the unit of /proc/stat: 100 almost everywhere (alpha: 1024), so asked, not assumed.
fn ticks_per_second() -> f64 {
    // SAFETY: sysconf reads a constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 {
        hz as f64
    } else {
        100.0
    }
}

fn online_cpus() -> Option<u32> {
    // SAFETY: sysconf reads a constant. Not available_parallelism: that is this process's
    // affinity and quota, and the capacity other work competes for is the host's.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    u32::try_from(n).ok().filter(|&n| n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_aggregate_line_is_read_and_per_cpu_lines_ignored() {
        let text = "cpu  100 5 40 9000 30 2 3 7 50 0\ncpu0 1 1 1 1 1 1 1 1 0 0\nintr 12345 0\n";
        // guest (50) is inside user (100) already; idle and iowait are not busy.
        assert_eq!(parse_proc_stat(text), Ok(CpuTicks { busy: 100 + 5 + 40 + 2 + 3, steal: 7 }));
        // A kernel without guest fields still has the eight that matter.
        assert_eq!(parse_proc_stat("cpu 1 2 3 4 5 6 7 8"), Ok(CpuTicks { busy: 19, steal: 8 }));
    }

    #[test]
    fn a_short_or_garbled_stat_is_an_error_naming_the_file() {
        let short = parse_proc_stat("cpu  100 5 40 9000\n").unwrap_err();
        assert_eq!(short, StatError::Short(4));
        let garbled = parse_proc_stat("cpu  100 5 forty 9000 30 2 3 7\n").unwrap_err();
        assert_eq!(garbled, StatError::NotANumber { index: 3, value: "forty".into() });
        let none = parse_proc_stat("cpu0 1 2 3 4 5 6 7 8\nintr 1\n").unwrap_err();
        assert_eq!(none, StatError::NoCpuLine);
        for (e, says) in [(short, "has 4 fields"), (garbled, "field 3"), (none, "no aggregate")] {
            let msg = e.to_string();
            assert!(msg.starts_with("/proc/stat: ") && msg.contains(says), "{msg}");
        }
        assert!(parse_proc_stat("").is_err());
        assert!(parse_proc_stat("cpu 18446744073709551616 0 0 0 0 0 0 0").is_err(), "overflow is an error too");
    }

    #[test]
    fn other_work_is_what_neither_the_guest_nor_this_process_took() {
        // 100 s on 2 cores: the guest took 150 s of CPU, this process 2 s, the host 166 s.
        let h = HostCpu::new(100.0, 2, 166.0, 4.0, 150.0, 2.0);
        assert_eq!(h.other_s, 14.0);
        assert_eq!(h.other_share(), Some(0.07));
        assert_eq!(h.steal_share(), Some(0.02));
        assert_eq!(h.summary(), "other work took 7% of 2 cores during the guest, steal 2%");
        // Tick rounding can put busy below guest + own: nothing else ran.
        assert_eq!(HostCpu::new(10.0, 2, 11.99, 0.0, 12.0, 0.01).other_s, 0.0);
        let empty = HostCpu::new(0.0, 2, 0.0, 0.0, 0.0, 0.0);
        assert_eq!((empty.other_share(), empty.summary().contains("took ? of")), (None, true));
    }

    #[test]
    fn a_probe_measures_this_host() {
        let probe = Probe::start();
        let spin = Instant::now();
        while spin.elapsed().as_millis() < 50 {
            std::hint::black_box(0);
        }
        // Build machines and CI have /proc/stat; the numbers are only sane, not exact.
        let h = probe.finish().expect("/proc/stat is readable here");
        assert!(h.wall_s >= 0.05 && h.cores >= 1, "{h:?}");
        assert!(h.own_s > 0.0 && h.guest_s >= 0.0 && h.other_s >= 0.0, "{h:?}");
    }
}
