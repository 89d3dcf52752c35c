#!/bin/sh
# A sample sandbox workload: reports the configuration it runs with and
# re-reads it whenever the supervisor signals a live change (SIGHUP).
show() {
    ports=$(grep -o '"port":[0-9]*' "$OPENSHELL_POLICY_FILE" 2>/dev/null | cut -d: -f2 | sort -u | tr '\n' ' ')
    echo "[$OPENSHELL_SANDBOX_ID] $1: policy ports: ${ports:-none}"
}
trap 'show "reloaded"' HUP
trap 'kill $! 2>/dev/null; echo "[$OPENSHELL_SANDBOX_ID] stopping"; exit 0' TERM INT
show "started"
# `wait` returns as soon as a signal arrives, so reloads show at once.
while :; do sleep 60 & wait $!; done
