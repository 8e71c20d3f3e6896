//! Property tests of the daemon's parsers of outside input (issue 28, item 8), through their
//! public APIs: the learned-peak history file, kernel log (kmsg) OOM records, the journal
//! file, control-socket requests and the event log. Any bytes give a value or a clean error,
//! never a panic; what the daemon writes reads back as written.
//!
//! The long run: `scripts/fuzz-long.sh`.

use memqos_daemon::control::Request;
use memqos_daemon::history::{History, LIFETIMES};
use memqos_daemon::journal::{Entry, Journal, Process, JOURNAL_FILE};
use memqos_daemon::oom_report::parse_record;
use proptest::prelude::*;
use std::path::Path;

mod scratch;
use scratch::Scratch;

/// Text shaped like the daemon's JSON files more often than random strings are.
fn jsonish(words: Vec<&'static str>) -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            3 => prop::sample::select(words).prop_map(str::to_owned),
            1 => "[0-9]{1,22}",
            1 => any::<String>(),
        ],
        0..40,
    )
    .prop_map(|p| p.concat())
}

fn workload_key() -> impl Strategy<Value = String> {
    prop_oneof!["[a-z0-9./_-]{1,40}", "[a-z]{1,10} [a-z]{1,10}"]
}

fn entry() -> impl Strategy<Value = Entry> {
    (
        "[a-z]{1,6}(/[a-z0-9._-]{1,8}){0,3}",
        any::<u64>(),
        prop::sample::select(vec![
            "memory.high",
            "memory.low",
            "memory.min",
            "memory.max",
            "cgroup.freeze",
            "cpu.weight",
            "oom_score_adj",
        ]),
        prop_oneof![Just("max".to_owned()), any::<u64>().prop_map(|v| v.to_string()), any::<String>()],
        prop::option::of((any::<u32>(), any::<u64>())),
    )
        .prop_map(|(cgroup, cgroup_id, file, original, process)| Entry {
            cgroup,
            cgroup_id,
            file: file.to_owned(),
            original,
            process: process.map(|(pid, start_time)| Process { pid, start_time }),
        })
}

proptest! {
    #[test]
    fn proptest_history_any_text_is_ok_or_an_error(
        text in jsonish(vec!["{", "}", "[", "]", ",", ":", "\"version\"", "1", "\"workloads\"", "\"peaks\"", "\"last_seen\"", "\"k\"", "-1", "null"]),
    ) {
        if let Ok(h) = History::from_json(&text) {
            // Whatever loads writes back to the same history.
            prop_assert_eq!(History::from_json(&h.to_json()), Ok(h));
        }
    }

    #[test]
    fn proptest_history_round_trips(
        records in prop::collection::vec((workload_key(), any::<u64>(), any::<u64>()), 0..40),
    ) {
        let mut h = History::default();
        for (k, peak, now) in &records {
            h.record(k, *peak, *now);
        }
        let back = History::from_json(&h.to_json()).unwrap();
        prop_assert_eq!(&back, &h);
        for (k, _, _) in &records {
            let e = back.get(k).unwrap();
            prop_assert!(!e.peaks.is_empty() && e.peaks.len() <= LIFETIMES);
            // The expectation is the largest of the last LIFETIMES lifetimes of that key.
            let recent: Vec<u64> = records.iter().filter(|r| &r.0 == k).map(|r| r.1).collect();
            let tail = &recent[recent.len().saturating_sub(LIFETIMES)..];
            prop_assert_eq!(e.expectation(), tail.iter().copied().max());
        }
    }

    #[test]
    fn proptest_kmsg_records_never_panic_and_round_trip(
        seq in any::<u64>(),
        usec in any::<u64>(),
        pid in 1u32..,
        command in "[a-zA-Z0-9_ .:()-]{1,15}",
        memcg in "(/[a-z0-9._-]{1,10}){1,4}",
        anon_kb in prop_oneof![0u64..1 << 40, any::<u64>()],
        junk in prop_oneof![any::<String>(), "[0-9]{1,3},[0-9]{1,20},[0-9]{1,20},[-c];(oom-kill:|Memory cgroup out of memory: Killed process )[a-z_=,/ ()0-9:-]{0,60}"],
    ) {
        let summary = format!(
            "6,{seq},{usec},-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg={memcg},task_memcg={memcg},task={command},pid={pid},uid=0\n"
        );
        let k = parse_record(&summary).unwrap();
        prop_assert_eq!((k.pid, k.at_us, k.command.as_str(), k.task_memcg.as_str()), (pid, usec, command.as_str(), memcg.as_str()));
        prop_assert_eq!(k.oom_memcg.as_deref(), Some(memcg.as_str()));
        let killed = format!(
            "3,{seq},{usec},-;Memory cgroup out of memory: Killed process {pid} ({command}) total-vm:1kB, anon-rss:{anon_kb}kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:4kB oom_score_adj:0\n"
        );
        let k = parse_record(&killed).unwrap();
        prop_assert_eq!((k.pid, k.at_us, k.command.as_str()), (pid, usec, command.as_str()));
        // The RSS in bytes, saturating where kB * 1024 does not fit.
        prop_assert_eq!(k.anon_rss_bytes, Some(anon_kb.saturating_mul(1024)));
        let _ = parse_record(&junk);
    }

    #[test]
    fn proptest_journal_any_bytes_load_or_fail_cleanly(
        bytes in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..300),
            jsonish(vec![
                "{\"op\":\"root\",\"cgroup_root\":\"/r\"}\n", "{\"op\":\"set\",", "{\"op\":\"forget\",\"key\":",
                "\"cgroup\":\"a\",", "\"cgroup_id\":", "\"file\":\"memory.high\",", "\"original\":\"max\"", "}", "\n",
                "{\"cgroup\":[", "\"process\":{\"pid\":1,\"start_time\":2}", "]}",
            ]).prop_map(String::into_bytes),
        ],
    ) {
        let dir = Scratch::new("journal");
        std::fs::write(dir.0.join(JOURNAL_FILE), &bytes).unwrap();
        match Journal::open(&dir.0, Path::new("/r")) {
            Ok(j) => {
                // A journal that loads names its root and reopens to the same entries.
                let entries: Vec<Entry> = j.entries().cloned().collect();
                drop(j);
                let again = Journal::open(&dir.0, Path::new("/r")).unwrap();
                prop_assert_eq!(again.entries().cloned().collect::<Vec<_>>(), entries);
            }
            Err(e) => {
                let shown = format!("{e:#}");
                prop_assert!(shown.contains(JOURNAL_FILE), "{}", shown);
            }
        }
    }

    #[test]
    fn proptest_journal_round_trips(
        entries in prop::collection::vec(entry(), 0..20),
        forget in prop::collection::vec(any::<prop::sample::Index>(), 0..5),
    ) {
        let dir = Scratch::new("journal-rt");
        let root = Path::new("/sys/fs/cgroup/x");
        let mut j = Journal::open(&dir.0, root).unwrap();
        for e in &entries {
            j.stage(e.clone());
        }
        j.commit().unwrap();
        let keys: Vec<_> = j.entries().map(Entry::key).collect();
        for i in &forget {
            if !keys.is_empty() {
                j.stage_forget(&keys[i.index(keys.len())]);
            }
        }
        j.commit().unwrap();
        let want: Vec<Entry> = j.entries().cloned().collect();
        drop(j);
        let back = Journal::open(&dir.0, Path::new("/elsewhere")).unwrap();
        // Nothing staged, nothing written: the file (and its root line) exists once an entry was.
        if !entries.is_empty() {
            prop_assert_eq!(back.cgroup_root(), root);
        }
        prop_assert_eq!(back.entries().cloned().collect::<Vec<_>>(), want);
    }

    #[test]
    fn proptest_control_requests(
        name in any::<String>(),
        bytes in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..200),
            jsonish(vec!["{", "}", "\"explain\"", ":", "\"a/b\"", "\"../x\"", "\\u0000", "[", "]", "null"]).prop_map(String::into_bytes),
        ],
    ) {
        // What `memqos explain` sends, the socket reads back exactly.
        let line = serde_json::to_vec(&Request::Explain(name.clone())).unwrap();
        prop_assert!(!line.contains(&b'\n'), "a request is one line");
        let back: Request = serde_json::from_slice(&line).unwrap();
        let Request::Explain(got) = back;
        prop_assert_eq!(got, name);
        // Any other bytes: a request or a clean error.
        let _ = serde_json::from_slice::<Request>(&bytes);
    }

    #[test]
    fn proptest_event_log_any_text(text in jsonish(vec!["{", "}", "\"ts\"", ":", "1.5", "\"event\"", "\"write\"", "\n", ","])) {
        let lines = memqos_daemon::events::parse(&text);
        prop_assert!(lines.len() <= text.lines().count());
    }
}
