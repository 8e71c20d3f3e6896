//! docs/reliability.md: the table's rows, the targets' verdicts and the method, rendered from
//! docs/reliability.json and the churn soak.

use super::{DescriptorsResult, Doc, KernelResult};
use crate::bench::churn;
use serde::Deserialize;
use std::fmt::Write as _;

/// One row of the table.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub fault: String,
    pub kernel: String,
    /// The build that measured it ("-" when unknown).
    pub build: String,
    pub runs: usize,
    pub lost: Option<usize>,
    pub wrong: Option<usize>,
    pub exits: usize,
    pub unprotected_ms: Option<f64>,
    pub note: String,
}

/// The part of docs/agent/churn.json the soak row reads.
#[derive(Clone, Debug, Deserialize)]
pub struct Soak {
    pub kernels: Vec<churn::KernelResult>,
}

fn exits(v: &[String]) -> usize {
    v.len()
}

/// The table's rows of one kernel's result.
pub fn rows(k: &KernelResult) -> Vec<Row> {
    let mut out = Vec::new();
    let kernel = k.kernel.clone();
    let build = k.provenance.as_ref().and_then(|p| p.build()).unwrap_or_else(|| "-".into());
    if let Some(s) = &k.sigkill {
        out.push(Row {
            fault: "SIGKILL under churn".into(),
            kernel: kernel.clone(),
            build: build.clone(),
            runs: s.kills,
            lost: Some(s.check.lost),
            wrong: Some(s.check.wrong),
            exits: exits(&s.unexpected_exits),
            unprotected_ms: s.unprotected.max_ms,
            note: format!(
                "seed {}; {} of {} kills with caps to restore ({} caps), {} in start-up; {} cgroup checks; {} raced their tenant's own write; guardian restore p50 {} ms, max {} ms, {} timeouts; churn {:.0}/s",
                s.seed,
                s.kills_with_caps,
                s.kills,
                s.capped_at_kill,
                s.killed_in_startup,
                s.check.checked,
                s.check.raced,
                ms(s.restore.p50_ms),
                ms(s.restore.max_ms),
                s.restore_timeouts,
                s.churn_rate
            ),
        });
    }
    if let Some(h) = &k.hostile {
        // What the daemon left alone, by the last clause of each line (the paths are long).
        let unmanaged: Vec<String> = h
            .degraded
            .iter()
            .filter(|m| m.contains("not managed"))
            .map(|m| m.rsplit(": ").next().unwrap_or(m).chars().take(100).collect())
            .collect();
        let refused = h.made.iter().filter(|m| m.contains("refused")).count();
        out.push(Row {
            fault: "hostile tenant".into(),
            kernel: kernel.clone(),
            build: build.clone(),
            runs: 1,
            lost: Some(h.check.lost),
            wrong: Some(h.check.wrong),
            exits: exits(&h.unexpected_exits),
            unprotected_ms: None,
            note: format!(
                "{} oddities tried ({} refused by the kernel), deepest path {} levels / {} bytes; {} not-managed lines from the daemon ({}); a first low cgroup made while the daemon was calm capped {} ms after its mkdir; the root-owned declaration first acted on {} ms after its mkdir; a normal low cgroup capped {} ms after its mkdir; trickling client cut after {} ms; explain meanwhile {}; stop: {}",
                h.made.len(),
                refused,
                h.deep_levels,
                h.deep_path_bytes,
                unmanaged.len(),
                unmanaged.join("; "),
                ms(h.calm_low_capped_ms),
                ms(h.declared_seen_ms),
                ms(h.normal_capped_ms),
                ms(h.trickle_cut_after_ms),
                if h.explain_ok { format!("answered in {} ms", ms(h.explain_ms)) } else { "not answered".into() },
                h.stop_status
            ),
        });
    }
    if let Some(d) = &k.state_dir {
        for (i, p) in d.phases.iter().enumerate() {
            // The restore check after the final kill belongs to the last phase's row.
            let last = i + 1 == d.phases.len();
            out.push(Row {
                fault: format!("state_dir {}", p.fault),
                kernel: kernel.clone(),
                build: build.clone(),
                runs: 1,
                lost: last.then_some(d.check.lost),
                wrong: last.then_some(d.check.wrong),
                exits: exits(&p.unexpected_exits),
                unprotected_ms: p.recovery_ms,
                note: format!(
                    "{} for {:.0} s ({}); {} writes refused for want of a journal, {} unjournaled knobs in {} samples; time column: fault's end to the next newly journaled knob",
                    p.method, p.held_s, d.tmpfs_size, p.refused, p.unjournaled, p.samples
                ),
            });
        }
    }
    if let Some(d) = &k.descriptors {
        out.push(Row {
            fault: format!("{} cgroups at 1,024 open files", d.cgroups),
            kernel,
            build,
            runs: 1,
            lost: Some(d.check.lost),
            wrong: Some(d.check.wrong),
            exits: exits(&d.unexpected_exits),
            unprotected_ms: d.first_cap_s.map(|s| s * 1e3),
            note: format!(
                "limit {}/{} (soft/hard); ran {:.0} of {:.0} s, {}; status.json {}; {} capped; peak {} fds; {} EMFILE lines; time column: launch to first cap",
                opt(d.nofile_soft),
                opt(d.nofile_hard),
                d.ran_s,
                d.asked_s,
                d.exit_status,
                if d.status_json_seen { "written" } else { "never seen" },
                d.capped,
                d.peak_fds,
                d.emfile_lines
            ),
        });
    }
    out
}

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{x:.0}"))
}

fn opt(v: Option<u64>) -> String {
    v.map_or_else(|| "?".into(), |x| x.to_string())
}

fn cell(v: Option<usize>) -> String {
    v.map_or_else(|| "-".into(), |x| x.to_string())
}

pub(super) fn plain(r: &Row) -> String {
    format!(
        "{} on {} ({}): runs {}, lost {}, wrong {}, exits {}, longest without protection {} ms; {}",
        r.fault,
        r.kernel,
        r.build,
        r.runs,
        cell(r.lost),
        cell(r.wrong),
        r.exits,
        ms(r.unprotected_ms),
        r.note
    )
}

/// The soak's row: RSS, CPU and journal at the first and last 10 s sample.
pub fn soak_row(k: &churn::KernelResult) -> Row {
    let (first, last) = (k.samples.first(), k.samples.last());
    let drift = |f: fn(&churn::Sample) -> f64| match (first, last) {
        (Some(a), Some(b)) if f(a) > 0.0 => format!("{:+.0}%", (f(b) / f(a) - 1.0) * 100.0),
        _ => "-".into(),
    };
    Row {
        fault: format!("soak: churn at {}/s for {:.0} s", k.rate_target, k.duration_s),
        kernel: k.kernel.clone(),
        // docs/agent/churn.json keeps one provenance for the file, not per kernel.
        build: "see docs/agent/churn.json".into(),
        runs: 1,
        lost: Some(k.not_restored.len()),
        wrong: None,
        exits: usize::from(k.daemon_error.is_some()),
        unprotected_ms: None,
        note: format!(
            "first to last sample: RSS {}, CPU {}, journal {}; {} write errors, {} degraded lines",
            drift(|s| s.rss_kib as f64),
            drift(|s| s.cpu_pct),
            drift(|s| s.journal_bytes as f64),
            k.write_errors,
            k.degraded.len()
        ),
    }
}

/// docs/reliability.md from the campaign and the soak.
pub fn render(doc: &Doc, soak: Option<&Soak>) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# Reliability: the fault campaign\n");
    let _ = writeln!(
        s,
        "Generated: `memqos-lab bench faults --kernel all` runs the campaign in guests and rewrites `docs/reliability.json` and this file; `memqos-lab bench faults --render-only` rebuilds this file from `docs/reliability.json` and `docs/agent/churn.json` (the soak). Do not edit it by hand.\n"
    );
    let _ = writeln!(s, "{}; each kernel's build, host load and guest time are in its `provenance`.\n", doc.host_note);
    let _ = writeln!(s, "| fault | kernel | build | runs | knobs lost | knobs restored into the wrong cgroup | daemon exits | longest time without protection (ms) | notes |");
    let _ = writeln!(s, "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |");
    let mut all = Vec::new();
    for k in &doc.kernels {
        all.extend(rows(k));
    }
    if let Some(soak) = soak {
        all.extend(soak.kernels.iter().map(soak_row));
    }
    for r in &all {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.fault,
            r.kernel,
            r.build,
            r.runs,
            cell(r.lost),
            cell(r.wrong),
            r.exits,
            ms(r.unprotected_ms),
            r.note.replace('|', "\\|")
        );
    }
    let _ = writeln!(s, "\n## Targets (issue 28, item 8)\n");
    for (target, verdict) in targets(doc, soak) {
        let _ = writeln!(s, "- {target}: {verdict}");
    }
    let errors: Vec<String> =
        doc.kernels.iter().flat_map(|k| k.errors.iter().map(move |e| format!("{}: {e}", k.kernel))).collect();
    if !errors.is_empty() {
        let _ = writeln!(s, "\n## Scenarios that did not finish\n");
        for e in errors {
            let _ = writeln!(s, "- {}", e.replace('\n', " "));
        }
    }
    let _ = writeln!(s, "\n## What each row measures\n");
    let _ = writeln!(s, "{}", METHOD.trim());
    s
}

const METHOD: &str = r#"
All scenarios run the release binary in a TCG guest of the kernel named, with
`crates/lab/configs/faults.toml` (sampling every 100 ms) unless said otherwise; the code is
`crates/lab/src/bench/faults/guest.rs`.

- **SIGKILL under churn**: a protected cgroup declares its expected peak (root-owned
  `user.memqos.expected_peak`, honoured), so each daemon life caps every low cgroup's
  memory.high at once. Low cgroups `low/tool.{k % 50}` are removed and made again at 100 per
  second, each given its own memory.high V_k right after its mkdir. The daemon (guardian on)
  is SIGKILLed at a random instant 0.2–3 s after its launch (seeded); once the state lock is
  free and the journal gone or empty, every live low cgroup must hold its own V_k, and the
  protected cgroup its memory.low/min of 0. *Lost*: still at a value memqos wrote; *wrong*:
  another incarnation's V. A lost knob whose cgroup the daemon had read before the tenant's
  own write is also counted as *raced* (the tenant's write raced the adoption, not the
  kill). *Longest time without protection*: from a kill to the first cap written by the next
  daemon (launched right after the check), so it includes the check and the start-up.
- **hostile tenant**: under `hostile/` (tier `hostile/**`): `a/b` without the memory
  controller, a chain of 200-byte names past PATH_MAX (or as deep as the kernel allows),
  names that are not UTF-8 and names with escapes and control characters, a protected
  cgroup owned by uid 1000 declaring 18446744073709551615 bytes (ignored: untrusted) and a
  root-owned one declaring the same (honoured, capped at the parent's limit), and a control
  client trickling a byte every 100 ms. Then a normal low cgroup must be capped. Lost/wrong:
  after SIGTERM, the knobs memqos wrote on the normal and protected cgroups put back.
- **state_dir full / read-only**: state_dir on a tmpfs; mid-run a file fills it to ENOSPC,
  then is removed; later the tmpfs is remounted read-only (if the kernel refuses because the
  daemon holds files open for writing, a read-only bind mount over it, which fails every new
  open and rename but not the daemon's open descriptors: said in the row), then made
  writable again. Every 250 ms each live low cgroup at a memqos value must have its original
  in the journal (*unjournaled* otherwise). The time column is from the fault's end to the
  first knob memqos newly journals and writes. Lost/wrong: after a final SIGKILL and the
  guardian's restore.
- **10,000 cgroups at 1,024 open files**: `fs.nr_open` lowered to 1,024 in the guest and the
  daemon started with RLIMIT_NOFILE 1,024:1,024, so it cannot raise it (as in a container
  without CAP_SYS_RESOURCE); it must run its whole `--duration`, write status.json and cap the
  low cgroups; after it stops every low cgroup's memory.high must be back.
- **soak**: `memqos-lab bench churn` (docs/agent-hosts.md); the target asks for one hour.
"#;

/// Each issue-28 target with its verdict, computed from the rows.
pub fn targets(doc: &Doc, soak: Option<&Soak>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let kernels: Vec<&str> = doc.kernels.iter().map(|k| k.kernel.as_str()).collect();
    let on = if kernels.is_empty() { "no kernel".to_string() } else { kernels.join(", ") };
    let verdict = |ok: bool, figure: String| format!("**{}** ({figure}; {on})", if ok { "met" } else { "missed" });
    let sum = |f: &dyn Fn(&KernelResult) -> Option<usize>| -> Option<usize> {
        let v: Vec<usize> = doc.kernels.iter().filter_map(f).collect();
        (!v.is_empty()).then(|| v.iter().sum())
    };
    let shape = sum(&|k| k.hostile.as_ref().map(|h| h.unexpected_exits.len()));
    out.push((
        "0 daemon exits caused by any cgroup's shape, name or content".into(),
        shape.map_or("not measured".into(), |n| verdict(n == 0, format!("{n} exits"))),
    ));
    let lost = sum(&|k| k.sigkill.as_ref().map(|s| s.check.lost + s.check.wrong));
    let kills = sum(&|k| k.sigkill.as_ref().map(|s| s.kills));
    out.push((
        "0 knobs lost or restored into the wrong cgroup over every SIGKILL run".into(),
        match (lost, kills) {
            (Some(n), Some(k)) => verdict(n == 0, format!("{n} lost or wrong after {k} kills")),
            _ => "not measured".into(),
        },
    ));
    let sd_exits = sum(&|k| k.state_dir.as_ref().map(|d| d.phases.iter().map(|p| p.unexpected_exits.len()).sum()));
    let unjournaled = sum(&|k| k.state_dir.as_ref().map(|d| d.phases.iter().map(|p| p.unjournaled).sum()));
    out.push((
        "0 daemon exits while state_dir is full or read-only".into(),
        match (sd_exits, unjournaled) {
            (Some(e), Some(u)) => verdict(e == 0, format!("{e} exits; {u} unjournaled knobs seen")),
            _ => "not measured".into(),
        },
    ));
    let recoveries: Vec<Option<f64>> = doc
        .kernels
        .iter()
        .filter_map(|k| k.state_dir.as_ref())
        .flat_map(|d| d.phases.iter().map(|p| p.recovery_ms))
        .collect();
    out.push((
        "full service within 1 s of space returning".into(),
        if recoveries.is_empty() {
            "not measured".into()
        } else if recoveries.iter().any(Option::is_none) {
            verdict(false, "a phase never journaled a new knob again".into())
        } else {
            let worst = recoveries.iter().flatten().copied().fold(0.0, f64::max);
            verdict(worst <= 1000.0, format!("worst {worst:.0} ms"))
        },
    ));
    let fd: Vec<&DescriptorsResult> = doc.kernels.iter().filter_map(|k| k.descriptors.as_ref()).collect();
    out.push((
        "10,000 cgroups run at a hard open-file limit of 1,024".into(),
        if fd.is_empty() {
            "not measured".into()
        } else {
            let ok = fd.iter().all(|d| {
                d.cgroups >= 10_000
                    && d.nofile_hard == Some(1024)
                    && d.unexpected_exits.is_empty()
                    && d.exit_status == "exit status: 0"
                    && d.status_json_seen
                    && d.capped > 0
                    && d.emfile_lines == 0
            });
            let figure = fd
                .iter()
                .map(|d| {
                    format!(
                        "{} cgroups, hard limit {}, {}, {} capped",
                        d.cgroups,
                        opt(d.nofile_hard),
                        d.exit_status,
                        d.capped
                    )
                })
                .collect::<Vec<_>>()
                .join("; ");
            verdict(ok, figure)
        },
    ));
    out.push((
        "RSS, CPU and journal size flat (±10%) over a one-hour soak".into(),
        match soak.map(|s| s.kernels.as_slice()) {
            None | Some([]) => "not measured (no docs/agent/churn.json)".into(),
            Some(ks) => ks
                .iter()
                .map(|k| {
                    let hour = k.duration_s >= 3600.0;
                    let row = soak_row(k);
                    format!(
                        "{}: {} ({:.0} s run; {})",
                        k.kernel,
                        if hour { "see the row" } else { "not measured: the committed soak is shorter than an hour" },
                        k.duration_s,
                        row.note
                    )
                })
                .collect::<Vec<_>>()
                .join("; "),
        },
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::faults::{Check, Phase, SigkillResult, Spread, StateDirResult};
    use std::path::Path;

    fn kernel() -> KernelResult {
        KernelResult {
            kernel: "7.2.13".into(),
            sigkill: Some(SigkillResult {
                seed: 42,
                kills: 3,
                kills_asked: 3,
                check: Check { checked: 150, lost: 1, wrong: 0, raced: 1, examples: vec!["low/tool.3".into()] },
                unprotected: Spread::of(vec![900.0, 2500.0, 1200.0]),
                ..Default::default()
            }),
            state_dir: Some(StateDirResult {
                tmpfs_size: "8m".into(),
                phases: vec![
                    Phase { fault: "full".into(), recovery_ms: Some(300.0), ..Default::default() },
                    Phase { fault: "read-only".into(), recovery_ms: Some(1500.0), ..Default::default() },
                ],
                check: Check { checked: 50, ..Default::default() },
            }),
            ..Default::default()
        }
    }

    #[test]
    fn rows_carry_the_counts_and_the_longest_gap() {
        let rows = rows(&kernel());
        assert_eq!(rows.len(), 3);
        assert_eq!((rows[0].runs, rows[0].lost, rows[0].wrong), (3, Some(1), Some(0)));
        assert_eq!(rows[0].unprotected_ms, Some(2500.0), "the longest gap, not the median");
        // The restore check after the final kill is the last phase's, not each phase's.
        assert_eq!((rows[1].lost, rows[2].lost), (None, Some(0)));
        assert_eq!(rows[2].unprotected_ms, Some(1500.0));
    }

    #[test]
    fn targets_are_computed_not_assumed() {
        let doc = Doc { kernels: vec![kernel()], ..Default::default() };
        let t: std::collections::BTreeMap<String, String> = targets(&doc, None).into_iter().collect();
        let v = |k: &str| t.iter().find(|(name, _)| name.starts_with(k)).map(|(_, v)| v.clone()).unwrap();
        assert!(
            v("0 knobs lost").starts_with("**missed**") && v("0 knobs lost").contains("1 lost or wrong after 3 kills")
        );
        assert!(v("full service").starts_with("**missed**") && v("full service").contains("1500 ms"));
        assert_eq!(v("0 daemon exits caused"), "not measured", "no hostile scenario ran");
        assert!(v("RSS, CPU").starts_with("not measured"));
        let mut good = kernel();
        good.sigkill.as_mut().unwrap().check.lost = 0;
        good.state_dir.as_mut().unwrap().phases[1].recovery_ms = Some(400.0);
        let doc = Doc { kernels: vec![good], ..Default::default() };
        let t = targets(&doc, None);
        assert!(t[1].1.starts_with("**met**") && t[3].1.starts_with("**met**"), "{t:?}");
    }

    #[test]
    fn the_table_has_one_row_per_fault_and_kernel_and_escapes_pipes() {
        let mut k = kernel();
        k.errors.push("descriptors: a | b".into());
        let doc = Doc { kernels: vec![k], ..Default::default() };
        let md = render(&doc, None);
        let table: Vec<&str> = md
            .lines()
            .filter(|l| l.starts_with("| ") && !l.starts_with("| fault") && !l.starts_with("| ---"))
            .collect();
        assert_eq!(table.len(), 3, "{md}");
        assert!(table[0].starts_with("| SIGKILL under churn | 7.2.13 | - | 3 | 1 | 0 | 0 | 2500 |"), "{}", table[0]);
        assert!(md.contains("memqos-lab bench faults --render-only"));
        assert!(md.contains("descriptors: a | b"), "errors listed");
    }

    #[test]
    fn the_committed_doc_is_what_the_committed_data_renders() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let text = std::fs::read_to_string(root.join("docs/reliability.json")).expect("docs/reliability.json");
        let doc: Doc = serde_json::from_str(&text).expect("docs/reliability.json parses as Doc");
        let soak: Option<Soak> = std::fs::read_to_string(root.join("docs/agent/churn.json"))
            .ok()
            .map(|t| serde_json::from_str(&t).expect("docs/agent/churn.json parses"));
        let md = std::fs::read_to_string(root.join("docs/reliability.md")).expect("docs/reliability.md");
        assert!(
            md == render(&doc, soak.as_ref()),
            "docs/reliability.md is not what its data renders: run `memqos-lab bench faults --render-only`"
        );
    }
}
