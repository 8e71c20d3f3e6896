use super::*;
use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    init: InitArgs,
}

fn args(list: &[&str]) -> InitArgs {
    Cli::try_parse_from(std::iter::once("init").chain(list.iter().copied())).unwrap().init
}

/// doctor's report of a fake host: no mounts it can read, and `swaps` as /proc/swaps.
fn fake_doctor(dir: &Path, swaps: &str) -> impl Fn() -> DoctorReport {
    let proc = dir.join("proc");
    std::fs::create_dir_all(&proc).unwrap();
    std::fs::write(proc.join("swaps"), swaps).unwrap();
    let sys = doctor::SystemPaths { proc, sys: dir.join("sys") };
    move || doctor::collect(&sys)
}

const NO_SWAP: &str = "Filename\tType\tSize\tUsed\tPriority\n";

#[test]
fn writes_the_profile_as_it_is_and_checks_it() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("etc/memqos/memqos.toml");
    let o =
        init(&args(&["--profile", "systemd", "--output", out.to_str().unwrap()]), &fake_doctor(dir.path(), NO_SWAP))
            .unwrap();
    assert_eq!(std::fs::read_to_string(&out).unwrap(), profiles::profile("systemd").unwrap().text);
    assert_eq!((o.profile, o.replaced, o.cgroup_root_from), ("systemd", false, "profile"));
    assert_eq!(o.cgroup_root, Path::new("/sys/fs/cgroup"));
    assert!(o.tiers >= 2);
    // The fake host has no cgroup2 mount: doctor's blocker is one that matters.
    assert_eq!(o.verdict, Verdict::CannotRun);
    assert!(o.findings.iter().any(|f| f.severity == Severity::Blocker));
    assert!(render(&o).contains("wrote "));
}

#[test]
fn an_unknown_profile_names_the_profiles() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("memqos.toml");
    let a = args(&["--profile", "laptop", "--output", out.to_str().unwrap()]);
    let e = init(&a, &fake_doctor(dir.path(), NO_SWAP)).err().unwrap().to_string();
    assert!(e.contains("unknown profile \"laptop\"") && e.contains("systemd, kubernetes, agent-host"), "{e}");
    assert!(!out.exists());
}

#[test]
fn an_existing_file_is_replaced_only_with_force() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("memqos.toml");
    std::fs::write(&out, "# mine\n").unwrap();
    let doctor = fake_doctor(dir.path(), NO_SWAP);
    let e = init(&args(&["--profile", "kubernetes", "--output", out.to_str().unwrap()]), &doctor).err().unwrap();
    assert!(e.to_string().contains(&format!("{} exists", out.display())), "{e}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "# mine\n");
    let o = init(&args(&["--profile", "kubernetes", "--force", "--output", out.to_str().unwrap()]), &doctor).unwrap();
    assert!(o.replaced);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), profiles::profile("kubernetes").unwrap().text);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2, "no temporary file left: memqos.toml and proc/");
}

#[test]
fn cgroup_root_replaces_the_profiles_and_a_relative_one_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("memqos.toml");
    let doctor = fake_doctor(dir.path(), NO_SWAP);
    let o = init(
        &args(&[
            "--profile",
            "agent-host",
            "--output",
            out.to_str().unwrap(),
            "--cgroup-root",
            "/sys/fs/cgroup/ai \"x\"",
        ]),
        &doctor,
    )
    .unwrap();
    assert_eq!((o.cgroup_root.to_str().unwrap(), o.cgroup_root_from), ("/sys/fs/cgroup/ai \"x\"", "--cgroup-root"));
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.contains("the profile's: \"/sys/fs/cgroup/agents\""), "{text}");
    std::fs::remove_file(&out).unwrap();
    let e = init(
        &args(&["--profile", "agent-host", "--output", out.to_str().unwrap(), "--cgroup-root", "agents"]),
        &doctor,
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("cgroup_root") && e.to_string().contains("absolute"), "{e}");
    assert!(!out.exists());
}

#[test]
fn an_agent_host_hears_what_its_swap_means() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("a.toml");
    let topics = |swaps: &str, sub: &str| {
        let _ = std::fs::remove_file(&out);
        let root = dir.path().join("no-such-root");
        let a = args(&[
            "--profile",
            "agent-host",
            "--output",
            out.to_str().unwrap(),
            "--cgroup-root",
            root.to_str().unwrap(),
        ]);
        let o = init(&a, &fake_doctor(&dir.path().join(sub), swaps)).unwrap();
        o.findings.iter().map(|f| f.topic).collect::<Vec<_>>()
    };
    let none = topics(NO_SWAP, "a");
    assert!(none.contains(&"agent host, no swap") && none.contains(&"cgroup root"), "{none:?}");
    let swap = topics(&format!("{NO_SWAP}/dev/vdb\tpartition\t1048572\t0\t-2\n"), "b");
    assert!(swap.contains(&"agent host, swap"), "{swap:?}");
}

#[test]
fn help_lists_the_profiles() {
    use clap::CommandFactory;
    let help = Cli::command().render_long_help().to_string();
    for p in profiles::PROFILES {
        assert!(help.contains(p.name) && help.contains(p.summary), "{help}");
    }
}
