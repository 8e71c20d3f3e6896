#!/bin/bash
# Diagnoses victim write() stalls in the dirty-page reproducer (issue 31). Runs inside a guest:
#   memqos-lab vm run --kernel 6.12 --scratch 256:262144 --timeout 1800 -- \
#       bash scripts/dirty/stall-trace.sh [memqos|stock] [RUNS] [extra experiment args...]
# While `memqos-lab experiment dirty-noisy-neighbour --in-guest` runs, it
#  - records, in a private tracefs instance, every switch-out of a `fio` task in D state with
#    its kernel stack (sched_switch + stacktrace trigger), the waker's stack of every fio
#    wake-up, and the jbd2, ext4 writepages/journal-start, block and writeback events;
#  - samples /proc/PID/task/*/stack of the victim's tasks every 0.2 s and, once per stall
#    that lasts 2 s, dumps every blocked task with `echo w > /proc/sysrq-trigger`.
# Output in $MEMQOS_RESULTS: trace.txt, samples.txt, dmesg-blocked.txt, dirty-<policy>.json.
set -u
policy=${1:-memqos}
runs=${2:-3}
shift 2 2>/dev/null
out=${MEMQOS_RESULTS:?run inside a memqos guest}
T=/sys/kernel/tracing/instances/stall
mkdir -p $T
echo 32768 > $T/buffer_size_kb
echo 'prev_comm == "fio" && prev_state & 2' > $T/events/sched/sched_switch/filter
echo 'stacktrace if prev_comm == "fio" && prev_state & 2' > $T/events/sched/sched_switch/trigger
echo 'comm == "fio"' > $T/events/sched/sched_wakeup/filter
echo 'stacktrace if comm == "fio"' > $T/events/sched/sched_wakeup/trigger
# The victim's files are the first two created on the fresh scratch fs (inodes 12 and 13):
# does its write() dirty the inode through the journal (ext4_dirty_inode) or not?
echo 'ino == 12 || ino == 13' > $T/events/ext4/ext4_mark_inode_dirty/filter
for e in sched/sched_switch sched/sched_wakeup jbd2 \
    ext4/ext4_writepages ext4/ext4_writepages_result ext4/ext4_journal_start_inode \
    ext4/ext4_journal_start_sb ext4/ext4_journal_start_reserved ext4/ext4_mark_inode_dirty \
    block/block_rq_issue block/block_rq_complete \
    writeback/writeback_start writeback/writeback_written writeback/balance_dirty_pages; do
    echo 1 > $T/events/$e/enable || echo "stall-trace: no event $e" >&2
done
echo 1 > $T/tracing_on

victim=/sys/fs/cgroup/dirtyexp/victim
sampler() {
    local dticks=0 dumped=0
    while :; do
        local now any=0
        now=$(cut -d' ' -f1 /proc/uptime)
        for p in $(cat $victim/cgroup.procs 2>/dev/null); do
            for t in /proc/$p/task/*; do
                local st
                st=$(cut -d' ' -f3 $t/stat 2>/dev/null) || continue
                [ "$st" = D ] || continue
                any=1
                echo "== $now ${t#/proc/} D wchan=$(cat $t/wchan 2>/dev/null)"
                cat $t/stack 2>/dev/null
            done
        done
        if [ $any = 1 ]; then
            dticks=$((dticks + 1))
            if [ $dticks = 10 ] && [ $dumped -lt 6 ]; then
                echo "== $now sysrq-w (victim in D for 2 s)"
                echo w > /proc/sysrq-trigger
                dumped=$((dumped + 1))
            fi
        else
            dticks=0
        fi
        sleep 0.2
    done
}
sampler > $out/samples.txt 2>&1 &
spid=$!
echo "stall-trace: tracing on at uptime $(cut -d' ' -f1 /proc/uptime)"
memqos=${MEMQOS_BIN:-$(dirname "$0")/../../target/release/memqos}
"$memqos" experiment dirty-noisy-neighbour --policy "$policy" --runs "$runs" "$@" --in-guest "dirty-$policy.json"
rc=$?
kill $spid
echo 0 > $T/tracing_on
cp $T/trace $out/trace.txt
dmesg > $out/dmesg-blocked.txt
echo "stall-trace: experiment exit $rc; trace $(wc -l < $out/trace.txt) lines"
exit $rc
