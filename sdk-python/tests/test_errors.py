"""Errors: one exception class per SDK error code, with its details."""

from __future__ import annotations

import pytest

from conftest import POLICY, Gateway, free_port, policy_with_port, unique
from openshell import (
    Client,
    InvalidArgument,
    InvalidArgumentType,
    NotFound,
    OpenShellError,
    Target,
    Unauthenticated,
    Unavailable,
    UpdateMode,
    Violation,
)


def test_bad_policy_names_the_field(client: Client) -> None:
    created = client.create_sandbox(unique("badpol"), policy=POLICY)
    with pytest.raises(InvalidArgument) as err:
        client.update_config(created.sandbox.name, policy=policy_with_port(70000))
    error = err.value
    assert error.code == "INVALID_ARGUMENT"
    assert isinstance(error, ValueError)
    fields = [v.field for v in error.violations]
    assert any(f.endswith("network_policies.github.endpoints[0].port") for f in fields), fields
    assert all(isinstance(v, Violation) and v.message for v in error.violations)


def test_wrong_token_is_unauthenticated(gateway: Gateway) -> None:
    with pytest.raises(Unauthenticated) as err:
        Client(gateway.endpoint, "not-the-token").gateway_info()
    assert err.value.code == "UNAUTHENTICATED"
    with pytest.raises(Unauthenticated):
        Client(gateway.endpoint).list_sandboxes()


def test_unknown_objects_are_not_found(client: Client) -> None:
    with pytest.raises(NotFound) as err:
        client.get_operation("op-00000000-0000-0000-0000-000000000000")
    assert err.value.code == "NOT_FOUND"
    assert isinstance(err.value, LookupError)
    with pytest.raises(NotFound):
        client.get_sandbox(unique("missing"))


def test_unreachable_gateway_is_unavailable() -> None:
    client = Client(f"http://127.0.0.1:{free_port()}", "t")
    with pytest.raises(Unavailable) as err:
        client.gateway_info()
    assert err.value.code == "UNAVAILABLE"


def test_bad_arguments_fail_before_sending(client: Client) -> None:
    with pytest.raises(InvalidArgument) as err:
        client.update_config(Target.global_(), settings={"log_level": "debug"}, threshold=1.5)
    assert [v.field for v in err.value.violations] == ["wait.threshold"]
    with pytest.raises(InvalidArgument) as err:
        client.wait_for_apply("op-x", timeout=-1)
    assert [v.field for v in err.value.violations] == ["timeout"]
    with pytest.raises(InvalidArgument, match="COMMIT_ONLY"):
        client.update_config("x", policy=POLICY, mode="sometimes")
    with pytest.raises(InvalidArgument):
        client.list_operations(states=["NOT_A_STATE"])
    with pytest.raises(InvalidArgument):
        Client("127.0.0.1:7070")
    with pytest.raises(InvalidArgumentType, match="^target: expected a str") as wrong:
        client.update_config(42, policy=POLICY)  # type: ignore[arg-type]
    assert isinstance(wrong.value, TypeError) and wrong.value.code == "INVALID_ARGUMENT"
    assert [v.field for v in wrong.value.violations] == ["target"]
    with pytest.raises(InvalidArgumentType) as wrong:
        client.update_config("x", settings={"log_level": 1.5})  # type: ignore[dict-item]
    assert [v.field for v in wrong.value.violations] == ["settings.log_level"]


def test_unknown_setting_is_invalid(client: Client) -> None:
    created = client.create_sandbox(unique("badset"))
    with pytest.raises(InvalidArgument) as err:
        client.update_config(
            created.sandbox.name, settings={"no_such_key": "x"}, mode=UpdateMode.COMMIT_ONLY
        )
    assert err.value.violations, err.value


def test_every_error_is_an_openshell_error(client: Client) -> None:
    with pytest.raises(OpenShellError):
        client.get_operation("op-00000000-0000-0000-0000-000000000000")
