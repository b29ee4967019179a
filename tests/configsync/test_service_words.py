"""The words config-sync's service and its daemons' strategies write on /status are stated once, in
sidecars/protocol/configsync.py: who put the good set back (`restored.by`) and where a slurmrestd
replica stands in the turn (`restd.turn.state`). A literal of one anywhere in config-sync fails here."""

from __future__ import annotations

import ast
from pathlib import Path

from sidecars.protocol.configsync import RestdTurnState, RestoredBy
from tests.runtime.test_protocol import _keys, _not_wire

CONFIGSYNC = Path(__file__).parent.parent.parent / "sidecars" / "configsync"
WORDS = {*(w.value for w in RestoredBy), *(w.value for w in RestdTurnState)}
# the one other meaning of a word: the role's own name, bound into its log lines
ROLE_NAME = {("main.py", RestoredBy.CONFIG_SYNC.value)}


def word_copies(source: str) -> list[tuple[int, str]]:
    """(line, literal) of each of these words written as a value (not a key, not a docstring)."""
    tree = ast.parse(source)
    skip = _not_wire(tree) | _keys(tree)
    words = (n for n in ast.walk(tree) if isinstance(n, ast.Constant) and id(n) not in skip)
    return [(n.lineno, n.value) for n in words if n.value in WORDS]


def test_no_service_word_is_written_twice() -> None:
    paths = {str(p.relative_to(CONFIGSYNC)): p for p in sorted(CONFIGSYNC.rglob("*.py"))}
    found = [
        f"{name}:{line}: {text!r}"
        for name, path in paths.items()
        for line, text in word_copies(path.read_text())
        if (name, text) not in ROLE_NAME
    ]
    assert not found, "config-sync's /status words belong in sidecars/protocol/configsync.py:\n" + "\n".join(
        found
    )


def test_the_scan_finds_a_copy() -> None:
    source = '''
"""waiting, holding"""
out = {"free": None}
state = "waiting"
target.restore("config-guard")
'''
    assert [line for line, _ in word_copies(source)] == [4, 5]
