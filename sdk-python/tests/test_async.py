"""`AsyncClient`: the same calls as coroutines, progress on the loop, cancellation."""

from __future__ import annotations

import asyncio
import inspect
import threading

import pytest

from conftest import APPLY, POLICY, Gateway, policy_with_port, unique
from openshell import (
    AsyncClient,
    NotFound,
    Operation,
    OperationFailed,
    OperationState,
    Target,
    UpdateMode,
    WaitTimeout,
)


def async_client(gateway: Gateway) -> AsyncClient:
    return AsyncClient(gateway.endpoint, gateway.token)


def test_methods_are_coroutines_usable_before_a_loop_runs(gateway: Gateway) -> None:
    client = async_client(gateway)
    call = client.gateway_info()
    assert inspect.iscoroutine(call)
    info = asyncio.run(call)
    assert info.config_delivery_mode == "push"
    assert info.store_backend == "sqlite"


def test_async_calls_and_errors(gateway: Gateway) -> None:
    client = async_client(gateway)

    async def main() -> None:
        created = await client.create_sandbox(unique("aio"), policy=POLICY)
        task = asyncio.create_task(client.get_sandbox(created.sandbox.name))
        sandbox = await task
        assert sandbox.id == created.sandbox.id
        with pytest.raises(NotFound):
            await client.get_operation("op-00000000-0000-0000-0000-000000000000")
        result = await client.update_config(
            Target.sandbox(created.sandbox.name),
            policy=policy_with_port(8443),
            mode=UpdateMode.WAIT_FOR_APPLY,
            wait_timeout=0.3,
        )
        assert result.operation.wait_timed_out
        with pytest.raises(WaitTimeout) as err:
            await client.wait_for_apply(result.operation.id, timeout=0.3)
        assert err.value.operation_id == result.operation.id
        with pytest.raises(WaitTimeout):
            await result.operation.result_async(timeout=0.3)

    asyncio.run(main())


def test_async_progress_runs_on_the_loop_in_order(gateway: Gateway) -> None:
    created = gateway.running_sandbox("aprog")
    client = async_client(gateway)

    async def main() -> None:
        op = (await client.update_config(created.sandbox.id, policy=policy_with_port(8443))).operation
        loop_thread = threading.get_ident()
        seen: list[Operation] = []
        threads: set[int] = set()

        async def record(update: Operation) -> None:
            threads.add(threading.get_ident())
            await asyncio.sleep(0)
            seen.append(update)

        final = await client.wait_for_apply(op.id, timeout=APPLY, on_progress=record)
        assert final.state == OperationState.APPLIED
        assert seen and seen[-1].state == OperationState.APPLIED
        assert {u.id for u in seen} == {op.id}
        assert not any(u.is_terminal for u in seen[:-1])
        assert threads == {loop_thread}, "callbacks run on the event loop thread"

    asyncio.run(main())


def test_cancelling_a_wait_leaves_the_operation_intact(gateway: Gateway) -> None:
    client = async_client(gateway)

    async def main() -> None:
        created = await client.create_sandbox(unique("cancel"), policy=POLICY)
        op = (
            await client.update_config(created.sandbox.id, settings={"log_level": "debug"})
        ).operation
        subscribed = asyncio.Event()
        task = asyncio.create_task(
            client.wait_for_apply(op.id, timeout=APPLY, on_progress=lambda _: subscribed.set())
        )
        await subscribed.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert task.cancelled()

        still = await client.get_operation(op.id)
        assert still.state == OperationState.PENDING

        gateway.start_supervisor(created)
        applied = await client.wait_for_apply(op.id, timeout=APPLY)
        assert applied.state == OperationState.APPLIED

    asyncio.run(main())


def test_async_result_raises_operation_failed(gateway: Gateway) -> None:
    created = gateway.running_sandbox(
        "apicky", on_apply='grep -q 9999 "$OPENSHELL_POLICY_FILE" && exit 3 || exit 0'
    )
    client = async_client(gateway)

    async def main() -> None:
        op = (await client.update_config(created.sandbox.id, policy=policy_with_port(9999))).operation
        with pytest.raises(OperationFailed) as err:
            await op.result_async(timeout=APPLY)
        assert err.value.operation.state == OperationState.FAILED

    asyncio.run(main())


def test_gather_runs_calls_concurrently(gateway: Gateway) -> None:
    client = async_client(gateway)

    async def main() -> None:
        names = [unique("gather") for _ in range(4)]
        created = await asyncio.gather(*(client.create_sandbox(n) for n in names))
        assert sorted(c.sandbox.name for c in created) == sorted(names)
        listed = {s.name for s in await client.list_sandboxes()}
        assert set(names) <= listed

    asyncio.run(main())
