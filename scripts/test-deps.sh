#!/usr/bin/env bash
# Installs what the test suite needs beyond the README's toolchains (Rust, Node,
# Python), when it is missing: cargo-nextest, PostgreSQL, promtool (the monitoring
# rules), etcd (the benchmark's peer, measured by its quick test) and cargo-fuzz (the
# fuzz targets must keep compiling). scripts/test.sh runs it first; safe to run again.
set -euo pipefail

if ! command -v cargo-nextest >/dev/null 2>&1; then
    cargo install cargo-nextest --locked
fi

apt_updated=""
apt_install() {
    if [[ "$(id -u)" != 0 ]]; then
        echo "missing $*: install it (apt-get install $*) or run this as root" >&2
        exit 1
    fi
    if [[ -z "$apt_updated" ]]; then
        apt-get update
        apt_updated=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y "$@"
}
if ! command -v pg_ctlcluster >/dev/null 2>&1; then
    apt_install postgresql
fi
if ! command -v promtool >/dev/null 2>&1; then
    apt_install prometheus
fi
if ! command -v etcd >/dev/null 2>&1; then
    apt_install etcd-server
fi

if ! command -v cargo-fuzz >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi
