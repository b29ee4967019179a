"""No `asyncio.gather` in the package that can leave its siblings running: without
`return_exceptions=True`, the first error returns at once and the other awaitables run on, owned by
nobody (a Slurm command and its stream readers outliving a daemon's stop: CI, issue #34). Such a
call goes through `sidecars.runtime.waits.all_of`, which ends them all first."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "sidecars"
OWN = PACKAGE / "runtime" / "waits.py"  # all_of's own gather, which collects every end itself


def _gathers_without_return_exceptions(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if not (isinstance(f, ast.Attribute) and f.attr == "gather"):
            continue
        if not (isinstance(f.value, ast.Name) and f.value.id == "asyncio"):
            continue
        ok = any(
            k.arg == "return_exceptions" and isinstance(k.value, ast.Constant) and k.value.value is True
            for k in node.keywords
        )
        if not ok:
            lines.append(node.lineno)
    return lines


def test_every_gather_collects_all_its_ends() -> None:
    found = []
    for path in sorted(p for p in PACKAGE.rglob("*.py") if p != OWN):
        for line in _gathers_without_return_exceptions(ast.parse(path.read_text(), str(path))):
            found.append(f"{path.relative_to(PACKAGE.parent)}:{line}")
    assert not found, f"asyncio.gather without return_exceptions=True (use runtime.waits.all_of): {found}"


def test_the_rule_sees_a_bare_gather() -> None:
    bad = ast.parse("import asyncio\nasync def f(a, b):\n    return await asyncio.gather(a, b)\n")
    good = ast.parse("import asyncio\nasync def f(a):\n    await asyncio.gather(a, return_exceptions=True)\n")
    assert _gathers_without_return_exceptions(bad) == [3]
    assert _gathers_without_return_exceptions(good) == []
