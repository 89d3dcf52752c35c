#!/usr/bin/env bash
# Compares this project's gRPC contract (proto/openshell/**/*.proto) with upstream
# OpenShell's release, the `openshell` package on PyPI, whose generated modules
# carry upstream's descriptors. Fails on a difference not listed in
# proto/upstream-contract-known.txt; see docs/protocol.md, "Checking the contract
# against upstream's release". Run from anywhere:
#
#   bash scripts/upstream-contract.sh            # the check (exit 0 or 1)
#   bash scripts/upstream-contract.sh --report   # every finding, by kind
#   bash scripts/upstream-contract.sh --update   # rewrite the known findings
#
# Installs the pinned packages into target/upstream-contract-venv on first use
# (needs PyPI then); later runs reuse it and need no network.
set -euo pipefail
cd "$(dirname "$0")/.."

PINS=(openshell==0.1.5 grpcio-tools==1.85.4 protobuf==7.36.2)
venv="target/upstream-contract-venv"
source scripts/pinned-venv.sh
pinned_venv "$venv" "${PINS[@]}"

exec "$venv/bin/python" scripts/upstream_contract.py "$@"
