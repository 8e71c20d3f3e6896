#!/bin/sh
# Reproducer, no memqos daemon involved: after a memcg OOM kill, does the kernel kill a second
# task before the first victim's memory is uncharged?
#
# A low task holds 100 MiB of anonymous memory; a protected task with oom_score_adj = -900
# (set by hand) then grows to 200 MiB under a 256 MiB parent, no swap. The OOM killer's
# first choice is the low task. Measured (docs/experiments.md): 7.2.13 then ran a second
# OOM 6-21 ms later and killed the protected task as well in 3 of 3 iterations; 6.12.117
# killed only the low task (3 of 3).
#
# Run it in a guest (needs cgroup v2 with the memory controller and root):
#   target/release/memqos-lab vm run --kernel 7 --memory 1024 -- /bin/sh scripts/repro/double-memcg-oom.sh
set -u
MEMQOS=${MEMQOS:-$(cd "$(dirname "$0")/../.." && pwd)/target/release/memqos}
P=/sys/fs/cgroup/double-oom-repro
for i in 1 2 3; do
  mkdir -p $P
  echo "+memory" > $P/cgroup.subtree_control
  echo $((256 * 1024 * 1024)) > $P/memory.max
  mkdir -p $P/high $P/low
  "$MEMQOS" workload phases --cgroup $P/low --phases "100:500,100:30000,0:0" > /dev/null &
  LOW=$!
  while [ "$(cat $P/low/memory.current)" -lt $((95 * 1024 * 1024)) ]; do sleep 0.05; done
  dmesg -C
  "$MEMQOS" workload phases --cgroup $P/high --phases "8:1500,200:1500,200:6000,0:0" > /dev/null &
  HIGH=$!
  sleep 0.3
  echo -900 > /proc/$HIGH/oom_score_adj
  wait $HIGH
  HIGH_STATUS=$?
  kill -9 $LOW 2> /dev/null
  wait $LOW 2> /dev/null
  echo "iteration $i: protected task exit status $HIGH_STATUS (137 = SIGKILL); low pid $LOW, protected pid $HIGH"
  dmesg | grep -E "invoked oom-killer|Killed process" | sed 's/^/    /'
  rmdir $P/high $P/low $P
done
