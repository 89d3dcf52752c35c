"""`update_config(validate_only=True)` and kept static sections against a real gateway: a dry
run checks against the stored policy and writes nothing; a policy that omits static sections
keeps the sandbox's own."""

from __future__ import annotations

import pytest

from conftest import unique
from openshell import Client, DryRunResult, InvalidArgument, Target, UpdateMode, UpdateResult

STATIC = """filesystem_policy:
  read_only: [/usr, /etc]
  read_write: [/tmp]
process:
  run_as_user: sandbox
  run_as_group: sandbox
"""
NETWORK = """network_policies:
  api:
    endpoints:
      - { host: api.example.com, port: 443 }
      - { host: old.example.com, port: 443 }
"""
FULL = "version: 1\n" + STATIC + NETWORK
# Network only: api gains one endpoint and loses another, pypi is new.
NETWORK_ONLY = """version: 1
network_policies:
  api:
    endpoints:
      - { host: api.example.com, port: 443 }
      - { host: new.example.com, port: 8443 }
  pypi:
    endpoints:
      - { host: pypi.org, port: 443 }
"""


def state(client: Client, name: str) -> tuple[int, int, int]:
    sandbox = client.get_sandbox(name)
    operations = client.list_operations(sandbox=name)
    return sandbox.policy_revision, sandbox.settings_revision, len(operations)


def test_validate_only_reports_what_would_change_and_writes_nothing(client: Client) -> None:
    name = client.create_sandbox(unique("dry"), policy=FULL).sandbox.name
    before = state(client, name)
    key = unique("deploy")

    checked = client.update_config(
        Target.sandbox(name),
        policy=NETWORK_ONLY,
        settings={"log_level": "debug"},
        mode=UpdateMode.WAIT_FOR_APPLY,
        idempotency_key=key,
        validate_only=True,
    )
    assert isinstance(checked, DryRunResult)
    assert checked.validate_only
    assert checked.operation is None
    assert not checked.idempotent_replay
    assert checked.kept_static_sections == ["filesystem_policy", "process"]
    diff = checked.policy_diff
    assert diff is not None and not diff.is_empty()
    assert diff.added_policies == ["pypi"]
    assert diff.removed_policies == []
    [change] = diff.changed_policies
    assert change.name == "api"
    assert change.added_endpoints == ["new.example.com:8443"]
    assert change.removed_endpoints == ["old.example.com:443"]
    assert change.changed_endpoints == []
    assert diff.changed_static_sections == []
    assert diff.current_revision == before[0]
    [setting] = checked.setting_changes
    assert (setting.key, setting.old_value, setting.new_value) == ("log_level", None, "debug")
    assert checked.to_dict()["policy_diff"]["added_policies"] == ["pypi"]

    # Nothing was written: no revision, no operation, no setting.
    assert state(client, name) == before

    # The key was not taken: the real write with it commits, and keeps the same sections.
    written = client.update_config(
        Target.sandbox(name), policy=NETWORK_ONLY, settings={"log_level": "debug"}, idempotency_key=key
    )
    assert isinstance(written, UpdateResult)
    assert not written.idempotent_replay
    assert not written.validate_only
    assert written.operation.policy_revision == before[0] + 1
    assert written.kept_static_sections == ["filesystem_policy", "process"]
    # A repeat is a replay of the same request, and says the same.
    again = client.update_config(
        Target.sandbox(name), policy=NETWORK_ONLY, settings={"log_level": "debug"}, idempotency_key=key
    )
    assert again.idempotent_replay
    assert again.operation.id == written.operation.id
    assert again.kept_static_sections == ["filesystem_policy", "process"]


def test_validate_only_refuses_a_changed_static_section_with_its_path(client: Client) -> None:
    name = client.create_sandbox(unique("dry-static"), policy=FULL).sandbox.name
    before = state(client, name)
    with pytest.raises(InvalidArgument) as caught:
        client.update_config(
            Target.sandbox(name),
            policy=FULL.replace("run_as_user: sandbox", "run_as_user: '1500'"),
            validate_only=True,
        )
    assert [v.field for v in caught.value.violations] == ["policy.process"]
    assert state(client, name) == before
