"""Checked by `mypy --strict` in test_typing.py, never run: code a user
would write, so the stubs must type every name and call in it."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone

import openshell
from openshell import (
    AsyncClient,
    Client,
    DryRunResult,
    FleetProgress,
    InvalidArgument,
    Operation,
    OperationFailed,
    OperationState,
    Target,
    UpdateMode,
    PolicyChange,
    PolicyDiff,
    PolicyEdits,
    PolicyRevision,
    PolicySource,
    Provider,
    Sandbox,
    SandboxLifecycle,
    SandboxPolicy,
    ScopeSettings,
    SettingDefinition,
    SettingScope,
    SettingDiff,
    UpdateResult,
    WaitTimeout,
)


def blocking(client: Client, policy: str) -> OperationState:
    created = client.create_sandbox("demo", workspace="team", policy=policy)
    credential: str = created.supervisor_credential
    assert credential
    first: Operation | None = created.operation
    try:
        result: UpdateResult = client.update_config(
            Target.sandbox("team/demo"),
            policy=policy,
            settings={"log_level": "debug", "verbose": True, "limit": 3},
            delete_settings=["old"],
            mode=UpdateMode.WAIT_FOR_APPLY,
            idempotency_key="deploy-1",
            wait_timeout=120.0,
        )
    except InvalidArgument as err:
        for violation in err.violations:
            print(violation.field, violation.message)
        raise
    op = result.operation
    kept: list[str] = result.kept_static_sections
    edits: PolicyEdits = {"add_endpoints": ["api.github.com:443:read-only"], "binaries": ["/usr/bin/gh"]}
    edited = client.update_config(
        "team/demo", policy_edits=edits, expected_revision=op.policy_revision
    )
    notes: list[str] = edited.merge_notes
    print(notes, client.update_config("demo", policy_edits={"rule_name": "gh"}, validate_only=True).merge_notes)
    checked: DryRunResult = client.update_config(
        "team/demo", policy=policy, settings={"log_level": "debug"}, validate_only=True
    )
    diff: PolicyDiff | None = checked.policy_diff
    if diff is not None and not diff.is_empty():
        changes: list[PolicyChange] = diff.changed_policies
        print(diff.added_policies, [(c.name, c.added_endpoints) for c in changes], kept)
    settings: list[SettingDiff] = checked.setting_changes
    print([(s.key, s.old_value, s.new_value) for s in settings], checked.operation)
    if op.wait_timed_out:
        try:
            op = client.wait_for_apply(op.id, timeout=60, on_progress=lambda o: print(o.state))
        except WaitTimeout as err:
            print("still waiting on", err.operation_id, err.operation.state)
            raise
    try:
        op.result(timeout=30.0)
    except OperationFailed as err:
        print(err.operation.error, err.code)
    fleet: FleetProgress | None = client.update_config(
        Target.global_(), settings={"log_level": "info"}, threshold=0.95
    ).operation.fleet
    if fleet is not None:
        print(f"{fleet.applied}/{fleet.targets}")
    for pending in client.list_operations(sandbox="demo", states=[OperationState.PENDING, "delivered"]):
        print(pending.id, pending.to_dict()["state"])
    inspection = client.inspect_session("demo")
    print(inspection.hints, [c.component for c in inspection.components], first)
    print(client.gateway_info().version, [s.mode for s in client.list_sessions()])
    write = client.create_provider(
        "gh", "github", credentials={"TOKEN": "x"}, expires_at=datetime.now(timezone.utc)
    )
    print(write.provider.credential_names, client.attach_provider("demo", "gh").operation)
    print(client.delete_sandbox("demo").cancelled_operations, openshell.__version__)
    stopped: Sandbox = client.set_sandbox_lifecycle("demo", SandboxLifecycle.STOPPED)
    provider: Provider = client.get_provider("gh", workspace="team")
    renewed = client.update_provider("gh", env={"ORG": "acme"}, expires_at=None)
    print(stopped.lifecycle, provider.env, renewed.provider.revision, client.list_providers())
    client.detach_provider("demo", "gh")
    client.delete_provider("gh")
    current: SandboxPolicy = client.get_sandbox_policy("demo", 2)
    history: list[PolicyRevision] = client.list_sandbox_policies("demo", limit=10)
    print(current.effective_source is PolicySource.GLOBAL, [p.revision for p in history])
    stored: ScopeSettings = client.get_settings(Target.workspace("team"))
    values: list[bool | int | str | None] = [s.value for s in stored.effective]
    keys: list[SettingDefinition] = client.list_setting_definitions()
    print(stored.scope is SettingScope.SANDBOX, values, [k.default_value for k in keys])
    return op.state


def context_managers() -> None:
    with Client() as client:
        print(client.gateway_info().version)
    client.close()

    async def main() -> str:
        async with AsyncClient(token="t") as aclient:
            settings = await aclient.get_settings("demo")
            policy = await aclient.get_sandbox_policy("demo")
            return f"{settings.revision} {policy.policy.revision}"

    print(asyncio.run(main()))


async def coroutines(client: AsyncClient) -> int:
    seen: list[Operation] = []

    async def on_progress(op: Operation) -> None:
        seen.append(op)

    result = await client.update_config(
        "demo", settings={"log_level": "debug"}, mode="commit-only"
    )
    preview = await client.update_config("demo", settings={"log_level": "info"}, validate_only=True)
    print(preview.setting_changes, preview.kept_static_sections)
    task = asyncio.create_task(client.wait_for_apply(result.operation.id, on_progress=on_progress))
    final: Operation = await task
    again: Operation = await final.result_async(timeout=1.0)
    sandboxes = await client.list_sandboxes(workspace="team")
    return len(seen) + len(sandboxes) + again.policy_revision


if __name__ == "__main__":
    print(blocking(Client("http://127.0.0.1:7070", "token", timeout=30), "version: 1"))
    print(asyncio.run(coroutines(AsyncClient("http://127.0.0.1:7070", "token"))))
