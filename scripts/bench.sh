#!/usr/bin/env bash
# Builds the benchmark harness in release mode and runs it.
#
#   bash scripts/bench.sh --quick          # smoke run, well under a minute
#   bash scripts/bench.sh                  # full run (1k and 10k sessions; about 6 min on 2 cores)
#   bash scripts/bench.sh --store postgres --postgres-url postgres://postgres:postgres@127.0.0.1:5432/postgres
#
# Every other argument is passed to `openshell-bench` (see `--help`). Results go to
# bench-results/ (report.json, report.md, and the gateway and swarm logs) unless --out is given.
# With OPENSHELL_BENCH_POSTGRES_URL set (an admin URL), commit throughput is also measured on
# PostgreSQL; each use gets a fresh database that is dropped afterwards. Beside each fleet size
# an etcd server (installed here when possible, or --etcd PATH) is measured as the peer.
set -euo pipefail
cd "$(dirname "$0")/.."

# The etcd baseline beside each fleet size needs an etcd server (Debian's etcd-server).
if ! command -v etcd >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing etcd-server for the etcd baseline" >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y etcd-server >&2 \
            || echo "etcd-server could not be installed: the etcd comparison will be skipped" >&2
    else
        echo "no etcd on PATH and no way to install it: the etcd comparison will be skipped" >&2
    fi
fi

cargo build --release --locked -p openshell-bench
exec ./target/release/openshell-bench "$@"
