//! Config parsing: defaults, the example file, and errors that point at file:line:col + field.

use memqos_policy::{Config, Limit, Policy, Protect, Signals, StallAction, StallBound, SwapMax, TierIndex};

const ROOT: &str = "cgroup_root = \"/sys/fs/cgroup/agents\"\n";

fn err(text: &str) -> String {
    match Config::from_str(text, "memqos.toml") {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn example_file_parses_and_matches_the_defaults() {
    let cfg = Config::from_str(include_str!("../memqos.example.toml"), "memqos.example.toml").unwrap();
    assert_eq!(cfg.cgroup_root.to_str(), Some("/sys/fs/cgroup/agents"));
    assert_eq!(cfg.state_dir.to_str(), Some("/run/memqos"));
    assert_eq!(cfg.signals, Signals::default());
    assert_eq!(cfg.policy, Policy::default());
    assert_eq!(cfg.tiers.len(), 2);
    assert_eq!(cfg.history_file, None);
    assert_eq!(
        cfg.history_path(&cfg.state_dir).to_str(),
        Some("/var/lib/memqos/history.json"),
        "a reboot empties /run"
    );
    assert_eq!(cfg.history_path(std::path::Path::new("/tmp/s")).to_str(), Some("/tmp/s/history.json"));
    assert_eq!(cfg.tier_peaks_path(&cfg.state_dir).to_str(), Some("/var/lib/memqos/tier-peaks.json"));
    assert!(!cfg.learns_peaks());
}

#[test]
fn learn_peak_on_a_protected_tier_and_an_absolute_history_file() {
    let text = format!(
        "history_file = \"/var/lib/memqos-history/h.json\"\n{ROOT}[[tier]]\nname = \"a\"\nmatch = [\"x\"]\nprotect = \"low\"\nlearn_peak = true\n[[tier]]\nname = \"b\"\nmatch = [\"y\"]\nlearn_peak = false\n"
    );
    let cfg = Config::from_str(&text, "memqos.toml").unwrap();
    assert!(cfg.learns_peaks());
    assert!(cfg.tiers.get(TierIndex(0)).unwrap().learn_peak);
    assert!(!cfg.tiers.get(TierIndex(1)).unwrap().learn_peak, "false is allowed anywhere");
    assert_eq!(
        cfg.history_path(std::path::Path::new("/elsewhere")).to_str(),
        Some("/var/lib/memqos-history/h.json"),
        "an explicit file does not follow state_dir"
    );
}

/// Every daemon config the repository runs with is a file, checked here with the example: the
/// lab's (demo, benches, dirty experiment, guest tests) and the experiments'.
#[test]
fn every_config_file_in_the_repository_parses() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut checked = Vec::new();
    for dir in ["crates/lab/configs", "experiments"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            // experiments/ also holds scenario files; daemon configs there are memqos-*.toml.
            if !name.ends_with(".toml") || (dir == "experiments" && !name.starts_with("memqos-")) {
                continue;
            }
            // The experiment runner fills in these two placeholders per arm.
            let text = std::fs::read_to_string(&path)
                .unwrap()
                .replace("@CGROUP_ROOT@", "/sys/fs/cgroup/experiment")
                .replace("@STATE_DIR@", "/run/memqos-experiment");
            if let Err(e) = Config::from_str(&text, &path.display().to_string()) {
                panic!("{e}");
            }
            checked.push(name);
        }
    }
    assert!(checked.len() >= 7, "fewer config files than expected: {checked:?}");
}

/// Every example under configs/ parses (the systemd one is the package's /etc/memqos/memqos.toml).
#[test]
fn configs_folder_examples_parse() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    names.sort();
    for p in &names {
        let text = std::fs::read_to_string(p).unwrap();
        Config::from_str(&text, &p.display().to_string()).unwrap_or_else(|e| panic!("{e}"));
    }
    let stems: Vec<_> = names.iter().map(|p| p.file_stem().unwrap().to_str().unwrap()).collect();
    // The profiles (`memqos init --profile`); crates/agent checks agent-host's layout.
    assert_eq!(stems, ["agent-host", "kubernetes", "systemd"]);
    let k8s = Config::from_str(&std::fs::read_to_string(dir.join("kubernetes.toml")).unwrap(), "k").unwrap();
    let tier = |p: &str| k8s.tiers.classify(p).map(|t| k8s.tiers.get(t).unwrap().name.clone());
    assert_eq!(tier("kubepods-pod1234.slice/cri-containerd-ab.scope").as_deref(), Some("guaranteed"));
    assert_eq!(
        tier("kubepods-burstable.slice/kubepods-burstable-pod9.slice/cri-containerd-cd.scope").as_deref(),
        Some("burstable")
    );
    assert_eq!(
        tier("kubepods-besteffort.slice/kubepods-besteffort-pod7.slice/cri-containerd-ef.scope").as_deref(),
        Some("besteffort")
    );
}

#[test]
fn minimal_config_gets_documented_defaults() {
    let cfg = Config::from_str(&format!("{ROOT}[[tier]]\nname = \"all\"\nmatch = [\"**\"]\n"), "m.toml").unwrap();
    assert_eq!(cfg.state_dir.to_str(), Some("/run/memqos"));
    let p = &cfg.policy;
    assert_eq!((p.headroom_guard, p.min_high, p.hold_ms), (64 << 20, 32 << 20, 5000));
    let (_, t) = cfg.tiers.iter().next().unwrap();
    assert_eq!((t.protect, t.throttle, t.freeze, t.kill), (Protect::None, false, false, false));
    assert!(cfg.signals.psi && cfg.signals.events && !cfg.signals.bpf);
}

#[test]
fn sizes_and_numbers() {
    let text = format!(
        "{ROOT}[[tier]]\nname = \"a\"\nmatch = [\"*\"]\n[policy]\nheadroom_guard = \"1G\"\nmin_high = 8388608\nws_granularity = \"4M\"\nstep_ratio = 0.25\n"
    );
    let p = Config::from_str(&text, "m.toml").unwrap().policy;
    assert_eq!((p.headroom_guard, p.min_high, p.ws_granularity), (1 << 30, 8 << 20, 4 << 20));
    assert_eq!(p.step_ratio, 0.25);
}

#[test]
fn oom_score_adj_is_per_tier_and_optional() {
    let cfg = Config::from_str(
        &format!("{ROOT}[[tier]]\nname = \"a\"\nmatch = [\"x\"]\nprotect = \"low\"\noom_score_adj = -900\n[[tier]]\nname = \"b\"\nmatch = [\"**\"]\n"),
        "m.toml",
    )
    .unwrap();
    assert_eq!(cfg.tiers.get(TierIndex(0)).unwrap().oom_score_adj, Some(-900));
    assert_eq!(cfg.tiers.get(TierIndex(1)).unwrap().oom_score_adj, None);
    assert_eq!(cfg.tiers.get(TierIndex(0)).unwrap().cpu_weight, None);
}

#[test]
fn swap_max_defaults_by_protection_and_is_validated() {
    let tiers = |a: &str, b: &str| {
        format!("{ROOT}[[tier]]\nname = \"a\"\nmatch = [\"x\"]\nprotect = \"low\"\n{a}[[tier]]\nname = \"b\"\nmatch = [\"**\"]\nthrottle = true\n{b}")
    };
    let swap = |text: &str| {
        let cfg = Config::from_str(text, "m.toml").unwrap();
        (cfg.tiers.get(TierIndex(0)).unwrap().swap_max, cfg.tiers.get(TierIndex(1)).unwrap().swap_max)
    };
    assert_eq!(swap(&tiers("", "")), (SwapMax::Set(Limit::Bytes(0)), SwapMax::Keep), "the defaults");
    assert_eq!(
        swap(&tiers("swap_max = \"keep\"\n", "swap_max = \"2G\"\n")),
        (SwapMax::Keep, SwapMax::Set(Limit::Bytes(2 << 30)))
    );
    assert_eq!(
        swap(&tiers("swap_max = 0\n", "swap_max = \"max\"\n")),
        (SwapMax::Set(Limit::Bytes(0)), SwapMax::Set(Limit::Max))
    );
    let e = err(&tiers("", "swap_max = \"lots\"\n"));
    assert!(e.contains("tier[1].swap_max") && e.contains("expected \"keep\", \"max\" or a size"), "{e}");
    let e = err(&tiers("swap_max = -1\n", ""));
    assert!(e.contains("tier[0].swap_max") && e.contains("-1 is negative"), "{e}");
}

#[test]
fn stall_bound_defaults_on_throttle_tiers_and_is_configurable() {
    let cfg = Config::from_str(
        &format!("{ROOT}[[tier]]\nname = \"a\"\nmatch = [\"x\"]\nthrottle = true\n[[tier]]\nname = \"b\"\nmatch = [\"**\"]\nthrottle = true\nstall = {{ after_ms = 5000, action = \"kill\" }}\n[policy]\nstall_psi_full_avg10 = 60\n"),
        "m.toml",
    )
    .unwrap();
    assert_eq!(
        cfg.tiers.get(TierIndex(0)).unwrap().stall,
        StallBound { after_ms: 30_000, action: StallAction::Relieve }
    );
    assert_eq!(cfg.tiers.get(TierIndex(1)).unwrap().stall, StallBound { after_ms: 5_000, action: StallAction::Kill });
    assert_eq!(cfg.policy.stall_psi_full_avg10, 60.0);
}

#[test]
fn classify_first_match_wins() {
    let text = format!(
        "{ROOT}[[tier]]\nname = \"critical\"\nmatch = [\"high*\", \"prod/*\"]\n[[tier]]\nname = \"batch\"\nmatch = [\"*\"]\n[[tier]]\nname = \"deep\"\nmatch = [\"**\"]\n"
    );
    let cfg = Config::from_str(&text, "m.toml").unwrap();
    let t = &cfg.tiers;
    assert_eq!(t.classify("high-a"), Some(TierIndex(0)));
    assert_eq!(t.classify("/prod/web"), Some(TierIndex(0)));
    assert_eq!(t.classify("prod"), Some(TierIndex(1)));
    assert_eq!(t.classify("batch/x"), Some(TierIndex(2))); // `*` stays within one component
    assert_eq!(t.classify("prod/web/worker"), Some(TierIndex(2)));
    assert_eq!(t.by_name("batch"), Some(TierIndex(1)));
}

#[test]
fn errors_name_file_line_column_and_field() {
    let tier = "[[tier]]\nname = \"a\"\nmatch = [\"x\"]\n";
    let cases: Vec<(String, &str)> = vec![
        (
            format!("{ROOT}{tier}[[tier]]\nname = \"b\"\nmatch = [\n  \"ok\",\n  \"[\",\n]\n"),
            "memqos.toml:9:3: tier[1].match: invalid glob \"[\": unclosed character class; missing ']'",
        ),
        (
            format!("{ROOT}{tier}bogus = 1\n"),
            "memqos.toml:5:1: tier[0].bogus: unknown field `bogus`, expected one of `name`, `match`, `protect`, `throttle`, `freeze`, `queue_held`, `freeze_thrashing`, `kill`, `dirty`, `oom_score_adj`, `cpu_weight`, `stall`, `xattr`, `expected_peak`, `learn_peak`, `default_peak`, `first_sight_growth`, `swap_max`",
        ),
        (format!("{ROOT}[signals]\npsi = \"yes\"\n{tier}"), "memqos.toml:3:7: signals.psi: invalid type: string \"yes\", expected a boolean"),
        (format!("{ROOT}[[tier]]\nname = \"a\"\n"), "memqos.toml:2:1: tier[0]: missing field `match`"),
        (format!("{ROOT}{tier}protect = \"lo\"\n"), "memqos.toml:5:11: tier[0].protect: unknown variant `lo`, expected one of `none`, `low`, `min`"),
        (format!("{ROOT}{tier}[policy]\nheadroom_guard = \"64X\"\n"), "memqos.toml:6:18: policy.headroom_guard: invalid byte size \"64X\": unknown suffix \"X\""),
        (format!("{ROOT}{tier}[policy]\nhold_ms = -5\n"), "memqos.toml:6:11: policy.hold_ms: invalid value: integer `-5`, expected u64"),
        (format!("{ROOT}{tier}[policy]\nstep_ratio = 1.5\n"), "memqos.toml:6:14: policy.step_ratio: 1.5 is out of range (0, 1)"),
        (format!("{ROOT}{tier}[policy]\nws_margin = 0.5\n"), "memqos.toml:6:13: policy.ws_margin: 0.5 is out of range [1, 4]"),
        (format!("{ROOT}{tier}[policy]\nmin_high = \"1K\"\n"), "memqos.toml:6:12: policy.min_high: 1024 bytes is too small (at least 4096)"),
        (format!("{ROOT}{tier}[policy]\nfreeze_after_ms = 0\n"), "memqos.toml:6:19: policy.freeze_after_ms: 0 is out of range 1..=86400000"),
        (format!("{ROOT}{tier}[policy]\nadmission_wait_ms = 3600001\n"), "memqos.toml:6:21: policy.admission_wait_ms: 3600001 is out of range 0..=3600000"),
        (format!("{ROOT}[signals]\nsampling_interval_ms = 1\n{tier}"), "memqos.toml:3:24: signals.sampling_interval_ms: 1 is out of range 10..=60000"),
        (
            format!("{ROOT}[signals]\nsampling_interval_ms = 1000\ncalm_interval_ms = 500\n{tier}"),
            "memqos.toml:4:20: signals.calm_interval_ms: 500 is shorter than sampling_interval_ms (1000); use 0 to sample the whole tree every interval",
        ),
        (format!("{ROOT}{tier}[[tier]]\nname = \"a\"\nmatch = [\"y\"]\n"), "memqos.toml:6:8: tier[1].name: duplicate tier name \"a\" (also tier[0])"),
        (format!("{ROOT}[[tier]]\nname = \"a\"\nmatch = []\n"), "memqos.toml:4:9: tier[0].match: needs at least one glob"),
        (format!("{ROOT}[[tier]]\nname = \"a\"\nmatch = [\"/abs\"]\n"), "memqos.toml:4:10: tier[0].match: glob \"/abs\" must be relative to cgroup_root (drop the leading '/')"),
        (format!("{ROOT}{tier}freeze = true\n"), "memqos.toml:5:10: tier[0].freeze: needs throttle = true (it escalates throttling)"),
        (format!("{ROOT}{tier}freeze_thrashing = true\n"), "memqos.toml:5:20: tier[0].freeze_thrashing: needs throttle = true (it escalates throttling)"),
        (format!("{ROOT}{tier}kill = true\n"), "memqos.toml:5:8: tier[0].kill: needs throttle = true (it escalates throttling)"),
        (ROOT.to_string(), "memqos.toml: tier: at least one [[tier]] is required"),
        (tier.to_string(), "memqos.toml: cgroup_root: missing (the managed subtree, e.g. \"/sys/fs/cgroup/agents\")"),
        (format!("cgroup_root = \"relative\"\n{tier}"), "memqos.toml:1:15: cgroup_root: must be an absolute path, got \"relative\""),
        (format!("{ROOT}{tier}[polcy]\n"), "memqos.toml:5:2: polcy: unknown field `polcy`, expected one of `cgroup_root`, `state_dir`, `history_file`, `signals`, `tier`, `policy`, `metrics`, `control`"),
        (format!("{ROOT}{tier}[control]\ngroup = \"a b\"\n"), "memqos.toml:6:9: control.group: \"a b\" is not a group name (letters, digits, '_', '-', '.'; at most 32)"),
        (format!("{ROOT}[[tier]]\nname = \"a\"\nmatch = [\"x\"\n"), "memqos.toml:5:1: tier[0].match: invalid array; expected `]`"),
        (format!("{ROOT}{tier}dirty = {{ max = 1.5 }}\n"), "memqos.toml:5:17: tier[0].dirty.max: ratio 1.5 is out of range (0, 1] (a fraction of the host's dirty threshold; use a size like \"8M\" for bytes)"),
        (format!("{ROOT}{tier}dirty = {{ max = \"4K\" }}\n"), "memqos.toml:5:17: tier[0].dirty.max: 4096 bytes is too small (at least 65536)"),
        (format!("{ROOT}{tier}dirty = {{ min = \"1K\" }}\n"), "memqos.toml:5:17: tier[0].dirty.min: 1024 bytes is too small (at least 4096)"),
        (format!("{ROOT}{tier}dirty = {{ max = \"4M\", min = \"8M\" }}\n"), "memqos.toml:5:29: tier[0].dirty.min: dirty.min (8388608 bytes) is above dirty.max (4194304 bytes)"),
        (format!("{ROOT}{tier}dirty = {{ mx = \"4M\" }}\n"), "memqos.toml:5:11: tier[0].dirty: unknown field `mx`, expected `max` or `min`"),
        (format!("{ROOT}{tier}oom_score_adj = -1000\n"), "memqos.toml:5:17: tier[0].oom_score_adj: -1000 exempts the processes from the OOM killer entirely, and a memcg OOM with nothing killable stalls the charging task instead; use -999"),
        (format!("{ROOT}{tier}oom_score_adj = 1001\n"), "memqos.toml:5:17: tier[0].oom_score_adj: 1001 is out of range -999..=1000"),
        (format!("{ROOT}{tier}cpu_weight = 0\n"), "memqos.toml:5:14: tier[0].cpu_weight: 0 is out of range 1..=10000 (cgroup v2 cpu.weight; the default is 100)"),
        (format!("{ROOT}{tier}stall = {{ after_ms = 5000 }}\n"), "memqos.toml:5:9: tier[0].stall: needs throttle = true (memqos bounds the stalls its own memory.high causes)"),
        (format!("{ROOT}{tier}throttle = true\nstall = {{ after_ms = 10 }}\n"), "memqos.toml:6:22: tier[0].stall.after_ms: 10 is out of range 1000..=86400000"),
        (format!("{ROOT}{tier}throttle = true\nstall = {{ action = \"freeze\" }}\n"), "memqos.toml:6:20: tier[0].stall: unknown variant `freeze`, expected `relieve` or `kill`"),
        (format!("{ROOT}{tier}expected_peak = \"1G\"\n"), "memqos.toml:5:17: tier[0].expected_peak: needs protect = \"low\" or \"min\" (a protected tier reserves room for its expected peak)"),
        (format!("{ROOT}{tier}protect = \"low\"\nexpected_peak = 100\n"), "memqos.toml:6:17: tier[0].expected_peak: 100 bytes is below one page"),
        (format!("{ROOT}{tier}default_peak = \"1G\"\n"), "memqos.toml:5:16: tier[0].default_peak: needs protect = \"low\" or \"min\" (a protected tier reserves room for its expected peak)"),
        (format!("{ROOT}{tier}protect = \"low\"\ndefault_peak = 100\n"), "memqos.toml:6:16: tier[0].default_peak: 100 bytes is below one page"),
        (format!("{ROOT}{tier}first_sight_growth = 2.0\n"), "memqos.toml:5:22: tier[0].first_sight_growth: needs protect = \"low\" or \"min\" (a protected tier reserves room for its expected peak)"),
        (format!("{ROOT}{tier}protect = \"low\"\nfirst_sight_growth = 1.0\n"), "memqos.toml:6:22: tier[0].first_sight_growth: 1 is out of range (1, 16]: a growing cgroup expects this many times its peak so far"),
        (format!("{ROOT}{tier}learn_peak = true\n"), "memqos.toml:5:14: tier[0].learn_peak: tier \"a\" does not protect: learn_peak needs protect = \"low\" or \"min\" (a protected tier reserves room for its expected peak)"),
        (format!("history_file = \"hist.json\"\n{ROOT}{tier}"), "memqos.toml:1:16: history_file: must be an absolute path, got \"hist.json\""),
        (format!("{ROOT}{tier}[policy]\nstall_psi_full_avg10 = 0.0\n"), "memqos.toml:6:24: policy.stall_psi_full_avg10: 0 is out of range (0, 100]"),
    ];
    for (text, want) in cases {
        assert_eq!(err(&text), want, "config:\n{text}");
    }
}
