#!/usr/bin/env bash
# Checks the monitoring assets of deploy/monitoring/: the alert rules load in
# Prometheus (`promtool check rules`) and fire as their unit tests expect
# (`promtool test rules alerts.test.yml`). That every metric they and the
# dashboard name is exported by a running gateway is e2e/tests/monitoring.rs.
# Needs promtool (Debian: `apt-get install prometheus`).
set -euo pipefail
cd "$(dirname "$0")/../deploy/monitoring"

if ! command -v promtool >/dev/null 2>&1; then
    echo "monitoring.sh: promtool is missing (apt-get install prometheus)" >&2
    exit 1
fi
promtool check rules alerts.yml
promtool test rules alerts.test.yml
python3 -m json.tool dashboard.json >/dev/null
