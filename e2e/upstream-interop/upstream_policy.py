"""A policy document as upstream's client puts it on the wire.

Upstream's CLI and SDK read a policy file and send it as the typed message
`openshell.sandbox.v1.SandboxPolicy`. This module builds that message from a
document the same way, with upstream's own generated classes, so the suite
sends what an upstream client sends:

- an entry without `name` is named after its map key;
- `port` is copied into `ports` when `ports` is empty (upstream's readers take
  `ports` when it is not empty, so the two always travel together);
- `tls`, `enforcement` and `access` become upstream's enums;
- the `tool:` shorthand becomes `params["name"]`, nested `params` maps dotted
  keys;
- the JSON-RPC body limit, from `mcp` or `json_rpc`, goes to
  `json_rpc_max_body_bytes`;
- a binary's deprecated `harness` is dropped.

A key this module does not know fails the conversion by name, so a field added
to the schema cannot pass the suite unsent.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import struct_pb2
from openshell._proto import sandbox_pb2 as spb

TLS = {
    "skip": spb.NETWORK_TLS_MODE_SKIP,
    "terminate": spb.NETWORK_TLS_MODE_TERMINATE,
    "passthrough": spb.NETWORK_TLS_MODE_PASSTHROUGH,
}
ENFORCEMENT = {
    "enforce": spb.NETWORK_ENFORCEMENT_MODE_ENFORCE,
    "audit": spb.NETWORK_ENFORCEMENT_MODE_AUDIT,
}
ACCESS = {
    "read-only": spb.NETWORK_ACCESS_PRESET_READ_ONLY,
    "read-write": spb.NETWORK_ACCESS_PRESET_READ_WRITE,
    "full": spb.NETWORK_ACCESS_PRESET_FULL,
}

# Endpoint keys copied as they are: upstream's message field has the
# document's name and type.
PLAIN_ENDPOINT_KEYS = {
    "host",
    "path",
    "protocol",
    "allowed_ips",
    "allow_encoded_slash",
    "persisted_queries",
    "graphql_max_body_bytes",
    "websocket_credential_rewrite",
    "request_body_credential_rewrite",
    "credential_signing",
    "signing_service",
    "signing_region",
    "allow_uninspected_credentials",
}


class UnknownKey(KeyError):
    """A document key this converter does not know how upstream sends."""


def _mapping(value: Any) -> dict:
    # A key written with nothing after it (`network_policies:`) is YAML null.
    return value or {}


def _check_keys(where: str, value: dict, known: set[str]) -> None:
    unknown = set(value) - known
    if unknown:
        raise UnknownKey(f"{where}: {sorted(unknown)}")


def _enum(table: dict[str, int], text: Any) -> int:
    return table[text] if text else 0


def _matcher(value: Any) -> spb.L7QueryMatcher:
    if isinstance(value, dict):
        return spb.L7QueryMatcher(any=value.get("any") or [])
    return spb.L7QueryMatcher(glob=value)


def _flatten_params(params: dict, prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in params.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and "any" not in value:
            flat.update(_flatten_params(value, f"{dotted}."))
        else:
            flat[dotted] = value
    return flat


MATCH_KEYS = {
    "method",
    "path",
    "command",
    "query",
    "operation_type",
    "operation_name",
    "fields",
    "params",
    "tool",
}


def _match_fields(where: str, match: dict) -> dict[str, Any]:
    _check_keys(where, match, MATCH_KEYS)
    params = _flatten_params(_mapping(match.get("params")))
    if "tool" in match:
        params["name"] = match["tool"]
    return {
        "method": match.get("method") or "",
        "path": match.get("path") or "",
        "command": match.get("command") or "",
        "query": {k: _matcher(v) for k, v in _mapping(match.get("query")).items()},
        "operation_type": match.get("operation_type") or "",
        "operation_name": match.get("operation_name") or "",
        "fields": match.get("fields") or [],
        "params": {k: _matcher(v) for k, v in params.items()},
    }


def endpoint(where: str, ep: dict) -> spb.NetworkEndpoint:
    _check_keys(
        where,
        ep,
        PLAIN_ENDPOINT_KEYS
        | {
            "port",
            "ports",
            "tls",
            "enforcement",
            "access",
            "rules",
            "deny_rules",
            "graphql_persisted_queries",
            "json_rpc",
            "mcp",
        },
    )
    message = spb.NetworkEndpoint(
        **{key: ep[key] for key in PLAIN_ENDPOINT_KEYS if ep.get(key) is not None}
    )
    port = ep.get("port") or 0
    message.port = port
    message.ports.extend(ep.get("ports") or ([port] if port else []))
    message.tls = _enum(TLS, ep.get("tls"))
    message.enforcement = _enum(ENFORCEMENT, ep.get("enforcement"))
    message.access = _enum(ACCESS, ep.get("access"))
    for i, rule in enumerate(ep.get("rules") or []):
        _check_keys(f"{where}.rules[{i}]", rule, {"allow"})
        allow = _match_fields(f"{where}.rules[{i}].allow", rule["allow"])
        message.rules.append(spb.L7Rule(allow=spb.L7Allow(**allow)))
    for i, deny in enumerate(ep.get("deny_rules") or []):
        message.deny_rules.append(spb.L7DenyRule(**_match_fields(f"{where}.deny_rules[{i}]", deny)))
    for digest, op in _mapping(ep.get("graphql_persisted_queries")).items():
        message.graphql_persisted_queries[digest].CopyFrom(
            spb.GraphqlOperation(
                operation_type=op.get("operation_type") or "",
                operation_name=op.get("operation_name") or "",
                fields=op.get("fields") or [],
            )
        )
    json_rpc = ep.get("json_rpc")
    mcp = ep.get("mcp")
    if json_rpc is not None:
        _check_keys(f"{where}.json_rpc", json_rpc, {"max_body_bytes"})
        message.json_rpc_max_body_bytes = json_rpc.get("max_body_bytes") or 0
    if mcp is not None:
        _check_keys(
            f"{where}.mcp", mcp, {"max_body_bytes", "strict_tool_names", "allow_all_known_mcp_methods"}
        )
        message.mcp.SetInParent()
        if mcp.get("max_body_bytes"):
            message.json_rpc_max_body_bytes = mcp["max_body_bytes"]
        for flag in ("strict_tool_names", "allow_all_known_mcp_methods"):
            if mcp.get(flag) is not None:
                setattr(message.mcp, flag, mcp[flag])
    return message


def _middleware(where: str, mw: dict) -> spb.NetworkMiddlewareConfig:
    _check_keys(where, mw, {"name", "middleware", "config", "on_error", "endpoints", "order"})
    message = spb.NetworkMiddlewareConfig(
        name=mw.get("name") or "",
        middleware=mw.get("middleware") or "",
        on_error=mw.get("on_error") or "",
        order=mw.get("order") or 0,
    )
    if mw.get("config") is not None:
        config = struct_pb2.Struct()
        config.update(mw["config"])
        message.config.CopyFrom(config)
    if mw.get("endpoints") is not None:
        selector = mw["endpoints"]
        message.endpoints.include.extend(selector.get("include") or [])
        message.endpoints.exclude.extend(selector.get("exclude") or [])
    return message


def sandbox_policy(document: dict) -> spb.SandboxPolicy:
    """The message upstream's client sends for `document` (a parsed policy file)."""
    _check_keys(
        "policy",
        document,
        {
            "version",
            "filesystem_policy",
            "landlock",
            "process",
            "network_policies",
            "network_middlewares",
        },
    )
    message = spb.SandboxPolicy(version=document.get("version") or 0)
    if document.get("filesystem_policy") is not None:
        fs = document["filesystem_policy"]
        message.filesystem.CopyFrom(
            spb.FilesystemPolicy(
                include_workdir=bool(fs.get("include_workdir")),
                read_only=fs.get("read_only") or [],
                read_write=fs.get("read_write") or [],
            )
        )
    if document.get("landlock") is not None:
        message.landlock.compatibility = document["landlock"].get("compatibility") or ""
    if document.get("process") is not None:
        process = document["process"]
        message.process.run_as_user = str(process.get("run_as_user") or "")
        message.process.run_as_group = str(process.get("run_as_group") or "")
    for key, entry in _mapping(document.get("network_policies")).items():
        where = f"network_policies.{key}"
        _check_keys(where, entry, {"name", "endpoints", "binaries"})
        rule = message.network_policies[key]
        rule.name = entry.get("name") or key
        for i, ep in enumerate(entry.get("endpoints") or []):
            rule.endpoints.append(endpoint(f"{where}.endpoints[{i}]", ep))
        for i, binary in enumerate(entry.get("binaries") or []):
            _check_keys(f"{where}.binaries[{i}]", binary, {"path", "harness"})
            rule.binaries.append(spb.NetworkBinary(path=binary["path"]))
    for key, mw in _mapping(document.get("network_middlewares")).items():
        message.network_middlewares[key].CopyFrom(_middleware(f"network_middlewares.{key}", mw))
    return message
