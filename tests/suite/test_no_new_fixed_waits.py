"""No new fixed sleep or hard-coded timeout in the tests (issue #34): every wait is on an event, or
a poll with a deadline derived from a settings value. What the tests hold today is counted per file
in `fixed_waits_baseline.json`; a file with more than its count fails, naming each place in it.

Counted (an ast walk, no import): `asyncio.sleep(N)` and `time.sleep(N)` with a number other than 0
(0 is a yield, not a wait); a number given as `timeout=`, `within=`, `deadline=`, `*_timeout=`
or `*_seconds=` to a call; and the time argument of `within(aw, N)`, `wait_until(pred, N)`,
`asyncio.wait_for(aw, N)` and `asyncio.timeout(N)`. `pytest.mark.timeout(N)` is a test's budget,
not a wait, and is not counted.

After removing some, or at a merge that adds reviewed ones: `python -m tests.suite.test_no_new_fixed_waits`
rewrites the baseline (review its diff)."""

from __future__ import annotations

import ast
import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
BASELINE = Path(__file__).with_name("fixed_waits_baseline.json")
TIME_KEYWORDS = {"timeout", "within", "deadline"}
TIME_ARG = {"within": 1, "wait_until": 1, "wait_for": 1, "timeout": 0}  # callee -> index of its time


def _number(node: ast.expr | None) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
        and node.value != 0
    )


def _name(func: ast.expr) -> tuple[str | None, str | None]:
    """(module or object name, callee name) of a call's function."""
    if isinstance(func, ast.Attribute):
        owner = func.value.id if isinstance(func.value, ast.Name) else None
        if isinstance(func.value, ast.Attribute):
            owner = func.value.attr
        return owner, func.attr
    if isinstance(func, ast.Name):
        return None, func.id
    return None, None


def fixed_waits(source: str, filename: str = "<test>") -> list[tuple[int, str]]:
    """Each fixed wait in `source`: (line, what)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source, filename)):
        if not isinstance(node, ast.Call):
            continue
        owner, callee = _name(node.func)
        if owner == "mark" and callee == "timeout":
            continue  # pytest.mark.timeout: the test's budget
        if callee == "sleep" and owner in ("asyncio", "time", None) and node.args and _number(node.args[0]):
            found.append((node.lineno, f"{owner + '.' if owner else ''}sleep({ast.unparse(node.args[0])})"))
            continue
        index = TIME_ARG.get(callee or "")
        timed_call = index is not None and (callee != "timeout" or owner == "asyncio")
        if timed_call and index is not None and len(node.args) > index and _number(node.args[index]):
            found.append((node.lineno, f"{callee}(..., {ast.unparse(node.args[index])})"))
            continue
        for kw in node.keywords:
            name = kw.arg or ""
            timed = name in TIME_KEYWORDS or name.endswith(("_timeout", "_seconds"))
            if timed and _number(kw.value):
                found.append((node.lineno, f"{callee}({name}={ast.unparse(kw.value)})"))
    return sorted(found)


def scan() -> dict[str, list[tuple[int, str]]]:
    out: dict[str, list[tuple[int, str]]] = {}
    for path in sorted(TESTS.rglob("*.py")):
        if waits := fixed_waits(path.read_text(), str(path)):
            out[path.relative_to(ROOT).as_posix()] = sorted(waits)
    return out


def test_no_test_file_has_more_fixed_waits_than_its_baseline() -> None:
    baseline: dict[str, int] = json.loads(BASELINE.read_text())
    over = []
    for name, waits in scan().items():
        if len(waits) > baseline.get(name, 0):
            places = "\n".join(f"  {name}:{line}: {what}" for line, what in waits)
            over.append(f"{name}: {len(waits)} fixed waits, baseline {baseline.get(name, 0)}:\n{places}")
    assert not over, (
        "new fixed sleeps or hard-coded timeouts (wait on an event, or derive the deadline from a "
        "settings value; see this module's docstring):\n" + "\n".join(over)
    )


def test_the_walk_finds_each_kind_and_leaves_the_rest() -> None:
    source = (
        "import asyncio, time, pytest\n"
        "@pytest.mark.timeout(300)\n"
        "async def t(s):\n"
        "    await asyncio.sleep(0.5)\n"
        "    time.sleep(1)\n"
        "    await asyncio.sleep(0)\n"
        "    await asyncio.sleep(s.interval_seconds)\n"
        "    await eventually(f, within=30.0)\n"
        "    await within(aw, 10)\n"
        "    await within(aw, 2 * s.restart_timeout_seconds)\n"
        "    await svc.wait_until(p, 90.0)\n"
        "    async with asyncio.timeout(5):\n"
        "        pass\n"
        "    run(x, restart_timeout_seconds=45.0)\n"
    )
    assert [line for line, _ in fixed_waits(source)] == [4, 5, 8, 9, 11, 12, 14]


def test_the_baseline_names_only_files_that_exist() -> None:
    baseline: dict[str, int] = json.loads(BASELINE.read_text())
    assert not [n for n in baseline if not (ROOT / n).is_file()]


if __name__ == "__main__":  # rewrite the baseline from the tests as they are
    counts = Counter({name: len(w) for name, w in scan().items()})
    BASELINE.write_text(json.dumps(dict(sorted(counts.items())), indent=1) + "\n")
    print(f"{BASELINE.relative_to(ROOT)}: {sum(counts.values())} in {len(counts)} files", file=sys.stderr)
