#!/bin/bash
# Regenerates docs/dirty (issue 31): every arm of the dirty-page reproducer on both kernels,
# then the combined report and plots from the saved guest reports.
#   scripts/dirty/run-all.sh [RUNS]         # boots 11 guests (about 100 minutes under TCG)
#   scripts/dirty/run-all.sh --report-only  # rebuild results.{json,txt} and plots from docs/dirty/guest
#   scripts/dirty/run-all.sh --arm NAME ARGS...  # one experiment invocation, reports saved under NAME
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${MEMQOS:-target/release/memqos}
out=docs/dirty
runs=${1:-5}
# io.max for the documented configuration: the two writers' wbps add up to 224 KiB/s, below
# the 256 KiB/s disk, so their writeback queues in blk-throttle and not ahead of the journal.
iomax=(--victim-wbps 131072 --noisy-wbps 98304)

arm() { # NAME ARGS...: one experiment invocation; its guest reports are saved as NAME-<series>-<policy>.json
    local name=$1
    shift
    local log
    log=$(mktemp)
    "$bin" experiment dirty-noisy-neighbour "$@" > /dev/null 2> >(tee "$log" >&2)
    local series=
    while read -r line; do
        case "$line" in
        "== kernel "*) series=$(echo "$line" | awk '{print $3}' | cut -d. -f1-2 | sed 's/^7\..*/7/')
            policy=$(echo "$line" | awk '{print tolower($5)}') ;;
        "guest report: "*) cp "${line#guest report: }" "$out/guest/$name-$series-$policy.json" ;;
        esac
    done < <(sed 's/^ *//' "$log")
    rm -f "$log"
}

if [ "${1:-}" = --arm ]; then
    shift
    mkdir -p "$out/guest"
    arm "$@"
    exit 0
fi
if [ "${1:-}" != --report-only ]; then
    mkdir -p "$out/guest"
    arm ext4 --runs "$runs" --kernel all --policy both
    # The issue-7 memqos runs are superseded by the ones just made.
    for f in 6.12-memqos 7-memqos; do
        [ -f "$out/guest/$f.json" ] && mv "$out/guest/$f.json" "$out/guest/issue-7/"
    done
    arm ext4-iomax --runs "$runs" --kernel all --policy memqos "${iomax[@]}"
    arm ext4-iomax-maxsectors64 --runs "$runs" --kernel 6.12 --policy memqos "${iomax[@]}" --max-sectors-kb 64
    arm xfs --runs 1 --kernel all --policy both --fs xfs
fi
"$bin" experiment dirty-noisy-neighbour --from "$out"/guest/*.json --out "$out/results.json" > "$out/results.txt"
"$bin" experiment dirty-noisy-neighbour --from "$out"/guest/*.json --markdown > "$out/results.md"
# The README's tables are results.md, between the two markers.
/usr/bin/python3 - "$out/README.md" "$out/results.md" <<'PY'
import sys
readme, table = sys.argv[1], open(sys.argv[2]).read()
text = open(readme).read()
begin, end = "<!-- results.md begin -->\n", "<!-- results.md end -->"
a, b = text.index(begin) + len(begin), text.index(end)
open(readme, "w").write(text[:a] + table + text[b:])
PY
/usr/bin/python3 scripts/plots/dirty.py "$out/results.json" "$out"
