"""Sandboxes, providers, sessions and the shape of the view objects."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

from conftest import POLICY, Gateway, unique
from openshell import (
    ApplyOutcome,
    Client,
    DeliveryMode,
    OperationState,
    SandboxLifecycle,
    Target,
    TargetKind,
    UpdateMode,
)


def test_sandbox_lifecycle(client: Client) -> None:
    name = unique("life")
    created = client.create_sandbox(name, policy=POLICY)
    assert created.supervisor_credential
    assert created.supervisor_credential not in repr(created)
    assert created.sandbox.lifecycle == SandboxLifecycle.PENDING
    assert created.operation is not None and created.operation.policy_revision == 1

    by_name = client.get_sandbox(name)
    assert by_name.id == created.sandbox.id
    assert client.get_sandbox(f"{by_name.workspace}/{name}").id == by_name.id
    assert name in {s.name for s in client.list_sandboxes()}

    deleted = client.delete_sandbox(name)
    assert deleted.sandbox.lifecycle == SandboxLifecycle.DELETED
    assert deleted.cancelled_operations == 1
    assert created.operation.result().state == OperationState.CANCELLED
    assert name not in {s.name for s in client.list_sandboxes()}
    assert name in {s.name for s in client.list_sandboxes(include_deleted=True)}


def test_provider_create_and_attach(client: Client) -> None:
    created = client.create_sandbox(unique("prov"), policy=POLICY)
    provider_name = unique("gh")
    write = client.create_provider(
        provider_name,
        "github",
        env={"GITHUB_ORG": "acme"},
        credentials={"GITHUB_TOKEN": "ghp_very_secret"},
    )
    provider = write.provider
    assert provider.name == provider_name
    assert provider.env == {"GITHUB_ORG": "acme"}
    assert provider.credential_names == ["GITHUB_TOKEN"]
    assert "ghp_very_secret" not in json.dumps(write.to_dict())

    assert provider.created_at is not None and provider.updated_at == provider.created_at
    assert client.inspect_session(created.sandbox.name).credential_expiry == []

    attached = client.attach_provider(created.sandbox.name, provider_name)
    assert attached.sandbox.providers == [provider_name]
    assert attached.sandbox.attachment_epoch >= 1

    # A provider whose credentials expire: the inspection says when, by name only.
    expiring = unique("exp")
    client.create_provider(
        expiring,
        "github",
        credentials={"EXPIRING_TOKEN": "ghp_short_lived"},
        expires_at=datetime(2031, 1, 1, tzinfo=timezone.utc),
    )
    client.attach_provider(created.sandbox.name, expiring)
    [expiry] = client.inspect_session(created.sandbox.name).credential_expiry
    assert (expiry.name, expiry.provider) == ("EXPIRING_TOKEN", expiring)
    assert expiry.expires_at is not None and expiry.expires_at.startswith("2031-01-01T00:00:00")
    assert "ghp_short_lived" not in repr(expiry) + json.dumps(expiry.to_dict())


def test_sessions_and_operations(gateway: Gateway) -> None:
    created = gateway.running_sandbox("sess")
    client = gateway.client()

    sessions = {s.sandbox_id: s for s in client.list_sessions()}
    assert sessions[created.sandbox.id].mode == DeliveryMode.PUSH

    inspection = client.inspect_session(created.sandbox.name)
    assert inspection.connected
    assert inspection.gateway_mode == "push"
    assert inspection.negotiated_mode == DeliveryMode.PUSH
    assert inspection.sandbox is not None and inspection.sandbox.id == created.sandbox.id
    assert inspection.components

    # The example policy's request_logger is a remote middleware no test supervisor registers;
    # it is fail_open, so the workload started degraded and the supervisor said so.
    deadline = time.monotonic() + 30
    while (readiness := client.inspect_session(created.sandbox.name).runtime_readiness) is None:
        assert time.monotonic() < deadline, "no runtime readiness reported"
        time.sleep(0.1)
    assert readiness.workload_started
    [audit] = readiness.middlewares
    assert (audit.name, audit.implementation) == ("request_audit", "request_logger")
    assert not audit.reachable and not audit.fail_closed and audit.endpoint is None
    assert audit.error is not None and "not registered" in audit.error
    assert readiness.to_dict()["middlewares"][0]["name"] == "request_audit"

    first = created.operation
    assert first is not None
    ops = client.list_operations(sandbox=created.sandbox.id, states=[OperationState.APPLIED])
    assert [op.id for op in ops] == [first.id]
    assert client.list_operations(sandbox=created.sandbox.id, states=["pending"]) == []


def test_views_and_enums() -> None:
    assert OperationState("APPLIED") is OperationState.APPLIED
    assert OperationState.APPLIED == "APPLIED"
    assert str(UpdateMode.WAIT_FOR_APPLY) == "WAIT_FOR_APPLY"
    assert OperationState.FAILED.is_terminal and not OperationState.DELIVERED.is_terminal
    assert ApplyOutcome.FAILED_CLOSED.value == "FAILED_CLOSED"

    assert Target.sandbox("team/demo") == Target.sandbox("demo", workspace="team")
    assert Target.sandbox("team/demo").name == "team/demo"
    assert Target.global_().kind == TargetKind.GLOBAL and Target.global_().name is None
    assert Target.workspace("team").kind == TargetKind.WORKSPACE
    assert repr(Target.workspace("team")) == "Target.workspace('team')"
    assert len({Target.global_(), Target.global_()}) == 1


def test_operation_to_dict_matches_cli_json(client: Client) -> None:
    created = client.create_sandbox(unique("dict"), policy=POLICY)
    op = created.operation
    assert op is not None
    shape = op.to_dict()
    assert shape["id"] == op.id
    assert shape["state"] == "PENDING"
    assert shape["target_kind"] == "SANDBOX"
    assert shape["fleet"] is None
    assert json.loads(json.dumps(shape)) == shape
    assert repr(op).startswith(f"Operation(id='{op.id}', state=PENDING")
