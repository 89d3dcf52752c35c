#!/usr/bin/env bash
# Starts the machine's PostgreSQL 15 cluster if it is not running, makes sure
# the test login works, and prints the admin URL the tests use.
# Safe to run again: every step checks before it acts.
set -euo pipefail

url="${OPENSHELL_TEST_POSTGRES_URL:-postgres://postgres:postgres@127.0.0.1:5432/postgres}"

if psql "$url" -Atc 'select 1' >/dev/null 2>&1; then
    echo "$url"
    exit 0
fi

if ! command -v pg_ctlcluster >/dev/null 2>&1; then
    echo "PostgreSQL is not reachable at $url and pg_ctlcluster is not installed." >&2
    echo "Install it (apt-get install postgresql) or set OPENSHELL_TEST_POSTGRES_URL." >&2
    exit 1
fi

if ! pg_lsclusters -h 2>/dev/null | awk '{print $1" "$2" "$4}' | grep -q '^15 main online'; then
    pg_ctlcluster 15 main start >&2
fi

# The default cluster authenticates local TCP logins with a password.
for _ in $(seq 1 50); do
    if su postgres -c "psql -Atc \"ALTER USER postgres PASSWORD 'postgres'\"" >/dev/null 2>&1; then
        break
    fi
    sleep 0.2
done

if ! psql "$url" -Atc 'select 1' >/dev/null 2>&1; then
    echo "PostgreSQL started but $url does not accept logins." >&2
    exit 1
fi
echo "$url"
