#!/usr/bin/env python3
"""Which kernels make the writer of a lower memory.high reclaim, with and without O_NONBLOCK,
and whether the limit is set before that reclaim. Run in a guest with swap and zswap:

    memqos-lab vm run --kernel all --swap 1024 --zswap -- python3 scripts/probe-nonblocking-limits.py

A process holding 300 MiB is cut to 50 MiB, twice per mode; each RESULT line gives the write's
time and memory.current right after it. Then one blocking write runs on a thread while
memory.high is read from another (is the new limit in place during the writer's reclaim?).
Results: docs/results/nonblocking-limits.txt (the console lines, as printed)."""
import os, subprocess, sys, threading, time

CG = "/sys/fs/cgroup"
HOLD = "import sys,time\nb=bytearray(300<<20)\nfor i in range(0,len(b),4096): b[i]=1\nprint('ok',flush=True)\ntime.sleep(120)"


def holder(d):
    p = subprocess.Popen([sys.executable, "-c", HOLD], stdout=subprocess.PIPE)
    with open(f"{d}/cgroup.procs", "w") as f:
        f.write(str(p.pid))
    p.stdout.readline()
    return p


def current(d):
    return int(open(f"{d}/memory.current").read()) >> 20


def cut(name, flags):
    d = f"{CG}/{name}"
    os.makedirs(d, exist_ok=True)
    p = holder(d)
    before = current(d)
    fd = os.open(f"{d}/memory.high", os.O_WRONLY | flags)
    t0 = time.monotonic()
    os.write(fd, b"52428800")
    took = time.monotonic() - t0
    os.close(fd)
    mode = "O_NONBLOCK" if flags else "blocking"
    print(f"RESULT {os.uname().release} {mode} write {took:.3f} s, memory.current {before} MiB before, {current(d)} MiB right after", flush=True)
    p.kill(); p.wait(); time.sleep(0.5); os.rmdir(d)


def order():
    d = f"{CG}/order"
    os.makedirs(d, exist_ok=True)
    p = holder(d)
    t = threading.Thread(target=lambda: open(f"{d}/memory.high", "w").write("52428800"))
    t.start()
    time.sleep(0.1)
    during = open(f"{d}/memory.high").read().strip()
    busy = t.is_alive()
    t.join()
    print(f"RESULT {os.uname().release} during a blocking write (writer still reclaiming: {busy}): memory.high = {during}", flush=True)
    p.kill(); p.wait(); time.sleep(0.5); os.rmdir(d)


open(f"{CG}/cgroup.subtree_control", "w").write("+memory")
for i, flags in enumerate([0, os.O_NONBLOCK, 0, os.O_NONBLOCK]):
    cut(f"probe{i}", flags)
order()
