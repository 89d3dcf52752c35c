#!/usr/bin/env bash
# Long fault-injection runs of the chaos catalog (docs/reliability.md).
#
#   scripts/chaos.sh --seed N --duration 10m [--scenario NAME] [--backend sqlite|postgres]
#                    [--supervisors N] [--report FILE]
#
# Runs every scenario of e2e/tests/chaos*.rs (or the one NAME names, as in
# `chaos_NAME_sqlite`: gateway_sigkill, supervisor_sigkill_mid_apply,
# corrupted_state_files, state_dir_full, shared_credential, random, ...) on both stores, one after the
# other, each injecting faults for the duration, and prints the figures of every
# run and their totals. A run that finds a violation fails, keeps its stores, state
# directories and logs, and names where they are.
set -euo pipefail
cd "$(dirname "$0")/.."

seed=1
duration=10m
scenario=""
backend=""
supervisors=""
report=""

usage() {
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
    exit "${1:-0}"
}

while [ $# -gt 0 ]; do
    case "$1" in
        --seed) seed="${2:?--seed needs a number}"; shift 2 ;;
        --duration) duration="${2:?--duration needs a duration such as 10m}"; shift 2 ;;
        --scenario) scenario="${2:?--scenario needs a name}"; shift 2 ;;
        --backend) backend="${2:?--backend needs sqlite or postgres}"; shift 2 ;;
        --supervisors) supervisors="${2:?--supervisors needs a number}"; shift 2 ;;
        --report) report="${2:?--report needs a file}"; shift 2 ;;
        -h|--help) usage 0 ;;
        *) echo "chaos.sh: unknown argument '$1'" >&2; usage 2 >&2 ;;
    esac
done

case "$seed" in ''|*[!0-9]*) echo "chaos.sh: --seed must be a whole number, got '$seed'" >&2; exit 2 ;; esac
case "$duration" in *[0-9]s|*[0-9]m|*[0-9]h|*[0-9]) ;; *)
    echo "chaos.sh: --duration must be like 90s, 10m or 1h, got '$duration'" >&2; exit 2 ;;
esac
case "$backend" in ''|sqlite|postgres) ;; *)
    echo "chaos.sh: --backend must be sqlite or postgres, got '$backend'" >&2; exit 2 ;;
esac
case "$supervisors" in ''|*[!0-9]*) [ -z "$supervisors" ] || {
    echo "chaos.sh: --supervisors must be a whole number, got '$supervisors'" >&2; exit 2; } ;;
esac

report="${report:-$(mktemp -t chaos-report.XXXXXX.jsonl)}"
: > "$report"

export OPENSHELL_CHAOS_SEED="$seed"
export OPENSHELL_CHAOS_DURATION="$duration"
export OPENSHELL_CHAOS_REPORT="$report"
[ -z "$supervisors" ] || export OPENSHELL_CHAOS_SUPERVISORS="$supervisors"
OPENSHELL_TEST_POSTGRES_URL="$(bash scripts/postgres.sh)"
export OPENSHELL_TEST_POSTGRES_URL

filter="binary(/^chaos/) & test(/^chaos_/)"
[ -z "$scenario" ] || filter="$filter & test(/chaos_${scenario}_/)"
[ -z "$backend" ] || filter="$filter & test(/_${backend}\$/)"

cargo build -p openshell-gateway -p openshell-supervisor --bins --locked
status=0
cargo nextest run -p openshell-e2e --locked --profile chaos --no-capture --run-ignored all \
    --test-threads 1 \
    --no-fail-fast -E "$filter" || status=$?

echo
echo "runs (one JSON line each): $report"
if command -v jq >/dev/null 2>&1 && [ -s "$report" ]; then
    jq -r '"\(.scenario) \(.backend) seed \(.seed): \(.supervisors) supervisors, \(.faults) faults, \(.writes) writes, \(.lost_updates) lost, \(.stuck_operations) stuck, converged \(.convergence_ms) ms after the heal, \(.violations | length) violations"' "$report"
    jq -s -r '"total: \(length) runs, \(map(.faults) | add) faults, \(map(.writes) | add) writes, \(map(.committed) | add) committed, \(map(.lost_updates) | add) lost updates, \(map(.stuck_operations) | add) stuck operations, longest convergence \(map(.convergence_ms) | max) ms"' "$report"
fi
exit "$status"
