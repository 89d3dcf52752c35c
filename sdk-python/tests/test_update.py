"""`update_config` and waits against a real gateway and real supervisors."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

import pytest

from conftest import APPLY, POLICY, Gateway, policy_with_port, unique
from openshell import (
    ApplyOutcome,
    Client,
    InvalidArgument,
    Operation,
    OperationFailed,
    OperationState,
    Target,
    TargetKind,
    UpdateMode,
    WaitTimeout,
)

RANK = {OperationState.PENDING: 0, OperationState.DELIVERED: 1}


def assert_in_order(seen: list[Operation], final: Operation) -> None:
    """Updates of one operation, each no older than the one before, ending in `final`."""
    assert seen, "no progress reported"
    assert {op.id for op in seen} == {final.id}
    ranks = [RANK.get(op.state, 2) for op in seen]
    assert ranks == sorted(ranks), [op.state for op in seen]
    assert seen[-1].state == final.state
    assert not any(op.is_terminal for op in seen[:-1])


def test_commit_only_with_idempotency_key_replays_the_same_operation(client: Client) -> None:
    created = client.create_sandbox(unique("idem"), policy=POLICY)
    name = created.sandbox.name
    key = unique("deploy")
    change = policy_with_port(8443)

    first = client.update_config(
        Target.sandbox(name), policy=change, mode=UpdateMode.COMMIT_ONLY, idempotency_key=key
    )
    assert not first.idempotent_replay
    assert first.operation.state == OperationState.PENDING
    assert first.operation.policy_revision == 2
    assert first.operation.idempotency_key == key
    assert first.operation.target_kind == TargetKind.SANDBOX
    assert first.operation.target == created.sandbox.id

    retry = client.update_config(Target.sandbox(name), policy=change, idempotency_key=key)
    assert retry.idempotent_replay
    assert retry.operation.id == first.operation.id
    assert retry.operation.policy_revision == 2
    assert client.get_sandbox(name).policy_revision == 2, "the retry wrote nothing"

    with pytest.raises(InvalidArgument) as err:
        client.update_config(name, policy=policy_with_port(9443), idempotency_key=key)
    assert [v.field for v in err.value.violations] == ["request_id"]


def test_wait_for_apply_mode_returns_applied_with_exact_revision(gateway: Gateway) -> None:
    created = gateway.running_sandbox("wait")
    client = gateway.client()

    result = client.update_config(
        Target.sandbox(created.sandbox.name),
        policy=policy_with_port(8443),
        mode=UpdateMode.WAIT_FOR_APPLY,
        wait_timeout=APPLY,
    )
    op = result.operation
    assert op.state == OperationState.APPLIED, op
    assert op.outcome == ApplyOutcome.APPLIED
    assert op.policy_revision == 2
    assert not op.wait_timed_out
    assert op.is_terminal
    assert op.completed_at is not None
    assert client.get_sandbox(created.sandbox.id).policy_revision == 2
    assert op.result() is not None, "a terminal operation resolves without waiting"


def test_rejected_change_fails_and_result_raises(gateway: Gateway) -> None:
    created = gateway.running_sandbox(
        "picky", on_apply='grep -q 9999 "$OPENSHELL_POLICY_FILE" && exit 3 || exit 0'
    )
    client = gateway.client()

    op = client.update_config(created.sandbox.name, policy=policy_with_port(9999)).operation
    with pytest.raises(OperationFailed) as err:
        op.result(timeout=APPLY)
    failed = err.value.operation
    assert err.value.operation_id == op.id
    assert err.value.code == "OPERATION_FAILED"
    assert failed.state == OperationState.FAILED
    # The default policy_validation_failure_mode is fail_closed, as upstream OpenShell's.
    assert failed.outcome == ApplyOutcome.FAILED_CLOSED
    assert failed.error is not None and "on-apply" in failed.error

    # wait_for_apply reports any final state without raising.
    assert client.wait_for_apply(op.id).state == OperationState.FAILED
    assert client.get_operation(op.id).state == OperationState.FAILED

    # The supervisor kept working: a later good change applies.
    good = client.update_config(
        created.sandbox.name, policy=policy_with_port(8443), mode="wait-for-apply"
    )
    assert good.operation.state == OperationState.APPLIED


def test_wait_timeout_surfaces_the_operation_which_later_applies(gateway: Gateway) -> None:
    client = gateway.client()
    created = client.create_sandbox(unique("late"), policy=POLICY)

    result = client.update_config(
        created.sandbox.name,
        settings={"log_level": "debug"},
        mode=UpdateMode.WAIT_FOR_APPLY,
        wait_timeout=0.3,
    )
    op = result.operation
    assert op.wait_timed_out
    assert not op.is_terminal

    with pytest.raises(WaitTimeout) as err:
        client.wait_for_apply(op.id, timeout=0.3)
    assert err.value.operation_id == op.id
    assert not err.value.operation.is_terminal
    assert isinstance(err.value, TimeoutError)

    with pytest.raises(WaitTimeout):
        op.result(timeout=0.3)

    gateway.start_supervisor(created)
    applied = err.value.operation.result(timeout=APPLY)
    assert applied.state == OperationState.APPLIED
    assert client.get_operation(op.id).state == OperationState.APPLIED


def test_progress_callbacks_fire_in_order(gateway: Gateway) -> None:
    created = gateway.running_sandbox("progress")
    client = gateway.client()
    op = client.update_config(created.sandbox.id, policy=policy_with_port(8443)).operation

    seen: list[Operation] = []
    final = client.wait_for_apply(op.id, timeout=APPLY, on_progress=seen.append)
    assert final.state == OperationState.APPLIED
    assert_in_order(seen, final)

    # On a terminal operation, result() reports it once and returns at once.
    again: list[Operation] = []
    assert final.result(on_progress=again.append).id == op.id
    assert [o.state for o in again] == [OperationState.APPLIED]


def test_progress_callback_error_ends_the_wait_not_the_operation(gateway: Gateway) -> None:
    client = gateway.client()
    created = client.create_sandbox(unique("boom"), policy=POLICY)
    op = client.update_config(created.sandbox.id, policy=policy_with_port(8443)).operation

    def explode(update: Operation) -> None:
        raise RuntimeError(f"callback saw {update.state}")

    with pytest.raises(RuntimeError, match="callback saw PENDING"):
        client.wait_for_apply(op.id, timeout=APPLY, on_progress=explode)

    gateway.start_supervisor(created)
    assert client.wait_for_apply(op.id, timeout=APPLY).state == OperationState.APPLIED


def test_blocking_wait_releases_the_gil(gateway: Gateway) -> None:
    client = gateway.client()
    created = client.create_sandbox(unique("gil"), policy=POLICY)
    op = created.operation
    assert op is not None
    waiting = threading.Event()
    outcome: list[BaseException] = []

    def wait() -> None:
        try:
            client.wait_for_apply(op.id, timeout=5.0, on_progress=lambda _: waiting.set())
        except BaseException as err:  # noqa: BLE001 - handed to the main thread
            outcome.append(err)

    thread = threading.Thread(target=wait)
    thread.start()
    assert waiting.wait(timeout=APPLY)
    # The other thread is parked in Rust; this thread still runs Python and calls.
    assert client.get_operation(op.id).state == OperationState.PENDING
    thread.join()
    assert len(outcome) == 1 and isinstance(outcome[0], WaitTimeout)


def test_fleet_change_reaches_every_supervisor(fresh_gateway: Gateway) -> None:
    for i in range(3):
        fresh_gateway.running_sandbox(f"fleet{i}")
    client = fresh_gateway.client()

    seen: list[Operation] = []
    result = client.update_config(
        Target.global_(),
        settings={"log_level": "debug"},
        mode=UpdateMode.WAIT_FOR_APPLY,
        threshold=1.0,
        wait_timeout=APPLY,
    )
    op = result.operation
    assert op.target_kind == TargetKind.GLOBAL
    assert op.fleet is not None, op
    assert op.fleet.targets == 3
    assert op.fleet.applied == 3, op
    assert op.threshold_met(1.0)

    final = client.wait_for_apply(op.id, timeout=APPLY, threshold=1.0, on_progress=seen.append)
    assert final.fleet is not None and final.fleet.applied == final.fleet.targets == 3
    assert seen[-1].fleet == final.fleet


def test_blocking_calls_work_inside_a_progress_callback(gateway: Gateway) -> None:
    created = gateway.running_sandbox("nested")
    client = gateway.client()
    op = client.update_config(created.sandbox.id, policy=policy_with_port(8443)).operation

    fetched: list[Operation] = []
    final = client.wait_for_apply(
        op.id, timeout=APPLY, on_progress=lambda update: fetched.append(client.get_operation(update.id))
    )
    assert final.state == OperationState.APPLIED
    assert fetched and all(f.id == op.id for f in fetched)


def test_ctrl_c_interrupts_a_blocking_wait(gateway: Gateway) -> None:
    client = gateway.client()
    created = client.create_sandbox(unique("sigint"), policy=POLICY)
    op = created.operation
    assert op is not None
    # A test runner started as a background job of a non-interactive shell passes SIGINT on
    # ignored, and Python then keeps it ignored: the child installs Python's own handler, as
    # an interactive program has it, so the test checks the SDK rather than how it was started.
    # If the child still runs 20 s after its last progress report, faulthandler prints every
    # thread's stack: a wait that missed the interrupt and an exit that hangs look alike
    # from outside.
    script = (
        "import faulthandler, signal, sys\n"
        "from openshell import Client\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "client = Client(sys.argv[1], sys.argv[2])\n"
        "def ready(update):\n"
        "    faulthandler.dump_traceback_later(20)\n"
        "    print('waiting', flush=True)\n"
        "try:\n"
        "    client.wait_for_apply(sys.argv[3], timeout=600, on_progress=ready)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True)\n"
        "    sys.exit(7)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script, gateway.endpoint, gateway.token, op.id],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "waiting"
        child.send_signal(signal.SIGINT)
        # Far below the 600 s wait: only the interrupt can end it this soon.
        try:
            out, err = child.communicate(timeout=APPLY)
        except subprocess.TimeoutExpired:
            child.kill()
            out, err = child.communicate()
            pytest.fail(
                f"the child did not end {APPLY} s after Ctrl-C\nstdout: {out!r}\nstderr:\n{err}"
            )
        assert child.returncode == 7, f"stdout: {out!r}\nstderr:\n{err}"
        assert out.strip() == "interrupted"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
