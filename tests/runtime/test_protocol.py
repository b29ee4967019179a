"""Every name on the wire is stated once, in sidecars/protocol: a literal of one anywhere else in
the package fails here (a misspelt copy would be a second name for the same thing on the wire)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from sidecars.protocol import drains, kube_names
from sidecars.protocol.configsync import FORCE_FILE, ISOLATION_SETTINGS, ConfigOutcome, HaRole, RolloutState
from sidecars.protocol.events import EventReason, upgrade_stage_reason

ROOT = Path(__file__).parent.parent.parent / "sidecars"

# whole values: a literal equal to one of these is a copy
EXACT = {
    *(r.value for r in EventReason),
    drains.REASON_PREFIX,
    drains.SLINKY_OPERATOR_PREFIX,
    *(v for v in vars(kube_names).values() if isinstance(v, str) and v.startswith(kube_names.PREFIX)),
    *(name for names in kube_names.CONDITIONS for name in names),
    FORCE_FILE,
}
# families: a literal that starts with one of these is a hand-made reason of that family
FAMILIES = (
    drains.MAINTENANCE,
    drains.UPGRADE,
    drains.GRES,
    drains.HEALTH,
    drains.AGENT,
    drains.GPU_CHECK,
    drains.CORDON[0],
)


def _not_wire(tree: ast.AST) -> set[int]:
    """Docstrings, and the names in `__all__` (a class may share a reason's word: Maintenance)."""
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets):
            ids.update(id(n) for n in ast.walk(node.value))
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def copies(source: str) -> Iterator[tuple[int, str]]:
    """(line, literal) of each wire name written outside the protocol layer."""
    tree = ast.parse(source)
    docs = _not_wire(tree)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or id(node) in docs:
            continue
        text = node.value
        if text in EXACT or text.startswith(FAMILIES):
            yield node.lineno, text


def test_no_wire_name_is_written_twice() -> None:
    found = [
        f"{path.relative_to(ROOT.parent)}:{line}: {text!r}"
        for path in sorted(ROOT.rglob("*.py"))
        if "protocol" not in path.relative_to(ROOT).parts
        for line, text in copies(path.read_text())
    ]
    assert not found, "wire names belong in sidecars/protocol:\n" + "\n".join(found)


# config-sync's outcomes are plain words ("applied", "held") that are also /status keys and other
# roles' states: a copy is a literal of one in the code that reads or writes config-sync's outcomes,
# other than as a key (a dict's, a subscript's, `.get`'s, `in`'s)
OUTCOMES = {*(o.value for o in ConfigOutcome), *(s.value for s in RolloutState)}
OUTCOME_SCOPE = (ROOT / "configsync", ROOT / "operator" / "status")


def _keys(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            ids.update(id(k) for k in node.keys if k is not None)
        elif isinstance(node, ast.Subscript):
            ids.add(id(node.slice))
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "get" and node.args:
            ids.add(id(node.args[0]))
        elif isinstance(node, ast.Compare) and isinstance(node.ops[0], ast.In | ast.NotIn):
            ids.add(id(node.left))
    return ids


def outcome_copies(source: str) -> Iterator[tuple[int, str]]:
    """(line, literal) of each of config-sync's outcomes written as a value outside the protocol."""
    tree = ast.parse(source)
    skip = _not_wire(tree) | _keys(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value in OUTCOMES and id(node) not in skip:
            yield node.lineno, node.value


def test_no_config_sync_outcome_is_written_twice() -> None:
    found = [
        f"{path.relative_to(ROOT.parent)}:{line}: {text!r}"
        for scope in OUTCOME_SCOPE
        for path in sorted(scope.rglob("*.py"))
        for line, text in outcome_copies(path.read_text())
    ]
    assert not found, "config-sync's outcomes belong in sidecars/protocol/configsync.py:\n" + "\n".join(found)


# a controller's role among the HA pods and the dry run's isolation are plain words too ("down",
# "auto"): a copy is looked for where they mean that (config-sync's ha/ and dry run, and the Slurm
# edge's questions of one controller); "in control" means nothing else, so anywhere
HA_WORDS = {*HaRole, *ISOLATION_SETTINGS}
HA_SCOPE = (
    *(ROOT / "configsync" / wing for wing in ("ha", "dryrun")),
    *(ROOT / "slurm" / name for name in ("standby.py", "primary.py", "models.py")),
    ROOT / "probe" / "main.py",
)
# written before the words had a name, in files of lanes merged beside this one: each goes at merge
HA_PENDING = {
    ("controlplane/fleet/controllers.py", HaRole.IN_CONTROL),  # the primary gauge
}


def ha_copies(path: Path) -> Iterator[tuple[int, str]]:
    """(line, literal) of a role or isolation word written as a value outside the protocol."""
    tree = ast.parse(path.read_text())
    skip = _not_wire(tree) | _keys(tree)
    scoped = any(path == s or s in path.parents for s in HA_SCOPE)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and node.value in HA_WORDS) or id(node) in skip:
            continue
        if scoped or node.value == HaRole.IN_CONTROL:
            yield node.lineno, node.value


def test_no_ha_role_or_isolation_is_written_twice() -> None:
    found = [
        f"{path.relative_to(ROOT.parent)}:{line}: {text!r}"
        for path in sorted(ROOT.rglob("*.py"))
        if "protocol" not in path.relative_to(ROOT).parts
        for line, text in ha_copies(path)
        if (path.relative_to(ROOT).as_posix(), text) not in HA_PENDING
    ]
    assert not found, (
        "HA roles and the dry run's isolation belong in sidecars/protocol/configsync.py:\n" + "\n".join(found)
    )


def test_the_ha_scan_finds_a_copy(tmp_path: Path) -> None:
    ha = tmp_path / "elsewhere.py"
    ha.write_text('role = "standby"\nok = answer.role == "in control"\nd = {"down": 1}\n')
    assert [line for line, _ in ha_copies(ha)] == [2]  # out of scope, only "in control" counts


def test_the_outcome_scan_finds_a_copy_and_spares_keys() -> None:
    source = '''
"""held, applied"""
out = {"applied": None, "rejected": r}
a = body.get("applied")
b = out["restart_required"]
c = "applied" in body
record(files, "held")
state = "not everywhere"
'''
    assert sorted(line for line, _ in outcome_copies(source)) == [7, 8]


def test_the_scan_finds_a_copy_of_each_kind() -> None:
    source = '''
"""A docstring may name SlurmDrainReapplied and slurm-sidecars.io/busy."""
__all__ = ["Maintenance"]
A = "SlurmDrainReapplied"
B = {"slurm-sidecars.io/busy": "true"}
C = f"slurm-sidecars: maintenance {name}"
D = ("SlurmNodeDrained", "True")
E = "slurm-sidecars: something else"
'''
    assert [line for line, _ in copies(source)] == [4, 5, 6, 7]


def test_reasons_and_names_are_what_kubernetes_and_slurm_accept() -> None:
    # an Event reason is UpperCamelCase (kubectl shows it as is); values are unique
    values = [r.value for r in EventReason]
    assert len(values) == len(set(values))
    assert all(v[0].isupper() and v.isalnum() for v in values)
    assert upgrade_stage_reason("slurmctld", "RolledBack") == "ClusterUpgradeSlurmctldRolledBack"
    # every drain family is ours by the prefix the rest of the package trusts
    assert all(f.startswith(drains.REASON_PREFIX) for f in FAMILIES)
    assert (
        drains.agent_reason("slurm", "w-0", "scale-in")
        == "slurm-sidecars: pod slurm/w-0 terminating: scale-in"
    )
    assert drains.reason_problem("x" * drains.REASON_MAX_CHARS) is None
    assert drains.reason_problem("x" * (drains.REASON_MAX_CHARS + 1)) is not None
    assert drains.reason_problem("two\nlines") is not None
