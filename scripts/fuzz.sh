#!/usr/bin/env bash
# Fuzzes what the gateway and the supervisor parse from the network, and the
# CLI's argument parsers (docs/security.md, "Fuzzing").
#
#   scripts/fuzz.sh [--time 60s] [TARGET]
#
# Builds the targets of fuzz/ with cargo-fuzz on the nightly toolchain (into
# fuzz/target), seeds fuzz/corpus/TARGET from the repository's test files,
# runs each target (or only TARGET) for the given time, and prints the
# executions and executions per second of each. A crash or panic is saved
# under fuzz/artifacts/TARGET/ and makes the script exit 1 once every target
# ran. Reproduce one with:
#   cargo +nightly fuzz run -s none TARGET fuzz/artifacts/TARGET/crash-...
set -euo pipefail
cd "$(dirname "$0")/.."

TARGETS=(policy settings supervisor_push gateway_session cli_parsers)
time_spec=60s
only=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --time) time_spec="${2:?--time needs a value such as 60s or 10m}"; shift 2 ;;
        --time=*) time_spec="${1#--time=}"; shift ;;
        -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "unknown option $1 (usage: scripts/fuzz.sh [--time 60s] [TARGET])" >&2; exit 2 ;;
        *) only="$1"; shift ;;
    esac
done

case "$time_spec" in
    *[0-9]s) seconds="${time_spec%s}" ;;
    *[0-9]m) seconds=$(( ${time_spec%m} * 60 )) ;;
    *[0-9]h) seconds=$(( ${time_spec%h} * 3600 )) ;;
    *) seconds="$time_spec" ;;
esac
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [[ "$seconds" -eq 0 ]]; then
    echo "--time must be a positive duration such as 60s, 10m or 1h, got '$time_spec'" >&2
    exit 2
fi
if [[ -n "$only" ]]; then
    if [[ ! " ${TARGETS[*]} " == *" $only "* ]]; then
        echo "unknown target '$only'; targets: ${TARGETS[*]}" >&2
        exit 2
    fi
    TARGETS=("$only")
fi

if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "the nightly toolchain is missing: rustup toolchain install nightly" >&2
    exit 2
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "cargo-fuzz is missing: cargo install cargo-fuzz --locked" >&2
    exit 2
fi

# No sanitizer: the targets are safe Rust, and without ASan they run several
# times faster; overflow checks and debug assertions stay on (cargo-fuzz's default).
FUZZ=(cargo +nightly fuzz)
BUILD_FLAGS=(-s none --target-dir fuzz/target)
# Without a name cargo-fuzz builds every target.
"${FUZZ[@]}" build "${BUILD_FLAGS[@]}" ${only:+"$only"}
bin_dir="fuzz/target/$(rustc +nightly -vV | sed -n 's/^host: //p')/release"

seed() {
    local target="$1" dir="fuzz/corpus/$1"
    mkdir -p "$dir"
    case "$target" in
        policy)
            cp core/tests/corpus/accepted/* core/tests/corpus/rejected/* examples/policy.yaml "$dir/"
            ;;
        cli_parsers)
            local i=0 text
            for text in 90s 2m "1m 30s" 600 601 0 10m 1h 0.95 1 0 1e-9 NaN inf -0.5 \
                2027-01-31T00:00:00Z 2027-01-31 KEY=VALUE "A B=c" =x "k=a=b" \
                demo team/demo /demo sb-0190b6a0-0000-7000-8000-000000000001 succeeded \
                running cancelled; do
                printf '%s' "$text" >"$dir/seed-$i"
                i=$((i + 1))
            done
            ;;
        *)
            # The target writes its seeds and exits before libFuzzer starts (fuzz/src/seeds.rs).
            if ! OPENSHELL_FUZZ_SEEDS="$dir" "$bin_dir/$target" -runs=0 >/dev/null 2>&1; then
                echo "$target could not write its seeds into $dir" >&2
                exit 1
            fi
            ;;
    esac
}

failed=()
summary=()
for target in "${TARGETS[@]}"; do
    seed "$target"
    log="fuzz/target/$target.log"
    echo "== $target: fuzzing for ${seconds}s"
    status=0
    "${FUZZ[@]}" run "${BUILD_FLAGS[@]}" "$target" "fuzz/corpus/$target" -- \
        -max_total_time="$seconds" -timeout=30 -print_final_stats=1 >"$log" 2>&1 || status=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    if [[ "$status" -ne 0 ]]; then
        failed+=("$target")
        echo "!! $target failed (exit $status); the end of its log ($log):"
        tail -40 "$log"
        artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
        [[ -n "$artifact" ]] && echo "!! crashing input: $artifact"
    fi
    summary+=("$(printf '%-16s %12s executions %8s exec/s  %s' "$target" "${execs:-?}" "${rate:-?}" \
        "$([[ "$status" -eq 0 ]] && echo ok || echo CRASH)")")
done

echo
echo "== fuzzing summary (${seconds}s per target)"
printf '%s\n' "${summary[@]}"
if [[ ${#failed[@]} -gt 0 ]]; then
    echo "crashes in: ${failed[*]} (inputs under fuzz/artifacts/)" >&2
    exit 1
fi
