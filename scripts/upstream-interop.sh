#!/usr/bin/env bash
# End-to-end interop suite against upstream OpenShell's released client code:
# starts a real gateway (embedded SQLite, push mode) and a real supervisor from
# this workspace, then calls the operator API only through the gRPC stubs that
# ship in upstream's PyPI package `openshell==0.1.5`. A pass shows that the
# calls the gateway serves in upstream's layout are wire-compatible with
# upstream's own clients. See e2e/upstream-interop/README.md. Run from anywhere:
#
#   bash scripts/upstream-interop.sh              # the whole suite
#   bash scripts/upstream-interop.sh -k policy    # extra arguments go to pytest
#
# OPENSHELL_BIN_DIR=DIR takes the binaries (openshell-gateway,
# openshell-supervisor, openshell) from DIR; the default is target/debug, which
# this script does not build. Installs the pinned packages into
# target/upstream-interop-venv on first use (needs PyPI then); later runs reuse
# it and need no network. The exit code is pytest's.
set -euo pipefail
cd "$(dirname "$0")/.."

PINS=(openshell==0.1.5 grpcio==1.85.4 protobuf==7.36.2 pytest==9.2.0 pyyaml==6.0.3)
venv="target/upstream-interop-venv"
source scripts/pinned-venv.sh
pinned_venv "$venv" "${PINS[@]}"

export OPENSHELL_BIN_DIR="${OPENSHELL_BIN_DIR:-$PWD/target/debug}"
for binary in openshell-gateway openshell-supervisor openshell; do
    if [[ ! -x "$OPENSHELL_BIN_DIR/$binary" ]]; then
        echo "upstream-interop: $OPENSHELL_BIN_DIR/$binary is missing; build it with" \
            "cargo build --bins -p openshell-gateway -p openshell-supervisor -p openshell-cli" >&2
        exit 2
    fi
done

# No bytecode and no pytest cache: the suite writes nothing into the source tree.
export PYTHONDONTWRITEBYTECODE=1
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider e2e/upstream-interop "$@"
