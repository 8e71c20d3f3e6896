#!/usr/bin/env bash
# The long run of the property tests (issue 28, item 8). `cargo test` runs each proptest_*
# target with a few hundred cases; this runs every target alone, in rounds of ROUND_CASES
# fresh random cases, until SECONDS_PER_TARGET have passed, and prints executions per target
# and any failure (proptest prints the minimised input). Exit 1 if any target failed.
#
#   bash scripts/fuzz-long.sh [SECONDS_PER_TARGET] [FILTER]
#   ROUND_CASES=100000 bash scripts/fuzz-long.sh 60 journal
#   SUITES="memqos-policy --test properties" bash scripts/fuzz-long.sh 120
#
# Results also go to target/fuzz-long/summary.tsv (target, executions, seconds, result).
set -euo pipefail
cd "$(dirname "$0")/.."
budget=${1:-60}
filter=${2:-}
round=${ROUND_CASES:-20000}
# Targets whose one case is a whole engine run over 10,000 cgroups: small rounds, or one
# round outlasts any budget.
slow_round=${SLOW_ROUND_CASES:-10}
out=target/fuzz-long
mkdir -p "$out"
summary=$out/summary.tsv
printf 'target\texecutions\tseconds\tresult\n' >"$summary"

# Where the property tests live: package and cargo target selector.
if [ -n "${SUITES:-}" ]; then
    IFS=';' read -r -a suites <<<"$SUITES"
else
suites=(
    "memqos-cgroupfs --test proptest_parsers"
    "memqos-stats --lib"
    "memqos-policy --test proptest_inputs"
    "memqos-policy --test properties"
    "memqos-replay --test proptest_traces"
    "memqos-daemon --test proptest_inputs"
)
fi

failed=0
for suite in "${suites[@]}"; do
    read -r pkg kind name <<<"$suite"
    sel=(-p "$pkg" "$kind" ${name:+"$name"})
    # Build once, then run the test executable itself: no cargo (and no build lock) per round.
    bin=$(cargo test --release -q "${sel[@]}" --no-run --message-format=json 2>/dev/null |
        sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)
    [ -x "$bin" ] || { echo "fuzz-long: cannot build $suite" >&2; exit 1; }
    mapfile -t targets < <("$bin" --list 2>/dev/null | sed -n 's/: test$//p' | grep 'proptest' | grep -- "$filter" || true)
    for t in "${targets[@]}"; do
        start=$(date +%s)
        execs=0
        result=ok
        log=$out/${pkg}_${t//::/_}.log
        cases=$round
        [[ $t == *10000_cgroups* ]] && cases=$slow_round
        while (($(date +%s) - start < budget)); do
            if ! PROPTEST_CASES=$cases "$bin" --exact "$t" --test-threads=1 >"$log" 2>&1; then
                result="FAILED (see $log)"
                failed=1
                grep -m3 -E 'minimal failing input|Test failed|panicked' "$log" >&2 || true
                break
            fi
            execs=$((execs + cases))
        done
        secs=$(($(date +%s) - start))
        printf '%-75s %12d executions %5d s  %s\n' "$pkg::$t" "$execs" "$secs" "$result"
        printf '%s\t%d\t%d\t%s\n' "$pkg::$t" "$execs" "$secs" "$result" >>"$summary"
    done
done
echo "fuzz-long: summary in $summary"
exit $failed
