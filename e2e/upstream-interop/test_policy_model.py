"""The policy model as upstream's client sends it.

Every policy of this project's accepted corpus (`core/tests/corpus/accepted`,
documents upstream's schema accepts) is converted the way upstream's client
converts a policy file (`upstream_policy.py`: `port` copied into `ports`, the
endpoint modes as enums, entries named after their keys) and written with
upstream's stubs to a sandbox whose supervisor runs, until upstream's
`GetSandboxPolicyStatus` reports it loaded. Fields this gateway cannot honour
are refused by field path, and a refused write leaves no revision behind.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import grpc
import pytest
import yaml
from conftest import REPO, TIMEOUT, assert_latest_revision, policy_status, rpc_error, wait_loaded
from openshell._proto import openshell_pb2 as pb, sandbox_pb2 as spb
from upstream_policy import sandbox_policy

CORPUS = sorted((REPO / "core" / "tests" / "corpus" / "accepted").glob("*.yaml"))


def write(stub, sandbox: str, policy: spb.SandboxPolicy) -> pb.UpdateConfigResponse:
    return stub.UpdateConfig(
        pb.UpdateConfigRequest(sandbox=sandbox, policy=policy, request_id=str(uuid.uuid4())),
        timeout=TIMEOUT,
    )


def test_the_corpus_is_there():
    # A moved corpus would make the test below pass on nothing.
    assert len(CORPUS) >= 70, CORPUS


@pytest.mark.parametrize("path", CORPUS, ids=lambda path: path.stem)
def test_every_corpus_policy_is_loaded_as_upstreams_client_sends_it(gateway, stub, path: Path):
    # A sandbox each: the static sections are fixed at a sandbox's first revision.
    sandbox = gateway.create_sandbox("corpus")
    policy = sandbox_policy(yaml.safe_load(path.read_text()))

    written = write(stub, sandbox.name, policy)

    assert written.version >= 1, written
    supervisor = gateway.start_supervisor(sandbox)
    try:
        status = wait_loaded(gateway, stub, sandbox, written.version)
        assert status.revision.policy_hash == written.policy_hash
    finally:
        gateway.stop_supervisor(supervisor)


def test_endpoint_modes_come_back_as_the_enums_that_were_sent(gateway, stub):
    sandbox = gateway.create_sandbox("modes")
    policy = spb.SandboxPolicy(
        version=1,
        network_policies={
            "api": spb.NetworkPolicyRule(
                name="api",
                endpoints=[
                    spb.NetworkEndpoint(
                        host="api.example.com",
                        port=443,
                        ports=[443],
                        protocol="rest",
                        enforcement=spb.NETWORK_ENFORCEMENT_MODE_ENFORCE,
                        access=spb.NETWORK_ACCESS_PRESET_READ_ONLY,
                    ),
                    spb.NetworkEndpoint(
                        host="raw.example.com",
                        port=8443,
                        tls=spb.NETWORK_TLS_MODE_SKIP,
                    ),
                ],
                binaries=[spb.NetworkBinary(path="/usr/bin/curl")],
            )
        },
    )

    written = write(stub, sandbox.name, policy)

    revision = policy_status(stub, sandbox.name, written.version).revision
    assert revision.policy == policy


@pytest.mark.parametrize(
    "endpoint, field",
    [
        (
            spb.NetworkEndpoint(
                credential_binding=spb.NetworkCredentialBinding(provider="github")
            ),
            "network_policies.api.endpoints[0].credential_binding",
        ),
        (
            spb.NetworkEndpoint(protocol="mcp", mcp=spb.McpOptions(versions=["2025-06-18"])),
            "network_policies.api.endpoints[0].mcp.versions",
        ),
        (
            spb.NetworkEndpoint(token_grant_owner="someone"),
            "network_policies.api.endpoints[0].token_grant_owner",
        ),
        # An enum value the release does not define (a newer client's, say).
        (spb.NetworkEndpoint(tls=7), "network_policies.api.endpoints[0].tls"),
    ],
    ids=["credential_binding", "mcp_versions", "token_grant_owner", "unknown_tls"],
)
def test_what_this_gateway_cannot_honour_is_refused_by_path_and_writes_nothing(
    gateway, stub, endpoint: spb.NetworkEndpoint, field: str
):
    sandbox = gateway.create_sandbox("refused")
    first = write(
        stub,
        sandbox.name,
        spb.SandboxPolicy(
            version=1,
            network_policies={
                "api": spb.NetworkPolicyRule(
                    endpoints=[spb.NetworkEndpoint(host="api.example.com", port=443)],
                    binaries=[spb.NetworkBinary(path="/usr/bin/curl")],
                )
            },
        ),
    )
    endpoint.host = "api.example.com"
    endpoint.port = 443
    refused = spb.SandboxPolicy(
        version=1,
        network_policies={
            "api": spb.NetworkPolicyRule(
                endpoints=[endpoint], binaries=[spb.NetworkBinary(path="/usr/bin/curl")]
            )
        },
    )

    err = rpc_error(
        stub.UpdateConfig,
        pb.UpdateConfigRequest(sandbox=sandbox.name, policy=refused, request_id=str(uuid.uuid4())),
    )

    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    assert field in err.details()
    assert_latest_revision(stub, sandbox.name, first.version)
