"""Just enough of slurm.conf's syntax to check what Slurm's client parse does not and to compare two sets.

Slurm itself stays the judge of syntax (validate.py runs its parser); this reads `Key=Value` words,
`Include` lines, and the NodeName / PartitionName / NodeSet records, with their keys case-insensitive
as Slurm treats them.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from sidecars.configsync.sources import FileSet
from sidecars.slurm import hostlist

RECORD_KEYS = ("nodename", "partitionname", "nodeset", "downnodes", "frontendname", "switchname")


@dataclass
class Record:
    kind: str  # lower-case first key: nodename, partitionname, nodeset...
    name: str
    fields: dict[str, str]  # lower-case keys
    origin: str  # "file:line" for messages


@dataclass
class SlurmConf:
    options: dict[str, str] = field(default_factory=dict)  # lower-case key -> last value
    records: list[Record] = field(default_factory=list)
    includes: list[tuple[str, str | None, str]] = field(default_factory=list)  # (raw, name in set, origin)
    problems: list[str] = field(default_factory=list)

    def of(self, kind: str) -> list[Record]:
        return [r for r in self.records if r.kind == kind]

    def node_names(self) -> list[str]:
        names: list[str] = []
        for r in self.of("nodename"):
            if r.name.upper() != "DEFAULT":
                names += expand(r.name)
        return names

    def partitions(self) -> dict[str, Record]:
        return {r.name: r for r in self.of("partitionname") if r.name.upper() != "DEFAULT"}

    def node_definitions(self) -> dict[str, dict[str, str]]:
        """Each node's fields as Slurm reads them: a `NodeName=DEFAULT` line's values apply to the
        node lines after it, until another DEFAULT line changes them."""
        defaults: dict[str, str] = {}
        out: dict[str, dict[str, str]] = {}
        for r in self.of("nodename"):
            if r.name.upper() == "DEFAULT":
                defaults = {**defaults, **r.fields}
                continue
            for n in expand(r.name):
                out[n] = {**defaults, **r.fields}
        return out


def expand(expr: str) -> list[str]:
    try:
        return hostlist.expand(expr)
    except Exception:  # a malformed hostlist: Slurm's parser says so in its own words
        return [expr]


def words(line: str) -> list[str]:
    try:
        return shlex.split(line, comments=False, posix=True)
    except ValueError:
        return line.split()


def strip_comment(line: str) -> str:
    out = []
    prev = ""
    for ch in line:
        if ch == "#" and prev != "\\":
            break
        out.append(ch)
        prev = ch
    return "".join(out).replace("\\#", "#").strip()


def resolve_include(raw: str, files: FileSet, target: Path) -> tuple[str | None, str | None]:
    """(name in the set, problem). A relative path is relative to the main file's directory
    (the target); an absolute one must name a file of the set inside the target."""
    path = PurePosixPath(raw)
    if not path.is_absolute():
        path = PurePosixPath(target) / path
    if str(path.parent) != str(target):
        return None, f"Include {raw} points outside the set (only files in {target} are managed)"
    if path.name not in files.files:
        return None, f"Include {raw}: {path.name} is not in the set"
    return path.name, None


def parse(files: FileSet, main: str, target: Path) -> SlurmConf:
    """Parse the main file and what it includes (each file once); undecodable text is a problem."""
    conf = SlurmConf()
    todo = [main]
    seen: set[str] = set()
    while todo:
        name = todo.pop(0)
        if name in seen:
            continue
        seen.add(name)
        entry = files.files.get(name)
        if entry is None:
            conf.problems.append(f"{name} is missing from the set")
            continue
        try:
            text = entry.data.decode("utf-8")
        except UnicodeDecodeError:
            continue  # reported by the text check; nothing to read here
        lines = text.splitlines()
        i = 0
        while i < len(lines):
            lineno = i + 1
            line = lines[i]
            while line.rstrip().endswith("\\") and i + 1 < len(lines):  # continuation
                i += 1
                line = line.rstrip()[:-1] + " " + lines[i]
            i += 1
            line = strip_comment(line)
            if not line:
                continue
            origin = f"{name}:{lineno}"
            head = line.split(None, 1)
            if head[0].lower() == "include" and len(head) == 2:
                raw = head[1].strip().strip('"')
                inc, problem = resolve_include(raw, files, target)
                conf.includes.append((raw, inc, origin))
                if problem:
                    conf.problems.append(f"{origin}: {problem}")
                elif inc:
                    todo.append(inc)
                continue
            pairs: list[tuple[str, str]] = []
            for word in words(line):
                key, eq, value = word.partition("=")
                if eq:
                    pairs.append((key.lower(), value))
            if not pairs:
                continue
            if pairs[0][0] in RECORD_KEYS:
                conf.records.append(Record(pairs[0][0], pairs[0][1], dict(pairs[1:]), origin))
            else:
                for key, value in pairs:
                    conf.options[key] = value
    return conf
