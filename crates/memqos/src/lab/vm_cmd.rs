//! `memqos-lab vm`: the real-kernel harness from the command line.

use anyhow::Result;
use clap::{Args, Subcommand};
use memqos_vmtest::{kernels, Guest, Series};
use std::time::Duration;

#[derive(Subcommand)]
pub enum VmCmd {
    /// Resolve (and download if needed) the newest kernel of each series; print them.
    Kernels {
        /// "6.12", "7", a list "6.12,7", or "all".
        #[arg(long, default_value = "all")]
        kernel: String,
        #[arg(long)]
        json: bool,
    },
    /// Boot a guest and run one command inside it (host root shared read-only).
    Run(RunArgs),
}

#[derive(Args)]
pub struct RunArgs {
    /// Kernel series: "6.12", "7", a list "6.12,7", or "all" (runs one guest per series).
    #[arg(long, default_value = "7")]
    kernel: String,
    /// Guest memory in MiB.
    #[arg(long, default_value_t = 2048)]
    memory: u64,
    /// Attach a swap disk of this many MiB (swap is off by default).
    #[arg(long)]
    swap: Option<u64>,
    /// Boot the host's systemd as PID 1 on a tmpfs overlay of the host root; CMD runs as a
    /// service after basic.target (no --swap/--scratch set-up in this mode).
    #[arg(long, conflicts_with_all = ["swap", "scratch"])]
    systemd: bool,
    /// Enable zswap (useful with --swap).
    #[arg(long)]
    zswap: bool,
    /// Attach an ext4 scratch disk of MB MiB, mounted at /run/scratch; ":BPS" throttles its
    /// writes to BPS bytes/s (QEMU throttling.bps-write), e.g. 1024:262144.
    #[arg(long, value_name = "MB[:BPS]", value_parser = parse_scratch)]
    scratch: Option<(u64, Option<u64>)>,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// The command to run inside the guest.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

pub fn run(cmd: VmCmd) -> Result<u8> {
    match cmd {
        VmCmd::Kernels { kernel, json } => {
            let mut rows = Vec::new();
            for series in Series::parse_list(&kernel)? {
                let k = kernels::ensure(series)?;
                rows.push(serde_json::json!({
                    "series": series.to_string(), "release": k.release(),
                    "vmlinuz": k.vmlinuz, "modules": k.modules_dir,
                }));
                if !json {
                    println!("{series:>5}  {}  {}", k.release(), k.vmlinuz.display());
                }
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            }
            Ok(0)
        }
        VmCmd::Run(args) => run_command(args),
    }
}

fn run_command(args: RunArgs) -> Result<u8> {
    let mut worst = 0;
    for series in Series::parse_list(&args.kernel)? {
        let kernel = kernels::ensure(series)?;
        let mut guest = Guest::new(kernel.clone())
            .memory_mb(args.memory)
            .zswap(args.zswap)
            .systemd(args.systemd)
            .timeout(Duration::from_secs(args.timeout))
            .stream_console(true);
        if let Some(mb) = args.swap {
            guest = guest.swap_mb(mb);
        }
        if let Some((mb, write_bps)) = args.scratch {
            guest = guest.scratch_mb(mb, write_bps);
        }
        let run = guest.run(&args.command)?;
        eprintln!(
            "memqos-lab vm: kernel {} ({:?}): exit {}, boot {:.1} s, total {:.1} s, results in {}",
            kernel.release(),
            run.accel,
            run.exit_code,
            run.boot_secs,
            run.wall_secs,
            run.results_dir.display()
        );
        worst = worst.max(run.exit_code.clamp(0, 255) as u8);
    }
    Ok(worst)
}

/// `MB` or `MB:BPS` (both positive integers).
fn parse_scratch(text: &str) -> Result<(u64, Option<u64>), String> {
    let number = |what: &str, s: &str| -> Result<u64, String> {
        match s.parse::<u64>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!("{what} {s:?} is not a positive integer (expected MB or MB:BPS, e.g. 1024:262144)")),
        }
    };
    match text.split_once(':') {
        None => Ok((number("size", text)?, None)),
        Some((mb, bps)) => Ok((number("size", mb)?, Some(number("write rate", bps)?))),
    }
}
