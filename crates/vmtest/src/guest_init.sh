#!/bin/busybox sh
# memqos guest init (PID 1 in the initramfs). Mounts the host root read-only over 9p,
# prepares cgroup2 with the memory controller, runs one job chrooted into the host root,
# records its exit status in the shared results directory and powers off.
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev

say() { echo "memqos-init: $*" > /dev/ttyS0; }
param() { for w in $(cat /proc/cmdline); do case "$w" in "memqos.$1="*) echo "${w#*=}";; esac; done; }

while read -r m; do
    insmod "/modules/$m.ko" 2>/dev/null || say "insmod $m failed"
done < /modules.order

RESULTS=$(param results)
INIT=$(param init)
R=/mnt
if [ "$INIT" = systemd ]; then
    # systemd as PID 1 needs a writable root: the host root stays read-only below a tmpfs.
    mkdir -p /lower /rw
    mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=524288,cache=loose host /lower || { say "cannot mount host root over 9p"; poweroff -f; }
    mount -t tmpfs rw /rw && mkdir -p /rw/upper /rw/work
    mount -t overlay overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work $R || { say "cannot mount the overlay root"; poweroff -f; }
else
    mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=524288,cache=loose host $R || { say "cannot mount host root over 9p"; poweroff -f; }
fi
mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288 results "$R$RESULTS" || { say "cannot mount results dir $RESULTS"; poweroff -f; }
mount -t proc proc $R/proc
mount -t sysfs sys $R/sys
mount -t devtmpfs dev $R/dev
mkdir -p $R/dev/pts $R/dev/shm 2>/dev/null
mount -t devpts devpts $R/dev/pts 2>/dev/null
# The guest gets its own /tmp and /run; host directories under them that the job needs
# (a checkout in /tmp, say) are carried over with bind mounts.
KEEP=$(param keep)
i=0
for k in $(echo "$KEEP" | tr , ' '); do
    mkdir -p /keep/$i && mount --bind "$R$k" /keep/$i && i=$((i+1))
done
mount -t tmpfs tmp $R/tmp
mount -t tmpfs run $R/run
i=0
for k in $(echo "$KEEP" | tr , ' '); do
    mkdir -p "$R$k" && mount --move /keep/$i "$R$k" && i=$((i+1))
done
mount -t tmpfs shm $R/dev/shm 2>/dev/null
if [ "$INIT" = systemd ]; then
    # systemd mounts cgroup2 (nsdelegate, memory_recursiveprot) and enables controllers itself.
    : > $R/etc/fstab
    D=$R/etc/systemd/system
    printf '[Unit]\nDescription=memqos guest job\nAllowIsolate=yes\nWants=memqos-job.service\n' > $D/memqos-job.target
    printf '%s\n' '[Unit]' 'Description=memqos guest job' '[Service]' 'Type=oneshot' \
        "ExecStart=/bin/sh -c 'echo memqos-init: job starting under systemd > /dev/ttyS0; /bin/sh $RESULTS/job.sh > /dev/ttyS0 2>&1 < /dev/null; echo \$\$? > $RESULTS/exit-status; dmesg > $RESULTS/dmesg; sync; echo memqos-init: job finished > /dev/ttyS0; systemctl poweroff --force --force'" \
        > $D/memqos-job.service
    say "starting systemd at uptime $(cut -d' ' -f1 /proc/uptime)"
    exec switch_root $R /lib/systemd/systemd --unit=memqos-job.target --log-level=warning --show-status=false
fi
mount -t cgroup2 cgroup2 $R/sys/fs/cgroup || say "cannot mount cgroup2"
mount -t bpf bpf $R/sys/fs/bpf 2>/dev/null
mount -t tracefs tracefs $R/sys/kernel/tracing 2>/dev/null
mount -t debugfs debugfs $R/sys/kernel/debug 2>/dev/null
echo "+memory +cpu +io +pids" > $R/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null ||
    echo "+memory" > $R/sys/fs/cgroup/cgroup.subtree_control || say "cannot enable the memory controller"

SWAP=$(param swap)
if [ -n "$SWAP" ]; then
    chroot $R /sbin/mkswap "$SWAP" >/dev/null && swapon "$SWAP" || say "swap on $SWAP failed"
fi
[ "$(param zswap)" = 1 ] && { echo 1 > /sys/module/zswap/parameters/enabled || say "zswap unavailable"; }

SCRATCH=$(param scratch)
if [ -n "$SCRATCH" ]; then
    mkdir -p $R/run/scratch
    # Lazy journal/inode-table init and noinit_itable: on a write-throttled disk (256 KB/s)
    # zeroing them would take minutes at mkfs time, or steal the disk from the job later.
    chroot $R /sbin/mkfs.ext4 -q -F -E lazy_itable_init=1,lazy_journal_init=1 "$SCRATCH" &&
        mount -t ext4 -o noinit_itable "$SCRATCH" $R/run/scratch || say "scratch disk $SCRATCH failed"
fi

say "job starting at uptime $(cut -d' ' -f1 /proc/uptime)"
chroot $R /bin/sh "$RESULTS/job.sh" > /dev/ttyS0 2>&1 < /dev/null
echo $? > "$R$RESULTS/exit-status"
say "job finished at uptime $(cut -d' ' -f1 /proc/uptime)"
dmesg > "$R$RESULTS/dmesg" 2>/dev/null
sync
umount "$R$RESULTS" 2>/dev/null
poweroff -f
