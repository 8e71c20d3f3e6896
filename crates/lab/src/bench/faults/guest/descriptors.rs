//! `descriptors`: 10,000 cgroups at an open-file limit the daemon cannot raise.

use super::*;

/// "Max open files" soft and hard of a process.
fn nofile(pid: u32) -> (Option<u64>, Option<u64>) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap_or_default();
    let Some(line) = text.lines().find(|l| l.starts_with("Max open files")) else { return (None, None) };
    let mut f = line["Max open files".len()..].split_whitespace().map(|v| v.parse().ok());
    (f.next().flatten(), f.next().flatten())
}

pub(super) fn descriptors(n: usize) -> Result<DescriptorsResult> {
    const LIMIT: u64 = 1024;
    const ASKED: u64 = 30;
    let tree = Tree::setup("256M")?;
    // A whole-tree sample of 10,000 cgroups every 100 ms would be the bench, not the limit.
    daemon_config().set("signals.sampling_interval_ms", 1000).write(config_path().as_path())?;
    let mut r = DescriptorsResult { cgroups: n, asked_s: ASKED as f64, ..Default::default() };
    let made = Instant::now();
    let names: Vec<String> = (0..n).map(|i| format!("c{i:05}")).collect();
    for name in &names {
        make(&tree.low.child(name))?;
    }
    r.make_s = made.elapsed().as_secs_f64();
    eprintln!("faults: {n} cgroups made in {:.0} s", r.make_s);
    let state_buf = state_path();
    let state = state_buf.as_path();
    let _ = std::fs::remove_dir_all(state);
    // The daemon raises its limit up to fs.nr_open when it may: lowered, 1,024 is a hard cap.
    // (Not in a rehearsal: the host's sysctl is not the bench's to change.)
    let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")?;
    let set_nr_open = |v: &str| if fake() { Ok(()) } else { std::fs::write("/proc/sys/fs/nr_open", v) };
    set_nr_open(&LIMIT.to_string())?;
    let launched = mono_ns();
    let t0 = Instant::now();
    let spawned = spawn_daemon(state, &["--duration", &ASKED.to_string()], Stdio::null(), Some(LIMIT));
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            set_nr_open(nr_open.trim())?;
            return Err(e);
        }
    };
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break st;
        }
        if t0.elapsed() > Duration::from_secs(ASKED + 600) {
            let _ = child.kill();
            break child.wait()?;
        }
        // The largest limit seen: the daemon may raise its own after start-up.
        let (soft, hard) = nofile(child.id());
        r.nofile_soft = r.nofile_soft.max(soft);
        r.nofile_hard = r.nofile_hard.max(hard);
        r.status_json_seen |= state.join(memqos_daemon::status::STATUS_FILE).exists();
        if r.status_json_seen && r.startup_s.is_none() {
            r.startup_s = Some(t0.elapsed().as_secs_f64());
        }
        let fds = std::fs::read_dir(format!("/proc/{}/fd", child.id())).map(|d| d.count()).unwrap_or(0);
        r.peak_fds = r.peak_fds.max(fds);
        std::thread::sleep(Duration::from_millis(250));
    };
    set_nr_open(nr_open.trim())?;
    r.ran_s = t0.elapsed().as_secs_f64();
    r.exit_status = status.to_string();
    if !status.success() {
        r.unexpected_exits.push(format!("{status} ({})", daemon_stderr_tail()));
    }
    let log = events::read(state);
    let capped: Vec<&WriteEvent> = caps(&log).collect();
    r.first_cap_s = capped.iter().map(|w| w.mono_done_ns).min().map(|t| ms_between(launched, t) / 1e3);
    r.capped = capped.iter().map(|w| w.cgroup_id).collect::<HashSet<_>>().len();
    r.emfile_lines = log.iter().filter(|l| format!("{:?}", l.event).contains("Too many open files")).count();
    for name in &names {
        r.check.checked += 1;
        let v = tree.low.child(name).read_string("memory.high").map(|s| s.trim().to_string()).unwrap_or_default();
        if v != "max" {
            r.check.lost += 1;
            if r.check.examples.len() < 20 {
                r.check.examples.push(format!("low/{name}: memory.high {v}, was max"));
            }
        }
    }
    for name in &names {
        let _ = unmake(&tree.low.child(name));
    }
    drop(tree);
    Ok(r)
}
