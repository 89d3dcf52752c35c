"""The whole surface of the Rust client core, its defaults and its context
managers: every call of `openshell-sdk` is a method of both clients, the
calls the Node SDK had first work here too, the endpoint and token come from
the CLI's environment variables, and `with`/`async with` close the client."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from conftest import POLICY, REPO, Gateway, policy_with_port, unique
from openshell import (
    AsyncClient,
    Client,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PolicySource,
    SandboxLifecycle,
    SettingScope,
    Target,
    Unauthenticated,
    Unavailable,
)

# Core calls whose Python name differs, and why; `None`: not a method.
RENAMED = {
    "connect": None,  # the constructor: Client(endpoint, token, ...)
    "wait_for_apply": "wait_for_apply",  # the stream: on_progress gets each update
    "wait_for_apply_final": "wait_for_apply",  # the final operation, WaitTimeout on a deadline
    # Token administration is the CLI's (`openshell token`) and the Rust SDK's only.
    "create_token": None,
    "list_tokens": None,
    "revoke_token": None,
}


def core_calls() -> set[str]:
    """Every `pub async fn` of the Rust client core."""
    sources = [REPO / "sdk-rs/src/client.rs", REPO / "sdk-rs/src/wait.rs"]
    sources += sorted((REPO / "sdk-rs/src/calls").glob("*.rs"))
    names = set()
    for path in sources:
        names |= set(re.findall(r"pub async fn (\w+)", Path(path).read_text()))
    return names


def test_every_core_call_is_a_method_of_both_clients() -> None:
    calls = core_calls()
    assert {"update_config", "get_provider", "set_sandbox_lifecycle"} <= calls, calls
    for name in sorted(calls):
        python = RENAMED.get(name, name)
        if python is None:
            continue
        for cls in (Client, AsyncClient):
            assert callable(getattr(cls, python, None)), f"{cls.__name__} lacks {python} (core: {name})"


def test_providers_get_list_update_detach_delete(client: Client) -> None:
    sandbox = client.create_sandbox(unique("prov"), policy=POLICY).sandbox
    name = unique("gh")
    client.create_provider(name, "github", env={"GITHUB_ORG": "acme"}, credentials={"GITHUB_TOKEN": "a"})

    got = client.get_provider(name)
    assert (got.name, got.provider_type, got.env) == (name, "github", {"GITHUB_ORG": "acme"})
    assert got.id in {p.id for p in client.list_providers()}
    assert client.get_provider(got.id, workspace=got.workspace).name == name

    updated = client.update_provider(name, env={"GITHUB_ORG": "other"}, credentials={"GITHUB_TOKEN": "b"})
    assert updated.provider.env == {"GITHUB_ORG": "other"}
    assert updated.provider.revision > got.revision

    client.attach_provider(sandbox.name, name)
    with pytest.raises(FailedPrecondition):
        client.delete_provider(name)
    detached = client.detach_provider(sandbox.name, name)
    assert detached.sandbox.providers == []
    assert client.delete_provider(name) is None
    with pytest.raises(NotFound):
        client.get_provider(name)
    assert name not in {p.name for p in client.list_providers(workspace=sandbox.workspace)}


def test_sandbox_stop_and_start(client: Client) -> None:
    name = unique("stop")
    client.create_sandbox(name, policy=POLICY)
    stopped = client.set_sandbox_lifecycle(name, SandboxLifecycle.STOPPED)
    assert stopped.lifecycle is SandboxLifecycle.STOPPED
    assert client.get_sandbox(name).lifecycle is SandboxLifecycle.STOPPED
    started = client.set_sandbox_lifecycle(name, "PENDING")
    assert started.lifecycle is SandboxLifecycle.PENDING
    with pytest.raises(InvalidArgument):
        client.set_sandbox_lifecycle(name, "SOMETIMES")


def test_policy_get_and_history(client: Client) -> None:
    name = unique("pol")
    client.create_sandbox(name, policy=POLICY)
    second = client.update_config(name, policy=policy_with_port(8443)).operation
    assert second.policy_revision == 2

    latest = client.get_sandbox_policy(name)
    assert latest.policy.revision == 2
    assert latest.policy.policy_yaml is not None and "8443" in latest.policy.policy_yaml
    assert latest.policy.operation_id == second.id
    assert latest.effective_source is PolicySource.SANDBOX
    assert latest.global_policy_revision == 0

    first = client.get_sandbox_policy(name, 1)
    assert first.policy.revision == 1 and first.policy.policy_hash != latest.policy.policy_hash

    history = client.list_sandbox_policies(name)
    assert [p.revision for p in history] == [2, 1]
    assert all(p.policy_yaml is None for p in history)
    assert [p.revision for p in client.list_sandbox_policies(name, limit=1)] == [2]
    with pytest.raises(InvalidArgument):
        client.get_sandbox_policy(name, 0)


def test_global_policy_get_and_history(client: Client) -> None:
    before = [p.revision for p in client.list_global_policies()]
    written = client.update_config(Target.global_(), policy=policy_with_port(7443)).operation
    try:
        latest = client.get_global_policy()
        assert latest.policy.revision == written.global_policy_revision
        assert latest.policy.sandbox_id is None
        assert latest.policy.policy_yaml is not None and "7443" in latest.policy.policy_yaml
        assert latest.effective_source is PolicySource.GLOBAL
        assert latest.global_policy_revision == written.global_policy_revision
        assert client.get_global_policy(written.global_policy_revision).policy.operation_id == written.id
    finally:
        cleared = client.update_config(Target.global_(), clear_global_policy=True).operation
    history = client.list_global_policies()
    assert [p.revision for p in history] == [cleared.global_policy_revision, written.global_policy_revision, *before]
    assert history[0].policy_hash == "" and history[1].policy_hash != ""
    assert [p.revision for p in client.list_global_policies(limit=1)] == [cleared.global_policy_revision]
    with pytest.raises(InvalidArgument):
        client.get_global_policy(0)


def test_settings_get_and_keys(client: Client) -> None:
    name = unique("set")
    client.create_sandbox(name, policy=POLICY)
    client.update_config(name, settings={"log_level": "debug"})

    keys = {d.key: d for d in client.list_setting_definitions()}
    assert "log_level" in keys and keys["log_level"].kind in {"enum", "string"}
    assert "debug" in keys["log_level"].allowed_values

    stored = client.get_settings(name)
    assert stored.scope is SettingScope.SANDBOX
    assert [(s.key, s.value, s.scope) for s in stored.values] == [("log_level", "debug", SettingScope.SANDBOX)]
    effective = {s.key: s for s in stored.effective}
    assert effective["log_level"].value == "debug"
    assert set(effective) == set(keys)
    assert client.get_settings(Target.global_()).scope is SettingScope.GLOBAL


def test_endpoint_and_token_default_to_the_cli_environment(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("OPENSHELL_GATEWAY", gateway.endpoint)
    monkeypatch.setenv("OPENSHELL_TOKEN", gateway.token)
    client = Client()
    assert client.endpoint == gateway.endpoint
    assert client.gateway_info().config_delivery_mode == "push"
    assert asyncio.run(AsyncClient().gateway_info()).config_delivery_mode == "push"

    # Arguments win over the environment.
    with pytest.raises(Unauthenticated):
        Client(token="not-the-token").gateway_info()

    monkeypatch.setenv("OPENSHELL_CA_CERT", str(tmp_path / "missing.pem"))
    with pytest.raises(InvalidArgument, match="OPENSHELL_CA_CERT"):
        Client()

    for name in ("OPENSHELL_GATEWAY", "OPENSHELL_TOKEN", "OPENSHELL_CA_CERT"):
        monkeypatch.delenv(name)
    assert Client().endpoint == "http://127.0.0.1:7070"
    monkeypatch.setenv("OPENSHELL_GATEWAY", "")
    assert Client().endpoint == "http://127.0.0.1:7070"


def test_clients_are_context_managers(gateway: Gateway) -> None:
    with Client(gateway.endpoint, gateway.token) as client:
        assert client.gateway_info().config_delivery_mode == "push"
    with pytest.raises(RuntimeError, match="closed"):
        client.gateway_info()

    async def main() -> AsyncClient:
        async with AsyncClient(gateway.endpoint, gateway.token) as aclient:
            assert (await aclient.gateway_info()).config_delivery_mode == "push"
            assert (await aclient.get_settings(Target.global_())).scope is SettingScope.GLOBAL
        return aclient

    closed = asyncio.run(main())
    with pytest.raises(RuntimeError, match="closed"):
        closed.gateway_info()


def test_an_unreachable_gateway_is_named_in_the_error() -> None:
    with socket_port() as port:
        endpoint = f"http://127.0.0.1:{port}"
        with pytest.raises(Unavailable) as caught:
            Client(endpoint, timeout=5).gateway_info()
    assert str(caught.value).startswith(f"cannot reach the gateway at {endpoint}: "), caught.value


class socket_port:
    """A port nothing listens on: bound, never listening, while in use."""

    def __enter__(self) -> int:
        import socket

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        return int(self.sock.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self.sock.close()
