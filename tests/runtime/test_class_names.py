"""One class per name in the package (issue 26): a name read in a log, a traceback or a review
points at one thing."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import sidecars


def test_no_two_classes_share_a_name() -> None:
    root = Path(sidecars.__file__).parent
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                where[node.name].append(str(path.relative_to(root)))
    assert {name: places for name, places in where.items() if len(places) > 1} == {}
