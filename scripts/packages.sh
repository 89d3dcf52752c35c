#!/usr/bin/env bash
# Builds the SDKs' distributable packages and proves they install anywhere:
#
# - every package carries the workspace's one version;
# - the npm tarball carries a stripped release addon (its size is printed);
# - the Python sdist carries every Rust source it needs: the wheel is built
#   from the unpacked sdist in a directory outside the checkout;
# - a fresh npm project and a fresh venv install those files, run a smoke
#   script against a real gateway and supervisor, and run the SDK guides'
#   examples (docs/sdk-node.md, docs/sdk-python.md) from the installs; the
#   guide's TypeScript examples compile under `tsc --strict` there.
#
# Both native modules build with the `dist` cargo profile in the workspace's
# target directory, so the dependencies they share compile once.
#
#   bash scripts/packages.sh
#
# Needs the gateway and supervisor binaries (target/debug, or
# OPENSHELL_BIN_DIR), python3, node/npm, and the npm and PyPI registries
# (maturin and pytest for the venvs, sdk-node's dev tools for tsc).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
export OPENSHELL_BIN_DIR="${OPENSHELL_BIN_DIR:-$repo/target/debug}"

work="$(mktemp -d)"
gateway_pid=""
cleanup() {
    if [[ -n "$gateway_pid" ]]; then
        kill "$gateway_pid" 2>/dev/null || true
        wait "$gateway_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

fail() {
    echo "packages.sh: $*" >&2
    exit 1
}

for bin in openshell-gateway openshell-supervisor; do
    [[ -x "$OPENSHELL_BIN_DIR/$bin" ]] ||
        fail "$OPENSHELL_BIN_DIR/$bin is missing: run \`cargo build --workspace --bins\` or set OPENSHELL_BIN_DIR"
done

echo "== one version for every package"
version="$(cargo metadata --no-deps --format-version 1 --locked | python3 -c '
import json, sys
versions = {p["name"]: p["version"] for p in json.load(sys.stdin)["packages"]}
if len(set(versions.values())) != 1:
    sys.exit(f"workspace crates disagree on their version: {versions}")
print(next(iter(versions.values())))
')"
npm_version="$(node -p 'require("./sdk-node/package.json").version')"
[[ "$npm_version" == "$version" ]] ||
    fail "sdk-node/package.json has version $npm_version, the workspace $version: set it to $version"
echo "workspace, crates and npm package: $version"

echo "== npm package: addon built with --profile dist"
cargo build --profile dist -p openshell-sdk-node --locked
stage="$work/npm-stage"
mkdir -p "$stage"
# A copy of the package without the development build, so packing never
# picks up the debug addon that sdk-node/test.sh leaves in sdk-node/.
tar -C sdk-node --exclude=./node_modules --exclude='*.node' -cf - . | tar -C "$stage" -xf -
addon="$stage/openshell-sdk.linux-x64-gnu.node"
cp target/dist/libopenshell_sdk_node.so "$addon"
if readelf -S --wide "$addon" | grep -Eq '\.(symtab|debug_info)\b'; then
    fail "$addon still has symbols or debug info: the dist profile must strip"
fi
echo "addon: $(stat -c %s "$addon") bytes, stripped"
tarball="$work/$(cd "$stage" && npm pack --silent --pack-destination "$work")"
echo "tarball: $(basename "$tarball"), $(stat -c %s "$tarball") bytes"
listing="$(tar -tzf "$tarball")"
grep -qx 'package/openshell-sdk.linux-x64-gnu.node' <<<"$listing" || fail "$tarball has no addon"

echo "== Python sdist, and the wheel built from it outside the checkout"
python3 -m venv "$work/build-venv"
"$work/build-venv/bin/pip" install --quiet --disable-pip-version-check 'maturin>=1.5,<2'
(cd sdk-python && "$work/build-venv/bin/maturin" sdist --out "$work/sdist")
sdist="$work/sdist/openshell-$version.tar.gz"
[[ -f "$sdist" ]] || fail "no $sdist (is the Python package's version the workspace's?)"
mkdir -p "$work/unpacked"
tar -C "$work/unpacked" -xzf "$sdist"
# The sdist's files keep old times, and cargo names a path crate's artifacts
# by its place in the workspace: an older dist build of the same crate in the
# shared target directory would look fresh and end up in the wheel.
find "$work/unpacked" -type f -exec touch {} +
# The workspace's target directory keeps the dist profile's dependencies,
# compiled above for the addon; only the path crates compile again.
(cd "$work/unpacked/openshell-$version" &&
    CARGO_TARGET_DIR="$repo/target" "$work/build-venv/bin/maturin" build --profile dist --out "$work/wheels")
wheel="$(echo "$work"/wheels/openshell-"$version"-*.whl)"
[[ -f "$wheel" ]] || fail "no wheel of version $version in $work/wheels"
echo "wheel: $(basename "$wheel"), $(stat -c %s "$wheel") bytes"

echo "== fresh installs"
project="$work/npm-project"
mkdir -p "$project"
(cd "$project" && npm init -y >/dev/null && npm install --no-audit --no-fund --silent "$tarball")
cp scripts/packages/smoke.mjs "$project/"
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet --disable-pip-version-check "$wheel" pytest

echo "== smoke scripts against one gateway"
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
export OPENSHELL_GATEWAY="http://127.0.0.1:$port"
export OPENSHELL_TOKEN="packages-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
export OPENSHELL_SMOKE_POLICY="$repo/examples/policy.yaml"
mkdir -p "$work/gateway"
"$OPENSHELL_BIN_DIR/openshell-gateway" \
    --listen "127.0.0.1:$port" \
    --data-dir "$work/gateway" \
    --operator-token "ci=$OPENSHELL_TOKEN" \
    --metrics-listen off \
    --config-delivery-mode push \
    --heartbeat-interval 500ms \
    2>"$work/gateway.log" &
gateway_pid=$!
deadline=$((SECONDS + 30))
until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
    if ! kill -0 "$gateway_pid" 2>/dev/null || ((SECONDS > deadline)); then
        cat "$work/gateway.log" >&2
        fail "the gateway did not listen on $port"
    fi
    sleep 0.1
done
(cd "$project" && node smoke.mjs) || { cat "$work/gateway.log" >&2; exit 1; }
(cd "$work" && "$work/venv/bin/python" "$repo/scripts/packages/smoke.py") ||
    { cat "$work/gateway.log" >&2; exit 1; }

echo "== docs/sdk-node.md examples from the installed tarball"
if [[ ! -x sdk-node/node_modules/typescript/bin/tsc ]]; then
    (cd sdk-node && npm install --no-audit --no-fund)
fi
(cd sdk-node && OPENSHELL_SDK_PACKAGE="$project/node_modules/@openshell/sdk" node --test test/docs.test.mjs)

echo "== docs/sdk-python.md examples from the installed wheel"
(cd "$work" && "$work/venv/bin/python" -m pytest -q -p no:cacheprovider \
    --rootdir "$repo/sdk-python" "$repo/sdk-python/tests/test_docs.py")
