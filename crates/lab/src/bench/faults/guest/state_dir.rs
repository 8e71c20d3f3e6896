//! `state_dir`: the daemon's state directory full, then read-only, under churn.

use super::*;

/// Writes `path` until the filesystem is full.
fn fill(path: &Path) -> Result<u64> {
    let mut f = std::fs::File::create(path)?;
    let chunk = vec![0u8; 4096];
    let mut n = 0u64;
    loop {
        match f.write(&chunk) {
            Ok(0) => break,
            Ok(w) => n += w as u64,
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => return Err(e).with_context(|| format!("filling {}", path.display())),
        }
    }
    let _ = f.sync_all();
    Ok(n)
}

fn sh(args: &[&str]) -> Result<()> {
    let out = Command::new(args[0]).args(&args[1..]).output()?;
    if !out.status.success() {
        bail!("{}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// Holds a fault for `hold` while sampling: the daemon alive, every knob memqos holds
/// journaled. Fills in the phase's exits, samples and unjournaled count.
fn hold_fault(phase: &mut Phase, hold: Duration, child: &mut Child, churn: &Churner, state: &Path) -> Result<()> {
    let t0 = Instant::now();
    let mut unjournaled = HashSet::new();
    while t0.elapsed() < hold {
        if let Some(st) = child.try_wait()? {
            phase.unexpected_exits.push(format!("{st} ({})", daemon_stderr_tail()));
            break;
        }
        {
            let s = churn.pause();
            let journal = Journal::open(state, root_path().as_path());
            for slot in s.slots.iter().flatten() {
                let v = std::fs::read_to_string(root_path().as_path().join(&slot.rel).join("memory.high"))
                    .ok()
                    .and_then(|t| t.trim().parse::<u64>().ok());
                if v.is_some_and(|v| v < V_BASE) {
                    let journaled = journal.as_ref().is_ok_and(|j| j.original(slot.id, "memory.high").is_some());
                    if !journaled {
                        unjournaled.insert(slot.id);
                    }
                }
            }
        }
        phase.samples += 1;
        std::thread::sleep(Duration::from_millis(250));
    }
    phase.held_s = t0.elapsed().as_secs_f64();
    phase.unjournaled = unjournaled.len();
    Ok(())
}

/// Counts refused writes in [from, to] and waits for the first newly journaled knob after
/// `to`: a first cap of a cgroup memqos had not capped before (its original must be
/// journaled before that write).
fn after_fault(phase: &mut Phase, stdout: &Path, from: u64, to: u64) {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(20) {
        let lines = events::parse(&std::fs::read_to_string(stdout).unwrap_or_default());
        let writes: Vec<&WriteEvent> = events::writes(&lines).map(|(_, w)| w).collect();
        phase.refused = writes
            .iter()
            .filter(|w| {
                (from..=to).contains(&w.mono_ns)
                    && matches!(&w.outcome, Outcome::Error(m) if m.contains("could not be journaled"))
            })
            .count();
        let before: HashSet<u64> = writes.iter().filter(|w| is_cap(w) && w.mono_ns < to).map(|w| w.cgroup_id).collect();
        if let Some(w) = writes.iter().find(|w| is_cap(w) && w.mono_ns >= to && !before.contains(&w.cgroup_id)) {
            phase.recovery_ms = Some(ms_between(to, w.mono_done_ns));
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub(super) fn state_dir() -> Result<StateDirResult> {
    // 8 MiB, not 64 KiB: at 100 calls/s the daemon's own event log (about 40 KB/s) would fill
    // 64 KiB within two seconds, so "full" could not be switched off again to time recovery.
    let size = "8m";
    let small_buf = state_path().with_file_name("memqos-faults-small");
    let (small, at) = (small_buf.as_path(), small_buf.to_str().context("a UTF-8 path")?);
    let _ = sh(&["umount", at]);
    std::fs::create_dir_all(small)?;
    sh(&["mount", "-t", "tmpfs", "-o", &format!("size={size},mode=0700"), "memqos-faults", at])?;
    let result = state_dir_on(small, at, size);
    // A bind mount may be left on top after a failure: unmount until nothing is there.
    while sh(&["umount", at]).is_ok() {}
    result
}

fn state_dir_on(small: &Path, at: &str, size: &str) -> Result<StateDirResult> {
    let tree = Tree::setup("256M")?;
    config()?;
    let churn = Churner::start(tree.low.clone());
    let stdout_buf = state_path().with_file_name("memqos-faults-stdout.jsonl");
    let stdout_path = stdout_buf.as_path();
    let stdout = std::fs::File::create(stdout_path)?;
    let mut child = spawn_daemon(small, &[], Stdio::from(stdout), None)?;
    let t0 = Instant::now();
    while !small.join(memqos_daemon::status::STATUS_FILE).exists() {
        if let Some(st) = child.try_wait()? {
            bail!("the daemon exited in start-up: {st} ({})", daemon_stderr_tail());
        }
        if t0.elapsed() > Duration::from_secs(60) {
            bail!("no status.json within 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs(3));
    let mut r = StateDirResult { tmpfs_size: size.into(), ..Default::default() };
    let hold = Duration::from_secs(5);

    // Full.
    let filler = small.join("filler");
    let from = mono_ns();
    let filled = fill(&filler)?;
    let mut full = Phase {
        fault: "full".into(),
        method: format!("tmpfs filled to ENOSPC ({} KiB file)", filled / 1024),
        ..Default::default()
    };
    hold_fault(&mut full, hold, &mut child, &churn, small)?;
    std::fs::remove_file(&filler)?;
    let to = mono_ns();
    after_fault(&mut full, stdout_path, from, to);
    r.phases.push(full);

    // Read-only. The kernel refuses `remount,ro` while files are open for writing (the
    // daemon's journal and log); then a read-only bind mount on top fails every new open and
    // rename beneath the state_dir, while the daemon's open descriptors still write.
    std::thread::sleep(Duration::from_secs(2));
    let from = mono_ns();
    let (method, undo): (String, Vec<&str>) = match sh(&["mount", "-o", "remount,ro", at]) {
        Ok(()) => ("tmpfs remounted read-only".into(), vec!["mount", "-o", "remount,rw", at]),
        Err(e) => {
            sh(&["mount", "--bind", at, at])?;
            sh(&["mount", "-o", "remount,bind,ro", at])?;
            (
                format!(
                    "read-only bind mount over state_dir (remount,ro refused: {})",
                    e.to_string().lines().next().unwrap_or_default()
                ),
                vec!["umount", at],
            )
        }
    };
    let mut ro = Phase { fault: "read-only".into(), method, ..Default::default() };
    hold_fault(&mut ro, hold, &mut child, &churn, small)?;
    sh(&undo)?;
    let to = mono_ns();
    after_fault(&mut ro, stdout_path, from, to);
    r.phases.push(ro);

    // The journal written through both faults must restore every knob after a SIGKILL.
    if let Some(st) = child.try_wait()? {
        r.phases.last_mut().expect("two phases").unexpected_exits.push(format!("{st} before the final kill"));
    } else {
        let s = churn.pause();
        let _ = child.kill();
        let _ = child.wait();
        drop(s);
    }
    if let Err(why) = await_restore(small) {
        r.check.examples.push(format!("no restore within {} s: {why}", RESTORE_PATIENCE.as_secs()));
    }
    let mut first = HashMap::new();
    note_first_reads(&events::parse(&std::fs::read_to_string(stdout_path).unwrap_or_default()), &mut first);
    r.check.add(&check(&root_path(), &mut churn.pause(), &first, &tree.prot));
    churn.stop();
    drop(tree);
    Ok(r)
}
