"""Sandbox logs from Python against a real gateway and supervisor: the
supervisor's own lines arrive, a follow streams a line written after it
started (blocking and asyncio), and bad input raises the exception that names it."""

from __future__ import annotations

import asyncio
import time

import pytest

from conftest import Gateway, policy_with_port
from openshell import (
    AsyncClient,
    Client,
    InvalidArgument,
    NotFound,
    SandboxLogs,
    Target,
    UpdateMode,
)

DEADLINE = 30.0


def lines_with(client: Client, sandbox: str, message: str) -> SandboxLogs:
    deadline = time.monotonic() + DEADLINE
    while True:
        logs = client.get_sandbox_logs(sandbox)
        if any(line.message == message for line in logs.lines):
            return logs
        assert time.monotonic() < deadline, f"no line {message!r}: {[l.message for l in logs.lines]}"
        time.sleep(0.1)


def test_get_sandbox_logs_returns_the_supervisor_lines(gateway: Gateway, client: Client) -> None:
    sandbox = gateway.running_sandbox("pylogs").sandbox.name
    logs = lines_with(client, sandbox, "workload started")
    started = next(line for line in logs.lines if line.message == "workload started")
    assert (started.source, started.level) == ("supervisor", "INFO")
    assert started.time is not None and started.time.startswith("20")
    assert started.timestamp_ms > 0
    assert logs.buffer_total >= len(logs.lines)
    assert logs.supervisor_dropped_lines == 0
    assert logs.to_dict()["lines"][0]["source"] in {"supervisor", "workload"}

    assert client.get_sandbox_logs(sandbox, sources=["workload"], min_level="ERROR").lines == []
    future = int(time.time() * 1000) + 3_600_000
    assert client.get_sandbox_logs(sandbox, since_ms=future).lines == []
    assert len(client.get_sandbox_logs(sandbox, lines=1).lines) == 1


def test_a_blocking_follow_streams_a_line_written_after_it_started(gateway: Gateway, client: Client) -> None:
    sandbox = gateway.running_sandbox("pyfollow").sandbox.name
    lines_with(client, sandbox, "workload started")
    seen: list[str] = []
    with client.watch_sandbox_logs(sandbox, sources=["supervisor"]) as watch:
        for event in watch:
            if event.kind != "line" or event.line is None:
                continue
            seen.append(event.line.message)
            if event.line.message == "workload started" and seen.count("workload started") == 1:
                client.update_config(
                    Target.sandbox(sandbox), policy=policy_with_port(8443), mode=UpdateMode.COMMIT_ONLY
                )
            if event.line.message == "configuration applied" and event.line.fields.get("policy_revision") == "2":
                break
        else:
            pytest.fail(f"the follow ended early: {seen}")
    assert "workload started" in seen


def test_an_async_follow_streams_a_line_written_after_it_started(gateway: Gateway, client: Client) -> None:
    sandbox = gateway.running_sandbox("pyafollow").sandbox.name
    lines_with(client, sandbox, "workload started")

    async def follow() -> list[str]:
        seen: list[str] = []
        async with AsyncClient(gateway.endpoint, gateway.token) as aclient:
            watch = aclient.watch_sandbox_logs(sandbox, sources=["supervisor"])
            async for event in watch:
                if event.line is None:
                    continue
                seen.append(event.line.message)
                if event.line.message == "workload started" and seen.count("workload started") == 1:
                    await aclient.update_config(
                        Target.sandbox(sandbox), policy=policy_with_port(8444), mode=UpdateMode.COMMIT_ONLY
                    )
                if event.line.message == "configuration applied" and event.line.fields.get("policy_revision") == "2":
                    watch.cancel()
                    break
        return seen

    seen = asyncio.run(asyncio.wait_for(follow(), DEADLINE))
    assert "configuration applied" in seen


def test_failures_name_what_is_wrong(gateway: Gateway, client: Client) -> None:
    with pytest.raises(NotFound):
        client.get_sandbox_logs("no-such-sandbox")
    sandbox = gateway.running_sandbox("pylogbad").sandbox.name
    with pytest.raises(InvalidArgument, match="min_level"):
        client.get_sandbox_logs(sandbox, min_level="LOUD")
    with pytest.raises(InvalidArgument, match="since_ms"):
        client.get_sandbox_logs(sandbox, since_ms=-1)
    with pytest.raises(NotFound):
        next(iter(client.watch_sandbox_logs("no-such-sandbox")))
