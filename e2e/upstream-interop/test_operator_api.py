"""Operator calls of `openshell.v1.OpenShell` made with upstream's own stubs.

Every request and response here is built and parsed by the generated modules
of upstream's PyPI package `openshell` (0.1.5); this project's CLI is used
only to create sandboxes, and its supervisor only to apply what the gateway
delivers. A field this gateway numbered or typed differently from upstream's
release shows up as a decode error or a wrong value.
"""

from __future__ import annotations

import uuid

import grpc
import pytest
from conftest import TIMEOUT, assert_latest_revision, eventually, rpc_error, wait_loaded
from openshell._proto import datamodel_pb2, openshell_pb2 as pb, sandbox_pb2 as spb

def typed_policy(github_port: int) -> spb.SandboxPolicy:
    """A policy built field by field with upstream's typed messages, the
    endpoint modes as upstream's enums."""
    return spb.SandboxPolicy(
        version=1,
        filesystem=spb.FilesystemPolicy(
            include_workdir=True,
            read_only=["/usr", "/lib", "/etc"],
            read_write=["/sandbox", "/tmp"],
        ),
        landlock=spb.LandlockPolicy(compatibility="best_effort"),
        process=spb.ProcessPolicy(run_as_user="sandbox", run_as_group="sandbox"),
        network_policies={
            "github": spb.NetworkPolicyRule(
                name="github-api",
                endpoints=[
                    spb.NetworkEndpoint(
                        host="api.github.com",
                        port=github_port,
                        protocol="rest",
                        enforcement=spb.NETWORK_ENFORCEMENT_MODE_ENFORCE,
                        rules=[spb.L7Rule(allow=spb.L7Allow(method="GET", path="/repos/**"))],
                        deny_rules=[
                            spb.L7DenyRule(method="POST", path="/repos/*/*/issues/*/lock")
                        ],
                    )
                ],
                binaries=[spb.NetworkBinary(path="/usr/bin/gh")],
            ),
            "pypi": spb.NetworkPolicyRule(
                endpoints=[
                    spb.NetworkEndpoint(
                        host="pypi.org",
                        ports=[443, 8443],
                        protocol="tcp",
                        tls=spb.NETWORK_TLS_MODE_SKIP,
                        allowed_ips=["10.0.5.0/24"],
                    )
                ],
                binaries=[spb.NetworkBinary(path="/usr/bin/pip")],
            ),
        },
    )


def test_health_answers_without_a_token(anonymous_stub):
    health = anonymous_stub.Health(pb.HealthRequest(), timeout=TIMEOUT)

    assert health.status == pb.SERVICE_STATUS_HEALTHY
    assert health.version


def test_gateway_info_needs_the_operator_token_and_reports_health(stub, anonymous_stub):
    refused = rpc_error(anonymous_stub.GetGatewayInfo, pb.GetGatewayInfoRequest())
    assert refused.code() == grpc.StatusCode.UNAUTHENTICATED, refused.details()

    info = stub.GetGatewayInfo(pb.GetGatewayInfoRequest(), timeout=TIMEOUT)
    assert info.status == pb.SERVICE_STATUS_HEALTHY
    assert info.gateway_version
    health = stub.Health(pb.HealthRequest(), timeout=TIMEOUT)
    assert info.gateway_version == health.version


def test_get_sandbox_names_it_and_turns_ready_once_its_supervisor_runs(gateway, stub):
    sandbox = gateway.create_sandbox("ready")

    got = stub.GetSandbox(pb.GetSandboxRequest(name=sandbox.name), timeout=TIMEOUT).sandbox
    assert got.metadata.name == sandbox.name
    assert got.metadata.id == sandbox.id
    assert got.metadata.workspace == "default"
    assert got.metadata.HasField("created_time")
    # No supervisor has ever connected, so it cannot be ready yet.
    assert got.status.phase == pb.SANDBOX_PHASE_PROVISIONING

    # The same sandbox through upstream's explicit workspace selector.
    scoped = stub.GetSandbox(
        pb.GetSandboxRequest(
            workspace_scope=datamodel_pb2.WorkspaceSelector(workspace="default"),
            name=sandbox.name,
        ),
        timeout=TIMEOUT,
    ).sandbox
    assert scoped.metadata.id == sandbox.id

    gateway.start_supervisor(sandbox)

    ready = eventually(
        lambda: stub.GetSandbox(pb.GetSandboxRequest(name=sandbox.name), timeout=TIMEOUT).sandbox,
        lambda got: got.status.phase == pb.SANDBOX_PHASE_READY,
        f"{sandbox.name} in SANDBOX_PHASE_READY",
        context=lambda: gateway.logs(sandbox),
    )
    assert ready.metadata.id == sandbox.id


def test_get_sandbox_of_an_unknown_name_is_not_found(stub):
    err = rpc_error(stub.GetSandbox, pb.GetSandboxRequest(name="no-such-sandbox"))

    assert err.code() == grpc.StatusCode.NOT_FOUND, err.details()
    assert "no-such-sandbox" in err.details()


def test_list_sandboxes_pages_through_every_sandbox_once(gateway, stub):
    for _ in range(3):
        gateway.create_sandbox("list")
    expected = {s.name: s.id for s in gateway.sandboxes}

    seen: list[tuple[str, str]] = []
    token = ""
    # One page per sandbox, plus the last (possibly empty) one; more means a loop.
    for _ in range(len(expected) + 2):
        page = stub.ListSandboxes(
            pb.ListSandboxesRequest(page_size=1, page_token=token), timeout=TIMEOUT
        )
        assert len(page.sandboxes) <= 1, page
        seen += [(s.metadata.name, s.metadata.id) for s in page.sandboxes]
        token = page.next_page_token
        if not token:
            break
    else:
        pytest.fail(f"ListSandboxes still returned a next_page_token after {len(seen)} sandboxes")

    assert sorted(seen) == sorted(expected.items())


def test_list_sandboxes_refuses_a_label_selector(stub):
    err = rpc_error(stub.ListSandboxes, pb.ListSandboxesRequest(label_selector="team=web"))

    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    assert "label_selector" in err.details()


def test_list_sandboxes_refuses_a_negative_page_size(stub):
    err = rpc_error(stub.ListSandboxes, pb.ListSandboxesRequest(page_size=-1))

    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    assert "page_size" in err.details()


def test_typed_policy_is_loaded_by_the_supervisor_and_a_replay_is_idempotent(gateway, stub):
    sandbox = gateway.create_sandbox("policy")
    gateway.start_supervisor(sandbox)
    policy = typed_policy(github_port=443)
    request = pb.UpdateConfigRequest(
        sandbox=sandbox.name, policy=policy, request_id=str(uuid.uuid4())
    )

    written = stub.UpdateConfig(request, timeout=TIMEOUT)
    assert written.version >= 1
    assert written.policy_hash

    status = wait_loaded(gateway, stub, sandbox, written.version)
    assert status.revision.version == written.version
    assert status.revision.policy_hash == written.policy_hash
    # Every typed field came back as upstream's stubs wrote it.
    assert status.revision.policy == policy

    replay = stub.UpdateConfig(request, timeout=TIMEOUT)
    assert (replay.version, replay.policy_hash) == (written.version, written.policy_hash)
    assert_latest_revision(stub, sandbox.name, written.version)

    # An identical policy is no change even under a new key, so the replay
    # above alone cannot tell the key was honoured. After a newer revision,
    # a replay that were taken for a new write would add a third revision.
    newer = stub.UpdateConfig(
        pb.UpdateConfigRequest(
            sandbox=sandbox.name, policy=typed_policy(8443), request_id=str(uuid.uuid4())
        ),
        timeout=TIMEOUT,
    )
    assert newer.version > written.version
    late_replay = stub.UpdateConfig(request, timeout=TIMEOUT)
    assert (late_replay.version, late_replay.policy_hash) == (written.version, written.policy_hash)
    assert_latest_revision(stub, sandbox.name, newer.version)

    # The key stays bound to its first request.
    reused = rpc_error(
        stub.UpdateConfig,
        pb.UpdateConfigRequest(
            sandbox=sandbox.name, policy=typed_policy(9443), request_id=request.request_id
        ),
    )
    assert reused.code() == grpc.StatusCode.INVALID_ARGUMENT, reused.details()
    assert request.request_id in reused.details()
    assert_latest_revision(stub, sandbox.name, newer.version)


def test_a_second_typed_policy_replaces_the_first_on_the_running_sandbox(gateway, stub):
    sandbox = gateway.create_sandbox("revise")
    gateway.start_supervisor(sandbox)
    first = stub.UpdateConfig(
        pb.UpdateConfigRequest(
            sandbox=sandbox.name, policy=typed_policy(443), request_id=str(uuid.uuid4())
        ),
        timeout=TIMEOUT,
    )
    wait_loaded(gateway, stub, sandbox, first.version)

    second = stub.UpdateConfig(
        pb.UpdateConfigRequest(
            sandbox=sandbox.name, policy=typed_policy(8443), request_id=str(uuid.uuid4())
        ),
        timeout=TIMEOUT,
    )

    assert second.version > first.version
    assert second.policy_hash != first.policy_hash
    status = wait_loaded(gateway, stub, sandbox, second.version)
    assert status.revision.policy.network_policies["github"].endpoints[0].port == 8443


def test_a_sandbox_setting_is_written_through_update_config(gateway, stub):
    sandbox = gateway.create_sandbox("settings")

    def set_log_level(value: str) -> pb.UpdateConfigResponse:
        return stub.UpdateConfig(
            pb.UpdateConfigRequest(
                sandbox=sandbox.name,
                setting_key="log_level",
                setting_value=spb.SettingValue(string_value=value),
                request_id=str(uuid.uuid4()),
            ),
            timeout=TIMEOUT,
        )

    debug = set_log_level("debug")
    assert debug.settings_revision >= 1

    warn = set_log_level("warn")
    assert warn.settings_revision > debug.settings_revision

    err = rpc_error(
        stub.UpdateConfig,
        pb.UpdateConfigRequest(
            sandbox=sandbox.name,
            setting_key="log_level",
            setting_value=spb.SettingValue(string_value="loud"),
        ),
    )
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    assert "log_level" in err.details()
    # The refused value changed nothing: writing the current value again is no change.
    assert set_log_level("warn").settings_revision == warn.settings_revision


def test_this_projects_own_calls_are_not_served_under_upstreams_service(channel):
    def raw(path: str):
        return channel.unary_unary(
            path, request_serializer=lambda b: b, response_deserializer=lambda b: b
        )

    err = rpc_error(raw("/openshell.v1.OpenShell/GetOperation"), b"")
    assert err.code() == grpc.StatusCode.UNIMPLEMENTED, err.details()

    # The call exists, under this project's own service: the refusal above is
    # about the path, not a gateway that serves no such call at all.
    own = rpc_error(raw("/openshell.v1.ConfigPlane/GetOperation"), b"")
    assert own.code() != grpc.StatusCode.UNIMPLEMENTED, own.details()


def test_policy_history_pages_with_upstreams_tokens(gateway, stub):
    sandbox = gateway.create_sandbox("history")
    for port in (7443, 8443, 9443):
        stub.UpdateConfig(
            pb.UpdateConfigRequest(sandbox=sandbox.name, policy=typed_policy(port)),
            timeout=TIMEOUT,
        )

    first = stub.ListSandboxPolicies(
        pb.ListSandboxPoliciesRequest(sandbox=sandbox.name, page_size=2), timeout=TIMEOUT
    )
    assert [r.version for r in first.revisions] == [3, 2]
    assert all(r.HasField("created_time") for r in first.revisions)
    assert first.next_page_token
    rest = stub.ListSandboxPolicies(
        pb.ListSandboxPoliciesRequest(
            sandbox=sandbox.name, page_size=2, page_token=first.next_page_token
        ),
        timeout=TIMEOUT,
    )
    assert [r.version for r in rest.revisions] == [1]
    assert rest.next_page_token == ""

    negative = rpc_error(
        stub.ListSandboxPolicies, pb.ListSandboxPoliciesRequest(sandbox=sandbox.name, page_size=-1)
    )
    assert negative.code() == grpc.StatusCode.INVALID_ARGUMENT, negative.details()
    assert "page_size" in negative.details()


def test_the_global_policy_is_written_and_read_with_upstreams_global_flag(gateway, stub):
    policy = typed_policy(github_port=7443)
    written = stub.UpdateConfig(pb.UpdateConfigRequest(policy=policy, **{"global": True}), timeout=TIMEOUT)
    try:
        status = stub.GetSandboxPolicyStatus(
            pb.GetSandboxPolicyStatusRequest(**{"global": True}), timeout=TIMEOUT
        )
        assert status.revision.version == written.version
        assert status.revision.policy == policy
        assert status.revision.policy_hash == written.policy_hash
    finally:
        # Upstream's client clears the global policy by deleting its reserved setting.
        cleared = stub.UpdateConfig(
            pb.UpdateConfigRequest(setting_key="policy", delete_setting=True, **{"global": True}),
            timeout=TIMEOUT,
        )
    assert cleared.deleted
    history = stub.ListSandboxPolicies(
        pb.ListSandboxPoliciesRequest(**{"global": True}), timeout=TIMEOUT
    )
    versions = [r.version for r in history.revisions]
    assert versions[:2] == [written.version + 1, written.version], versions
    # The newest revision cleared the global policy: it has no hash, and no policy.
    assert history.revisions[0].policy_hash == ""
    latest = stub.GetSandboxPolicyStatus(
        pb.GetSandboxPolicyStatusRequest(**{"global": True}), timeout=TIMEOUT
    )
    assert not latest.revision.HasField("policy")


def test_a_sandbox_setting_is_deleted_with_upstreams_delete_setting(gateway, stub):
    sandbox = gateway.create_sandbox("unset")
    stub.UpdateConfig(
        pb.UpdateConfigRequest(
            sandbox=sandbox.name,
            setting_key="log_level",
            setting_value=spb.SettingValue(string_value="warn"),
        ),
        timeout=TIMEOUT,
    )
    deleted = stub.UpdateConfig(
        pb.UpdateConfigRequest(sandbox=sandbox.name, setting_key="log_level", delete_setting=True),
        timeout=TIMEOUT,
    )
    assert deleted.deleted
    again = stub.UpdateConfig(
        pb.UpdateConfigRequest(sandbox=sandbox.name, setting_key="log_level", delete_setting=True),
        timeout=TIMEOUT,
    )
    assert not again.deleted
