#!/usr/bin/env bash
# Builds the `openshell` Python package into sdk-python/.venv and runs its
# tests against real gateway and supervisor processes.
#
#   bash sdk-python/test.sh [pytest args...]
#
# Needs python3 (3.9+), a Rust toolchain and PyPI (for maturin, pytest and
# mypy, installed into the venv).
# Binaries come from target/debug, built here when missing, or from
# OPENSHELL_BIN_DIR.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
cd "$here"

if [[ -z "${OPENSHELL_BIN_DIR:-}" ]]; then
    if [[ ! -x "$repo/target/debug/openshell-gateway" || ! -x "$repo/target/debug/openshell-supervisor" ]]; then
        echo "test.sh: building the gateway and supervisor binaries" >&2
        (cd "$repo" && cargo build --workspace --bins)
    fi
fi

if [[ ! -x .venv/bin/python ]]; then
    python3 -m venv .venv
fi
# shellcheck disable=SC1091
. .venv/bin/activate

# mypy checks the stubs against the built module (stubtest) and under
# --strict; those tests fail rather than skip without it, so it is required.
pip install --quiet --disable-pip-version-check maturin pytest mypy

maturin develop --quiet

status=0
python -m pytest -q tests/ "$@" || status=$?
if [[ $status -eq 5 ]]; then
    echo "test.sh: pytest collected no tests" >&2
    exit 1
fi
exit "$status"
