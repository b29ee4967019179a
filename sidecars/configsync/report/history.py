"""A bounded history of config generations, each with the unified diff of the files it changed.

Served at config-sync's `GET /history` (and gathered from there by the control plane's web page).
Every outcome is kept: applied, rejected (Slurm's words), rolled back, held for a restart. A diff is
against the set that ran when the change was judged. Key material (every file of a Secret volume,
key files, anything not world- or group-readable) is named but its contents are never shown; in
the rest, the values of secret-named options (`AccountingStoragePass=`, `StoragePass=`, JWT
settings: runtime.redact) are shown as `<redacted>`, in the diffs and in the reasons. Each diff is
capped, so the history stays small whatever the files are. It lives in memory: a restarted
sidecar starts a new one.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sidecars.configsync.fileset.sources import FileEntry, FileSet
from sidecars.protocol.configsync import ConfigOutcome
from sidecars.runtime import limits, offloop
from sidecars.runtime.redact import redact

DEFAULT_LIMIT = 20
MAX_DIFF_BYTES = 16 * 1024  # per file: a whole new slurm.conf for 1,000 nodes still reads as a diff

Change = Literal["added", "removed", "modified"]


def json_of(record: Any, **derived: Any) -> dict[str, Any]:
    """A record (a dataclass) as /status, /history and a plan show it: its fields by name, records
    in it as objects and tuples as lists, then `derived` (values computed or reshaped) over them."""
    fields = dataclasses.asdict(record)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in fields.items()} | derived


@dataclass(frozen=True, slots=True)
class FileChange:
    name: str
    change: Change
    diff: str | None  # unified diff; None when withheld (key material) or not text
    note: str = ""  # why the diff is withheld or cut short

    def as_json(self) -> dict[str, Any]:
        return json_of(self)


@dataclass(frozen=True, slots=True)
class Generation:
    outcome: ConfigOutcome
    generation: int | None  # the number an applied set got; None for one that never ran
    based_on: int | None  # the generation it was compared with (what ran when it was judged)
    sha256: str
    at: str  # RFC 3339
    reason: str | None  # Slurm's words (or our check's) for a refusal; how it went in for an install
    files: tuple[FileChange, ...]

    def as_json(self) -> dict[str, Any]:
        return json_of(self)


def _text(entry: FileEntry) -> str | None:
    try:
        return entry.data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _cap(diff: str, limit: int) -> tuple[str, str]:
    if len(diff.encode()) <= limit:
        return diff, ""
    cut = diff.encode()[:limit].decode("utf-8", "ignore")
    cut = cut[: cut.rfind("\n") + 1] if "\n" in cut else cut
    return cut, f"diff cut at {limit} bytes"


def _lines(text: str) -> list[str]:
    return [line if line.endswith("\n") else line + "\n" for line in text.splitlines(keepends=True)]


def _common(a: list[str], b: list[str]) -> tuple[int, int]:
    """How many lines `a` and `b` share at their head and then at their tail."""
    head = 0
    while head < min(len(a), len(b)) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < min(len(a), len(b)) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    return head, tail


def _block(a: list[str], b: list[str], fromfile: str, tofile: str) -> str:
    """A unified diff of one hunk over the lines between the common head and tail, compared line
    for line by position (equal ones kept as context), with three lines of context around.
    Linear in the lines, and readable where one attribute changed on many lines."""
    head, tail = _common(a, b)
    start = max(0, head - 3)
    end_a, end_b = len(a) - tail, len(b) - tail
    after = a[end_a : end_a + 3]
    span_a, span_b = end_a + len(after) - start, end_b + len(after) - start
    out = [
        f"--- {fromfile}\n+++ {tofile}\n",
        f"@@ -{start + 1 if span_a else start},{span_a} +{start + 1 if span_b else start},{span_b} @@\n",
        *(" " + line for line in a[start:head]),
    ]
    for x, y in zip(a[head:end_a], b[head:end_b], strict=False):
        out += (" " + x,) if x == y else ("-" + x, "+" + y)
    both = min(end_a, end_b) - head
    out += ("-" + line for line in a[head + both : end_a])
    out += ("+" + line for line in b[head + both : end_b])
    out += (" " + line for line in after)
    return "".join(out)


def _diff(a: list[str], b: list[str], fromfile: str, tofile: str) -> tuple[str, str]:
    """(the unified diff, a note): difflib's when the lines between the common head and tail are
    few enough (`limits.DIFF_MAX_LINES`), else one block hunk, and the note says so. difflib's
    matching grows with the square of the lines that differ: 20,000 lines, every other one
    changed, took 33 s."""
    head, tail = _common(a, b)
    differing = max(len(a), len(b)) - head - tail
    if differing <= limits.DIFF_MAX_LINES:
        return "".join(difflib.unified_diff(a, b, fromfile=fromfile, tofile=tofile)), ""
    cap = limits.DIFF_MAX_LINES
    note = f"{differing} lines differ, over the {cap}-line cap: shown line for line by position"
    return _block(a, b, fromfile, tofile), note


def file_change(
    name: str,
    old: FileEntry | None,
    new: FileEntry | None,
    limit: int = MAX_DIFF_BYTES,
    secret_sources: frozenset[Path] = frozenset(),
) -> FileChange:
    change: Change = "added" if old is None else "removed" if new is None else "modified"
    if any(e is not None and (e.secret or e.source in secret_sources) for e in (old, new)):
        return FileChange(name, change, None, "key material: contents not shown")
    before = "" if old is None else _text(old)
    after = "" if new is None else _text(new)
    if before is None or after is None:
        return FileChange(name, change, None, "not UTF-8 text")
    diff, block = _diff(
        _lines(before),
        _lines(after),
        fromfile="/dev/null" if old is None else f"a/{name}",
        tofile="/dev/null" if new is None else f"b/{name}",
    )
    if not diff:  # same text, another mode
        return FileChange(name, change, "", "contents unchanged (file mode changed)")
    text, note = _cap(redact(diff), limit)
    return FileChange(name, change, text, "; ".join(n for n in (block, note) if n))


def changes(
    old: FileSet | None,
    new: FileSet,
    limit: int = MAX_DIFF_BYTES,
    secret_sources: frozenset[Path] = frozenset(),
) -> tuple[FileChange, ...]:
    """What `new` changes against `old` (every file is added when there was no set before)."""
    before = dict(old.files) if old is not None else {}
    after = dict(new.files)
    out = []
    for name in sorted(set(before) | set(after)):
        a, b = before.get(name), after.get(name)
        if a is not None and b is not None and a.data == b.data and a.mode == b.mode:
            continue
        out.append(file_change(name, a, b, limit, secret_sources))
    return tuple(out)


class History:
    """The last `limit` generations, newest first in `as_json()`."""

    def __init__(self, limit: int = DEFAULT_LIMIT, secret_sources: tuple[Path, ...] = ()) -> None:
        self.limit = limit
        self.secret_sources = frozenset(secret_sources)
        self._items: deque[Generation] = deque(maxlen=limit)
        self.version = 0  # grows with every record: lets a reader skip an unchanged history

    async def record(
        self,
        outcome: ConfigOutcome,
        files: FileSet,
        old: FileSet | None,
        *,
        at: str,
        generation: int | None,
        based_on: int | None,
        reason: str | None,
    ) -> Generation:
        """Record a generation; its diff is worked out off the event loop when the sets are large
        (runtime.offloop), and the history changes on the loop only."""
        size = sum(e.size for s in (files, old) if s is not None for e in s.files.values())
        shown = await offloop.sized(size, changes, old, files, secret_sources=self.secret_sources)
        said = redact(reason) if reason is not None else None
        entry = Generation(outcome, generation, based_on, files.sha256, at, said, shown)
        self._items.append(entry)
        self.version += 1
        return entry

    def settle(self, generation: int, outcome: ConfigOutcome, reason: str) -> bool:
        """The outcome of a generation recorded before it was known (with HA peers: applied here,
        staging on the others), now known; False when it is no longer kept."""
        for i, g in enumerate(self._items):
            if g.generation == generation:
                self._items[i] = dataclasses.replace(g, outcome=outcome, reason=redact(reason))
                self.version += 1
                return True
        return False

    def __len__(self) -> int:
        return len(self._items)

    def as_json(self) -> dict[str, Any]:
        return {
            "limit": self.limit,
            "version": self.version,
            "generations": [g.as_json() for g in reversed(self._items)],
        }
