//! `memqos run`, `memqos-run` and `memqos-shell` on real kernels: each tool call in its own cgroup below
//! the session, removed afterwards, the command's exit status preserved (128 + signal
//! included), signals forwarded, an OOM kill explained on stderr.

mod common;

use common::*;
use memqos_cgroupfs::Cgroup;
use memqos_vmtest::guest_test;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A managed root below /sys/fs/cgroup with the memory controller given to its children.
fn agents_root(name: &str) -> Cgroup {
    let root = make_cgroup(name);
    enable_memory(&root);
    root
}

fn run(root: &Cgroup, args: &[&str]) -> Output {
    Command::new(memqos_bin()).arg("run").arg("--root").arg(root.path()).args(args).output().expect("spawn memqos run")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Child cgroups of `cg` by name.
fn children(cg: &Cgroup) -> Vec<String> {
    cg.children().unwrap().iter().map(|c| c.path().file_name().unwrap().to_string_lossy().into_owned()).collect()
}

/// The last stderr line, parsed as the --json report.
fn report(out: &Output) -> serde_json::Value {
    let err = text(&out.stderr);
    let line = err.lines().next_back().unwrap_or_else(|| panic!("no --json line on stderr: {err}"));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"))
}

fn poll(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

guest_test!(run_preserves_status_signals_and_removes_the_call_cgroup, |g| g, {
    let root = agents_root("agents-status");
    let session = root.child("s1");

    // The command runs in <root>/s1/tool.<pid>; its exit code comes back; the cgroup is gone.
    let out = run(&root, &["--session", "s1", "--json", "--", "sh", "-c", "cat /proc/self/cgroup; exit 3"]);
    let r = report(&out);
    println!("exit 3 run: {:?}, stdout {:?}, report {r}", out.status, text(&out.stdout));
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let cg = r["cgroup"].as_str().unwrap();
    assert!(cg.starts_with(&format!("{}/tool.", session.path().display())), "{cg}");
    assert_eq!(text(&out.stdout).trim(), format!("0::{}", cg.trim_start_matches("/sys/fs/cgroup")));
    assert!(r["peak_bytes"].as_u64().unwrap() > 0 && r["status"] == 3, "{r}");
    assert!(children(&session).is_empty(), "call cgroup left behind: {:?}", children(&session));

    // Killed by a signal: 128 + signal, as a shell reports it; no OOM account.
    let out = run(&root, &["--session", "s1", "--", "sh", "-c", "kill -KILL $$"]);
    assert_eq!(out.status.code(), Some(137), "{}", text(&out.stderr));
    assert!(!text(&out.stderr).contains("OOM"), "{}", text(&out.stderr));

    // A hint picks the tier, i.e. the cgroup's name.
    let out = run(&root, &["--session", "s1", "--hint", "low", "--json", "--", "true"]);
    let r = report(&out);
    assert!(
        out.status.success() && r["tier"] == "tool-low" && r["cgroup"].as_str().unwrap().contains("/s1/tool-low."),
        "{r}"
    );

    // A nested call stays in the outer call's cgroup (make running recipes through
    // SHELL=memqos-shell must not scatter one call over many cgroups).
    let bin = memqos_bin();
    let out = run(&root, &["--session", "s1", "--json", "--", bin, "run", "--", "cat", "/proc/self/cgroup"]);
    let outer = report(&out)["cgroup"].as_str().unwrap().to_owned();
    assert_eq!(text(&out.stdout).trim(), format!("0::{}", outer.trim_start_matches("/sys/fs/cgroup")));

    // memqos-run, the small binary beside memqos (a workspace build makes both), makes the
    // same call: own cgroup, status back, cgroup removed.
    let lean = std::path::Path::new(bin).with_file_name("memqos-run");
    let out = Command::new(&lean)
        .arg("--root")
        .arg(root.path())
        .args(["--session", "s1", "--json", "--", "sh", "-c", "cat /proc/self/cgroup; exit 5"])
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", lean.display()));
    let r = report(&out);
    assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));
    let cg = r["cgroup"].as_str().unwrap();
    assert!(cg.starts_with(&format!("{}/tool.", session.path().display())), "{cg}");
    assert_eq!(text(&out.stdout).trim(), format!("0::{}", cg.trim_start_matches("/sys/fs/cgroup")));
    assert!(children(&session).is_empty(), "{:?}", children(&session));

    // --expect declares the peak on the call's cgroup (here the runtime's), where the daemon
    // reads it; a bad size is a usage error before anything is made.
    let read_xattr = "import os; print(os.getxattr(os.environ['MEMQOS_CGROUP'], 'user.memqos.expected_peak').decode())";
    let out = run(&root, &["--session", "s1", "--runtime", "--expect", "512M", "--", "python3", "-c", read_xattr]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), (512u64 << 20).to_string());
    let out = run(&root, &["--session", "s1", "--expect", "lots", "--", "true"]);
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("--expect"), "{}", text(&out.stderr));
    assert!(children(&session).is_empty(), "{:?}", children(&session));

    // SIGTERM sent to memqos run reaches the command; its status says so.
    let mut child = Command::new(bin)
        .arg("run")
        .arg("--root")
        .arg(root.path())
        .args(["--session", "s1", "--", "sleep", "60"])
        .spawn()
        .unwrap();
    poll("the sleep to run in its call cgroup", Duration::from_secs(30), || {
        session.children().unwrap().iter().any(|c| c.is_populated().unwrap_or(false))
    });
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let st = wait_timeout(&mut child, Duration::from_secs(30)).expect("memqos run did not end after SIGTERM");
    println!("SIGTERM forwarded: {st:?}");
    assert_eq!(st.code(), Some(128 + libc::SIGTERM), "{st:?}");
    assert!(children(&session).is_empty(), "{:?}", children(&session));

    // A call that leaves a background process keeps its cgroup; once that process is gone,
    // the next call of the session removes it.
    let out = run(&root, &["--session", "s1", "--json", "--", "sh", "-c", "sleep 2 >/dev/null 2>&1 & exit 0"]);
    let r = report(&out);
    assert!(out.status.success() && r["kept"] == true, "{r}");
    let kept = Cgroup::new(r["cgroup"].as_str().unwrap());
    poll("the background sleep to end", Duration::from_secs(60), || !kept.is_populated().unwrap_or(true));
    assert!(kept.exists());
    assert!(run(&root, &["--session", "s1", "--", "true"]).status.success());
    assert!(!kept.exists(), "leftover {} not swept", kept.path().display());
    assert!(children(&session).is_empty(), "{:?}", children(&session));
});

guest_test!(oom_killed_call_is_explained_on_stderr, |g| g, {
    let root = agents_root("agents-oom");
    let (bin, lab) = (memqos_bin(), lab_bin());

    // The call's own limit.
    let out = run(&root, &["--session", "s", "--max", "32M", "--json", "--", lab, "workload", "alloc", "--mb", "96"]);
    let err = text(&out.stderr);
    println!("own limit:\n{err}");
    assert_eq!(out.status.code(), Some(137), "{err}");
    for want in [
        "was killed by the kernel's out-of-memory (OOM) killer (exit status 137)",
        "memory.max = 32M",
        "(this call)",
        "try: raise this call's own limit",
    ] {
        assert!(err.contains(want), "missing {want:?} in:\n{err}");
    }
    let r = report(&out);
    assert!(r["oom"]["killed"].as_u64().unwrap() >= 1 && r["events"]["oom_kill"].as_u64().unwrap() >= 1, "{r}");

    // The session's limit, with the agent runtime holding part of it.
    let session = root.child("t");
    session.create().unwrap();
    set(&session, "memory.max", 128 * MIB);
    let mut runtime = Command::new(bin)
        .arg("run")
        .arg("--root")
        .arg(root.path())
        .args(["--runtime", "--session", "t", "--", lab, "workload", "alloc", "--mb", "40", "--hold-ms", "300000"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let rt = session.child("runtime");
    poll("the runtime to hold 40 MiB", Duration::from_secs(120), || rt.memory_current().unwrap_or(0) >= 40 * MIB);
    let out = run(&root, &["--session", "t", "--json", "--", lab, "workload", "alloc", "--mb", "160"]);
    let err = text(&out.stderr);
    println!("session limit:\n{err}");
    assert_eq!(out.status.code(), Some(137), "{err}");
    for want in [
        "memory.max = 128M",
        "(its session)",
        "others holding memory under that limit now: runtime ",
        "try: run it again when the other tool calls",
    ] {
        assert!(err.contains(want), "missing {want:?} in:\n{err}");
    }
    assert_eq!(report(&out)["oom"]["limit"]["role"], "its session");
    unsafe { libc::kill(runtime.id() as i32, libc::SIGTERM) };
    let st = wait_timeout(&mut runtime, Duration::from_secs(60)).expect("runtime did not stop");
    assert_eq!(st.code(), Some(143), "{st:?}");
    assert!(children(&session).is_empty(), "{:?}", children(&session));
});

guest_test!(memqos_shell_puts_each_tool_call_in_its_own_cgroup, |g| g, {
    let root = agents_root("agents-shell");
    std::fs::create_dir_all("/tmp/bin").unwrap();
    std::os::unix::fs::symlink(memqos_bin(), "/tmp/bin/memqos-shell").unwrap();
    // An "agent runtime" that runs three tool calls through $SHELL -c, as agents do.
    let agent = r#"cat /proc/self/cgroup
        export SHELL=/tmp/bin/memqos-shell MEMQOS_SHELL_REAL=/bin/sh
        "$SHELL" -c 'cat /proc/self/cgroup'
        MEMQOS_HINT=low "$SHELL" -c 'cat /proc/self/cgroup; exit 5'; echo "status $?"
        "$SHELL" -c 'kill -TERM $$'; echo "status $?""#;
    let out = run(&root, &["--runtime", "--session", "agent", "--", "sh", "-c", agent]);
    let stdout = text(&out.stdout);
    println!("{stdout}{}", text(&out.stderr));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 5, "{stdout}");
    assert_eq!(lines[0], "0::/agents-shell/agent/runtime");
    assert!(lines[1].starts_with("0::/agents-shell/agent/tool."), "{}", lines[1]);
    assert!(lines[2].starts_with("0::/agents-shell/agent/tool-low."), "{}", lines[2]);
    assert_eq!(&lines[3..], ["status 5", "status 143"]);
    assert!(children(&root.child("agent")).is_empty(), "{:?}", children(&root.child("agent")));
});

/// A root `agents-<name>` with memory.max 512M and a daemon on it with the shipped session
/// config, its commented `[policy]` replaced by `policy` (admission on); the daemon's state dir
/// is /tmp/<name>/state.
fn admission_daemon(
    name: &str,
    policy: &str,
) -> (Cgroup, std::path::PathBuf, memqos_lab::daemon_process::DaemonProcess) {
    let root = agents_root(&format!("agents-{name}"));
    set(&root, "memory.max", 512 * MIB);
    let dir = std::path::Path::new("/tmp").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let state = dir.join("state");
    let config = include_str!("../../agent/session.example.toml")
        .replace("cgroup_root = \"/sys/fs/cgroup/agents\"", &format!("cgroup_root = {:?}", root.path()))
        .replace("# [policy]\n# admission = true", &format!("[policy]\n{policy}"));
    assert!(config.contains(&format!("{policy}\n")) && !config.contains("# admission"), "{config}");
    std::fs::write(dir.join("memqos.toml"), &config).unwrap();
    let daemon = memqos_lab::daemon_process::DaemonProcess::start(
        std::path::Path::new(memqos_bin()),
        &dir.join("memqos.toml"),
        &state,
        &[],
        Stdio::null(),
    )
    .unwrap();
    (root, state, daemon)
}

guest_test!(an_armed_ceiling_is_on_the_call_when_it_starts_and_gone_after_the_daemon_stops, |g| g, {
    let (root, state, daemon) = admission_daemon("armed", "admission = true");
    poll("the daemon's allowances", Duration::from_secs(60), || state.join("admission.json").exists());

    // The call reads its own memory.high first thing: armed before exec, at what the report says.
    let own_high = "cat /sys/fs/cgroup$(cut -d: -f3 /proc/self/cgroup)/memory.high";
    let state_arg = state.to_str().unwrap();
    let out = run(&root, &["--session", "s", "--state-dir", state_arg, "--json", "--", "sh", "-c", own_high]);
    let r = report(&out);
    println!("armed call: stdout {:?}, report {r}", text(&out.stdout));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let seen: u64 = text(&out.stdout).trim().parse().unwrap_or_else(|_| panic!("not armed: {}", text(&out.stdout)));
    assert_eq!(r["armed"]["high_bytes"].as_u64(), Some(seen), "{r}");
    assert!((16 * MIB..=512 * MIB).contains(&seen), "{seen}");

    // A call running when the daemon stops is not left with a ceiling.
    let mut call = Command::new(memqos_bin())
        .arg("run")
        .arg("--root")
        .arg(root.path())
        .args(["--session", "s", "--state-dir", state_arg, "--", "sleep", "300"])
        .spawn()
        .unwrap();
    let session = root.child("s");
    let running = || session.children().unwrap().into_iter().find(|c| c.is_populated().unwrap_or(false));
    poll("the call to run", Duration::from_secs(60), || running().is_some());
    let cg = running().unwrap();
    let (status, log) = daemon.stop().unwrap();
    assert!(status.success(), "{status:?}\n{log}");
    poll("the call's memory.high back at max", Duration::from_secs(30), || {
        std::fs::read_to_string(cg.path().join("memory.high")).is_ok_and(|v| v.trim() == "max")
    });
    assert!(!state.join("admission.json").exists(), "the allowances are withdrawn at stop");
    unsafe { libc::kill(call.id() as i32, libc::SIGTERM) };
    wait_timeout(&mut call, Duration::from_secs(60)).expect("the call did not end");
});

guest_test!(a_call_with_no_room_waits_at_the_door_and_starts_when_room_frees, |g| g, {
    // Waits long enough that only room ends one.
    let (root, state, daemon) = admission_daemon("wait", "admission = true\nadmission_wait_ms = 300000");

    // A full host: 470M held under the 512M limit, above the guard line.
    let hog_cg = make_cgroup("agents-wait/hog");
    let mut hog = spawn_workload(&hog_cg, "alloc", &["--mb", "470", "--hold-ms", "600000"]);
    poll("the hog to fill the host", Duration::from_secs(120), || {
        hog_cg.memory_current().is_ok_and(|b| b >= 440 * MIB)
    });
    let allowances = || -> serde_json::Value {
        std::fs::read(state.join("admission.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or(serde_json::Value::Null)
    };
    poll("the daemon to say wait", Duration::from_secs(60), || {
        allowances()["tiers"].as_array().is_some_and(|t| !t.is_empty() && t.iter().all(|a| a["wait"] == true))
    });

    // A stale sibling: the cgroup of a call whose `memqos run` died (empty, its lock gone).
    let stale = root.child("s").child("tool.99999");
    root.child("s").create().unwrap();
    stale.create().unwrap();

    let state_arg = state.to_str().unwrap();
    let mut call = Command::new(memqos_bin())
        .arg("run")
        .arg("--root")
        .arg(root.path())
        .args(["--session", "s", "--state-dir", state_arg, "--json", "--", "true"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // It waits, and before its cgroup exists.
    std::thread::sleep(Duration::from_secs(3));
    assert!(call.try_wait().unwrap().is_none(), "the call started on a full host");
    let session = root.child("s");
    assert!(!stale.path().exists(), "a waiting call sweeps its stale siblings before it waits");
    let calls = || session.children().map(|c| c.len()).unwrap_or(0);
    assert_eq!(calls(), 0, "a waiting call has no cgroup yet");

    // Room frees: the call starts, armed, and says it waited for room.
    hog.kill().unwrap();
    hog.wait().unwrap();
    let status = wait_timeout(&mut call, Duration::from_secs(120)).expect("the call never started");
    let out = call.wait_with_output().unwrap();
    assert!(status.success(), "{status:?}: {}", text(&out.stderr));
    let r = report(&out);
    println!("waited call: {r}");
    assert_eq!(r["armed"]["wait_ended"], "room", "{r}");
    assert!(r["armed"]["waited_ms"].as_u64().is_some_and(|ms| ms >= 3000), "{r}");
    assert!(r["armed"]["high_bytes"].as_u64().is_some(), "{r}");
    assert!(state.join("admission.claim").exists(), "a waiter that started took the tick's claim");

    let (status, log) = daemon.stop().unwrap();
    assert!(status.success(), "{status:?}\n{log}");
    assert!(!state.join("admission.claim").exists(), "the claim is withdrawn at stop");
});

guest_test!(a_declared_call_waits_for_room_for_its_declaration_and_only_for_that, |g| g, {
    let (root, state, daemon) = admission_daemon("declared", "admission = true\nadmission_wait_ms = 300000");

    // 250M held under the 512M limit: room for an undeclared call (its share is above the
    // 64M floor), not for one that declares 300M.
    let hog_cg = make_cgroup("agents-declared/hog");
    let mut hog = spawn_workload(&hog_cg, "alloc", &["--mb", "250", "--hold-ms", "600000"]);
    poll("the hog to hold its memory", Duration::from_secs(120), || {
        hog_cg.memory_current().is_ok_and(|b| b >= 240 * MIB)
    });
    // The daemon's admission.json, its entry for the tool tier, and that tier's room.
    let admission = || -> Option<serde_json::Value> {
        serde_json::from_slice(&std::fs::read(state.join("admission.json")).ok()?).ok()
    };
    let tool = |a: &serde_json::Value| a["tiers"].as_array()?.iter().find(|t| t["tier"] == "tool").cloned();
    let room = || admission().as_ref().and_then(tool)?["room_bytes"].as_u64();
    poll("the daemon to publish the room beside the hog", Duration::from_secs(60), || {
        room().is_some_and(|r| (100 * MIB..300 * MIB).contains(&r))
    });

    let state_arg = state.to_str().unwrap();
    let root_arg = root.path().to_str().unwrap();
    let common = ["run", "--root", root_arg, "--session", "s", "--state-dir", state_arg, "--json"];
    // Undeclared: starts at once.
    let out = Command::new(memqos_bin()).args(common).args(["--", "true"]).output().unwrap();
    let r = report(&out);
    assert!(out.status.success() && r["armed"]["waited_ms"].is_null(), "{r}");

    let mut call = Command::new(memqos_bin())
        .args(common)
        .args(["--expect", "300M", "--", "true"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(3));
    assert!(call.try_wait().unwrap().is_none(), "a call declaring 300M started beside {:?} B of room", room());

    hog.kill().unwrap();
    hog.wait().unwrap();
    let status = wait_timeout(&mut call, Duration::from_secs(120)).expect("the declared call never started");
    let out = call.wait_with_output().unwrap();
    assert!(status.success(), "{status:?}: {}", text(&out.stderr));
    let r = report(&out);
    println!("declared call: {r}");
    assert_eq!(r["armed"]["wait_ended"], "room", "{r}");
    assert_eq!(r["armed"]["declared_bytes"].as_u64(), Some(300 * MIB), "{r}");
    assert_eq!(r["armed"]["high_bytes"].as_u64(), Some(300 * MIB), "armed at its declaration: {r}");

    // 360M held: the room's share is below the 64M floor and the allowance says wait, but a
    // call that declares 40M fits in the room: it starts at once, armed at its declaration.
    let hog_cg = make_cgroup("agents-declared/hog2");
    let mut hog = spawn_workload(&hog_cg, "alloc", &["--mb", "360", "--hold-ms", "600000"]);
    // The ledger in admission.claim counts the 300M call for three ticks after it started
    // (until the daemon surely counts it itself): past those, only the room decides.
    let claimed_seq: u64 = std::fs::read_to_string(state.join("admission.claim"))
        .unwrap()
        .split_whitespace()
        .next()
        .and_then(|w| w.parse().ok())
        .expect("the 300M call's claim");
    poll("the daemon to say wait with room for 40M", Duration::from_secs(120), || {
        admission().is_some_and(|a| {
            a["seq"].as_u64().is_some_and(|s| s >= claimed_seq + 3)
                && tool(&a)
                    .is_some_and(|t| t["wait"] == true && t["room_bytes"].as_u64().is_some_and(|r| r >= 40 * MIB))
        })
    });
    let out = Command::new(memqos_bin()).args(common).args(["--expect", "40M", "--", "true"]).output().unwrap();
    let r = report(&out);
    println!("small declared call beside {:?}: {r}", admission().as_ref().and_then(tool));
    assert!(out.status.success() && r["armed"]["waited_ms"].is_null(), "it waited: {r}");
    assert_eq!(r["armed"]["high_bytes"].as_u64(), Some(40 * MIB), "armed at its declaration: {r}");
    hog.kill().unwrap();
    hog.wait().unwrap();

    let (status, log) = daemon.stop().unwrap();
    assert!(status.success(), "{status:?}\n{log}");
});
