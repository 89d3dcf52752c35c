#!/usr/bin/env bash
# The whole test suite: formatting, lints, every crate's import graph, the
# monitoring rules, every Rust test on SQLite and a real PostgreSQL, doc
# tests, the Node and Python SDKs against real gateways and supervisors, and
# their packages installed into fresh environments. Installs what it needs first
# (scripts/test-deps.sh). Run from anywhere: `bash scripts/test.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== test dependencies"
bash scripts/test-deps.sh

export OPENSHELL_TEST_POSTGRES_URL
OPENSHELL_TEST_POSTGRES_URL="$(bash scripts/postgres.sh)"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "== upstream contract (openshell 0.1.5)"
bash scripts/upstream-contract.sh

echo "== dependency audit (cargo-deny)"
bash scripts/deny.sh

echo "== no import cycle inside any crate"
bash scripts/imports.sh

echo "== monitoring rules (promtool)"
bash scripts/monitoring.sh

# End-to-end tests run the real binaries, so build them first, once.
echo "== cargo build (binaries for end-to-end tests)"
cargo build --workspace --bins --lib --locked

# The fuzz targets are their own workspace (built with nightly by scripts/fuzz.sh);
# checked here on stable so that they keep compiling against the crates they fuzz.
echo "== fuzz targets compile"
cargo check --manifest-path fuzz/Cargo.toml --locked --target-dir target/fuzz-check --bins

echo "== cargo nextest"
cargo nextest run --workspace --locked --no-fail-fast

echo "== doc tests"
cargo test --workspace --doc --locked

# The bindings run against the same binaries, built above.
echo "== Node SDK"
bash sdk-node/test.sh

echo "== Python SDK"
bash sdk-python/test.sh

echo "== upstream interop (openshell 0.1.5's own stubs against a real gateway)"
bash scripts/upstream-interop.sh

echo "== SDK packages in fresh environments"
bash scripts/packages.sh
