//! Prometheus metrics: the text exposition format (version 0.0.4) rendered from what the
//! daemon observed and decided, served on `[metrics] listen` and/or written to
//! `[metrics] textfile` for node_exporter's textfile collector. Every name is documented in
//! docs/metrics.md; `render` is pure, so a test checks the exact text.

use crate::observe::Seen;
use anyhow::{Context, Result};
use memqos_cgroupfs::Limit;
use memqos_policy::{Config, Decision, Observation};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Upper bounds of the tick latency histogram, in seconds.
const TICK_BUCKETS: &[f64] = &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0];

/// Counters the daemon accumulates between renders.
#[derive(Debug, Default)]
pub struct Counters {
    /// (tier, knob file, reason kind) -> decisions written.
    pub decisions: BTreeMap<(String, &'static str, &'static str), u64>,
    /// (tier, action) -> stall-bound actions decided (`Reason::StallBound`).
    pub stall_bound: BTreeMap<(String, &'static str), u64>,
    /// tier -> OOM kills reported since start (`oom_report`), set by the daemon.
    pub oom_kills: BTreeMap<String, u64>,
    /// kind (`call`, `session`) -> cgroups `memqos run` left behind, removed (`leftovers`).
    pub leftovers_removed: BTreeMap<String, u64>,
    /// Tick latency histogram: counts per bucket (cumulative at render), sum, count.
    tick_buckets: Vec<u64>,
    tick_sum: f64,
    tick_count: u64,
}

impl Counters {
    pub fn record_decision(&mut self, tier: &str, d: &Decision) {
        let key = (tier.to_owned(), d.action.file(), d.reason.kind());
        *self.decisions.entry(key).or_default() += 1;
        if let memqos_policy::Reason::StallBound { .. } = d.reason {
            let action = match d.action {
                memqos_policy::Action::Kill => "kill",
                _ => "relieve",
            };
            *self.stall_bound.entry((tier.to_owned(), action)).or_default() += 1;
        }
    }

    pub fn record_tick(&mut self, took: Duration) {
        let secs = took.as_secs_f64();
        if self.tick_buckets.is_empty() {
            self.tick_buckets = vec![0; TICK_BUCKETS.len()];
        }
        if let Some(i) = TICK_BUCKETS.iter().position(|&b| secs <= b) {
            self.tick_buckets[i] += 1;
        }
        self.tick_sum += secs;
        self.tick_count += 1;
    }
}

/// The daemon-wide figures of one render.
pub struct Daemon {
    pub cpu_seconds: f64,
    pub parent_usage_bytes: u64,
    /// Lower cgroups parked while a reservation lets older ones run (`engine::park`).
    pub parked: usize,
    /// Cgroups in line in the held queue (`engine::queue`).
    pub queued: usize,
    /// Lower cgroups frozen while they thrash beside a protected one (`engine::thrash`).
    pub thrashing: usize,
    /// Restarts of the loop in this process (`LoopRestarted` events).
    pub loop_restarts: u64,
}

/// The families both renderers have (the daemon's [`render`] and `memqos stat --prom`): one
/// name, type and help per value, whichever program exports it. docs/metrics.md lists them.
pub mod families {
    /// (name, type, help).
    pub type Family = (&'static str, &'static str, &'static str);

    pub const MEMORY_USAGE: Family = ("memqos_cgroup_memory_usage_bytes", "gauge", "memory.current of the cgroup.");
    pub const MEMORY_HIGH: Family = ("memqos_cgroup_memory_high_bytes", "gauge", "memory.high now (+Inf = max).");
    pub const MEMORY_LOW: Family = ("memqos_cgroup_memory_low_bytes", "gauge", "memory.low now.");
    pub const MEMORY_MIN: Family = ("memqos_cgroup_memory_min_bytes", "gauge", "memory.min now.");
    pub const PRESSURE_SOME_AVG10: Family =
        ("memqos_cgroup_memory_pressure_some_avg10_ratio", "gauge", "memory.pressure some avg10, as a ratio (0..1).");
    pub const OOM_KILLS: Family = (
        "memqos_cgroup_oom_kills_total",
        "counter",
        "memory.events oom_kill: processes the kernel OOM-killed in the cgroup.",
    );
    pub const HIGH_EVENTS: Family = (
        "memqos_cgroup_memory_high_events_total",
        "counter",
        "memory.events high: times the cgroup was over memory.high.",
    );
}

/// Text exposition format 0.0.4, written one family at a time (HELP and TYPE, then its
/// samples). Both renderers write through it, so escaping and number formats are the same.
#[derive(Debug, Default)]
pub struct Exposition {
    text: String,
}

impl Exposition {
    /// HELP and TYPE of a family (a [`families::Family`] or a renderer's own).
    pub fn family(&mut self, (name, kind, help): (&str, &str, &str)) {
        let _ = writeln!(self.text, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    /// One sample; label values are escaped here.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        self.text.push_str(name);
        if !labels.is_empty() {
            let pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{}\"", esc(v))).collect();
            let _ = write!(self.text, "{{{}}}", pairs.join(","));
        }
        let _ = writeln!(self.text, " {value}");
    }

    pub fn into_text(self) -> String {
        self.text
    }
}

/// A limit as a sample value: bytes, or +Inf for max.
pub fn limit_value(l: Limit) -> String {
    match l {
        Limit::Bytes(b) => b.to_string(),
        Limit::Max => "+Inf".into(),
    }
}

/// Label values escape `\`, `"` and newlines (exposition format).
fn esc(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// Per tier: cgroups, usage, throttled cgroups, OOM kills.
type TierSums = (u64, u64, u64, u64);
/// A per-cgroup family and its sample's value.
type CgroupFamily<'a> = (families::Family, &'a dyn Fn(&Seen) -> String);
/// A per-tier family and its sample's value.
type TierFamily = (families::Family, fn(&TierSums) -> u64);

/// The whole exposition for one moment.
pub fn render(seen: &[Seen], counters: &Counters, daemon: &Daemon) -> String {
    use families::*;
    let mut out = Exposition::default();
    let per_cgroup: [CgroupFamily; 10] = [
        (MEMORY_USAGE, &|s| s.usage_bytes.to_string()),
        (MEMORY_HIGH, &|s| limit_value(s.knobs.high)),
        (("memqos_cgroup_memory_high_original_bytes", "gauge", "memory.high before memqos wrote it."), &|s| {
            limit_value(s.original.high)
        }),
        (MEMORY_LOW, &|s| limit_value(s.knobs.low)),
        (MEMORY_MIN, &|s| limit_value(s.knobs.min)),
        (("memqos_cgroup_throttled", "gauge", "1 while memory.high is below its original."), &|s| {
            u8::from(s.knobs.high < s.original.high).to_string()
        }),
        (("memqos_cgroup_frozen", "gauge", "1 while cgroup.freeze is set."), &|s| u8::from(s.knobs.frozen).to_string()),
        (PRESSURE_SOME_AVG10, &|s| format!("{}", s.psi_some_avg10 / 100.0)),
        (OOM_KILLS, &|s| s.events.oom_kill.to_string()),
        (HIGH_EVENTS, &|s| s.events.high.to_string()),
    ];
    for (family, value) in per_cgroup {
        out.family(family);
        for s in seen {
            out.sample(family.0, &[("cgroup", &s.cgroup), ("tier", &s.tier)], value(s));
        }
    }

    // Per tier: sums over its cgroups.
    let mut tiers: BTreeMap<&str, TierSums> = BTreeMap::new();
    for s in seen {
        let t = tiers.entry(&s.tier).or_default();
        t.0 += 1;
        t.1 += s.usage_bytes;
        t.2 += u64::from(s.knobs.high < s.original.high);
        t.3 += s.events.oom_kill;
    }
    let per_tier: [TierFamily; 4] = [
        (("memqos_tier_cgroups", "gauge", "Managed cgroups in the tier."), |t| t.0),
        (("memqos_tier_memory_usage_bytes", "gauge", "Sum of memory.current over the tier's cgroups."), |t| t.1),
        (
            ("memqos_tier_throttled_cgroups", "gauge", "Cgroups of the tier whose memory.high is below its original."),
            |t| t.2,
        ),
        (
            (
                "memqos_tier_oom_kills_total",
                "counter",
                "Sum of memory.events oom_kill over the tier's present cgroups.",
            ),
            |t| t.3,
        ),
    ];
    for (family, value) in per_tier {
        out.family(family);
        for (tier, t) in &tiers {
            out.sample(family.0, &[("tier", tier)], value(t));
        }
    }

    const DECISIONS: Family =
        ("memqos_decisions_total", "counter", "Knob writes decided by the policy engine, by tier, knob and reason.");
    out.family(DECISIONS);
    for ((tier, file, reason), n) in &counters.decisions {
        out.sample(DECISIONS.0, &[("tier", tier), ("knob", file), ("reason", reason)], n);
    }
    const OOM_KILLS_BY_TIER: Family = (
        "memqos_oom_kills_total",
        "counter",
        "Kernel OOM kills under cgroup_root reported since the daemon started, by the victim's tier.",
    );
    out.family(OOM_KILLS_BY_TIER);
    for (tier, n) in &counters.oom_kills {
        out.sample(OOM_KILLS_BY_TIER.0, &[("tier", tier)], n);
    }
    const STALL_BOUND: Family = (
        "memqos_stall_bound_actions_total",
        "counter",
        "Stall-bound actions (a throttled cgroup made no progress for its tier's stall.after_ms), by tier and action.",
    );
    out.family(STALL_BOUND);
    for ((tier, action), n) in &counters.stall_bound {
        out.sample(STALL_BOUND.0, &[("tier", tier), ("action", action)], n);
    }
    const LEFTOVERS: Family = (
        "memqos_leftovers_removed_total",
        "counter",
        "Cgroups memqos run made and left behind (a killed call's, a session's with no calls left) that the daemon removed once empty, unlocked and idle for policy.remove_leftovers_after_ms, by kind.",
    );
    out.family(LEFTOVERS);
    for kind in [memqos_schema::call::MADE_CALL, memqos_schema::call::MADE_SESSION] {
        out.sample(LEFTOVERS.0, &[("kind", kind)], counters.leftovers_removed.get(kind).copied().unwrap_or(0));
    }
    const PARENT_USAGE: Family = (
        "memqos_parent_memory_usage_bytes",
        "gauge",
        "memory.current of cgroup_root (sum of its children at the hierarchy's root).",
    );
    out.family(PARENT_USAGE);
    out.sample(PARENT_USAGE.0, &[], daemon.parent_usage_bytes);
    const PARKED: Family = (
        "memqos_parked_cgroups",
        "gauge",
        "Lower cgroups parked at what they hold while room is kept for a protected cgroup's expected peak.",
    );
    out.family(PARKED);
    out.sample(PARKED.0, &[], daemon.parked);
    const QUEUED: Family = (
        "memqos_queued_cgroups",
        "gauge",
        "Cgroups held at their memory ceilings and in line (frozen unless thawed at their stall bound) while an older held one grows first (tiers with queue_held).",
    );
    out.family(QUEUED);
    out.sample(QUEUED.0, &[], daemon.queued);
    const THRASHING: Family = (
        "memqos_thrashing_frozen_cgroups",
        "gauge",
        "Lower cgroups frozen while they thrash beside a running protected cgroup (tiers with freeze_thrashing).",
    );
    out.family(THRASHING);
    out.sample(THRASHING.0, &[], daemon.thrashing);
    const RESTARTS: Family = (
        "memqos_loop_restarts_total",
        "counter",
        "Restarts of the daemon's loop in this process: each put every knob back and started afresh after an error (the event log's loop_restarted lines say which).",
    );
    out.family(RESTARTS);
    out.sample(RESTARTS.0, &[], daemon.loop_restarts);
    const CPU: Family = ("memqos_daemon_cpu_seconds_total", "counter", "CPU time (user + system) the daemon has used.");
    out.family(CPU);
    out.sample(CPU.0, &[], daemon.cpu_seconds);
    const TICK: Family =
        ("memqos_tick_duration_seconds", "histogram", "Time from a wakeup to the tick's last knob write.");
    out.family(TICK);
    let bucket = format!("{}_bucket", TICK.0);
    let mut cumulative = 0;
    for (i, b) in TICK_BUCKETS.iter().enumerate() {
        cumulative += counters.tick_buckets.get(i).copied().unwrap_or(0);
        out.sample(&bucket, &[("le", &b.to_string())], cumulative);
    }
    out.sample(&bucket, &[("le", "+Inf")], counters.tick_count);
    out.sample(&format!("{}_sum", TICK.0), &[], counters.tick_sum);
    out.sample(&format!("{}_count", TICK.0), &[], counters.tick_count);
    out.into_text()
}

/// Where renders go: a listener thread serving the latest one, and/or a textfile.
pub struct Exporter {
    latest: Arc<Mutex<String>>,
    textfile: Option<PathBuf>,
    pub counters: Counters,
}

impl Exporter {
    /// None when `[metrics]` asks for nothing. Binds the listener now, so an address in use
    /// fails the start-up instead of a later scrape.
    pub fn start(cfg: &memqos_policy::Metrics) -> Result<Option<Exporter>> {
        if cfg.listen.is_none() && cfg.textfile.is_none() {
            return Ok(None);
        }
        let latest = match cfg.listen {
            Some(addr) => listening_at(addr)?,
            None => Arc::new(Mutex::new(String::new())),
        };
        Ok(Some(Exporter { latest, textfile: cfg.textfile.clone(), counters: Counters::default() }))
    }

    /// A reload changed `[metrics] textfile` (the listener cannot move without a restart).
    pub fn set_textfile(&mut self, textfile: Option<PathBuf>) {
        self.textfile = textfile;
    }

    /// Counts one tick's decisions (by the tier of their cgroup) and its latency.
    pub fn after_tick(&mut self, cfg: &Config, obs: &Observation, decisions: &[Decision], took: Duration) {
        for d in decisions {
            let tier = obs.cgroups.iter().find(|c| c.path == d.cgroup).and_then(|c| cfg.tiers.get(c.tier));
            self.counters.record_decision(tier.map_or("", |t| t.name.as_str()), d);
        }
        self.counters.record_tick(took);
    }

    /// Renders and publishes. A textfile that cannot be written is reported, not fatal.
    pub fn publish(&mut self, seen: &[Seen], daemon: &Daemon) -> Result<()> {
        let text = render(seen, &self.counters, daemon);
        if let Some(path) = &self.textfile {
            // node_exporter must never read a half-written file.
            let tmp = path.with_extension("prom.tmp");
            std::fs::write(&tmp, &text)
                .and_then(|_| std::fs::rename(&tmp, path))
                .with_context(|| format!("writing metrics.textfile {}", path.display()))?;
        }
        *self.latest.lock().unwrap_or_else(|e| e.into_inner()) = text;
        Ok(())
    }
}

/// The listeners this process serves, by address, each with the render it serves. A
/// listener is bound once per process: a restart of the loop (`LOOP_RETRY`) makes a new
/// exporter, which finds the one the serving thread still holds instead of failing its bind
/// with EADDRINUSE forever.
static LISTENING: Mutex<Vec<(SocketAddr, Arc<Mutex<String>>)>> = Mutex::new(Vec::new());

/// The render served at `addr`, binding the listener and starting its thread on first use.
fn listening_at(addr: SocketAddr) -> Result<Arc<Mutex<String>>> {
    let mut listening = LISTENING.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, latest)) = listening.iter().find(|(a, _)| *a == addr) {
        return Ok(latest.clone());
    }
    let listener = TcpListener::bind(addr).with_context(|| format!("metrics.listen {addr}"))?;
    let latest = Arc::new(Mutex::new(String::new()));
    let served = latest.clone();
    std::thread::Builder::new().name("metrics".into()).spawn(move || serve(listener, served))?;
    listening.push((addr, latest.clone()));
    Ok(latest)
}

/// One request per connection: `GET /metrics` gets the latest render, anything else 404.
fn serve(listener: TcpListener, latest: Arc<Mutex<String>>) {
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else {
            // EMFILE and the like: wait for descriptors to come back instead of spinning.
            std::thread::sleep(crate::deadline::ACCEPT_BACKOFF);
            continue;
        };
        // One deadline for the whole exchange (a scraper trickling its request or reading
        // slowly holds this thread at most that long; the loop never waits for it).
        let mut s = crate::deadline::Exchange::new(&mut stream, Duration::from_secs(5));
        let request = read_request(&mut s);
        let response = respond(&request, || latest.lock().unwrap_or_else(|e| e.into_inner()).clone());
        let _ = s.write_all(response.as_bytes());
    }
}

/// The most of a request that is read: its request line and headers, however they arrive.
pub const REQUEST_MAX: usize = 1024;

/// Reads a request up to the end of its headers (the request line may arrive in pieces), at
/// most [`REQUEST_MAX`] bytes; an error or the end of the stream ends it early.
pub fn read_request(s: &mut impl Read) -> Vec<u8> {
    let mut buf = [0u8; REQUEST_MAX];
    let mut n = 0;
    while n < buf.len() && !buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut buf[n..]) {
            Ok(0) | Err(_) => break,
            Ok(k) => n += k,
        }
    }
    buf[..n].to_vec()
}

/// The whole response to `request`: `GET /metrics` (with or without a query) gets `body()`,
/// anything else a 404.
pub fn respond(request: &[u8], body: impl FnOnce() -> String) -> String {
    if request.starts_with(b"GET /metrics ") || request.starts_with(b"GET /metrics?") {
        let body = body();
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    } else {
        "HTTP/1.1 404 Not Found\r\nContent-Length: 21\r\nConnection: close\r\n\r\nonly GET /metrics is\n".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memqos_cgroupfs::MemoryEvents;
    use memqos_policy::{Action, Knobs, Reason};

    fn seen(cgroup: &str, tier: &str, high: Limit) -> Seen {
        let knobs = Knobs { high, ..Knobs::default() };
        Seen {
            cgroup: cgroup.into(),
            cgroup_id: 0,
            tier: tier.into(),
            usage_bytes: 100 << 20,
            knobs,
            original: Knobs::default(),
            psi_some_avg10: 12.5,
            events: MemoryEvents { oom_kill: 2, high: 7, ..Default::default() },
        }
    }

    #[test]
    fn exposition_has_every_family_with_labels_and_values() {
        let mut c = Counters::default();
        let d = Decision {
            cgroup: "b".into(),
            id: memqos_policy::CgroupId(7),
            action: Action::High(Limit::Bytes(64 << 20)),
            reason: Reason::Release { calm_for_ms: 5000 },
        };
        c.record_decision("batch", &d);
        c.record_decision("batch", &d);
        c.record_tick(Duration::from_millis(3));
        c.record_tick(Duration::from_secs(2));
        let stall = Decision {
            cgroup: "b".into(),
            id: memqos_policy::CgroupId(7),
            action: Action::High(Limit::Bytes(96 << 20)),
            reason: Reason::StallBound {
                stalled_for_ms: 31000,
                bound_ms: 30000,
                usage_bytes: 64 << 20,
                high_bytes: 64 << 20,
                psi_full_avg10: 80.0,
            },
        };
        c.record_decision("batch", &stall);
        c.oom_kills.insert("batch".into(), 3);
        c.leftovers_removed.insert("call".into(), 5);
        let text = render(
            &[seen("a\"x", "critical", Limit::Max), seen("b", "batch", Limit::Bytes(64 << 20))],
            &c,
            &Daemon { cpu_seconds: 1.5, parent_usage_bytes: 42, parked: 2, queued: 1, thrashing: 3, loop_restarts: 4 },
        );
        for line in [
            "memqos_cgroup_memory_high_bytes{cgroup=\"a\\\"x\",tier=\"critical\"} +Inf",
            "memqos_cgroup_memory_high_bytes{cgroup=\"b\",tier=\"batch\"} 67108864",
            "memqos_cgroup_throttled{cgroup=\"b\",tier=\"batch\"} 1",
            "memqos_cgroup_throttled{cgroup=\"a\\\"x\",tier=\"critical\"} 0",
            "memqos_cgroup_memory_pressure_some_avg10_ratio{cgroup=\"b\",tier=\"batch\"} 0.125",
            "memqos_cgroup_oom_kills_total{cgroup=\"b\",tier=\"batch\"} 2",
            "memqos_cgroup_memory_high_events_total{cgroup=\"b\",tier=\"batch\"} 7",
            "memqos_tier_throttled_cgroups{tier=\"batch\"} 1",
            "memqos_tier_memory_usage_bytes{tier=\"critical\"} 104857600",
            "memqos_decisions_total{tier=\"batch\",knob=\"memory.high\",reason=\"release\"} 2",
            "memqos_parent_memory_usage_bytes 42",
            "memqos_parked_cgroups 2",
            "memqos_queued_cgroups 1",
            "memqos_thrashing_frozen_cgroups 3",
            "memqos_oom_kills_total{tier=\"batch\"} 3",
            "memqos_stall_bound_actions_total{tier=\"batch\",action=\"relieve\"} 1",
            "memqos_decisions_total{tier=\"batch\",knob=\"memory.high\",reason=\"stall_bound\"} 1",
            "memqos_daemon_cpu_seconds_total 1.5",
            "memqos_loop_restarts_total 4",
            "memqos_leftovers_removed_total{kind=\"call\"} 5",
            "memqos_leftovers_removed_total{kind=\"session\"} 0",
            "memqos_tick_duration_seconds_bucket{le=\"0.005\"} 1",
            "memqos_tick_duration_seconds_bucket{le=\"1\"} 1",
            "memqos_tick_duration_seconds_bucket{le=\"+Inf\"} 2",
            "memqos_tick_duration_seconds_count 2",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
        // Every sample's family has HELP and TYPE, and names follow Prometheus conventions.
        let families: Vec<&str> =
            text.lines().filter_map(|l| l.strip_prefix("# TYPE ")).map(|l| l.split(' ').next().unwrap()).collect();
        for l in text.lines().filter(|l| !l.starts_with('#')) {
            let name = l.split(['{', ' ']).next().unwrap();
            let family = name.trim_end_matches("_bucket").trim_end_matches("_sum").trim_end_matches("_count");
            assert!(families.contains(&family) || families.contains(&name), "{name} has no TYPE");
            assert!(
                name.starts_with("memqos_")
                    && name.chars().all(|c| c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit()),
                "{name}"
            );
        }
        for f in &families {
            let kind = text.lines().find_map(|l| l.strip_prefix(&format!("# TYPE {f} "))).unwrap();
            assert_eq!(kind == "counter", f.ends_with("_total"), "{f}: counters and only counters end in _total");
        }
    }

    #[test]
    fn listener_serves_the_latest_render_and_404s_the_rest() {
        let cfg = memqos_policy::Metrics { listen: Some("127.0.0.1:0".parse().unwrap()), textfile: None };
        // Port 0 is bound by start(); find it by binding ourselves instead.
        let probe = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = probe.local_addr().unwrap();
        drop(probe);
        let cfg = memqos_policy::Metrics { listen: Some(addr), ..cfg };
        let mut ex = Exporter::start(&cfg).unwrap().unwrap();
        ex.publish(
            &[seen("b", "batch", Limit::Max)],
            &Daemon { cpu_seconds: 0.0, parent_usage_bytes: 1, parked: 0, queued: 0, thrashing: 0, loop_restarts: 0 },
        )
        .unwrap();
        let get = |path: &str| {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            // In two pieces, as a slow client would send it.
            s.write_all(format!("GET {path} HT").as_bytes()).unwrap();
            std::thread::sleep(Duration::from_millis(20));
            s.write_all(b"TP/1.1\r\nHost: x\r\n\r\n").unwrap();
            let mut r = String::new();
            s.read_to_string(&mut r).unwrap();
            r
        };
        let r = get("/metrics");
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n") && r.contains("text/plain; version=0.0.4"), "{r}");
        assert!(r.contains("memqos_parent_memory_usage_bytes 1\n"), "{r}");
        assert!(get("/").starts_with("HTTP/1.1 404"));
        // A restart of the loop makes a second exporter for the same address: it takes over
        // the listener this process already serves (a new bind would fail with EADDRINUSE
        // forever), and what it publishes is what is served.
        let mut again = Exporter::start(&cfg).unwrap().unwrap();
        let daemon =
            Daemon { cpu_seconds: 0.0, parent_usage_bytes: 7, parked: 0, queued: 0, thrashing: 0, loop_restarts: 1 };
        again.publish(&[], &daemon).unwrap();
        let r = get("/metrics");
        assert!(
            r.contains("memqos_parent_memory_usage_bytes 7\n") && r.contains("memqos_loop_restarts_total 1\n"),
            "{r}"
        );
        // An address another socket holds fails at start-up, naming the field.
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let other = memqos_policy::Metrics { listen: Some(taken.local_addr().unwrap()), textfile: None };
        let e = Exporter::start(&other).err().unwrap();
        assert!(format!("{e:#}").contains("metrics.listen"), "{e:#}");
    }
}
