"""The enums are the Rust SDK's: the classes of `openshell._enums` have
exactly the members the native module exports, in wire order, `_enums.pyi`
names exactly those (stubtest misses a stub member that Rust no longer has,
and a wrong value), and `is_terminal` is the Rust rule. No gateway needed."""

from __future__ import annotations

import ast
import enum
import pickle
from pathlib import Path

import openshell
from openshell import _enums, _native

STUB = Path(_enums.__file__).with_name("_enums.pyi")


def test_classes_have_the_rust_members_in_wire_order() -> None:
    assert sorted(_native.CONTRACT_ENUMS) == sorted(_enums.__all__)
    for name, members in _native.CONTRACT_ENUMS.items():
        cls = getattr(openshell, name)
        assert cls is getattr(_enums, name)
        assert issubclass(cls, str) and issubclass(cls, enum.Enum)
        assert [(m.name, m.value) for m in cls] == [(m, m) for m in members], name


def test_stub_names_the_rust_members() -> None:
    tree = ast.parse(STUB.read_text())
    stubbed: dict[str, list[tuple[str, object]]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            stubbed[node.name] = [
                (target.id, stmt.value.value)
                for stmt in node.body
                if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant)
                for target in stmt.targets
                if isinstance(target, ast.Name)
            ]
    expected = {name: [(m, m) for m in members] for name, members in _native.CONTRACT_ENUMS.items()}
    assert stubbed == expected


def test_terminal_states_follow_the_rust_rule() -> None:
    terminal = {state.value for state in openshell.OperationState if state.is_terminal}
    assert terminal == set(_native.TERMINAL_OPERATION_STATES)
    assert terminal == {"APPLIED", "FAILED", "SUPERSEDED", "INACTIVE", "CANCELLED"}


def test_members_behave_as_before() -> None:
    state = openshell.OperationState("APPLIED")
    assert state is openshell.OperationState.APPLIED
    assert state == "APPLIED" and str(state) == "APPLIED" and f"{state}" == "APPLIED"
    assert repr(openshell.UpdateMode.WAIT_FOR_APPLY) == "<UpdateMode.WAIT_FOR_APPLY: 'WAIT_FOR_APPLY'>"
    assert type(state).__module__ == "openshell._enums"
    assert pickle.loads(pickle.dumps(state)) is state
