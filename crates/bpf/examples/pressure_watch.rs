//! Loads the BPF pressure source, watches the given cgroup directories with the protected
//! thresholds, and prints each threshold event and, at the end, the counters, as JSON lines.
//!
//!     pressure_watch SECONDS CGROUP_DIR...
//!
//! A tool for checking the hooks on a kernel by hand (e.g. in a `memqos-lab vm run` guest).

use std::time::{Duration, Instant};

use memqos_bpf::pressure::{cgroup_id, Options, PressureSource, Thresholds};
use memqos_bpf::Btf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(secs), dirs) = (args.first(), &args[1.min(args.len())..]) else {
        return Err("usage: pressure_watch SECONDS CGROUP_DIR...".into());
    };
    let secs: f64 = secs.parse()?;
    let btf = Btf::load_vmlinux()?;
    let mut src = PressureSource::load(&btf, Options::default())?;
    for h in src.hooks() {
        println!("{}", serde_json::json!({"hook": h}));
    }
    let mut ids = Vec::new();
    for d in dirs {
        let id = cgroup_id(d.as_ref())?;
        src.watch(id, &Thresholds::PROTECTED)?;
        ids.push((d.clone(), id));
    }
    println!("{}", serde_json::json!({"ready": true}));
    let end = Instant::now() + Duration::from_secs_f64(secs);
    while Instant::now() < end {
        let p = libc_poll(src.fd(), end.saturating_duration_since(Instant::now()));
        if p > 0 {
            for ev in src.drain() {
                let name = ids.iter().find(|(_, id)| *id == ev.cgroup_id).map(|(d, _)| d.as_str());
                println!("{}", serde_json::json!({"event": ev, "cgroup": name}));
            }
        }
    }
    for (d, id) in &ids {
        println!("{}", serde_json::json!({"cgroup": d, "id": id, "counters": src.counters(*id)}));
    }
    println!("{}", serde_json::json!({"stats": src.stats()}));
    Ok(())
}

fn libc_poll(fd: i32, timeout: Duration) -> i32 {
    #[repr(C)]
    struct PollFd {
        fd: i32,
        events: i16,
        revents: i16,
    }
    extern "C" {
        fn poll(fds: *mut PollFd, n: u64, timeout: i32) -> i32;
    }
    let mut p = PollFd { fd, events: 1, revents: 0 };
    // SAFETY: one valid pollfd.
    unsafe { poll(&mut p, 1, timeout.as_millis().min(i32::MAX as u128) as i32) }
}
