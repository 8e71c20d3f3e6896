//! Property tests of the daemon's parsers of outside input that `proptest_inputs.rs` does not
//! cover (issue 53, deliverable 7): the cgroup a user types to `memqos explain`, /proc/PID/stat
//! and /proc/PID/status, inotify records, the metrics HTTP request, kernel log OOM summaries
//! whose cgroup names hold `,` and `=`, and the restore of a hostile journal. Each property
//! states what holds for every input besides "no panic".
//!
//! The long run: `scripts/fuzz-long.sh` (PROPTEST_CASES, PROPTEST_RNG_SEED).

use memqos_cgroupfs::name;
use memqos_daemon::journal::{restore_state_dir, JOURNAL_FILE};
use memqos_daemon::oom_report::parse_record;
use memqos_daemon::{control, explain, inotify, memlock, metrics, proc_stat};
use memqos_schema::KnobFile;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

mod scratch;
use scratch::Scratch;

const ROOTS: [&str; 4] = ["/sys/fs/cgroup", "/sys/fs/cgroup/qos", "/sys/fs/cgroup/qos/", "/"];

/// Text a user (or a script) might type as a cgroup, hostile pieces included: escapes that
/// decode to `/`, `.` and NUL, dots, slashes, the root itself, spaces and control characters.
fn typed_cgroup() -> impl Strategy<Value = String> {
    let piece = prop::sample::select(vec![
        "/",
        "//",
        "..",
        ".",
        "\\x2f",
        "\\x2F",
        "\\x00",
        "\\x2e",
        "\\x2e\\x2e",
        "\\\\",
        "\\x",
        "\\xff",
        "\\xc3\\xa9",
        "a",
        "low",
        "job.1",
        "b c",
        " ",
        "\t",
        "\0",
        "\n",
        "é",
        "/sys/fs/cgroup",
        "/sys/fs/cgroup/qos",
        "qos",
    ]);
    prop_oneof![
        4 => prop::collection::vec(piece, 0..10).prop_map(|p| p.concat()),
        1 => any::<String>(),
    ]
}

/// A cgroup name component a user could have: never `.`/`..`, no `/`, NUL or surrounding
/// whitespace (explain trims its argument).
fn component() -> impl Strategy<Value = String> {
    "[a-z0-9_,=é-][a-z0-9._ ,=é-]{0,6}[a-z0-9_,=é-]|[a-z0-9_,=é-]".prop_filter("not . or ..", |c| c != "." && c != "..")
}

/// The fields of a /proc/PID/stat line after the command (field 3 on), with `state`, the
/// parent pid, `flags` and the start time where the kernel puts them.
fn stat_fields(state: char, ppid: u32, flags: u64, start: u64, filler: &[u64]) -> String {
    let mut f: Vec<String> =
        (3..=52).map(|i| filler.get(i % filler.len().max(1)).copied().unwrap_or(0).to_string()).collect();
    f[0] = state.to_string();
    f[4 - 3] = ppid.to_string();
    f[9 - 3] = flags.to_string();
    f[22 - 3] = start.to_string();
    f.join(" ")
}

/// A fake scraper: the request arrives in the given pieces, then the stream ends or fails.
struct Pieces(std::collections::VecDeque<Vec<u8>>, bool);

impl std::io::Read for Pieces {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let Some(mut piece) = self.0.pop_front() else {
            return if self.1 { Err(std::io::Error::from(std::io::ErrorKind::TimedOut)) } else { Ok(0) };
        };
        let n = piece.len().min(buf.len());
        buf[..n].copy_from_slice(&piece[..n]);
        if n < piece.len() {
            self.0.push_front(piece.split_off(n));
        }
        Ok(n)
    }
}

fn request() -> impl Strategy<Value = Vec<u8>> {
    let line = prop::sample::select(vec![
        "GET /metrics HTTP/1.1\r\n",
        "GET /metrics?x=1 HTTP/1.0\r\n",
        "GET /metricsX HTTP/1.1\r\n",
        "GET / HTTP/1.1\r\n",
        "POST /metrics HTTP/1.1\r\n",
        "get /metrics HTTP/1.1\r\n",
        "GET /metrics",
        "",
    ]);
    let header = prop::sample::select(vec!["Host: x\r\n", "Accept: */*\r\n", "\r\n", "\r", "\n", "X: \u{e9}\r\n"]);
    prop_oneof![
        3 => (line, prop::collection::vec(header, 0..6), prop::collection::vec(any::<u8>(), 0..8))
            .prop_map(|(l, h, tail)| [l.as_bytes().to_vec(), h.concat().into_bytes(), tail].concat()),
        1 => prop::collection::vec(any::<u8>(), 0..1500),
        1 => (0usize..1200).prop_map(|n| [b"GET /metrics HTTP/1.1\r\nX: ".to_vec(), vec![b'a'; n], b"\r\n\r\n".to_vec()].concat()),
    ]
}

/// A cgroup path as the kernel prints it in an OOM summary, hostile names included.
fn kernel_path() -> impl Strategy<Value = String> {
    let name = prop_oneof![
        3 => "[a-z0-9._-]{1,8}",
        2 => prop::sample::select(vec![
            "x,task_memcg=y", "x,task_memcg=/y", "a,task=b", "t,pid=1,uid=0", "=", ",", "oom_memcg=/z", ",global_oom", "p=q,r",
        ]).prop_map(str::to_owned),
        1 => "[a-z,=/]{1,12}".prop_map(|s| s.replace('/', "")).prop_filter("a name", |s| !s.is_empty()),
    ];
    prop::collection::vec(name, 1..4).prop_map(|c| format!("/{}", c.join("/")))
}

/// A command (comm, at most 15 bytes) as kmsg prints it.
fn comm() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[a-zA-Z0-9_ .:()-]{1,15}",
        2 => prop::sample::select(vec!["a,task=b", "x,pid=7,uid=0", "task_memcg=/", ",task=", "a=b,c", ""]).prop_map(str::to_owned),
        1 => "[a-z,=/]{0,15}",
    ]
}

/// Every regular file below `dir` and its content (symlinks are not followed).
fn snapshot(dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let ft = e.file_type().unwrap();
        if ft.is_dir() {
            snapshot(&e.path(), out);
        } else if ft.is_file() {
            out.insert(e.path(), std::fs::read(e.path()).unwrap());
        }
    }
}

/// A journal `set` line, each field well-formed or hostile. `{ID}` stands for the id of one
/// of the scratch tree's directories (chosen with the index), filled in once it exists.
/// `escapes`: cgroups also carry escapes of `/`, `.` and NUL, which today's `name::decode`
/// turns into those bytes (the lead's name.rs change keeps them literal).
fn hostile_entry(escapes: bool) -> impl Strategy<Value = (String, prop::sample::Index)> {
    let mut cgroups = vec![
        "\"a\"",
        "\"a/b\"",
        "\"\"",
        "\"..\"",
        "\"../victim\"",
        "\"a/../../victim\"",
        "\"a\\u0000\"",
        "\"/abs\"",
        "\"link\"",
        "\"a/up\"",
        "\"a//b\"",
        "\"./a\"",
        "\"a\\\\xff\"",
        "\"\\\\\\\\\"",
        "5",
        "null",
        "[\"a\"]",
    ];
    if escapes {
        cgroups.extend([
            "\"\\\\x2f..\\\\x2fvictim\"",
            "\"\\\\x2e\\\\x2e\"",
            "\"a\\\\x2f..\"",
            "\"\\\\x00\"",
            "\"a/\\\\x2e\\\\x2e/\\\\x2e\\\\x2e\"",
        ]);
    }
    let cgroup = prop::sample::select(cgroups);
    let id = prop_oneof![
        3 => Just("{ID}"),
        1 => prop::sample::select(vec!["-1", "1e400", "18446744073709551616", "\"7\"", "null", "0", "18446744073709551615"]),
    ];
    let file = prop::sample::select(vec![
        "\"memory.high\"",
        "\"memory.low\"",
        "\"memory.max\"",
        "\"cgroup.freeze\"",
        "\"cpu.weight\"",
        "\"oom_score_adj\"",
        "\"memory.swap.max\"",
        "\"../victim/memory.high\"",
        "\"../memory.high\"",
        "\"memory.high/..\"",
        "\"cgroup.procs\"",
        "\"notes\"",
        "\"memory.high\\u0000\"",
        "7",
    ]);
    let original = prop_oneof![
        prop::sample::select(vec![
            "\"max\"",
            "\"0\"",
            "\"1\"",
            "\"-1000\"",
            "\"99999999999999999999999\"",
            "\"\"",
            "1",
            "null"
        ])
        .prop_map(str::to_owned),
        any::<String>().prop_map(|s| serde_json::to_string(&s).unwrap()),
    ];
    let process = prop_oneof![
        4 => Just(String::new()),
        // Never this process's start time: restore must not write to any real process here.
        1 => ((0u32..5).prop_map(|p| if p == 0 { std::process::id() } else { p }), (1u64 << 62)..).prop_map(|(pid, st)| format!(",\"process\":{{\"pid\":{pid},\"start_time\":{st}}}")),
        1 => prop::sample::select(vec![",\"process\":{\"pid\":-1,\"start_time\":1}", ",\"process\":null", ",\"process\":7"]).prop_map(str::to_owned),
    ];
    (cgroup, id, file, original, process, any::<prop::sample::Index>()).prop_map(|(c, i, f, o, p, which)| {
        (format!("{{\"op\":\"set\",\"cgroup\":{c},\"cgroup_id\":{i},\"file\":{f},\"original\":{o}{p}}}"), which)
    })
}

/// The journal property: the scratch tree, the journal of `lines` (see
/// `proptest_journal_restore_hostile_entries_stay_beneath_the_root`), restore, and what
/// must hold of the report and of every file.
fn check_restore(
    lines: &[(String, prop::sample::Index)],
    junk: &[String],
    root_line: u8,
    torn: bool,
) -> Result<(), TestCaseError> {
    let dir = Scratch::new("restore");
    let base = &dir.0;
    let root = base.join("cg");
    for d in ["", "a", "a/b"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
        for (f, v) in
            [("memory.high", "max\n"), ("memory.low", "0\n"), ("cgroup.freeze", "0\n"), ("cpu.weight", "100\n")]
        {
            std::fs::write(root.join(d).join(f), v).unwrap();
        }
    }
    std::fs::create_dir_all(base.join("victim")).unwrap();
    for f in ["memory.high", "memory.low", "cgroup.freeze", "cpu.weight", "oom_score_adj"] {
        std::fs::write(base.join("victim").join(f), "untouched\n").unwrap();
    }
    std::fs::write(base.join("memory.high"), "untouched\n").unwrap();
    std::os::unix::fs::symlink("../victim", root.join("link")).unwrap();
    std::os::unix::fs::symlink("../..", root.join("a/up")).unwrap();
    let ino = |p: &Path| std::fs::metadata(p).unwrap().ino();
    // The root, its cgroups, and directories outside it (the victim, the root's parent).
    let ids = [ino(&root), ino(&root.join("a")), ino(&root.join("a/b")), ino(&base.join("victim")), ino(base), 999_999];
    let root_json = serde_json::to_string(&root).unwrap();
    let mut text = match root_line {
        0 => String::new(), // no root line: the first entry line is refused
        1 => format!("{{\"op\":\"root\",\"cgroup_root\":{root_json},\"boot_id\":\"another-boot\"}}\n"),
        2 => format!("{{\"op\":\"root\",\"cgroup_root\":{root_json}}}\n{{\"op\":\"root\",\"cgroup_root\":\"/\"}}\n"),
        _ => format!("{{\"op\":\"root\",\"cgroup_root\":{root_json}}}\n"),
    };
    for (i, (line, which)) in lines.iter().enumerate() {
        text.push_str(&line.replace("{ID}", &ids[which.index(ids.len())].to_string()));
        text.push('\n');
        if let Some(j) = junk.get(i) {
            text.push_str(j);
            text.push('\n');
        }
    }
    if torn {
        text.push_str("{\"op\":\"set\",\"cgroup\":\"a\"");
    }
    let state = base.join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join(JOURNAL_FILE), &text).unwrap();

    let mut before = BTreeMap::new();
    snapshot(base, &mut before);
    let result = restore_state_dir(&state);
    let mut after = BTreeMap::new();
    snapshot(base, &mut after);

    let report = match result {
        Ok(r) => r,
        Err(e) => {
            let shown = format!("{e:#}");
            prop_assert!(shown.contains(JOURNAL_FILE), "{}", shown);
            None
        }
    };
    for (path, old) in &before {
        if path.starts_with(&state) {
            continue; // the journal itself: removed, rewritten or moved aside
        }
        let new = after.get(path);
        if !path.starts_with(&root) {
            prop_assert_eq!(new, Some(old), "{} outside the root changed", path.display());
            continue;
        }
        if new == Some(old) {
            continue;
        }
        // Changed inside the root: only by a restored entry of that cgroup and file.
        let (file, dir_id) = (path.file_name().unwrap().to_str().unwrap(), ino(path.parent().unwrap()));
        let by = report
            .as_ref()
            .and_then(|r| r.restored.iter().find(|e| e.file == file && e.cgroup_id == dir_id && e.process.is_none()));
        prop_assert!(by.is_some(), "{} changed with no restored entry for it", path.display());
        let e = by.unwrap();
        prop_assert_eq!(new.map(Vec::as_slice), Some(e.original.as_bytes()));
        prop_assert!(KnobFile::from_name(&e.file).is_some_and(|k| k.journaled()), "{} is not a journaled knob", e.file);
    }
    if let Some(r) = &report {
        for s in &r.skipped {
            prop_assert!(s.contains(JOURNAL_FILE) && s.contains("line "), "{}", s);
        }
        for (e, why) in &r.failed {
            prop_assert!(!why.is_empty(), "{} failed without a reason", e.describe());
        }
        if root_line == 1 && memqos_daemon::journal::current_boot_id().is_some() {
            prop_assert!(r.restored.is_empty() && r.vanished.is_empty() && r.failed.is_empty());
        }
    }
    Ok(())
}

proptest! {
    /// Whatever is typed, explain resolves it to an error or to a path beneath the root:
    /// every component, *decoded* as it is when the path is opened, is non-empty, not `.` or
    /// `..`, and holds no NUL and no `/`.
    #[test]
    fn proptest_explain_resolves_to_a_path_beneath_the_root(root in prop::sample::select(ROOTS.to_vec()), arg in typed_cgroup()) {
        use std::os::unix::ffi::OsStrExt;
        match explain::relative_to_root(Path::new(root), &arg) {
            Ok(rel) => {
                prop_assert!(!rel.starts_with('/'), "{:?} gave the absolute {:?}", arg, rel);
                if !rel.is_empty() {
                    for comp in rel.split('/') {
                        let decoded = name::decode(comp);
                        let b = decoded.as_bytes();
                        prop_assert!(!b.is_empty() && b != b"." && b != b"..", "{:?} gave {:?}: component {:?}", arg, rel, decoded);
                        prop_assert!(!b.contains(&0) && !b.contains(&b'/'), "{:?} gave {:?}: component {:?}", arg, rel, decoded);
                    }
                }
            }
            Err(e) => prop_assert!(!e.is_empty()),
        }
    }

    /// A cgroup below the root, typed relative or absolute, with a trailing slash or spaces
    /// around it, resolves to itself.
    #[test]
    fn proptest_explain_paths_under_the_root_round_trip(
        root in prop::sample::select(ROOTS.to_vec()),
        comps in prop::collection::vec(component(), 0..4),
        form in 0u8..4,
        pad in "[ \t]{0,2}",
    ) {
        let rel = comps.join("/");
        let root_text = root.trim_end_matches('/');
        let arg = match form {
            // Relative: the root itself cannot be typed so.
            0 | 1 if rel.is_empty() => format!("{root_text}/"),
            0 => rel.clone(),
            1 => format!("{rel}/"),
            2 => format!("{root_text}/{rel}"),
            _ => format!("{root}/{rel}/"),
        };
        prop_assert_eq!(explain::relative_to_root(Path::new(root), &format!("{pad}{arg}{pad}")), Ok(rel));
    }

    /// /proc/PID/stat: the command may hold spaces, parentheses (a trailing ") 1 2 3" too)
    /// and line breaks; the fields after it are still found. Any text gives numbers or None.
    #[test]
    fn proptest_proc_stat_comm_with_parens_and_spaces(
        pid in 1u32..,
        command in prop_oneof!["[a-z() 0-9\n]{0,16}", "[a-z]{0,4}\\) [0-9]{1,3} [RSDZX] [0-9 ()]{0,20}", any::<String>()],
        state in prop::sample::select(vec!['R', 'S', 'D', 'Z', 'X', 'I']),
        ppid in any::<u32>(),
        flags in any::<u64>(),
        start in any::<u64>(),
        filler in prop::collection::vec(any::<u64>(), 0..4),
        junk in any::<String>(),
    ) {
        let stat = format!("{pid} ({command}) {}\n", stat_fields(state, ppid, flags, start, &filler));
        prop_assert_eq!(proc_stat::start_time_of(&stat), Some(start));
        prop_assert_eq!(proc_stat::ppid_of(&stat), Some(ppid));
        let exiting = matches!(state, 'Z' | 'X') || flags & 0x4 != 0;
        prop_assert_eq!(proc_stat::start_time_and_exiting_of(&stat), Some((start, exiting)));
        // Anything else: a number or None, never a panic.
        let _ = (proc_stat::start_time_of(&junk), proc_stat::ppid_of(&junk), proc_stat::start_time_and_exiting_of(&junk));
    }

    /// /proc/PID/status: the control socket's supplementary-group check and the daemon's
    /// VmLck read find exactly what the kernel's lines say, whatever the peer named itself
    /// (the kernel escapes a line break in `Name:` as `\n`).
    #[test]
    fn proptest_proc_status_groups_and_locked_memory(
        command in prop_oneof!["[a-zA-Z0-9 :\t]{0,15}", "Groups:[0-9 ]{0,10}", "VmLck:[0-9 ]{0,8}kB", any::<String>()],
        groups in prop::collection::vec(any::<u32>(), 0..6),
        gid in prop_oneof![any::<u32>(), (0u32..4)],
        locked in prop::option::of(any::<u64>()),
        junk in any::<String>(),
    ) {
        let name: String = command.chars().flat_map(|c| if c == '\n' { vec!['\\', 'n'] } else if c == '\\' { vec!['\\', '\\'] } else { vec![c] }).collect();
        let listed: Vec<String> = groups.iter().map(u32::to_string).collect();
        let mut status = format!("Name:\t{name}\nUmask:\t0022\nState:\tS (sleeping)\nUid:\t1000\t1000\t1000\t1000\nGroups:\t{} \n", listed.join(" "));
        if let Some(kb) = locked {
            status.push_str(&format!("VmPeak:\t   12 kB\nVmLck:\t{kb:>8} kB\n"));
        }
        status.push_str("Threads:\t1\n");
        prop_assert_eq!(control::in_groups(&status, gid), groups.contains(&gid));
        // `Name:` comes first: a command that looks like a VmLck line is not one.
        prop_assert_eq!(memlock::locked_kb(&status), locked);
        let _ = (control::in_groups(&junk, gid), memlock::locked_kb(&junk));
    }

    /// inotify: any bytes walk to records that stay inside the buffer, and records written
    /// as the kernel writes them read back (names up to their NUL, cut where the buffer is).
    #[test]
    fn proptest_inotify_records_round_trip(
        events in prop::collection::vec((any::<i32>(), any::<u32>(), any::<u32>(), prop::collection::vec(1u8.., 0..20), 0u32..8), 0..8),
        cut in any::<prop::sample::Index>(),
        junk in prop::collection::vec(any::<u8>(), 0..200),
    ) {
        let mut buf = Vec::new();
        for (wd, mask, cookie, name, pad) in &events {
            // The kernel pads with at least one NUL when there is a name.
            let len = if name.is_empty() && *pad == 0 { 0 } else { name.len() as u32 + 1 + pad };
            buf.extend(inotify::encode(*wd, *mask, *cookie, name, len));
        }
        let got: Vec<_> = inotify::records(&buf).collect();
        prop_assert_eq!(got.len(), events.len());
        for (g, (wd, mask, _, name, _)) in got.iter().zip(&events) {
            prop_assert_eq!((g.wd, g.mask, g.name), (*wd, *mask, &name[..]));
        }
        // A read that ends mid-record: a prefix of the records, the last name maybe cut.
        let cut = &buf[..cut.index(buf.len() + 1)];
        let part: Vec<_> = inotify::records(cut).collect();
        prop_assert!(part.len() <= events.len());
        for (g, (wd, mask, _, name, _)) in part.iter().zip(&events) {
            prop_assert_eq!((g.wd, g.mask), (*wd, *mask));
            prop_assert!(name.starts_with(g.name));
        }
        let walked: Vec<_> = inotify::records(&junk).collect();
        prop_assert!(walked.len() <= junk.len() / std::mem::size_of::<libc::inotify_event>());
        for r in walked {
            prop_assert!(!r.name.contains(&0) && r.name.len() <= junk.len());
        }
    }

    /// The metrics listener reads at most REQUEST_MAX bytes, up to the end of the headers
    /// however the request is split; only `GET /metrics` gets the render, and every response's
    /// Content-Length is its body's.
    #[test]
    fn proptest_metrics_requests(
        req in request(),
        splits in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
        fails in any::<bool>(),
        body in prop_oneof![Just(String::new()), "[a-z_{}=\" 0-9\n.+]{0,200}", any::<String>()],
    ) {
        let mut at: Vec<usize> = splits.iter().map(|i| i.index(req.len() + 1)).collect();
        at.sort_unstable();
        let mut pieces = std::collections::VecDeque::new();
        let mut from = 0;
        for a in at.into_iter().chain([req.len()]) {
            pieces.push_back(req[from..a].to_vec());
            from = a;
        }
        // A zero-length piece reads as the end of the stream, as a closed socket would.
        let ended_at = pieces.iter().position(Vec::is_empty).map(|i| pieces.iter().take(i).map(Vec::len).sum::<usize>());
        let got = metrics::read_request(&mut Pieces(pieces, fails));
        prop_assert!(got.len() <= metrics::REQUEST_MAX && req.starts_with(&got));
        let complete = got.windows(4).any(|w| w == b"\r\n\r\n");
        let stream_end = ended_at.unwrap_or(req.len());
        prop_assert!(complete || got.len() == metrics::REQUEST_MAX || got.len() == stream_end, "stopped at {} of {}", got.len(), req.len());
        let response = metrics::respond(&got, || body.clone());
        let (head, sent) = response.split_once("\r\n\r\n").unwrap();
        let length: usize = head.lines().find_map(|l| l.strip_prefix("Content-Length: ")).unwrap().parse().unwrap();
        prop_assert_eq!(length, sent.len());
        let wanted = got.starts_with(b"GET /metrics ") || got.starts_with(b"GET /metrics?");
        prop_assert_eq!(head.starts_with("HTTP/1.1 200 OK"), wanted);
        if wanted {
            prop_assert_eq!(sent, body.as_str());
        }
    }

    /// An OOM summary whose cgroup names (and command) hold `,` and `=` is attributed to the
    /// cgroup the kernel printed, or to none; never to another. Plain names always parse.
    #[test]
    fn proptest_kmsg_cgroup_names_with_commas_and_equals(
        oom in kernel_path(),
        below in prop::collection::vec(prop_oneof!["[a-z]{1,5}", Just("x,task_memcg=/y".to_owned()), Just("a,task=b".to_owned())], 0..3),
        global in any::<bool>(),
        command in comm(),
        pid in 1u32..,
        uid in any::<u32>(),
        cpuset in prop::sample::select(vec!["/", "system.slice", "x,mems_allowed=0", "a,oom_memcg=", "c,task_memcg="]),
        usec in any::<u64>(),
    ) {
        let task = if below.is_empty() { oom.clone() } else { format!("{oom}/{}", below.join("/")) };
        let memcg = if global { ",global_oom".to_owned() } else { format!(",oom_memcg={oom}") };
        let line = format!(
            "6,1,{usec},-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset={cpuset},mems_allowed=0-1,3{memcg},task_memcg={task},task={command},pid={pid},uid={uid}\n"
        );
        let plain = |s: &str| !s.contains(',') && !s.contains('=');
        match parse_record(&line) {
            Some(k) => {
                prop_assert_eq!(&k.task_memcg, &task, "{}", line);
                prop_assert_eq!(k.oom_memcg.as_deref(), (!global).then_some(oom.as_str()), "{}", line);
                prop_assert_eq!((k.pid, k.at_us, k.command.as_str()), (pid, usec, command.as_str()));
            }
            None => prop_assert!(!(plain(&task) && plain(&command)), "plain names must parse: {}", line),
        }
    }

    /// Restoring a hostile journal (escapes of `/` and `..`, NUL, symlinks, other cgroups'
    /// ids, huge or ill-typed numbers, unknown files, torn lines) gives a report or an error
    /// naming the journal; a bad line is skipped with its number; nothing outside the root
    /// changes, and a file inside it changes only to an entry's original, in the cgroup with
    /// that entry's id.
    #[test]
    fn proptest_journal_restore_hostile_entries_stay_beneath_the_root(
        lines in prop::collection::vec(hostile_entry(false), 0..8),
        junk in prop::collection::vec(prop_oneof!["[{}\":a-z,0-9]{0,30}", Just("{\"op\":\"root\",\"cgroup_root\":\"/\"}".to_owned())], 0..2),
        root_line in 0u8..6,
        torn in any::<bool>(),
    ) {
        check_restore(&lines, &junk, root_line, torn)?;
    }

    /// The same with cgroups that carry escapes of `/`, `..` and NUL: today `\x00` decodes
    /// to a NUL after `check_relative` passed it, and opening it panics ("checked: no NUL",
    /// cgroupfs/src/beneath.rs `cpath`).
    #[test]
    fn proptest_journal_restore_escaped_names_stay_beneath_the_root(
        lines in prop::collection::vec(hostile_entry(true), 0..8),
        root_line in 3u8..6,
    ) {
        check_restore(&lines, &[], root_line, false)?;
    }
}
