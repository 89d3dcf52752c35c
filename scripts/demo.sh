#!/usr/bin/env bash
# The main job in one command: a local gateway on embedded SQLite in push
# mode, three supervisors running a sample workload, a policy change applied
# with --wait and live progress, and `sessions inspect` for one sandbox.
#
#   bash scripts/demo.sh              # keeps running until Ctrl-C
#   bash scripts/demo.sh --exit       # exits after the demo (used by tests)
#
# OPENSHELL_DEMO_BINARIES=DIR runs the binaries in DIR instead of building
# them: the test suite sets it, since a build beside running tests would
# re-link binaries those tests are starting.
set -euo pipefail
cd "$(dirname "$0")/.."

exit_after=false
for arg in "$@"; do
    case "$arg" in
        --exit|--exit-after-demo) exit_after=true ;;
        -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
        *) echo "unknown argument: $arg" >&2; exit 2 ;;
    esac
done

if [ -n "${OPENSHELL_DEMO_BINARIES:-}" ]; then
    bin="$OPENSHELL_DEMO_BINARIES"
else
    echo "== building (cargo build --workspace --bins)"
    cargo build --workspace --bins --quiet
    bin="$PWD/target/debug"
fi

demo="$PWD/.demo"
rm -rf "$demo"
mkdir -p "$demo"
port="${OPENSHELL_DEMO_PORT:-7070}"
export OPENSHELL_GATEWAY="http://127.0.0.1:$port"
export OPENSHELL_TOKEN="demo-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"

pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup EXIT
trap 'echo; echo "stopping"; exit 0' INT TERM

echo "== starting the gateway (SQLite in $demo/gateway, push mode, $OPENSHELL_GATEWAY)"
# The token through the environment, so it stays out of the process list.
OPENSHELL_OPERATOR_TOKENS="demo=$OPENSHELL_TOKEN" "$bin/openshell-gateway" \
    --listen "127.0.0.1:$port" \
    --data-dir "$demo/gateway" \
    --config-delivery-mode push \
    --metrics-listen off \
    >"$demo/gateway.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do
    "$bin/openshell" gateway info >/dev/null 2>&1 && break
    sleep 0.1
done
"$bin/openshell" gateway info

for name in alpha beta gamma; do
    "$bin/openshell" sandbox create "$name" --credential-file "$demo/$name.credential" -o json >"$demo/$name.json"
    id=$(sed -n 's/.*"id": "\(sb-[^"]*\)".*/\1/p' "$demo/$name.json" | head -n1)
    "$bin/openshell-supervisor" \
        --gateway "$OPENSHELL_GATEWAY" \
        --sandbox "$id" \
        --credential-file "$demo/$name.credential" \
        --state-dir "$demo/$name" \
        -- sh examples/workload.sh >"$demo/$name.log" 2>&1 &
    pids+=($!)
    echo "== sandbox $name ($id): supervisor started, log in $demo/$name.log"
done

echo "== waiting for the three supervisors to connect"
for _ in $(seq 1 100); do
    [ "$("$bin/openshell" sessions list -o json | grep -c '"session_id"')" -ge 3 ] && break
    sleep 0.1
done
"$bin/openshell" sessions list

echo "== openshell policy set alpha -f examples/policy.yaml --wait"
"$bin/openshell" policy set alpha -f examples/policy.yaml --wait --timeout 30s

echo "== openshell sessions inspect alpha"
"$bin/openshell" sessions inspect alpha

echo "== the workload saw the change:"
for _ in $(seq 1 50); do
    grep -q "reloaded" "$demo/alpha.log" && break
    sleep 0.1
done
grep -h "reloaded\|started:" "$demo/alpha.log" | tail -n 3

if $exit_after; then
    exit 0
fi
echo
echo "The gateway keeps running. In another terminal:"
echo "  export OPENSHELL_GATEWAY=$OPENSHELL_GATEWAY OPENSHELL_TOKEN=$OPENSHELL_TOKEN"
echo "  target/debug/openshell settings set --global log_level=debug --wait"
echo "Press Ctrl-C to stop."
while :; do sleep 1; done
