"""Just enough of slurm.conf's syntax to check what Slurm's client parse does not and to compare two sets.

Slurm itself stays the judge of syntax (validate.py runs its parser); this reads `Key=Value` words,
`Include` lines, and the NodeName / PartitionName / NodeSet records, with their keys case-insensitive
as Slurm treats them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from sidecars.configsync.fileset.sources import FileSet
from sidecars.runtime import textcuts
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


# A word as `shlex.split(posix=True)` reads one: runs of plain characters, "double quoted" (a
# backslash escapes `"` and `\` in it), 'single quoted' and backslash-escaped characters, side by
# side. Possessive throughout: each character is looked at once (shlex builds each word a character
# at a time, by string concatenation: quadratic, 20 s for a 1 MiB word).
_WORD = re.compile(r"""(?:[^ \t\r\n"'\\]++|"(?:[^"\\]++|\\.)*+"|'[^']*+'|\\.)++|(?P<bad>[^ \t\r\n])""", re.S)
_PIECE = re.compile(
    r"""(?P<plain>[^"'\\]++)|"(?P<double>(?:[^"\\]++|\\.)*+)"|'(?P<single>[^']*+)'|\\(?P<escaped>.)""", re.S
)
_DOUBLE_ESCAPE = re.compile(r"""\\(["\\])""")
_BLANKS = re.compile(r"[ \t\r\n]+")  # shlex's whitespace


def _unquoted(word: str) -> str:
    out = []
    for m in _PIECE.finditer(word):
        if m["double"] is not None:
            out.append(_DOUBLE_ESCAPE.sub(r"\1", m["double"]))
        else:
            out.append(m["plain"] or m["single"] or m["escaped"] or "")
    return "".join(out)


def words(line: str) -> list[str]:
    """The line's words as shlex (posix, no comments) splits them; a line it cannot split (an
    unterminated quote, a lone trailing backslash) by whitespace. Linear in the line."""
    if '"' not in line and "'" not in line and "\\" not in line:  # nothing to unquote: at C speed
        return textcuts.split_runs(line, _BLANKS)  # in pieces: a worker's C call holds the loop
    found = []
    for m in _WORD.finditer(line):
        if m["bad"] is not None:
            return line.split()
        found.append(_unquoted(m[0]))
    return found


def strip_comment(line: str) -> str:
    at = textcuts.find_unescaped(line, "#")  # by str.find: a regex search of a MiB holds the loop
    kept = line if at < 0 else line[:at]
    return kept.replace("\\#", "#").strip()


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
            parts = [lines[i]]
            while parts[-1].rstrip().endswith("\\") and i + 1 < len(lines):  # continuation
                i += 1
                parts[-1] = parts[-1].rstrip()[:-1]
                parts.append(lines[i])
            line = " ".join(parts)  # joined once: joining at each line was quadratic
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
