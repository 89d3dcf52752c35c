#!/usr/bin/env bash
# Builds and tests @openshell/sdk against real gateway and supervisor
# processes: `bash sdk-node/test.sh` from anywhere. Needs only the npm
# registry (for the dev tools, on first run or when package-lock.json changes).
#
# Gateway and supervisor binaries come from ../target/debug (the harness
# honours OPENSHELL_BIN_DIR to test other builds).
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

# The native module is built by cargo with the workspace's own package
# selection, so it shares every compiled dependency with the rest of the
# workspace instead of rebuilding them under the napi CLI's --target dir.
# NAPI_TYPE_DEF_TMP_FOLDER makes napi-derive write this crate's type-def
# fragments there as it compiles; a new folder each run changes the variable,
# which napi-build's build script watches, so cargo recompiles this crate (and
# only this crate) and the fragments always describe the current src/.
typedefs="$(mktemp -d)"
trap 'rm -rf "$typedefs"' EXIT
echo "== cargo build --workspace --bins --lib"
(cd .. && NAPI_TYPE_DEF_TMP_FOLDER="$typedefs" cargo build --workspace --bins --lib)
cp ../target/debug/libopenshell_sdk_node.so openshell-sdk.linux-x64-gnu.node

# The committed loader and types must be what napi-rs generates from src/:
# fails with a diff otherwise (`npm run generate` rewrites them).
echo "== native.js and native.d.ts match src/"
node scripts/generated.mjs --typedefs "$typedefs"

echo "== node --test"
node --test test/
