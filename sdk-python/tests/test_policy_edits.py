"""`update_config(policy_edits=..., expected_revision=...)` against a real
gateway: edits in the CLI's forms applied to the sandbox's latest revision on
the gateway, merge notes, malformed edits refused before anything is sent, and
an expected revision that refuses a write whose sandbox moved on."""

from __future__ import annotations

import asyncio

import pytest

from conftest import POLICY, Gateway, unique
from openshell import (
    AsyncClient,
    Client,
    DryRunResult,
    FailedPrecondition,
    InvalidArgument,
    PolicyEdits,
    Target,
    UpdateResult,
)


def revision(client: Client, name: str) -> int:
    return client.get_sandbox_policy(name).policy.revision


def policy_yaml(client: Client, name: str) -> str:
    text = client.get_sandbox_policy(name).policy.policy_yaml
    assert text is not None
    return text


def test_an_added_endpoint_is_a_new_revision_with_the_rule(client: Client) -> None:
    name = client.create_sandbox(unique("edit"), policy=POLICY).sandbox.name
    assert revision(client, name) == 1
    edits: PolicyEdits = {
        "add_endpoints": ["registry.npmjs.org:443:read-only:rest:enforce"],
        "binaries": ["/usr/bin/npm"],
    }

    result = client.update_config(name, policy_edits=edits)
    assert isinstance(result, UpdateResult)
    assert result.operation.policy_revision == 2
    assert result.merge_notes == []
    assert result.to_dict()["merge_notes"] == []

    assert revision(client, name) == 2
    text = policy_yaml(client, name)
    assert "allow_registry_npmjs_org_443" in text and "/usr/bin/npm" in text, text
    # The rest of the policy is the sandbox's own, not a document sent along.
    assert "api.github.com" in text, text


def test_an_allow_rule_on_an_access_preset_returns_a_merge_note(client: Client) -> None:
    name = client.create_sandbox(unique("edit-note"), policy=POLICY).sandbox.name
    client.update_config(name, policy_edits={"add_endpoints": ["registry.npmjs.org:443:read-only:rest"]})

    result = client.update_config(
        Target.sandbox(name), policy_edits={"add_allow": ["registry.npmjs.org:443:post:/-/npm/**"]}
    )
    assert result.operation.policy_revision == 3
    assert any(
        "access preset read-only of endpoint registry.npmjs.org:443 was expanded" in note
        for note in result.merge_notes
    ), result.merge_notes
    assert "merge_notes=[" in repr(result), repr(result)
    assert result.to_dict()["merge_notes"] == result.merge_notes
    assert "/-/npm/**" in policy_yaml(client, name)


def test_a_malformed_edit_is_refused_naming_its_option_and_nothing_is_sent(client: Client) -> None:
    name = client.create_sandbox(unique("edit-bad"), policy=POLICY).sandbox.name
    with pytest.raises(InvalidArgument) as caught:
        client.update_config(name, policy_edits={"add_endpoints": ["npmjs.org"], "remove_rules": [" "]})
    assert [v.field for v in caught.value.violations] == ["add_endpoints[0]", "remove_rules[0]"]
    assert "expected HOST:PORT" in caught.value.violations[0].message
    assert not isinstance(caught.value, TypeError)
    assert revision(client, name) == 1
    assert len(client.list_operations(sandbox=name)) == 1, "only the create's operation"


def test_an_edit_the_gateway_cannot_apply_names_the_merge_operation(client: Client) -> None:
    name = client.create_sandbox(unique("edit-refused"), policy=POLICY).sandbox.name
    with pytest.raises(InvalidArgument) as caught:
        client.update_config(name, policy_edits={"add_deny": ["nowhere.example:443:GET:/x"]})
    fields = [v.field for v in caught.value.violations]
    assert fields == ["merge_operations[0].add_deny_rules"], caught.value.violations
    assert revision(client, name) == 1


def test_a_stale_expected_revision_writes_nothing_and_the_current_one_succeeds(client: Client) -> None:
    name = client.create_sandbox(unique("edit-rev"), policy=POLICY).sandbox.name
    client.update_config(name, policy_edits={"add_endpoints": ["one.example.com:443"]}, expected_revision=1)
    assert revision(client, name) == 2

    with pytest.raises(FailedPrecondition) as caught:
        client.update_config(
            name, policy_edits={"add_endpoints": ["two.example.com:443"]}, expected_revision=1
        )
    assert caught.value.code == "FAILED_PRECONDITION"
    assert "is at revision 2, not the expected 1" in str(caught.value), str(caught.value)
    assert revision(client, name) == 2
    assert "two.example.com" not in policy_yaml(client, name)

    # Read-modify-write: read the revision again and retry against it.
    current = revision(client, name)
    again = client.update_config(
        name, policy_edits={"add_endpoints": ["two.example.com:443"]}, expected_revision=current
    )
    assert again.operation.policy_revision == 3
    assert "two.example.com" in policy_yaml(client, name)
    # A whole document takes an expected revision too.
    with pytest.raises(FailedPrecondition):
        client.update_config(name, policy=POLICY, expected_revision=2)
    assert revision(client, name) == 3


def test_validate_only_with_edits_reports_the_diff_and_writes_nothing(client: Client) -> None:
    name = client.create_sandbox(unique("edit-dry"), policy=POLICY).sandbox.name
    checked = client.update_config(
        name,
        policy_edits={"add_endpoints": ["registry.npmjs.org:443"], "remove_rules": ["pypi"]},
        validate_only=True,
    )
    assert isinstance(checked, DryRunResult)
    diff = checked.policy_diff
    assert diff is not None
    assert diff.added_policies == ["allow_registry_npmjs_org_443"]
    assert diff.removed_policies == ["pypi"]
    assert checked.merge_notes == []
    assert "merge_notes=[]" in repr(checked)
    assert revision(client, name) == 1


def test_the_async_client_takes_the_same_edits(gateway: Gateway) -> None:
    name = gateway.client().create_sandbox(unique("edit-async"), policy=POLICY).sandbox.name

    async def main() -> None:
        async with AsyncClient(gateway.endpoint, gateway.token) as client:
            result = await client.update_config(
                name, policy_edits={"remove_endpoints": ["nowhere.example:443"]}, expected_revision=1
            )
            assert result.merge_notes == ["no endpoint nowhere.example:443 to remove; nothing changed"]
            with pytest.raises(FailedPrecondition):
                await client.update_config(
                    name, policy_edits={"add_endpoints": ["x.example.com:443"]}, expected_revision=7
                )

    asyncio.run(main())
    assert "x.example.com" not in policy_yaml(gateway.client(), name)


def test_edit_keys_and_values_are_checked_by_name() -> None:
    client = Client("http://127.0.0.1:9", "t")
    with pytest.raises(InvalidArgument) as caught:
        client.update_config("demo", policy_edits={"add_endpoint": ["a:1"]})  # type: ignore[typeddict-unknown-key]
    assert [v.field for v in caught.value.violations] == ["policy_edits.add_endpoint"]
    assert "add_endpoints, remove_endpoints" in str(caught.value)
    with pytest.raises(InvalidArgument) as caught:
        client.update_config("demo", policy_edits={"rule_name": 3})  # type: ignore[typeddict-item]
    assert [v.field for v in caught.value.violations] == ["policy_edits.rule_name"]
    assert isinstance(caught.value, TypeError)
    for bad in (0, -1, 2**64):
        with pytest.raises(InvalidArgument) as caught:
            client.update_config("demo", expected_revision=bad)
        assert [v.field for v in caught.value.violations] == ["expected_revision"], bad
        assert not isinstance(caught.value, TypeError)
