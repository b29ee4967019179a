"""No regular expression in the package costs more than linear time on a long run of text, up to a
MiB (issue 33: one, tried again from each character of a 1 MiB word, held config-sync for minutes;
a later sweep of 1 MiB words found patterns that only `match` saved from a quadratic search).

The patterns: every `re.Pattern` a module of `sidecars/` holds (literal or built from pieces:
`"|".join`, a constant's `strip`, bytes), every literal pattern given to `re` inside a function,
every f-string pattern (its `re.escape` pieces filled with a name), and every `pattern` of the
control plane's OpenAPI schemas (schemacheck runs them). Each is run as a search over the whole text
(`subn`: tried from every character, as `search`, `finditer` and `sub` do), however its call site
runs it today: a pattern stays linear when a later change searches with it.

The texts: runs of the characters that make patterns backtrack, each ending in a character that
fails the match, grown 8x at a time (2 Ki, 16 Ki, 128 Ki characters, and 1 MiB for the shapes of a
ConfigMap's worst word). Two checks per step, both robust on a loaded machine (CPU time of this
thread, the least of a few runs, one retry):
- growth: 8x the text may cost at most RATIO times as much (linear ~8x, quadratic ~64x);
- budget: at most BUDGET times a reference pass over the same text measured in this run (one match
  per character, the most matches any pattern can make there; the package's patterns cost 0.1-1.7x
  of it on a quiet machine)."""

from __future__ import annotations

import ast
import functools
import importlib
import pkgutil
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, AnyStr

import pytest

import sidecars
from tests.costs import cpu_seconds

PACKAGE = Path(__file__).resolve().parents[2] / "sidecars"
FUNCTIONS = {"compile", "search", "match", "fullmatch", "finditer", "findall", "sub", "subn", "split"}
FLAG_NAMES = {"I", "IGNORECASE", "M", "MULTILINE", "S", "DOTALL", "X", "VERBOSE", "A", "ASCII"}
ENDING = "\x00!"
SIZES = (2_048, 16_384, 131_072, 1_048_576)
RATIO = 24  # per 8x step
BUDGET = 20  # times the reference pass
FLOOR = 2e-4  # seconds: a shorter measurement is noise
# the shapes of a ConfigMap's worst word, run to 1 MiB: one character, key-like runs, separators,
# an unterminated quote, comments, escapes, digits with dots, lines
MIB_RUNS = ["a", "1", "a=", " ", "[", "-", "a.b", "x/", '"x', "#", "\\", ",", "1.2."]
# more runs that make a pattern backtrack, to 128 Ki characters
RUNS = [
    "1.", "K= ", "a\n", "\\\n", "a:b@", "://", "A", "0", "\t", ".", "_", "=", ":", "/", "]", '"', "'",
    "@", "a-", "a ", "0-", "a,", "[0", "x:",
    "a=b ", " \n", "=\n", "a=b,", "x=\"", "#a",
]  # fmt: skip
REFERENCE = re.compile(r"[\s\S]")  # one match per character


def _flags(node: ast.expr | None) -> int | None:
    if node is None:
        return 0
    if isinstance(node, ast.Attribute) and node.attr in FLAG_NAMES:
        return int(getattr(re, node.attr))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        left, right = _flags(node.left), _flags(node.right)
        return None if left is None or right is None else left | right
    return None


def _fstring(node: ast.JoinedStr) -> str | None:
    """An f-string pattern with each `re.escape(...)` piece filled with a name; None when it has
    another kind of piece (not checked: the scan test below fails if one appears)."""
    out = []
    for part in node.values:
        if isinstance(part, ast.Constant) and isinstance(part.value, str):
            out.append(part.value)
        elif (
            isinstance(part, ast.FormattedValue)
            and isinstance(part.value, ast.Call)
            and ast.unparse(part.value.func) == "re.escape"
        ):
            out.append(re.escape("name-0"))
        else:
            return None
    return "".join(out)


def _call_patterns() -> Iterator[tuple[str, re.Pattern[str]]]:
    """Every pattern written at a call of `re` (literal or f-string), with its literal flags."""
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            func = node.func
            if not (isinstance(func.value, ast.Name) and func.value.id == "re" and func.attr in FUNCTIONS):
                continue
            if not node.args:
                continue
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                pattern: str | None = first.value
            elif isinstance(first, ast.JoinedStr):
                pattern = _fstring(first)
            else:
                continue  # a name: a module's Pattern (below), or schemacheck's schema patterns
            flag_arg = next((k.value for k in node.keywords if k.arg == "flags"), None)
            if flag_arg is None and func.attr == "compile" and len(node.args) > 1:
                flag_arg = node.args[1]
            if flag_arg is None and func.attr in {"search", "match", "fullmatch", "findall", "finditer"}:
                flag_arg = node.args[2] if len(node.args) > 2 else None
            flags = _flags(flag_arg)
            where = f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"
            assert pattern is not None and flags is not None, f"{where}: a pattern this test cannot read"
            yield where, re.compile(pattern, flags)


def _schema_patterns(value: object, where: str) -> Iterator[tuple[str, re.Pattern[str]]]:
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "pattern" and isinstance(item, str) and item.startswith("^") and item.endswith("$"):
                yield where, re.compile(item[1:-1])  # as schemacheck runs it
            else:
                yield from _schema_patterns(item, where)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _schema_patterns(item, where)


def _module_patterns() -> Iterator[tuple[str, re.Pattern[Any]]]:
    """Every Pattern a module holds (built at import, from whatever pieces), and every schema
    pattern of a module's dicts. Importing runs nothing (the package's rule)."""
    for info in pkgutil.walk_packages(sidecars.__path__, "sidecars."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if isinstance(value, re.Pattern):
                yield f"{info.name}.{name}", value
            elif isinstance(value, dict):
                yield from _schema_patterns(value, f"{info.name}.{name}")


def all_patterns() -> list[tuple[str, re.Pattern[Any]]]:
    seen: dict[tuple[object, int], str] = {}
    found = []
    for where, compiled in [*_module_patterns(), *_call_patterns()]:
        key = (compiled.pattern, compiled.flags)
        if key not in seen:
            seen[key] = where
            found.append((where, compiled))
    return found


PATTERNS = all_patterns()


def test_the_package_patterns_are_found() -> None:
    # the scan reads what it should: literal, built from pieces, f-strings, bytes, schemas
    wheres = [w for w, _ in PATTERNS]
    patterns = {p.pattern for _, p in PATTERNS}
    assert len(PATTERNS) > 60
    assert "sidecars.runtime.redact.SECRET_KEY" in wheres  # "|".join(SECRET_WORDS)
    assert "sidecars.slurm.plugindir._PLUGIN_DIR" in wheres  # bytes
    assert "sidecars.controlplane.http.upgrade_api.IMAGE" in wheres  # a schema's pattern stripped
    assert re.escape("name-0") + r"-\d+" in patterns  # an f-string's
    assert any(w.startswith("sidecars.controlplane.http.openapi") for w in wheres)  # schemas
    assert any(w.startswith("sidecars/slurm/textformat.py") for w in wheres)  # literal in a function


@functools.cache
def _text(run: str, size: int, as_bytes: bool) -> str | bytes:
    text = run * (size // len(run)) + ENDING
    return text.encode() if as_bytes else text


@functools.cache
def _reference(run: str, size: int, as_bytes: bool) -> float:
    text = _text(run, size, False)
    return cpu_seconds(lambda: REFERENCE.findall(text))


def _cost(scan: Callable[[AnyStr], object], text: AnyStr, runs: int) -> float:
    return cpu_seconds(lambda: scan(text), runs=runs)


def grows_past_linear(compiled: re.Pattern[Any], run: str, largest: int) -> str | None:
    """None when searching `compiled` through runs of `run` grows linearly up to `largest`
    characters and stays within its budget; else a sentence with the figures. Stops at the first
    step that fails (a quadratic pattern is never run on a MiB)."""
    as_bytes = isinstance(compiled.pattern, bytes)
    empty: Any = b"" if as_bytes else ""

    def scan(text: Any) -> object:
        return compiled.subn(empty, text)

    before: float | None = None
    for size in (s for s in SIZES if s <= largest):
        text = _text(run, size, as_bytes)
        said = None
        for attempt in range(2):
            runs = 3 if attempt or size < SIZES[-1] else 1
            cost = _cost(scan, text, runs)
            budget = BUDGET * max(_reference(run, size, as_bytes), FLOOR)
            if before is not None and cost > RATIO * max(before, FLOOR):
                said = f"{size} characters took {cost:.4f}s against {before:.4f}s for {size // 8}"
                if attempt == 0:  # once more, both sizes, the least of three runs each
                    before = _cost(scan, _text(run, size // 8, as_bytes), 3)
                continue
            if cost > budget:
                said = f"{size} characters took {cost:.4f}s, over its budget of {budget:.4f}s"
                continue
            said = None
            break
        if said is not None:
            return said
        before = cost
    return None


@pytest.mark.parametrize(("where", "compiled"), PATTERNS, ids=[p[0] for p in PATTERNS])
def test_no_pattern_is_superlinear_up_to_a_mib(where: str, compiled: re.Pattern[Any]) -> None:
    slow = []
    for run, largest in [*((r, SIZES[-1]) for r in MIB_RUNS), *((r, SIZES[-2]) for r in RUNS)]:
        said = grows_past_linear(compiled, run, largest)
        if said is not None:
            slow.append(f"{run!r}: {said}")
    assert not slow, f"{where} {compiled.pattern!r} is superlinear or over its budget on: {slow}"
