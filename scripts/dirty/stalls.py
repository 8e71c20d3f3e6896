#!/usr/bin/env python3
"""Victim write() stalls in a stall-trace.sh trace (issue 31).

usage: stalls.py TRACE[.xz] [--min-ms 500] [--pids P1,P2]

For every fio sleep in D state of at least --min-ms: where it slept (kernel stack at the
switch-out), who woke it (waker stack), the jbd2 commit it overlapped and the block I/O
around it: each journal write (rwbs with S and M, issued by jbd2) with its issue->complete
time and the data bytes (plain W requests) that completed while it waited.
"""
import lzma
import re
import sys
from collections import defaultdict

LINE = re.compile(r"^\s*(?P<task>.+?)-(?P<pid>\d+)\s+\[\d+\]\s+\S+\s+(?P<ts>\d+\.\d+): (?P<ev>\w+): (?P<rest>.*)$")


def parse(path):
    events = []  # (ts, ev, task, pid, rest, stack)
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt", errors="replace") as f:
        for line in f:
            if line.startswith("#"):
                continue
            if line.startswith(" => "):
                if events:
                    events[-1][5].append(line[4:].strip())
                continue
            m = LINE.match(line)
            if not m:
                continue
            events.append([float(m["ts"]), m["ev"], m["task"], int(m["pid"]), m["rest"], []])
    # the stacktrace trigger prints a separate "<stack trace>" event right after its event
    merged = []
    for e in events:
        if e[1] == "kernel_stack" or (e[4].startswith("<stack trace>")):
            if merged:
                merged[-1][5].extend(e[5])
            continue
        merged.append(e)
    return merged


def kv(rest, key):
    m = re.search(r"\b" + key + r"=(\S+)", rest)
    return m.group(1) if m else None


def kv_sp(rest, key):
    m = re.search(r"\b" + key + r" (\S+)", rest)
    return m.group(1) if m else "?"


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    path = args[0]
    min_ms = 500.0
    pids = None
    if "--min-ms" in args:
        min_ms = float(args[args.index("--min-ms") + 1])
    if "--pids" in args:
        pids = {int(p) for p in args[args.index("--pids") + 1].split(",")}
    ev = parse(path)
    # block requests: key (sector, rwbs-ish) -> issue time; completions
    issues = {}
    reqs = []  # (issue_ts, complete_ts, rwbs, bytes, sector, comm)
    for ts, name, task, pid, rest, _ in ev:
        if name == "block_rq_issue":
            m = re.match(r"(\S+) (\S+) (\d+) \(.*?\) (\d+) \+ (\d+)", rest)
            if m:
                issues[(m[4], m[5])] = (ts, m[2], int(m[3]), int(m[4]), rest.rsplit("[", 1)[-1].rstrip("]"))
        elif name == "block_rq_complete":
            m = re.match(r"(\S+) (\S+) \(.*?\) (\d+) \+ (\d+)", rest)
            if m and (m[3], m[4]) in issues:
                its, rwbs, nbytes, sector, comm = issues.pop((m[3], m[4]))
                reqs.append((its, ts, rwbs, nbytes, sector, comm))
    commits = defaultdict(dict)
    for ts, name, task, pid, rest, _ in ev:
        if name.startswith("jbd2_") and name in (
            "jbd2_start_commit", "jbd2_commit_locking", "jbd2_commit_flushing",
            "jbd2_commit_logging", "jbd2_end_commit", "jbd2_run_stats"):
            tid = kv_sp(rest, "transaction") if "transaction" in rest else kv_sp(rest, "tid")
            commits[tid][name] = (ts, rest)
    # D sleeps of fio tasks
    out = []
    pending = {}
    for i, (ts, name, task, pid, rest, stack) in enumerate(ev):
        if name == "sched_switch" and "prev_comm=fio" in rest:
            p = int(kv(rest, "prev_pid"))
            if pids and p not in pids:
                continue
            pending[p] = (ts, stack)
        elif name == "sched_wakeup" and "comm=fio" in rest:
            p = int(kv(rest, "pid"))
            if p in pending:
                t0, st = pending.pop(p)
                if (ts - t0) * 1e3 >= min_ms:
                    out.append((t0, ts, p, st, task, pid, stack))
    print(f"{len(out)} fio sleeps in D >= {min_ms:.0f} ms in {path}\n")
    for t0, t1, p, st, wtask, wpid, wstack in out:
        print(f"== fio pid {p}: D from {t0:.3f} to {t1:.3f} = {(t1 - t0) * 1e3:.0f} ms")
        print("   slept at:")
        for f in st[:16]:
            print(f"     {f}")
        print(f"   woken by {wtask}-{wpid}:")
        for f in wstack[:12]:
            print(f"     {f}")
        for tid, c in sorted(commits.items(), key=lambda x: x[1].get("jbd2_start_commit", (0,))[0]):
            s = c.get("jbd2_commit_locking", c.get("jbd2_start_commit", (None,)))[0]
            e = c.get("jbd2_end_commit", (None,))[0]
            if s is None or e is None or e < t0 or s > t1:
                continue
            phases = " ".join(f"{k[5:]}@{v[0]:.3f}" for k, v in sorted(c.items(), key=lambda x: x[1][0]) if k != "jbd2_run_stats")
            stats = c.get("jbd2_run_stats", (0, ""))[1]
            stats = re.sub(r"^dev \S+ ", "", stats)
            print(f"   jbd2 commit tid {tid}: {phases}")
            print(f"     run_stats (ms): {stats}")
        jw = [r for r in reqs if "S" in r[2] and "M" in r[2] and r[1] >= t0 and r[0] <= t1]
        for its, cts, rwbs, nbytes, sector, comm in jw[:8]:
            ahead = [r for r in reqs if r[2] == "W" and its <= r[1] <= cts]
            ab = sum(r[3] for r in ahead)
            who = defaultdict(int)
            for r in ahead:
                who[r[5]] += r[3]
            print(f"   journal write {rwbs} {nbytes} B sector {sector} [{comm}]: issued {its:.3f}, completed {cts:.3f} "
                  f"({(cts - its) * 1e3:.0f} ms); meanwhile {len(ahead)} data writes ({ab / 1024:.0f} KiB) completed")
        if jw:
            first = min(r[0] for r in jw)
            subs = [(ts, rest) for ts, name, _, _, rest, _ in ev
                    if name == "ext4_writepages_result" and first - 5 <= ts <= first]
            for ts, rest in subs:
                print(f"   writeback submitted before it: {ts:.3f} ino {kv_sp(rest, 'ino')} "
                      f"pages_written {kv_sp(rest, 'pages_written')} (4 KiB pages)")
        if len(jw) > 8:
            print(f"   ... {len(jw) - 8} more journal writes in the window")
        data = [r for r in reqs if r[2] == "W" and t0 <= r[1] <= t1]
        print(f"   data written during the stall: {sum(r[3] for r in data) / 1024:.0f} KiB in {len(data)} requests "
              f"({sum(r[3] for r in data) / 1024 / max(t1 - t0, 1e-9):.0f} KiB/s)")
        print()


if __name__ == "__main__":
    main()
