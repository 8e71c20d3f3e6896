#!/bin/sh
# Run: memqos-lab vm run --kernel 7 --memory 1024 --swap 2048 -- sh $PWD/experiments/probes/nested-low.sh
# (docs/operators.md, "Protection that cannot work", quotes one run on 7.2.13.)
# Does a leaf's memory.low protect it below a parent with memory.low 0, with and without
# memory_recursiveprot? Two protected 300M holders (one nested, one top-level), then a 700M
# allocation elsewhere under global pressure.
G=/sys/fs/cgroup
run() {
  label=$1
  mkdir -p $G/P; echo +memory > $G/P/cgroup.subtree_control; mkdir -p $G/P/C $G/Q $G/T
  echo 400M > $G/P/C/memory.low; echo 400M > $G/T/memory.low
  python3 -c 'import os,time; open("/tmp/ready","a"); b=b"\x01"*(300<<20); time.sleep(60)' & H1=$!
  echo $H1 > $G/P/C/cgroup.procs
  python3 -c 'import os,time; b=b"\x01"*(300<<20); time.sleep(60)' & H2=$!
  echo $H2 > $G/T/cgroup.procs
  sleep 15
  echo "$label before: nested=$(cat $G/P/C/memory.current) toplevel=$(cat $G/T/memory.current)"
  sh -c 'echo $$ > /sys/fs/cgroup/Q/cgroup.procs; exec python3 -c "b=b\"\\x01\"*(700<<20)"'
  echo "$label after:  nested=$(cat $G/P/C/memory.current) toplevel=$(cat $G/T/memory.current) nested_low_events=$(grep ^low $G/P/C/memory.events) top_low_events=$(grep ^low $G/T/memory.events)"
  kill $H1 $H2; wait $H1 $H2 2>/dev/null; sleep 1
  rmdir $G/P/C $G/P $G/Q $G/T
}
grep cgroup2 /proc/self/mountinfo
run norecursive
mount -o remount,memory_recursiveprot none $G
grep cgroup2 /proc/self/mountinfo
run recursiveprot
