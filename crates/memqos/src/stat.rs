//! `memqos stat`: memcg statistics of a cgroup subtree from one snapshot (memqos-stats), as
//! a table, JSON or Prometheus text.

use anyhow::{bail, Context, Result};
use clap::Args;
use memqos_policy::size::human;
use memqos_stats::{BackendChoice, CgroupStats, Limit, Snapshot};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct StatArgs {
    /// Cgroup v2 directory to report on.
    #[arg(default_value = "/sys/fs/cgroup")]
    path: PathBuf,
    /// Every cgroup below PATH, not just PATH and its direct children.
    #[arg(long)]
    tree: bool,
    /// One JSON object per snapshot (with --watch, one per line).
    #[arg(long, conflicts_with = "prom")]
    json: bool,
    /// Prometheus text exposition format.
    #[arg(long)]
    prom: bool,
    /// bpf (memcg kfuncs, Linux 7.0+), text (cgroupfs files) or auto (bpf where possible).
    #[arg(long, default_value = "auto")]
    backend: BackendChoice,
    /// Take a snapshot every SECS seconds until interrupted.
    #[arg(long, value_name = "SECS")]
    watch: Option<f64>,
    /// Table: show only the N cgroups using the most memory.
    #[arg(long, value_name = "N")]
    top: Option<usize>,
}

pub fn run(args: StatArgs) -> Result<u8> {
    if !args.path.join("cgroup.controllers").exists() {
        bail!(
            "{} is not a cgroup v2 directory (no cgroup.controllers); memqos stat needs the cgroup v2 hierarchy with the memory controller",
            args.path.display()
        );
    }
    if let Some(s) = args.watch {
        if !(s > 0.0 && s.is_finite()) {
            bail!("--watch {s}: expected a positive number of seconds");
        }
    }
    let mut source = memqos_stats::open(&args.path, args.backend, &mut |msg| eprintln!("{msg}"))
        .with_context(|| format!("opening {} with the {} backend", args.path.display(), args.backend))?;
    let mut snap = Snapshot::default();
    let mut warned = false;
    loop {
        source.refresh(&mut snap).with_context(|| format!("reading {}", args.path.display()))?;
        for c in snap.cgroups.iter().filter(|c| c.error.is_some()) {
            eprintln!(
                "memqos stat: {}: shown without values: {}",
                memqos_cgroupfs::name::display(&c.path),
                c.error.as_deref().unwrap_or_default()
            );
        }
        if !warned && snap.cgroups.iter().all(|c| c.stat.iter().all(|v| v.is_none())) {
            eprintln!(
                "memqos stat: no memory.stat under {}: the memory controller is not enabled there (see `memqos doctor`)",
                args.path.display()
            );
            warned = true;
        }
        if !args.tree {
            snap.cgroups.retain(|c| c.depth <= 1);
        }
        let out = if args.json {
            let mut s = serde_json::to_string(&to_json(&snap))?;
            s.push('\n');
            s
        } else if args.prom {
            prometheus(&snap)
        } else {
            table(&snap, args.top)
        };
        let mut stdout = std::io::stdout().lock();
        stdout.write_all(out.as_bytes())?;
        stdout.flush()?;
        let Some(secs) = args.watch else { return Ok(0) };
        std::thread::sleep(Duration::from_secs_f64(secs));
        if !args.json && !args.prom {
            println!();
        }
    }
}

fn limit(l: Option<Limit>) -> String {
    match l {
        None => "-".into(),
        Some(Limit::Max) => "max".into(),
        Some(Limit::Bytes(b)) => human(b),
    }
}

fn opt_bytes(v: Option<u64>) -> String {
    v.map(human).unwrap_or_else(|| "-".into())
}

/// Memory a cgroup holds: memory.current, or for the hierarchy root (no memory.current)
/// anon + file + kernel from memory.stat; None without either.
fn usage(snap: &Snapshot, c: &CgroupStats) -> Option<u64> {
    c.current.or_else(|| {
        let parts: Vec<u64> = ["anon", "file", "kernel"].iter().filter_map(|k| snap.stat(c, k)).collect();
        (!parts.is_empty()).then(|| parts.iter().sum())
    })
}

pub fn table(snap: &Snapshot, top: Option<usize>) -> String {
    let mut rows: Vec<&CgroupStats> = snap.cgroups.iter().collect();
    rows.sort_by_key(|c| std::cmp::Reverse(usage(snap, c)));
    let total = rows.len();
    if let Some(n) = top {
        rows.truncate(n);
    }
    let header =
        ["CGROUP", "CURRENT", "PEAK", "ANON", "FILE", "KERNEL", "LOW", "HIGH", "MAX", "PSI10", "HIGH#", "OOMKILL"];
    let mut cells: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
    for c in &rows {
        let name = if c.path.is_empty() { snap.root.display().to_string() } else { c.path.clone() };
        cells.push(vec![
            name,
            opt_bytes(usage(snap, c)),
            opt_bytes(c.peak),
            opt_bytes(snap.stat(c, "anon")),
            opt_bytes(snap.stat(c, "file")),
            opt_bytes(snap.stat(c, "kernel")),
            limit(c.low),
            limit(c.high),
            limit(c.max),
            c.pressure.map(|p| format!("{:.2}", p.some.avg10)).unwrap_or_else(|| "-".into()),
            c.events.map(|e| e.high.to_string()).unwrap_or_else(|| "-".into()),
            c.events.map(|e| e.oom_kill.to_string()).unwrap_or_else(|| "-".into()),
        ]);
    }
    let widths: Vec<usize> = (0..header.len()).map(|i| cells.iter().map(|r| r[i].len()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for row in &cells {
        for (i, cell) in row.iter().enumerate() {
            if i == 0 {
                let _ = write!(out, "{cell:<w$}", w = widths[0]);
            } else {
                let _ = write!(out, "  {cell:>w$}", w = widths[i]);
            }
        }
        out.push('\n');
    }
    let _ = writeln!(
        out,
        "{} of {total} cgroups, sorted by memory; backend {}; PSI10 = memory.pressure some avg10 (%), HIGH# = memory.events high",
        rows.len(),
        snap.backend
    );
    out
}

pub fn to_json(snap: &Snapshot) -> serde_json::Value {
    let cgroups: Vec<serde_json::Value> = snap
        .cgroups
        .iter()
        .map(|c| {
            let stat: serde_json::Map<String, serde_json::Value> =
                snap.keys.iter().zip(&c.stat).filter_map(|(k, v)| v.map(|v| (k.to_string(), v.into()))).collect();
            serde_json::json!({
                "path": c.path,
                "id": c.id,
                "depth": c.depth,
                "current": c.current,
                "peak": c.peak,
                "max": limit_json(c.max),
                "high": limit_json(c.high),
                "low": limit_json(c.low),
                "min": limit_json(c.min),
                "events": c.events,
                "pressure": c.pressure,
                "stat": stat,
            })
        })
        .collect();
    serde_json::json!({"root": snap.root, "backend": snap.backend, "cgroups": cgroups})
}

/// A limit as JSON: bytes, "max", or null where the cgroup has no such file.
fn limit_json(l: Option<Limit>) -> serde_json::Value {
    match l {
        None => serde_json::Value::Null,
        Some(Limit::Max) => "max".into(),
        Some(Limit::Bytes(b)) => b.into(),
    }
}

/// Prometheus text, under the daemon's names wherever it exports the same value
/// (`memqos_daemon::metrics::families`, docs/metrics.md); labelled by cgroup only.
pub fn prometheus(snap: &Snapshot) -> String {
    use memqos_daemon::metrics::families::{self, Family};
    use memqos_daemon::metrics::{limit_value, Exposition};
    let mut out = Exposition::default();
    let cg = |c: &CgroupStats| if c.path.is_empty() { "/".to_string() } else { c.path.clone() };
    const STAT: Family =
        ("memqos_cgroup_memory_stat", "gauge", "memory.stat value (bytes, or a count for event keys).");
    out.family(STAT);
    for c in &snap.cgroups {
        for (k, v) in snap.keys.iter().zip(&c.stat) {
            if let Some(v) = v {
                out.sample(STAT.0, &[("cgroup", &cg(c)), ("key", k)], v);
            }
        }
    }
    type Value = fn(&CgroupStats) -> Option<String>;
    let gauges: [(Family, Value); 6] = [
        (families::MEMORY_USAGE, |c| c.current.map(|v| v.to_string())),
        (("memqos_cgroup_memory_peak_bytes", "gauge", "memory.peak of the cgroup."), |c| c.peak.map(|v| v.to_string())),
        (families::MEMORY_MIN, |c| c.min.map(limit_value)),
        (families::MEMORY_LOW, |c| c.low.map(limit_value)),
        (families::MEMORY_HIGH, |c| c.high.map(limit_value)),
        (("memqos_cgroup_memory_max_bytes", "gauge", "memory.max now (+Inf = max)."), |c| c.max.map(limit_value)),
    ];
    for (family, value) in gauges {
        out.family(family);
        for c in &snap.cgroups {
            if let Some(v) = value(c) {
                out.sample(family.0, &[("cgroup", &cg(c))], v);
            }
        }
    }
    type Count = fn(&memqos_stats::MemoryEvents) -> u64;
    let events: [(Family, Count); 6] = [
        (("memqos_cgroup_memory_low_events_total", "counter", "memory.events low: reclaims under memory.low."), |e| {
            e.low
        }),
        (families::HIGH_EVENTS, |e| e.high),
        (("memqos_cgroup_memory_max_events_total", "counter", "memory.events max: times usage hit memory.max."), |e| {
            e.max
        }),
        (
            (
                "memqos_cgroup_memory_oom_events_total",
                "counter",
                "memory.events oom: times the cgroup ran out of memory.",
            ),
            |e| e.oom,
        ),
        (families::OOM_KILLS, |e| e.oom_kill),
        (("memqos_cgroup_oom_group_kills_total", "counter", "memory.events oom_group_kill: group OOM kills."), |e| {
            e.oom_group_kill
        }),
    ];
    for (family, count) in events {
        out.family(family);
        for c in &snap.cgroups {
            if let Some(e) = &c.events {
                out.sample(family.0, &[("cgroup", &cg(c))], count(e));
            }
        }
    }
    type Line = fn(&memqos_stats::Pressure) -> Option<memqos_stats::PressureLine>;
    let pressure: [(&str, Line); 2] = [("some", |p| Some(p.some)), ("full", |p| p.full)];
    for (kind, line) in pressure {
        let stall = format!("memqos_cgroup_memory_pressure_{kind}_stall_seconds_total");
        let help = format!("memory.pressure {kind} total: stall time.");
        out.family((&stall, "counter", &help));
        for c in &snap.cgroups {
            if let Some(l) = c.pressure.as_ref().and_then(line) {
                out.sample(&stall, &[("cgroup", &cg(c))], l.total_us as f64 / 1e6);
            }
        }
    }
    for (kind, line) in pressure {
        let family = if kind == "some" {
            families::PRESSURE_SOME_AVG10
        } else {
            (
                "memqos_cgroup_memory_pressure_full_avg10_ratio",
                "gauge",
                "memory.pressure full avg10, as a ratio (0..1).",
            )
        };
        out.family(family);
        for c in &snap.cgroups {
            if let Some(l) = c.pressure.as_ref().and_then(line) {
                out.sample(family.0, &[("cgroup", &cg(c))], l.avg10 / 100.0);
            }
        }
    }
    out.into_text()
}

#[cfg(test)]
mod tests {
    use super::*;
    use memqos_stats::{MemoryEvents, Pressure, PressureLine};
    use std::sync::Arc;

    fn snap() -> Snapshot {
        let keys: Vec<Box<str>> = vec!["anon".into(), "file".into(), "pgfault".into()];
        let c = |path: &str, depth, current, anon| CgroupStats {
            path: path.into(),
            id: 7,
            depth,
            stat: vec![Some(anon), Some(0), None],
            events: Some(MemoryEvents { high: 3, ..Default::default() }),
            current,
            peak: current,
            max: Some(Limit::Max),
            high: Some(Limit::Bytes(64 << 20)),
            low: Some(Limit::Bytes(0)),
            min: Some(Limit::Bytes(0)),
            pressure: Some(Pressure {
                some: PressureLine { avg10: 1.5, total_us: 2_000_000, ..Default::default() },
                full: None,
            }),
            error: None,
        };
        Snapshot {
            root: "/sys/fs/cgroup/t".into(),
            keys: Arc::new(keys),
            cgroups: vec![
                c("", 0, Some(100 << 20), 90 << 20),
                c("small", 1, Some(1 << 20), 4096),
                c("big", 1, Some(60 << 20), 50 << 20),
            ],
            backend: "text",
        }
    }

    #[test]
    fn table_sorts_by_memory_and_cuts_at_top() {
        let t = table(&snap(), Some(2));
        let lines: Vec<_> = t.lines().collect();
        assert!(lines[0].starts_with("CGROUP"), "{t}");
        assert!(lines[1].starts_with("/sys/fs/cgroup/t") && lines[2].starts_with("big"), "{t}");
        assert!(lines[2].contains("60M") && lines[2].contains("64M") && lines[2].contains("max"), "{t}");
        assert!(t.contains("2 of 3 cgroups"), "{t}");
    }

    #[test]
    fn json_and_prometheus() {
        let s = snap();
        let j = to_json(&s);
        assert_eq!(j["cgroups"][2]["stat"]["anon"], 50 << 20);
        assert!(j["cgroups"][2]["stat"].get("pgfault").is_none(), "absent keys are omitted");
        assert_eq!(j["cgroups"][1]["high"], 64 << 20);
        assert_eq!(j["cgroups"][1]["max"], "max");
        let p = prometheus(&s);
        assert!(p.contains("memqos_cgroup_memory_stat{cgroup=\"big\",key=\"anon\"} 52428800\n"), "{p}");
        assert!(p.contains("memqos_cgroup_memory_max_bytes{cgroup=\"/\"} +Inf\n"), "{p}");
        assert!(p.contains("memqos_cgroup_memory_pressure_some_stall_seconds_total{cgroup=\"small\"} 2\n"), "{p}");
        assert!(p.contains("# TYPE memqos_cgroup_memory_high_events_total counter"), "{p}");
        // The daemon's names for the values both export.
        assert!(p.contains("memqos_cgroup_memory_usage_bytes{cgroup=\"big\"} 62914560\n"), "{p}");
        assert!(p.contains("memqos_cgroup_memory_pressure_some_avg10_ratio{cgroup=\"small\"} 0.015\n"), "{p}");
    }
}
