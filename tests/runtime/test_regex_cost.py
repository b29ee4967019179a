"""No regular expression in the package costs more than linear time on a long run of text
(issue 33: one, tried again from each character of a 1 MiB word, held config-sync for minutes).

Every pattern written as a literal (`re.compile("...")`, `re.search("...", ...)`, in any module of
`sidecars/`) is found by reading the source, compiled with its literal flags, and run to the end
(`finditer`, what `sub` and `findall` do too) over long runs of the characters that make patterns
backtrack, each with an ending that fails the match. Its CPU time at 20,000 characters is compared
with its time at 2,000 (tests.costs: linear is ~10x, quadratic ~100x)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.costs import superlinear

PACKAGE = Path(__file__).resolve().parents[2] / "sidecars"
FUNCTIONS = {"compile", "search", "match", "fullmatch", "finditer", "findall", "sub", "subn", "split"}
FLAG_NAMES = {"I", "IGNORECASE", "M", "MULTILINE", "S", "DOTALL", "X", "VERBOSE", "A", "ASCII"}
# runs that make a pattern backtrack: word characters, key-like runs, separators, quotes, brackets,
# spaces, pairs of them, and the shapes of config lines
RUNS = [
    "a", "A", "0", " ", "\t", "-", ".", "_", "=", ",", ":", "/", "[", "]", '"', "'", "\\", "#", "@",
    "a-", "a=", "a ", "0-", "a,", "[0", "x:", "a=b ", "K= ", "a\n", " \n", "=\n", "://", "a:b@",
]  # fmt: skip
ENDING = "\x00!"


def _flags(node: ast.expr | None) -> int | None:
    if node is None:
        return 0
    if isinstance(node, ast.Attribute) and node.attr in FLAG_NAMES:
        return int(getattr(re, node.attr))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        left, right = _flags(node.left), _flags(node.right)
        return None if left is None or right is None else left | right
    return None


def literal_patterns() -> list[tuple[str, str, int, str]]:
    """(where, pattern, flags, how it is run) of every literal pattern given to `re` in the
    package: a compiled one may be searched (tried at every start), a `re.match` or `re.fullmatch`
    is tried at the start only."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            func = node.func
            if not (isinstance(func.value, ast.Name) and func.value.id == "re" and func.attr in FUNCTIONS):
                continue
            if (
                not node.args
                or not isinstance(node.args[0], ast.Constant)
                or not isinstance(node.args[0].value, str)
            ):
                continue
            flag_arg = next((k.value for k in node.keywords if k.arg == "flags"), None)
            if flag_arg is None and func.attr == "compile" and len(node.args) > 1:
                flag_arg = node.args[1]
            flags = _flags(flag_arg)
            if flags is None:
                continue
            where = f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"
            how = func.attr if func.attr in {"match", "fullmatch"} else "finditer"
            found.append((where, node.args[0].value, flags, how))
    return found


PATTERNS = literal_patterns()


def test_the_package_patterns_are_found() -> None:
    # the scan reads what it should: the redaction and the parsers' patterns among them
    assert len(PATTERNS) > 20
    assert any(p[0].startswith("sidecars/runtime/redact.py") for p in PATTERNS)
    assert any(p[0].startswith("sidecars/configsync/conffile.py") for p in PATTERNS)


@pytest.mark.parametrize(("where", "pattern", "flags", "how"), PATTERNS, ids=[p[0] for p in PATTERNS])
def test_no_pattern_is_superlinear_on_a_long_run(where: str, pattern: str, flags: int, how: str) -> None:
    compiled = re.compile(pattern, flags)

    def scan(text: str) -> int:
        if how == "finditer":
            return sum(1 for _ in compiled.finditer(text))
        return 0 if getattr(compiled, how)(text) is None else 1

    slow = []
    for run in RUNS:
        said = superlinear(lambda n, r=run: r * (n // len(r)) + ENDING, scan, 2_000, 20_000)
        if said is not None:
            slow.append(f"{run!r}: {said}")
    assert not slow, f"{where} {pattern!r} is superlinear on: {slow}"
