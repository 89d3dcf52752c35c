#!/usr/bin/env bash
# Builds and tests @openshell/sdk against real gateway and supervisor
# processes: `bash sdk-node/test.sh` from anywhere. Needs only the npm
# registry (for the dev tools, on first run or when package-lock.json changes).
#
# Gateway and supervisor binaries come from OPENSHELL_BIN_DIR, default
# ../target/debug; they are built with `cargo build --workspace --bins` when
# missing (the same package selection as the workspace's own test script, so
# nothing is rebuilt for a different feature set).
set -euo pipefail
cd "$(dirname "$0")"

# Reinstall only when the lock file changed since the last install.
stamp=node_modules/.package-lock.sha256
lock_sum="$(sha256sum package-lock.json | cut -d' ' -f1)"
if [[ ! -d node_modules || ! -f "$stamp" || "$(cat "$stamp")" != "$lock_sum" ]]; then
    echo "== npm install"
    npm install --no-audit --no-fund
    echo "$lock_sum" > "$stamp"
fi

bin_dir="${OPENSHELL_BIN_DIR:-../target/debug}"
if [[ ! -x "$bin_dir/openshell-gateway" || ! -x "$bin_dir/openshell-supervisor" ]]; then
    if [[ -n "${OPENSHELL_BIN_DIR:-}" ]]; then
        echo "OPENSHELL_BIN_DIR=$OPENSHELL_BIN_DIR has no openshell-gateway/openshell-supervisor" >&2
        exit 1
    fi
    echo "== cargo build --workspace --bins"
    (cd .. && cargo build --workspace --bins)
fi

# napi writes the .node, the native.js loader and the generated native.d.ts;
# a changed native.d.ts shows up in `git status` like any other change.
echo "== napi build"
npm run --silent build

echo "== node --test"
node --test test/
