//! The report for a terminal.

use std::fmt::Write as _;

use crate::judge::list_or_none;
use crate::*;

/// Renders the report for a terminal.
pub fn render_text(r: &DoctorReport) -> String {
    let mut o = String::new();
    let w = &mut o;
    let _ = writeln!(w, "memqos doctor\n");
    let _ = writeln!(w, "kernel      {}", r.kernel_release.as_deref().unwrap_or("(unknown)"));

    match &r.cgroup2_root {
        Some(root) => {
            let others: Vec<_> = r
                .cgroup2_mounts
                .iter()
                .filter(|m| m.mount_point != root.mount_point)
                .map(|m| m.mount_point.display().to_string())
                .collect();
            let _ = writeln!(
                w,
                "cgroup v2   {}{}",
                root.mount_point.display(),
                if others.is_empty() { String::new() } else { format!(" (also mounted at {})", others.join(", ")) }
            );
            let _ = writeln!(w, "            cgroup.controllers:     {}", list_or_none(root.controllers.as_deref()));
            let _ =
                writeln!(w, "            cgroup.subtree_control: {}", list_or_none(root.subtree_control.as_deref()));
        }
        None => {
            let _ = writeln!(w, "cgroup v2   not mounted");
        }
    }

    let mc = &r.memory_controller;
    let place = if mc.bound_to_v1 {
        let mut s = String::from("cgroup v1");
        if let Some(l) = &mc.proc_cgroups {
            let _ = write!(s, ", hierarchy {}, {} cgroups", l.hierarchy, l.num_cgroups);
        }
        if !mc.v1_mounts.is_empty() {
            let mounts: Vec<_> = mc.v1_mounts.iter().map(|m| m.display().to_string()).collect();
            let _ = write!(s, ", mounted at {}", mounts.join(", "));
        }
        s
    } else if mc.available_on_v2 {
        format!(
            "cgroup v2, {}",
            if mc.enabled_for_children { "enabled for children" } else { "not enabled for children" }
        )
    } else {
        "not available".into()
    };
    let _ = writeln!(w, "memory      {place}");

    let _ = match r.psi.state {
        FileState::Readable => writeln!(
            w,
            "PSI         {}: {}",
            r.psi.path.display(),
            r.psi.lines.first().map(String::as_str).unwrap_or("")
        ),
        FileState::Missing => writeln!(w, "PSI         {}: missing", r.psi.path.display()),
        FileState::Disabled => writeln!(w, "PSI         {}: disabled", r.psi.path.display()),
        FileState::Unreadable => writeln!(w, "PSI         {}: unreadable", r.psi.path.display()),
    };
    if let Some(root) = &r.cgroup2_root {
        let _ = writeln!(
            w,
            "            {}/memory.pressure: {}",
            root.mount_point.display(),
            if root.memory_pressure { "present" } else { "absent" }
        );
    }

    match (&r.btf.features, r.btf.state) {
        (Some(feat), _) => {
            let _ = writeln!(w, "BTF         {}: {} types", r.btf.path.display(), r.btf.types.unwrap_or(0));
            for line in feat.summary().lines() {
                let _ = writeln!(w, "            {line}");
            }
            for h in r.btf.bpf_pressure_hooks.iter().flatten() {
                let kinds: Vec<_> = h.kinds.iter().map(|k| k.as_str()).collect();
                let _ = writeln!(
                    w,
                    "            BPF pressure hook {} ({}): {}",
                    h.target,
                    kinds.join(", "),
                    match h.why_not {
                        None => "used".to_string(),
                        Some(why) => format!("not used: {why}"),
                    }
                );
            }
        }
        (None, FileState::Missing) => {
            let _ = writeln!(w, "BTF         {}: missing", r.btf.path.display());
        }
        (None, _) => {
            let _ =
                writeln!(w, "BTF         {}: {}", r.btf.path.display(), r.btf.error.as_deref().unwrap_or("unreadable"));
        }
    }

    let swap = if let Some(e) = &r.swap.error {
        format!("unknown ({e})")
    } else if r.swap.devices.is_empty() {
        "none".into()
    } else {
        let names: Vec<_> = r.swap.devices.iter().map(|d| d.name.as_str()).collect();
        format!("{} MiB on {}", r.swap.total_kib / 1024, names.join(", "))
    };
    let _ = writeln!(w, "swap        {swap}");
    let _ = writeln!(
        w,
        "zswap       {}",
        match r.zswap_enabled {
            Some(true) => "enabled",
            Some(false) => "disabled",
            None => "not built in",
        }
    );
    let _ = writeln!(
        w,
        "swap acct   {}",
        match r.swap_accounting {
            Some(true) => "per cgroup (memory.swap.max): tiers' swap_max applies",
            Some(false) => "none (no memory.swap.max): tiers' swap_max cannot apply",
            None => "unknown (no cgroup with the memory controller to look at)",
        }
    );

    if !r.findings.is_empty() {
        let _ = writeln!(w);
    }
    for x in &r.findings {
        let sev = match x.severity {
            Severity::Blocker => "blocker ",
            Severity::Degraded => "degraded",
            Severity::Note => "note    ",
        };
        let _ = writeln!(w, "{sev}  {}: {}", x.topic, x.message);
        if let Some(a) = &x.advice {
            let _ = writeln!(w, "          -> {a}");
        }
    }
    if !r.read_errors.is_empty() {
        let _ = writeln!(w, "\nunreadable files:");
        for e in &r.read_errors {
            let _ = writeln!(w, "  {e}");
        }
    }

    // The verdict comes last, so it is what a person sees when the output ends.
    let label = match r.verdict {
        Verdict::Ready => "READY",
        Verdict::Degraded => "DEGRADED",
        Verdict::CannotRun => "CANNOT RUN HERE",
    };
    let _ = writeln!(w, "\nverdict: {label} (exit {})", exit_code(r));
    let _ = writeln!(w, "  {}", r.headline);
    if r.verdict == Verdict::CannotRun {
        let _ = writeln!(w, "  try memqos in a guest kernel instead: `{GUEST_COMMAND}`");
    }
    o
}
