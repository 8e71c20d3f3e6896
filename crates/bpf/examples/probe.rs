//! Parses a BTF file (default: the running kernel's), prints the parse time and what
//! `KernelFeatures::probe` finds. `--json` prints the features as JSON instead.
//!
//!     cargo run --release -p memqos-bpf --example probe -- [--json] [PATH] [RUNS]

use std::time::{Duration, Instant};

use memqos_bpf::btf::VMLINUX_BTF;
use memqos_bpf::{Btf, KernelFeatures};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let json = args.iter().any(|a| a == "--json");
    args.retain(|a| a != "--json");
    let path = args.first().cloned().unwrap_or_else(|| VMLINUX_BTF.to_string());
    let runs: usize = args.get(1).map(|r| r.parse()).transpose()?.unwrap_or(9).max(1);

    let mut times = Vec::with_capacity(runs);
    let mut btf = None;
    for _ in 0..runs {
        let start = Instant::now();
        btf = Some(Btf::load(&path)?);
        times.push(start.elapsed());
    }
    let btf = btf.expect("runs >= 1");
    times.sort();
    let median = times[times.len() / 2];

    let start = Instant::now();
    let features = KernelFeatures::probe(&btf);
    let probe_time = start.elapsed();

    if json {
        println!("{}", serde_json::to_string_pretty(&features)?);
        return Ok(());
    }
    println!(
        "{path}: {} types; load+parse median {} over {runs} runs (min {}, max {}); probe {}",
        btf.type_count(),
        ms(median),
        ms(times[0]),
        ms(times[times.len() - 1]),
        ms(probe_time)
    );
    print!("{}", features.summary());
    Ok(())
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}
