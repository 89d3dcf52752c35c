"""Bad arguments: every parameter of every public call and constructor,
given a value of the wrong type, raises `InvalidArgumentType` (both
`InvalidArgument` and `TypeError`) naming that parameter, before anything is
sent; an out-of-range value raises `InvalidArgument` naming it. The
parameters are read from the built module's signatures, so a new call or
parameter is checked without being listed here."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, Callable, Iterator

import pytest

from conftest import POLICY, free_port, unique
from openshell import (
    AsyncClient,
    Client,
    InvalidArgument,
    InvalidArgumentType,
    Operation,
    Target,
)

# What a binding's own conversion errors say; none may reach a caller.
RAW = ("argument '", "cannot be converted", "cannot be cast", "napi", "Failed to convert", "PyString", "PyAny")


class Unfit:
    """A value no parameter accepts: not text, a number, a mapping, a sequence, a callable."""


# Valid values for the required parameters, so each call fails only on the
# parameter under test. A new required parameter must be added here.
REQUIRED = {
    "sandbox": "demo",
    "name": "demo",
    "provider": "gh",
    "provider_type": "github",
    "id": "op-x",
    "target": "demo",
    "lifecycle": "STOPPED",
    "fraction": 0.5,
}

# Plausible mistakes, beyond `Unfit()`: the right idea in the wrong type.
NEAR_MISSES: dict[str, list[Any]] = {
    "sandbox": [42, None, b"demo"],
    "name": [42, None],
    "provider": [42],
    "provider_type": [42],
    "id": [42],
    "target": [42, None, ("global",)],
    "lifecycle": [1],
    "mode": [1],
    "states": ["APPLIED", {"APPLIED": 1}],
    "limit": ["3", 2.5, True],
    "lines": ["3", 2.5],
    "since_ms": ["0", 1.5],
    "revision": ["1"],
    "timeout": ["5", True],
    "wait_timeout": ["5"],
    "threshold": ["0.5"],
    "fraction": ["0.5"],
    "include_deleted": [1, "yes"],
    "clear_global_policy": [1],
    "validate_only": ["yes"],
    "settings": [["log_level"], "log_level=debug"],
    "delete_settings": ["log_level", 3],
    "sources": ["sandbox", 3],
    "env": ["A=1", ["A"]],
    "credentials": ["A=1"],
    "expires_at": ["2030-01-01", 1893456000],
    "ca_cert_pem": [42],
    "on_progress": ["print"],
    "policy": [42, {"version": 1}],
    "endpoint": [42],
    "token": [42],
    "workspace": [42],
    "idempotency_key": [42],
    "min_level": [42],
    "policy_edits": [["api.github.com:443"], "api.github.com:443"],
    "expected_revision": ["3", 3.0, True],
}


def unreachable() -> str:
    return f"http://127.0.0.1:{free_port()}"


def call_now(call: Callable[[], Any]) -> Any:
    """Runs a call to the end, awaiting it when it is a coroutine."""
    result = call()
    if inspect.isawaitable(result):

        async def main() -> Any:
            return await result

        return asyncio.run(main())
    return result


def public_calls(operation: Operation) -> Iterator[tuple[str, Callable[..., Any]]]:
    """Every public method and constructor of the SDK's classes that takes arguments."""
    for cls, owner in (
        (Client, Client(unreachable(), "t")),
        (AsyncClient, AsyncClient(unreachable(), "t")),
        (Target, Target),
        (Operation, operation),
    ):
        if cls is not Target and cls is not Operation:
            yield f"{cls.__name__}()", cls
        for name in dir(cls):
            member = getattr(owner, name)
            if name.startswith("_") or not callable(member):
                continue
            yield f"{cls.__name__}.{name}", member


def parameters(call: Callable[..., Any]) -> list[inspect.Parameter]:
    return [
        p
        for p in inspect.signature(call).parameters.values()
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]


def check_refused(err: InvalidArgument, field: str, what: str) -> None:
    assert err.code == "INVALID_ARGUMENT", what
    assert [v.field for v in err.violations] == [field], (what, err.violations)
    # The core words its own checks ("threshold 2 must be in (0, 1]"); the
    # bindings' start with the field.
    assert field.rsplit(".", 1)[-1].split("[")[0] in str(err), (what, str(err))
    for text in [str(err), *(v.message for v in err.violations)]:
        assert not any(raw in text for raw in RAW), (what, text)


@pytest.fixture(scope="module")
def operation(gateway: Any) -> Operation:
    client = gateway.client()
    name = unique("args")
    client.create_sandbox(name, policy=POLICY)
    return client.update_config(name, settings={"log_level": "debug"}).operation


def test_every_parameter_refuses_a_wrong_type_naming_itself(operation: Operation) -> None:
    checked = []
    for label, call in public_calls(operation):
        params = parameters(call)
        required = {
            p.name: REQUIRED[p.name] for p in params if p.default is inspect.Parameter.empty
        }
        for param in params:
            for wrong in [Unfit(), *NEAR_MISSES.get(param.name, [])]:
                if wrong is None and param.default is not inspect.Parameter.empty:
                    continue  # None is every optional parameter's default
                what = f"{label}({param.name}={wrong!r})"
                with pytest.raises(InvalidArgumentType) as caught:
                    call_now(lambda: call(**{**required, param.name: wrong}))
                err = caught.value
                assert isinstance(err, InvalidArgument) and isinstance(err, TypeError), what
                check_refused(err, param.name, what)
                assert str(err).startswith(f"{param.name}: expected "), (what, str(err))
                assert f"got {type(wrong).__name__}" in str(err), (what, str(err))
            checked.append(f"{label}.{param.name}")
    # The enumeration found the surface: both clients' calls, their
    # constructors, the Target helpers and the Operation waits.
    for expected in (
        "Client().timeout",
        "AsyncClient().ca_cert_pem",
        "Client.update_config.settings",
        "AsyncClient.update_config.validate_only",
        "Client.update_config.policy_edits",
        "AsyncClient.update_config.expected_revision",
        "Client.list_operations.states",
        "AsyncClient.watch_sandbox_logs.since_ms",
        "Client.create_provider.expires_at",
        "Target.sandbox.workspace",
        "Target.workspace.name",
        "Operation.result.on_progress",
        "Operation.result_async.timeout",
        "Operation.threshold_met.fraction",
    ):
        assert expected in checked, expected
    assert len(checked) > 100, len(checked)


OUT_OF_RANGE: list[tuple[str, Callable[[Client], Any], str]] = [
    ("limit=-1", lambda c: c.list_sandbox_policies("demo", limit=-1), "limit"),
    ("limit=2**32", lambda c: c.list_operations(limit=2**32), "limit"),
    ("lines=-1", lambda c: c.get_sandbox_logs("demo", lines=-1), "lines"),
    ("since_ms=-1", lambda c: c.watch_sandbox_logs("demo", since_ms=-1), "since_ms"),
    ("revision=0", lambda c: c.get_sandbox_policy("demo", 0), "revision"),
    ("revision=-1", lambda c: c.get_sandbox_policy("demo", -1), "revision"),
    ("timeout=-1", lambda c: c.wait_for_apply("op-x", timeout=-1), "timeout"),
    ("timeout=nan", lambda c: c.wait_for_apply("op-x", timeout=float("nan")), "timeout"),
    ("wait_timeout=inf", lambda c: c.update_config("demo", wait_timeout=float("inf")), "wait_timeout"),
    ("threshold=2", lambda c: c.update_config("demo", threshold=2), "wait.threshold"),
    ("mode", lambda c: c.update_config("demo", mode="SOMETIMES"), "mode"),
    ("expected_revision=0", lambda c: c.update_config("demo", expected_revision=0), "expected_revision"),
    ("expected_revision=-1", lambda c: c.update_config("demo", expected_revision=-1), "expected_revision"),
    ("policy_edits key", lambda c: c.update_config("demo", policy_edits={"add": []}), "policy_edits.add"),
    ("lifecycle", lambda c: c.set_sandbox_lifecycle("demo", "SOMETIMES"), "lifecycle"),
    ("states", lambda c: c.list_operations(states=["APPLIED", "NOPE"]), "states[1]"),
]


@pytest.mark.parametrize("case", OUT_OF_RANGE, ids=[case[0] for case in OUT_OF_RANGE])
def test_out_of_range_values_are_invalid_arguments_naming_the_parameter(
    case: tuple[str, Callable[[Client], Any], str],
) -> None:
    what, call, field = case
    with pytest.raises(InvalidArgument) as caught:
        call(Client(unreachable(), "t"))
    assert not isinstance(caught.value, TypeError), what
    check_refused(caught.value, field, what)
    if field != "wait.threshold":
        assert str(caught.value).startswith(f"{field}: "), (what, str(caught.value))


ENTRIES: list[tuple[str, Callable[[Client], Any], str]] = [
    ("settings value", lambda c: c.update_config("demo", settings={"log_level": 1.5}), "settings.log_level"),
    ("settings key", lambda c: c.update_config("demo", settings={1: "debug"}), "settings"),
    ("env value", lambda c: c.create_provider("gh", "github", env={"GITHUB_ORG": 1}), "env.GITHUB_ORG"),
    ("credentials value", lambda c: c.update_provider("gh", credentials={"T": b"x"}), "credentials.T"),
    ("delete_settings item", lambda c: c.update_config("demo", delete_settings=["a", 2]), "delete_settings[1]"),
    ("sources item", lambda c: c.get_sandbox_logs("demo", sources=[None]), "sources[0]"),
    ("states item", lambda c: c.list_operations(states=[1]), "states[0]"),
    (
        "policy_edits item",
        lambda c: c.update_config("demo", policy_edits={"add_endpoints": ["a.example:443", 2]}),
        "policy_edits.add_endpoints[1]",
    ),
    ("policy_edits list", lambda c: c.update_config("demo", policy_edits={"binaries": "/usr/bin/npm"}), "policy_edits.binaries"),
]


@pytest.mark.parametrize("case", ENTRIES, ids=[case[0] for case in ENTRIES])
def test_a_bad_entry_is_named_by_its_path(case: tuple[str, Callable[[Client], Any], str]) -> None:
    what, call, field = case
    with pytest.raises(InvalidArgumentType) as caught:
        call(Client(unreachable(), "t"))
    check_refused(caught.value, field, what)
    assert str(caught.value).startswith(f"{field}: expected "), (what, str(caught.value))


def test_except_type_error_still_catches_a_wrong_type() -> None:
    client = Client(unreachable(), "t")
    try:
        client.get_sandbox(42)  # type: ignore[arg-type]
    except TypeError as err:
        assert str(err) == "sandbox: expected a str (NAME, ID or WORKSPACE/NAME), got int"
    else:
        pytest.fail("a wrong type was accepted")
