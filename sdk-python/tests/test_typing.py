"""The type stubs: they match the built module (mypy's stubtest), `mypy
--strict` accepts typical user code, and every public name of the native
module is in the stubs.

mypy is a requirement of these tests (test.sh installs it): stubs that drift
from the module must fail the suite, not skip a check.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import openshell
from openshell import _native

HERE = Path(__file__).resolve().parent
STUB = Path(openshell.__file__).with_name("_native.pyi")
ALLOWLIST = HERE / "stubtest-allowlist.txt"


def test_stubs_match_the_built_module() -> None:
    # The whole package: `_native.pyi` against the extension module, and
    # `_enums.pyi` against the enum classes built from the Rust SDK's lists,
    # so a member the stub names and Rust does not (or the reverse) fails.
    run = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "openshell", "--allowlist", str(ALLOWLIST)],
        capture_output=True,
        text=True,
        cwd=HERE,
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_stub_covers_every_native_name() -> None:
    tree = ast.parse(STUB.read_text())
    stubbed = {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
    stubbed |= {
        target.id
        for node in tree.body
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        for target in ([node.target] if isinstance(node, ast.AnnAssign) else node.targets)
        if isinstance(target, ast.Name)
    }
    native = {name for name in dir(_native) if not name.startswith("_")}
    assert native <= stubbed, native - stubbed
    for name in stubbed & native:
        cls = getattr(_native, name)
        if not isinstance(cls, type):
            continue
        node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
        members = {
            n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        }
        public = {m for m in dir(cls) if not m.startswith("_")}
        assert public <= members, f"{name}: {public - members} missing from the stub"


def test_mypy_strict_accepts_typical_code() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(HERE / "typed_example.py")],
        capture_output=True,
        text=True,
        cwd=HERE,
    )
    assert run.returncode == 0, run.stdout + run.stderr
