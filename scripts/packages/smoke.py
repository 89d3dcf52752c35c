"""Smoke test of an installed `openshell` wheel (run by scripts/packages.sh
from a fresh venv): creates a sandbox, runs its supervisor, commits a setting
with this script's own idempotency key, waits for it to apply, repeats the
write (a replay) and reads the setting back. The gateway comes from
OPENSHELL_GATEWAY and OPENSHELL_TOKEN, the supervisor binary from
OPENSHELL_BIN_DIR.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import openshell
from openshell import Client, OperationState, UpdateMode

NAME = "smoke-python"
KEY = "smoke-python-log-level-debug"


def main() -> None:
    venv = Path(sys.prefix).resolve()
    installed = Path(openshell.__file__).resolve()
    # The point is the installed wheel: a checkout's sources must not stand in for it.
    assert venv in installed.parents, f"openshell imported from {installed}, not from {venv}"

    client = Client()
    created = client.create_sandbox(NAME, policy=Path(os.environ["OPENSHELL_SMOKE_POLICY"]).read_text())
    with tempfile.TemporaryDirectory(prefix="openshell-smoke-python-") as work:
        credential = Path(work) / "credential"
        credential.write_text(created.supervisor_credential)
        credential.chmod(0o600)
        log = (Path(work) / "supervisor.log").open("wb")
        supervisor = subprocess.Popen(
            [
                str(Path(os.environ["OPENSHELL_BIN_DIR"]) / "openshell-supervisor"),
                "--gateway", os.environ["OPENSHELL_GATEWAY"],
                "--sandbox", created.sandbox.id,
                "--credential-file", str(credential),
                "--state-dir", str(Path(work) / "state"),
                "--poll-interval", "200ms",
                "--heartbeat-interval", "500ms",
                "--", "sh", "-c", 'trap "" HUP; while :; do sleep 0.1; done',
            ],
            stdout=subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,
        )
        try:
            first = client.update_config(
                NAME,
                settings={"log_level": "debug"},
                mode=UpdateMode.WAIT_FOR_APPLY,
                wait_timeout=120,
                idempotency_key=KEY,
            )
            op = first.operation
            assert op is not None and op.state is OperationState.APPLIED, (
                op,
                (Path(work) / "supervisor.log").read_text(errors="replace"),
            )
            again = client.update_config(
                NAME,
                settings={"log_level": "debug"},
                mode=UpdateMode.WAIT_FOR_APPLY,
                wait_timeout=120,
                idempotency_key=KEY,
            )
            assert again.idempotent_replay and again.operation is not None
            assert again.operation.id == op.id, (again.operation.id, op.id)
            effective = {s.key: s for s in client.get_settings(NAME).effective}
            assert effective["log_level"].value == "debug", effective["log_level"]
            print(f"openshell from {installed.parent}: {op.id} APPLIED, replayed, log_level=debug")
        finally:
            os.killpg(supervisor.pid, 15)
            supervisor.wait()
            log.close()


if __name__ == "__main__":
    main()
