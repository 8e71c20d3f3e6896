#!/usr/bin/env bash
# The long run of the property tests (issue 53, deliverable 7; issue 28, item 8): every
# proptest_* target alone, release build, PROPTEST_CASES cases from a fixed PROPTEST_RNG_SEED,
# with a summary per target (cases run, failures, seed, build, wall time) in
# docs/results/fuzz-summary.json and .md. `cargo test` runs the same targets as a smoke of a
# few hundred cases each. Exit 1 if any target failed (proptest prints the minimal failing
# input in the target's log and adds it to the suite's proptest-regressions file).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
    cat <<'EOF'
usage: scripts/fuzz-long.sh [--cases N] [--only TARGET]... [--seed S] [--jobs J]
                            [--out DIR] [--include-ignored] [--list]

Runs every property target (test functions named proptest_*) of the suites below, each in
its own process of the release test binary, with PROPTEST_CASES=N and PROPTEST_RNG_SEED=S,
and writes DIR/fuzz-summary.json and DIR/fuzz-summary.md.

  --cases N          cases per target (default 1000000; the one target whose case is an
                     engine run over 10,000 cgroups is capped, see CAP, and the summary says so)
  --only TARGET      run only targets whose name (package::suite::test) contains TARGET;
                     may be given more than once
  --seed S           PROPTEST_RNG_SEED for every target (default: $PROPTEST_RNG_SEED if set,
                     else 53, the committed seed); "random" lets proptest pick
  --jobs J           targets run at once (default 1; each target is one thread)
  --out DIR          where the summary goes (default docs/results; use e.g. target/fuzz-long
                     for a smoke run that must not replace the committed summary)
  --include-ignored  also run targets marked #[ignore] (otherwise listed as ignored)
  --list             list the targets and exit
  -h, --help         this text

Logs: target/fuzz-long/logs/<target>.log. Examples:
  scripts/fuzz-long.sh --jobs 2                          # the full run (about an hour)
  scripts/fuzz-long.sh --cases 2000 --out target/fuzz-long   # a smoke of the script
  scripts/fuzz-long.sh --only kmsg --only journal --cases 200000
EOF
}

cases=1000000
seed=${PROPTEST_RNG_SEED:-53}
jobs=1
out=docs/results
only=()
include_ignored=0
list_only=0
while (($#)); do
    case $1 in
        --cases) cases=${2:?--cases needs a number}; shift 2 ;;
        --only) only+=("${2:?--only needs a target}"); shift 2 ;;
        --seed) seed=${2:?--seed needs a value}; shift 2 ;;
        --jobs) jobs=${2:?--jobs needs a number}; shift 2 ;;
        --out) out=${2:?--out needs a directory}; shift 2 ;;
        --include-ignored) include_ignored=1; shift ;;
        --list) list_only=1; shift ;;
        -h | --help) usage; exit 0 ;;
        *) echo "fuzz-long: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
[[ $cases =~ ^[1-9][0-9]*$ ]] || { echo "fuzz-long: --cases must be a positive number" >&2; exit 2; }
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "fuzz-long: --jobs must be a positive number" >&2; exit 2; }
[[ $seed == random || $seed =~ ^[0-9]+$ ]] || { echo "fuzz-long: --seed must be a number or random" >&2; exit 2; }

# Where the property targets live: package and cargo target selector.
suites=(
    "memqos-cgroupfs --test proptest_parsers"
    "memqos-bpf --test proptest_btf"
    "memqos-stats --lib"
    "memqos-policy --test proptest_inputs"
    "memqos-policy --test properties"
    "memqos-replay --test proptest_traces"
    "memqos-daemon --test proptest_inputs"
    "memqos-daemon --test proptest_outside_input"
    "memqos-agent --lib"
)
# Targets whose one case is a whole engine run over 10,000 cgroups (a policy model test, not
# a parser: ~0.2 s a case in release, so a million would take two days): at most this many.
# The summary records the cap. Every other target runs the cases asked for.
declare -A CAP=(
    [proptest_engine_invariants_with_10000_cgroups]=2000
)

# The build, taken before anything is written (the summary itself is not "dirty").
rev=$(git rev-parse --short HEAD)
dirty=false
if [ -n "$(git status --porcelain -- . ':!docs/results/fuzz-summary.json' ':!docs/results/fuzz-summary.md')" ]; then
    dirty=true
fi

logs=target/fuzz-long/logs
mkdir -p "$logs"
# The journal and stats targets build a scratch tree per case under TMPDIR and fsync it: on
# tmpfs that costs nothing, on a disk it is most of their time.
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then
    export TMPDIR=/dev/shm/memqos-fuzz-$$
    mkdir -p "$TMPDIR"
    trap 'rm -rf "$TMPDIR"' EXIT
fi
export CARGO_TERM_COLOR=never

# Build every suite once (release), collect (package, suite, binary, test, ignored).
targets=()
for suite in "${suites[@]}"; do
    read -r pkg kind name <<<"$suite"
    sel=(-p "$pkg" "$kind" ${name:+"$name"})
    label=${name:-lib}
    echo "fuzz-long: building $pkg $label (release)" >&2
    bin=$(cargo test --release -q "${sel[@]}" --no-run --message-format=json |
        sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)
    [ -x "$bin" ] || { echo "fuzz-long: cannot build $suite" >&2; exit 1; }
    ignored=$("$bin" --list --ignored 2>/dev/null | sed -n 's/: test$//p' || true)
    while read -r t; do
        [ -n "$t" ] || continue
        full="$pkg::$label::$t"
        if ((${#only[@]})); then
            keep=0
            for o in "${only[@]}"; do [[ $full == *"$o"* ]] && keep=1; done
            ((keep)) || continue
        fi
        ig=0
        grep -qxF -- "$t" <<<"$ignored" && ig=1
        targets+=("$pkg|$label|$bin|$t|$ig")
    done < <("$bin" --list 2>/dev/null | sed -n 's/: test$//p' | grep 'proptest_')
done
((${#targets[@]})) || { echo "fuzz-long: no target matches" >&2; exit 2; }

if ((list_only)); then
    for x in "${targets[@]}"; do
        IFS='|' read -r pkg label _ t ig <<<"$x"
        echo "$pkg::$label::$t$( ((ig)) && echo ' (ignored)')"
    done
    exit 0
fi

json_escape() { sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/\t/\\t/g' | tr -d '\r' | tr '\n' ' '; }

# One target: runs it, writes one result line "full<TAB>cases<TAB>failures<TAB>result<TAB>wall<TAB>cap<TAB>note"
# (cap 0: not capped; note -: none; no field is empty, as read(1) would merge the tabs).
run_one() {
    local pkg=$1 label=$2 bin=$3 t=$4 ig=$5 n=$6 total=$7
    local full="$pkg::$label::$t" short=${t##*::}
    local log="$logs/${full//::/__}.log"
    local want=$cases cap=0 limit=${CAP[$short]:-0}
    if ((limit > 0 && cases > limit)); then
        want=$limit
        cap=$cases
    fi
    if ((ig && !include_ignored)); then
        printf '[%d/%d] %-90s ignored (#[ignore])\n' "$n" "$total" "$full" >&2
        printf '%s\t0\t0\tignored\t0\t0\t%s\n' "$full" "marked #[ignore]; --include-ignored runs it"
        return
    fi
    local extra=()
    ((ig)) && extra=(--include-ignored)
    printf '[%d/%d] %-90s %d cases ...\n' "$n" "$total" "$full" "$want" >&2
    local start end rc=0
    start=$(date +%s.%N)
    if [ "$seed" = random ]; then
        PROPTEST_CASES=$want "$bin" --exact "$t" --test-threads=1 "${extra[@]}" >"$log" 2>&1 || rc=$?
    else
        PROPTEST_CASES=$want PROPTEST_RNG_SEED=$seed "$bin" --exact "$t" --test-threads=1 "${extra[@]}" >"$log" 2>&1 || rc=$?
    fi
    end=$(date +%s.%N)
    local wall
    wall=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
    local result=ok failures=0 ran=$want note=-
    if ((rc != 0)) || ! grep -q 'test result: ok. 1 passed' "$log"; then
        result=FAILED
        failures=1
        # proptest counts the cases that passed before the failing one.
        ran=$(sed -n 's/^[[:space:]]*successes: \([0-9]*\).*/\1/p' "$log" | tail -1)
        ran=$((${ran:-0} + 1))
        note=$({ grep -m1 -A3 'minimal failing input' "$log" || grep -m1 'panicked at' "$log" || echo "see $log"; } | json_escape | cut -c1-400)
    fi
    printf '[%d/%d] %-90s %s: %d cases, %d failures, %s s\n' "$n" "$total" "$full" "$result" "$ran" "$failures" "$wall" >&2
    printf '%s\t%d\t%d\t%s\t%s\t%s\t%s\n' "$full" "$ran" "$failures" "$result" "$wall" "$cap" "$note"
}

results=target/fuzz-long/results.tsv
: >"$results"
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
total=${#targets[@]}
n=0
for x in "${targets[@]}"; do
    IFS='|' read -r pkg label bin t ig <<<"$x"
    n=$((n + 1))
    while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; done
    run_one "$pkg" "$label" "$bin" "$t" "$ig" "$n" "$total" >>"$results" &
done
wait
finished=$(date -u +%Y-%m-%dT%H:%M:%SZ)

# The summary, in target order.
mkdir -p "$out"
sorted=$(sort -t$'\t' -k1,1 "$results")
failed=0
{
    printf '{\n  "generated_by": "scripts/fuzz-long.sh",\n'
    printf '  "build": {"rev": "%s", "dirty": %s},\n' "$rev" "$dirty"
    printf '  "seed": "%s",\n  "cases_requested": %d,\n' "$seed" "$cases"
    printf '  "started": "%s",\n  "finished": "%s",\n  "targets": [\n' "$started" "$finished"
    first=1
    while IFS=$'\t' read -r full ran failures result wall cap note; do
        [ "$result" = FAILED ] && failed=1
        ((first)) || printf ',\n'
        first=0
        printf '    {"name": "%s", "cases": %d, "failures": %d, "result": "%s", "seed": "%s", "build": "%s%s", "wall_s": %s' \
            "$full" "$ran" "$failures" "$result" "$seed" "$rev" "$([ "$dirty" = true ] && echo '-dirty')" "$wall"
        ((cap)) && printf ', "capped_from": %d' "$cap"
        [ "$note" != - ] && printf ', "note": "%s"' "$note"
        printf '}'
    done <<<"$sorted"
    printf '\n  ]\n}\n'
} >"$out/fuzz-summary.json"
{
    echo "# Property-test long run"
    echo
    echo "Generated by \`scripts/fuzz-long.sh --cases $cases\` ($started to $finished), build \`$rev\`$([ "$dirty" = true ] && echo ' (dirty tree)'), PROPTEST_RNG_SEED=$seed. Machine-readable: \`fuzz-summary.json\`."
    echo
    echo "| target | cases | failures | result | seed | build | wall (s) |"
    echo "| --- | ---: | ---: | --- | --- | --- | ---: |"
    while IFS=$'\t' read -r full ran failures result wall cap note; do
        ((cap)) && result="$result (capped from $cap)"
        printf '| `%s` | %d | %d | %s | %s | %s%s | %s |\n' "$full" "$ran" "$failures" "$result" "$seed" "$rev" \
            "$([ "$dirty" = true ] && echo '-dirty')" "$wall"
    done <<<"$sorted"
} >"$out/fuzz-summary.md"
echo "fuzz-long: summary in $out/fuzz-summary.json and $out/fuzz-summary.md" >&2
if ((failed)); then
    echo "fuzz-long: FAILED targets:" >&2
    awk -F'\t' '$4 == "FAILED" { print "  " $1 ": " $7 }' <<<"$sorted" >&2
fi
exit $failed
