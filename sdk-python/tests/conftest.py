"""Real processes for the SDK tests: an `openshell-gateway` per fixture and
`openshell-supervisor`s for the sandboxes a test starts.

Binaries come from the workspace build (`cargo build --workspace --bins`) in
`target/debug`, or from `OPENSHELL_BIN_DIR`.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pytest

from openshell import Client, CreatedSandbox, OperationState

REPO = Path(__file__).resolve().parents[2]
BIN_DIR = Path(os.environ.get("OPENSHELL_BIN_DIR", REPO / "target" / "debug"))
POLICY = (REPO / "examples" / "policy.yaml").read_text()
TOKEN = "ci-" + secrets.token_hex(16)

# Generous bounds on waits for real processes; tests never assert on speed.
STARTUP = 30.0
APPLY = 60.0

# A workload that ignores the reload signal, so it outlives every apply.
WORKLOAD = ["sh", "-c", 'trap "" HUP; while :; do sleep 0.1; done']


def policy_with_port(port: int) -> str:
    """The example policy with its first endpoint on `port`: a new revision."""
    return POLICY.replace("port: 443", f"port: {port}", 1)


def unique(prefix: str) -> str:
    """A sandbox or provider name no other test uses (a DNS label)."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def binary(name: str) -> str:
    path = BIN_DIR / name
    if not path.exists():
        pytest.fail(f"{path} is missing: run `cargo build --workspace --bins` first")
    return str(path)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@dataclass
class Supervisor:
    process: subprocess.Popen[bytes]
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@dataclass
class Gateway:
    """One gateway process in push mode and the supervisors started for it."""

    dir: Path
    port: int = field(default_factory=free_port)
    token: str = TOKEN
    process: subprocess.Popen[bytes] | None = None
    supervisors: list[Supervisor] = field(default_factory=list)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.dir / "gateway.log"

    def start(self) -> None:
        data = self.dir / "data"
        data.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [
                binary("openshell-gateway"),
                "--listen", f"127.0.0.1:{self.port}",
                "--data-dir", str(data),
                "--operator-token", f"ci={self.token}",
                "--metrics-listen", "off",
                "--config-delivery-mode", "push",
                "--heartbeat-interval", "500ms",
            ],
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("wb"),
        )
        deadline = time.monotonic() + STARTUP
        while True:
            if self.process.poll() is not None:
                pytest.fail(f"gateway exited with {self.process.returncode}:\n{self.log.read_text()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"gateway did not listen on {self.port}:\n{self.log.read_text()}")
                time.sleep(0.05)

    def client(self, **kwargs: object) -> Client:
        return Client(self.endpoint, self.token, **kwargs)  # type: ignore[arg-type]

    def start_supervisor(self, created: CreatedSandbox, on_apply: str | None = None) -> Supervisor:
        """Runs a supervisor for a sandbox just created, with its one credential."""
        sandbox = created.sandbox
        home = self.dir / sandbox.id
        home.mkdir(parents=True, exist_ok=True)
        credential = home / "credential"
        credential.write_text(created.supervisor_credential)
        credential.chmod(0o600)
        command = [
            binary("openshell-supervisor"),
            "--gateway", self.endpoint,
            "--sandbox", sandbox.id,
            "--credential-file", str(credential),
            "--state-dir", str(home / "state"),
            "--poll-interval", "200ms",
            "--heartbeat-interval", "500ms",
        ]
        if on_apply is not None:
            command += ["--on-apply", on_apply]
        log = home / "supervisor.log"
        process = subprocess.Popen(
            [*command, "--", *WORKLOAD],
            stdout=subprocess.DEVNULL,
            stderr=log.open("wb"),
        )
        supervisor = Supervisor(process, log)
        self.supervisors.append(supervisor)
        return supervisor

    def running_sandbox(
        self,
        prefix: str,
        on_apply: str | None = None,
        *,
        name: str | None = None,
        workspace: str | None = None,
    ) -> CreatedSandbox:
        """Creates a sandbox (`name`, or a unique one from `prefix`) with the
        example policy, starts its supervisor and waits until the first policy
        is applied."""
        client = self.client()
        created = client.create_sandbox(name or unique(prefix), workspace=workspace, policy=POLICY)
        supervisor = self.start_supervisor(created, on_apply=on_apply)
        first = created.operation
        assert first is not None
        done = client.wait_for_apply(first.id, timeout=APPLY)
        assert done.state == OperationState.APPLIED, (done, supervisor.log_text())
        return created

    def stop(self) -> None:
        for supervisor in self.supervisors:
            stop(supervisor.process)
        if self.process is not None:
            stop(self.process)


def _gateway(dir: Path) -> Iterator[Gateway]:
    gateway = Gateway(dir)
    try:
        gateway.start()
        yield gateway
    finally:
        gateway.stop()


@pytest.fixture(scope="session")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """A gateway shared by the tests that only touch their own sandboxes."""
    yield from _gateway(tmp_path_factory.mktemp("gateway"))


@pytest.fixture
def fresh_gateway(tmp_path: Path) -> Iterator[Gateway]:
    """A gateway of its own, for fleet writes that reach every sandbox."""
    yield from _gateway(tmp_path / "gateway")


@pytest.fixture
def client(gateway: Gateway) -> Client:
    return gateway.client()
