//! `hostile`: a tenant's oddities below a `**` tier while the daemon runs.

use super::*;

/// The first cap of the normal low cgroup `rel` in the daemon's log, ms after `since_ns`.
fn await_cap(state: &Path, rel: &str, since_ns: u64, within: Duration) -> Option<f64> {
    let t0 = Instant::now();
    while t0.elapsed() < within {
        let log = events::read(state);
        if let Some(w) = caps(&log).find(|w| w.cgroup == rel && w.mono_ns >= since_ns) {
            return Some(ms_between(since_ns, w.mono_done_ns));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

fn c_path(p: &Path) -> Result<CString> {
    Ok(CString::new(p.as_os_str().as_bytes())?)
}

/// mkdirat + openat beneath `parent`: no path of the chain is ever spelled out whole.
fn mkdir_at(parent: libc::c_int, name: &str) -> std::io::Result<libc::c_int> {
    let c = CString::new(name).expect("no NUL");
    // SAFETY: a valid directory fd and NUL-terminated name.
    unsafe {
        if libc::mkdirat(parent, c.as_ptr(), 0o755) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let fd = libc::openat(parent, c.as_ptr(), libc::O_DIRECTORY | libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(fd)
    }
}

fn write_at(dir: libc::c_int, file: &str, value: &str) -> std::io::Result<()> {
    let c = CString::new(file).expect("no NUL");
    // SAFETY: a valid directory fd, NUL-terminated name, our own buffer.
    unsafe {
        let fd = libc::openat(dir, c.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let n = libc::write(fd, value.as_ptr().cast(), value.len());
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if n < 0 {
            return Err(err);
        }
    }
    Ok(())
}

/// A chain of directories too deep to name by path, removed beneath its own fds, deepest
/// first, when dropped (also when the scenario stops early: the next scenarios' teardown
/// could not remove it by path).
struct Chain {
    /// The top directory's fd, then each level's.
    fds: Vec<libc::c_int>,
    name: String,
    _top: std::fs::File,
}

impl Drop for Chain {
    fn drop(&mut self) {
        let Ok(c) = CString::new(self.name.as_str()) else { return };
        for w in self.fds.windows(2).rev() {
            // SAFETY: fds this chain opened (the top one is `_top`'s, closed by it); each
            // child's is closed before it is removed beneath its parent's.
            unsafe {
                libc::close(w[1]);
                libc::unlinkat(w[0], c.as_ptr(), libc::AT_REMOVEDIR);
            }
        }
    }
}

/// Sends without SIGPIPE (the bench runs with SIGPIPE's default action).
fn send(fd: libc::c_int, bytes: &[u8]) -> bool {
    // SAFETY: our own socket and buffer.
    unsafe { libc::send(fd, bytes.as_ptr().cast(), bytes.len(), libc::MSG_NOSIGNAL) == bytes.len() as isize }
}

pub(super) fn hostile() -> Result<HostileResult> {
    let mut tree = Tree::setup("256M")?;
    config()?;
    let state_buf = state_path();
    let state = state_buf.as_path();
    let _ = std::fs::remove_dir_all(state);
    let exe = std::env::current_exe()?;
    let mut daemon = DaemonProcess::start(&exe, config_path().as_path(), state, &[], Stdio::null())?;
    let mut r = HostileResult::default();

    // Before the tenant: no low cgroup yet, so the declaration has no one to hold back and the
    // daemon is calm (whole-tree samples every calm_interval_ms). How soon is a first low
    // cgroup capped?
    std::thread::sleep(Duration::from_secs(2));
    let first = tree.low.child("first");
    let since = mono_ns();
    make(&first)?;
    first.write_string("memory.high", &V_BASE.to_string())?;
    r.calm_low_capped_ms = await_cap(state, "low/first", since, Duration::from_secs(20));

    let hostile = tree.root.child("hostile");
    make(&hostile)?;
    hostile.write_string("cgroup.subtree_control", "+memory")?;

    // A leaf without the memory controller: a's subtree_control is empty.
    let a = hostile.child("a");
    make(&a)?;
    make(&a.child("b"))?;
    r.made.push("hostile/a/b: no memory controller".into());

    // A chain of long names, each level with the memory controller, past PATH_MAX.
    let name = "d".repeat(200);
    let top = std::fs::File::open(hostile.path())?;
    let mut chain = Chain { fds: vec![std::os::fd::AsRawFd::as_raw_fd(&top)], name: name.clone(), _top: top };
    let mut bytes = hostile.path().as_os_str().len();
    while bytes <= 4096 + 2 * name.len() {
        let parent = *chain.fds.last().expect("non-empty");
        if let Err(e) = write_at(parent, "cgroup.subtree_control", "+memory") {
            r.made.push(format!("deep chain: +memory refused at level {}: {e}", chain.fds.len() - 1));
            break;
        }
        match mkdir_at(parent, &name) {
            Ok(fd) => {
                chain.fds.push(fd);
                bytes += 1 + name.len();
            }
            Err(e) => {
                r.made.push(format!("deep chain: mkdir refused at level {}: {e}", chain.fds.len()));
                break;
            }
        }
    }
    r.deep_levels = chain.fds.len() - 1;
    r.deep_path_bytes = bytes;
    r.made.push(format!("hostile/{{200 x d}}/...: {} levels, {bytes} bytes", r.deep_levels));

    // Names that are not UTF-8, with terminal escapes and control characters.
    let odd: [&[u8]; 6] =
        [b"\xff\xfe-not-utf8", b"tool\x1b[31mred\x1b[0m", b"new\nline", b"tab\tand\rcr", b"back\\slash", b"\x07bell"];
    for raw in odd {
        let p = hostile.path().join(OsStr::from_bytes(raw));
        match std::fs::create_dir(&p) {
            Ok(()) => r.made.push(format!(
                "hostile/{}",
                memqos_cgroupfs::name::display(&memqos_cgroupfs::name::encode(OsStr::from_bytes(raw)))
            )),
            Err(e) => r.made.push(format!("{raw:?}: refused: {e}")),
        }
    }

    // A huge declaration from a tenant (untrusted: ignored) and from root (honoured, capped
    // at the parent's limit), both with a process.
    let huge = u64::MAX.to_string();
    let declared_at = mono_ns();
    for (name, uid) in [("prot-tenant", Some(1000)), ("prot-huge", None)] {
        let cg = tree.root.child(name);
        make(&cg)?;
        if let Some(uid) = uid {
            // SAFETY: chown(2) on a path we made.
            if unsafe { libc::chown(c_path(cg.path())?.as_ptr(), uid, uid) } != 0 {
                bail!("chown {}: {}", cg.path().display(), std::io::Error::last_os_error());
            }
        }
        cg.set_xattr(EXPECTED_PEAK_XATTR, &huge)?;
        tree.sleepers.push(spawn_in(&cg, "sleep", &["100000"])?);
        r.made.push(format!("{name}: {EXPECTED_PEAK_XATTR} = {huge}, owner uid {}", uid.unwrap_or(0)));
    }

    // A control client that trickles a byte every 100 ms; an explain meanwhile.
    match std::os::unix::net::UnixStream::connect(state.join(memqos_daemon::control::SOCKET_FILE)) {
        Ok(sock) => {
            let trickler = std::thread::spawn(move || {
                let fd = std::os::fd::AsRawFd::as_raw_fd(&sock);
                let t0 = Instant::now();
                while t0.elapsed() < Duration::from_secs(15) {
                    if !send(fd, b" ") {
                        return Some(t0.elapsed().as_secs_f64() * 1e3);
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                None
            });
            std::thread::sleep(Duration::from_millis(300));
            let asked = Instant::now();
            let explain = Command::new(&exe)
                .args(["explain", "prot", "--json", "--state-dir"])
                .arg(state)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            r.explain_ok = explain.is_ok_and(|s| s.success());
            r.explain_ms = r.explain_ok.then(|| asked.elapsed().as_secs_f64() * 1e3);
            r.trickle_cut_after_ms = trickler.join().unwrap_or(None);
            r.made.push("a control client trickling a byte every 100 ms".into());
        }
        Err(e) => r.made.push(format!("control client: could not connect: {e}")),
    }

    // A normal low cgroup: the daemon must still cap it.
    let normal = tree.low.child("normal");
    let since = mono_ns();
    make(&normal)?;
    normal.write_string("memory.high", &V_BASE.to_string())?;
    r.normal_capped_ms = await_cap(state, "low/normal", since, Duration::from_secs(20));
    r.declared_seen_ms = events::writes(&events::read(state))
        .map(|(_, w)| w)
        .find(|w| w.cgroup == "prot-huge" && w.outcome == Outcome::Ok)
        .map(|w| ms_between(declared_at, w.mono_done_ns));
    if let Some(st) = daemon.exited() {
        r.unexpected_exits.push(format!("{st} ({})", daemon_stderr_tail()));
    }
    for l in events::read(state) {
        if let Event::Degraded { message } = l.event {
            r.degraded.push(message);
        }
    }
    let (status, _) = daemon.stop()?;
    r.stop_status = status.to_string();
    // What memqos wrote must be back: the normal cgroup's value, no protection left.
    let expect: [(&Cgroup, &str, String); 5] = [
        (&first, "memory.high", V_BASE.to_string()),
        (&normal, "memory.high", V_BASE.to_string()),
        (&tree.prot, "memory.low", "0".into()),
        (&tree.root.child("prot-huge"), "memory.low", "0".into()),
        (&a, "memory.high", "max".into()),
    ];
    for (cg, file, want) in expect {
        r.check.checked += 1;
        let found = cg.read_string(file).map(|s| s.trim().to_string()).unwrap_or_else(|e| format!("{e:#}"));
        if found != want {
            r.check.lost += 1;
            r.check.examples.push(format!("{}/{file}: {found}, was {want}", cg.path().display()));
        }
    }
    drop(chain);
    Ok(r)
}
