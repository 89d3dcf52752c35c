"""Fixtures of the upstream interop suite.

A real `openshell-gateway` (embedded SQLite, push mode) on a free port, this
project's CLI to create sandboxes, real `openshell-supervisor` processes, and
gRPC stubs from upstream's published package `openshell` (0.1.5). Every
process is started in a session of its own and its whole process group is
ended at teardown, so no test leaves a gateway, supervisor or workload behind.

Run through scripts/upstream-interop.sh, which pins the packages and sets
OPENSHELL_BIN_DIR.
"""

from __future__ import annotations

import itertools
import json
import os
import secrets
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, TypeVar

import grpc
import pytest
from openshell._proto import openshell_pb2, openshell_pb2 as pb, openshell_pb2_grpc

REPO = Path(__file__).resolve().parents[2]
BIN_DIR = Path(os.environ.get("OPENSHELL_BIN_DIR", REPO / "target" / "debug"))

# How long a start-up or a state change may take before a test fails. Generous
# for a debug build on a loaded machine; a healthy run needs well under 1 s.
DEADLINE_SECONDS = 30.0
# A workload that outlives every test. The supervisor signals SIGHUP after a
# live change; an ignored signal stays ignored across exec, so `sleep` keeps
# running instead of dying with code 129 and taking the supervisor with it.
WORKLOAD = ["sh", "-c", "trap '' HUP; exec sleep 86400"]

T = TypeVar("T")


def eventually(
    probe: Callable[[], T],
    until: Callable[[T], bool],
    what: str,
    timeout: float = DEADLINE_SECONDS,
    context: Callable[[], str] | None = None,
) -> T:
    """Calls `probe` until `until` accepts its value, and returns that value.

    Fails after `timeout` seconds, naming `what`, the last value or gRPC error
    seen and `context()` (a log tail, say), so a failure says what the system
    was doing instead of just "timeout".
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = probe()
            if until(value):
                return value
            last = value
        except grpc.RpcError as err:
            last = f"{err.code()}: {err.details()}"
        if time.monotonic() >= deadline:
            extra = f"\n{context()}" if context else ""
            raise AssertionError(f"{what}: not within {timeout:.0f}s; last seen:\n{last}{extra}")
        time.sleep(0.05)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _stop(process: subprocess.Popen) -> None:
    """Ends the process group `process` leads: SIGTERM, then SIGKILL for what is left."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    # The leader if it hung, and any member it left behind in its group.
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(timeout=10)


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as err:
        return f"(cannot read {path}: {err})"


class _BearerToken(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    """Adds `authorization: Bearer TOKEN` to every call made through a channel."""

    def __init__(self, token: str) -> None:
        self._header = ("authorization", f"Bearer {token}")

    def _details(self, details: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        return _CallDetails(
            method=details.method,
            timeout=details.timeout,
            metadata=[*(details.metadata or ()), self._header],
            credentials=details.credentials,
            wait_for_ready=details.wait_for_ready,
            compression=details.compression,
        )

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._details(details), request)


@dataclass(frozen=True)
class _CallDetails(grpc.ClientCallDetails):
    method: str
    timeout: float | None
    metadata: list
    credentials: grpc.CallCredentials | None
    wait_for_ready: bool | None
    compression: grpc.Compression | None


@dataclass
class Sandbox:
    name: str
    id: str
    credential_file: Path


@dataclass
class Gateway:
    """A running gateway and everything the suite created on it."""

    address: str
    token: str
    workdir: Path
    process: subprocess.Popen
    log: Path
    # Sandboxes created through `create_sandbox`, in creation order: the
    # gateway holds these and no others.
    sandboxes: list[Sandbox] = field(default_factory=list)
    supervisors: list[subprocess.Popen] = field(default_factory=list)
    _names: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def cli(self, *args: str) -> str:
        """Runs this project's CLI against the gateway; returns its stdout."""
        env = {
            **os.environ,
            "OPENSHELL_GATEWAY": self.url,
            "OPENSHELL_TOKEN": self.token,
            # No saved gateway of the machine's user can change the target.
            "HOME": str(self.workdir / "home"),
            "XDG_CONFIG_HOME": str(self.workdir / "home" / ".config"),
        }
        done = subprocess.run(
            [str(BIN_DIR / "openshell"), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if done.returncode != 0:
            raise AssertionError(
                f"openshell {' '.join(args)} exited {done.returncode}:\n{done.stderr}"
            )
        return done.stdout

    def create_sandbox(self, prefix: str) -> Sandbox:
        """`openshell sandbox create` with a new name; the credential goes to a file."""
        name = f"{prefix}-{next(self._names)}"
        credential = self.workdir / f"{name}.credential"
        created = json.loads(
            self.cli("sandbox", "create", name, "--credential-file", str(credential), "-o", "json")
        )
        sandbox = Sandbox(name=name, id=created["sandbox"]["id"], credential_file=credential)
        self.sandboxes.append(sandbox)
        return sandbox

    def supervisor_log(self, sandbox: Sandbox) -> Path:
        return self.workdir / f"{sandbox.name}.supervisor.log"

    def logs(self, sandbox: Sandbox) -> str:
        """The ends of the gateway's and `sandbox`'s supervisor's logs, for failure messages."""
        return (
            f"--- gateway log ({self.log}):\n{_tail(self.log)}\n"
            f"--- supervisor log ({self.supervisor_log(sandbox)}):\n"
            f"{_tail(self.supervisor_log(sandbox))}"
        )

    def start_supervisor(self, sandbox: Sandbox) -> subprocess.Popen:
        """A real supervisor for `sandbox`, running a long-lived workload."""
        log = self.supervisor_log(sandbox)
        with log.open("wb") as out:
            process = subprocess.Popen(
                [
                    str(BIN_DIR / "openshell-supervisor"),
                    "--gateway", self.url,
                    "--sandbox", sandbox.id,
                    "--credential-file", str(sandbox.credential_file),
                    "--state-dir", str(self.workdir / f"{sandbox.name}.state"),
                    "--",
                    *WORKLOAD,
                ],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.supervisors.append(process)
        return process

    def stop_supervisor(self, process: subprocess.Popen) -> None:
        """Ends a supervisor and its workload before the session ends."""
        _stop(process)
        self.supervisors.remove(process)


def _start_gateway(workdir: Path, token: str) -> tuple[subprocess.Popen, str, Path]:
    """Starts the gateway; retries on a new port if another process took the chosen one."""
    # NO_COLOR: plain log lines in the log files failure messages quote.
    env = {**os.environ, "OPENSHELL_OPERATOR_TOKENS": f"interop={token}", "NO_COLOR": "1"}
    for attempt in range(1, 4):
        address = f"127.0.0.1:{_free_port()}"
        log = workdir / f"gateway.{attempt}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [
                    str(BIN_DIR / "openshell-gateway"),
                    "--listen", address,
                    "--data-dir", str(workdir / "gateway"),
                    "--config-delivery-mode", "push",
                    "--metrics-listen", "off",
                ],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        channel = grpc.insecure_channel(address)
        stub = openshell_pb2_grpc.OpenShellStub(channel)
        deadline = time.monotonic() + DEADLINE_SECONDS
        try:
            while process.poll() is None and time.monotonic() < deadline:
                try:
                    stub.Health(openshell_pb2.HealthRequest(), timeout=1)
                    return process, address, log
                except grpc.RpcError:
                    time.sleep(0.05)
        finally:
            channel.close()
        _stop(process)
        if "in use" not in _tail(log):
            raise AssertionError(
                f"the gateway did not answer Health within {DEADLINE_SECONDS:.0f}s; "
                f"its log:\n{_tail(log)}"
            )
    raise AssertionError("the gateway found no free port in 3 attempts")


@pytest.fixture(scope="session")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    workdir = tmp_path_factory.mktemp("upstream-interop")
    (workdir / "home" / ".config").mkdir(parents=True)
    # Operator tokens must be at least 16 characters.
    token = f"interop-{secrets.token_hex(16)}"
    process, address, log = _start_gateway(workdir, token)
    gw = Gateway(address=address, token=token, workdir=workdir, process=process, log=log)
    try:
        yield gw
    finally:
        for supervisor in gw.supervisors:
            _stop(supervisor)
        _stop(process)


@pytest.fixture(scope="session")
def anonymous_stub(gateway: Gateway) -> Iterator[openshell_pb2_grpc.OpenShellStub]:
    """Upstream's stub on a channel that sends no token."""
    channel = grpc.insecure_channel(gateway.address)
    try:
        yield openshell_pb2_grpc.OpenShellStub(channel)
    finally:
        channel.close()


@pytest.fixture(scope="session")
def channel(gateway: Gateway) -> Iterator[grpc.Channel]:
    """A channel that sends the operator token on every call."""
    raw = grpc.insecure_channel(gateway.address)
    try:
        yield grpc.intercept_channel(raw, _BearerToken(gateway.token))
    finally:
        raw.close()


@pytest.fixture(scope="session")
def stub(channel: grpc.Channel) -> openshell_pb2_grpc.OpenShellStub:
    """Upstream's `openshell.v1.OpenShell` stub, authenticated as an operator."""
    return openshell_pb2_grpc.OpenShellStub(channel)


# Helpers of the tests, shared by every module.

TIMEOUT = 10  # seconds, per call


def rpc_error(call, *args, **kwargs) -> grpc.RpcError:
    """The error `call` fails with; fails the test when it succeeds."""
    with pytest.raises(grpc.RpcError) as caught:
        call(*args, timeout=TIMEOUT, **kwargs)
    return caught.value


def policy_status(stub, sandbox: str, version: int) -> pb.GetSandboxPolicyStatusResponse:
    return stub.GetSandboxPolicyStatus(
        pb.GetSandboxPolicyStatusRequest(sandbox=sandbox, version=version), timeout=TIMEOUT
    )


def wait_loaded(gateway: Gateway, stub, sandbox, version: int) -> pb.GetSandboxPolicyStatusResponse:
    """Waits until the supervisor reports `version` loaded and it is the active one."""
    return eventually(
        lambda: policy_status(stub, sandbox.name, version),
        lambda status: status.revision.status == pb.POLICY_STATUS_LOADED
        and status.active_version == version,
        f"policy version {version} of {sandbox.name} LOADED and active",
        context=lambda: gateway.logs(sandbox),
    )


def assert_latest_revision(stub, sandbox: str, version: int) -> None:
    """`version` is the sandbox's newest policy revision: version 0 reads the
    newest, and the one after `version` does not exist."""
    assert policy_status(stub, sandbox, 0).revision.version == version
    missing = rpc_error(
        stub.GetSandboxPolicyStatus,
        pb.GetSandboxPolicyStatusRequest(sandbox=sandbox, version=version + 1),
    )
    assert missing.code() == grpc.StatusCode.NOT_FOUND, missing.details()
