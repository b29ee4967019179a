"""Private names stay private: no module of the package imports another's `_name` or reaches into an
object's `_attribute` from outside its class (self, cls and a subclass's `super()` excepted). What a
caller needs is given a public name where it is defined."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "sidecars"

# (file, expression) seen from outside and allowed, with why
ALLOWED = {
    # a copy of its own class (SlurmCommands.with_env): the class's own state
    ("slurm/commands.py", "clone._version"),
    # argparse's Namespace carries the parse's own bookkeeping (old flag names seen) under a name
    # that no setting can take
    ("runtime/settings.py", "namespace._sidecars_old_names"),
}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _is_super(node: ast.expr) -> bool:
    """`super()._x`: a subclass using its own base's part, as `self._x` would."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"


def private_uses(root: Path) -> set[tuple[str, str]]:
    found = set()
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sidecars"):
                names = [a.name for a in node.names if _private(a.name)]
                found |= {(rel, f"from {node.module} import {name}") for name in names}
            elif (
                isinstance(node, ast.Attribute)
                and _private(node.attr)
                and not (isinstance(node.value, ast.Name) and node.value.id in {"self", "cls"})
                and not _is_super(node.value)
            ):
                found.add((rel, ast.unparse(node)))
    return found


def test_no_private_name_is_used_from_outside() -> None:
    assert private_uses(PACKAGE) - ALLOWED == set()


def test_the_check_sees_both_kinds_of_use(tmp_path: Path) -> None:
    (tmp_path / "edge.py").write_text(
        "from sidecars.kube.client import _error\n"
        "class Client:\n    def ok(self):\n        return self._call()\n"
        "async def f(kube):\n    await kube._call()\n"
        "class Sub(Client):\n    def ok(self):\n        return super()._call()\n"
    )
    assert private_uses(tmp_path) == {
        ("edge.py", "from sidecars.kube.client import _error"),
        ("edge.py", "kube._call"),
    }
