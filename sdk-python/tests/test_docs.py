"""Runs the examples of docs/sdk-python.md against a real gateway.

Blocks run in document order in one namespace, like a reader pasting them
into one session. A block preceded by `<!-- expect: REGEX -->` must print a
line matching REGEX.
"""

from __future__ import annotations

import contextlib
import io
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import REPO, Gateway

DOC = REPO / "docs" / "sdk-python.md"
BLOCK = re.compile(
    r"(?:<!-- expect: (?P<expect>[^\n]+?) -->\n)?```python\n(?P<code>.*?)```", re.DOTALL
)


@dataclass
class Example:
    line: int
    code: str
    expect: str | None


def examples() -> list[Example]:
    text = DOC.read_text()
    return [
        Example(text[: m.start("code")].count("\n") + 1, m.group("code"), m.group("expect"))
        for m in BLOCK.finditer(text)
    ]


def test_doc_has_examples() -> None:
    found = examples()
    assert len(found) >= 8, "the examples were not found; did the markers change?"
    assert sum(1 for e in found if e.expect) == len(found), "every example states its output"


def test_doc_examples_run(
    fresh_gateway: Gateway, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh_gateway.running_sandbox("demo", name="demo")
    fresh_gateway.client().create_sandbox("idle", workspace="staging")
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(REPO / "examples" / "policy.yaml", work / "policy.yaml")
    monkeypatch.chdir(work)
    monkeypatch.setenv("OPENSHELL_GATEWAY", fresh_gateway.endpoint)
    monkeypatch.setenv("OPENSHELL_TOKEN", fresh_gateway.token)

    namespace: dict[str, object] = {"__name__": "__docs__"}
    for example in examples():
        out = io.StringIO()
        where = f"{DOC.name}:{example.line}"
        try:
            with contextlib.redirect_stdout(out):
                exec(compile(example.code, where, "exec"), namespace)
        except Exception as err:
            pytest.fail(f"example at {where} raised {err!r}\n--- output ---\n{out.getvalue()}")
        if example.expect is not None:
            lines = out.getvalue().splitlines()
            assert any(re.search(example.expect, line) for line in lines), (
                f"example at {where} printed no line matching {example.expect!r}:\n{out.getvalue()}"
            )
