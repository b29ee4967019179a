"""A minimal client slurm.conf, rendered from the cluster's: what a Slurm command needs to reach
the controllers and slurmdbd, and nothing that chooses code.

A sidecar outside slurmctld's pod (the upgrades overlay's control plane, slurmdbd's config-sync)
runs `scontrol` and `sacctmgr` with the operator token or the database password in its process. The
raw `slurm-config` ConfigMap is not checked by anyone before such a command reads it; its
`PluginDir=` (with a `binaryData` plugin beside it) would choose the code they load. The rendered file
keeps only the keys in KEPT (controller hosts and port, auth, accounting host, timeouts) and never a
`PluginDir=`: the commands load the image's compiled-in plugin directory. Every other key is
dropped, not refused: the controller knows the rest (`scontrol show config` asks it).

`Include` lines are followed (by file name, in the same directory; no wildcards), bounded in files
and bytes. A value is kept as written when it is one word of printable characters; anything else
is refused with the key's name (never its value).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

# the keys a client needs, as written back (Slurm's keys are case-blind); a key given several times
# keeps its last value, except those in REPEATED (every SlurmctldHost line names one controller)
_NAMES = {
    "clustername": "ClusterName",
    "slurmctldhost": "SlurmctldHost",
    "controlmachine": "ControlMachine",
    "controladdr": "ControlAddr",
    "backupcontroller": "BackupController",
    "backupaddr": "BackupAddr",
    "slurmctldport": "SlurmctldPort",
    "slurmctldaddr": "SlurmctldAddr",
    "authtype": "AuthType",
    "authinfo": "AuthInfo",
    "communicationparameters": "CommunicationParameters",
    "messagetimeout": "MessageTimeout",
    "tcptimeout": "TCPTimeout",
    "accountingstoragetype": "AccountingStorageType",
    "accountingstoragehost": "AccountingStorageHost",
    "accountingstoragebackuphost": "AccountingStorageBackupHost",
    "accountingstorageport": "AccountingStoragePort",
}
KEPT = tuple(_NAMES)
REPEATED = frozenset({"slurmctldhost"})
# lines that define a record: their other words (Port=, Nodes=) are the record's, not top-level keys
RECORDS = frozenset({"nodename", "partitionname", "nodeset", "downnodes", "frontendname", "switchname"})
MAX_FILES = 32
MAX_BYTES = 16 * 1024 * 1024  # all files together
_LINE = re.compile(r"^\s*(?P<key>[A-Za-z][A-Za-z0-9]*)\s*=\s*(?P<value>.*?)\s*$")
_INCLUDE = re.compile(r"^\s*include\s+(?P<name>\S+)\s*$", re.IGNORECASE)
_VALUE = re.compile(r"^[\x21-\x7e]+$")  # one printable word


class ClientConfError(ValueError):
    """The file cannot be rendered: the message names the file and the key, never a value."""


@dataclass(frozen=True, slots=True)
class Rendered:
    text: str
    kept: tuple[str, ...]  # the keys written, in order
    dropped: int  # lines of other keys (PluginDir among them)


def _lines(main: Path) -> list[tuple[Path, str]]:
    """Every (file, line) of main and its Includes, in Slurm's order."""
    out: list[tuple[Path, str]] = []
    budget = [MAX_BYTES]
    seen: list[Path] = []

    def read(path: Path) -> None:
        if len(seen) >= MAX_FILES:
            raise ClientConfError(f"{main}: more than {MAX_FILES} included files")
        seen.append(path)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ClientConfError(f"{path}: cannot be read ({exc.strerror})") from None
        budget[0] -= len(data)
        if budget[0] < 0:
            raise ClientConfError(f"{main}: over {MAX_BYTES} bytes with its includes")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ClientConfError(f"{path}: not UTF-8 text") from None
        for raw in text.splitlines():
            line = raw.split("#", 1)[0]
            inc = _INCLUDE.match(line)
            if inc is None:
                out.append((path, line))
                continue
            name = inc["name"].strip('"')
            if "/" in name or any(c in name for c in "*?["):
                raise ClientConfError(f"{path}: Include {name}: only a file beside it is followed")
            read(main.parent / name)

    read(main)
    return out


def render(main: Path) -> Rendered:
    """The client file for the cluster whose slurm.conf is `main`."""
    values: dict[str, list[str]] = {}
    dropped = 0
    for path, line in _lines(main):
        if not line.strip():
            continue
        words = line.split()
        first = _LINE.match(words[0])
        if first is not None and first["key"].lower() in RECORDS:
            dropped += 1  # NodeName=a Port=1: the words after the first are the record's own
            continue
        for word in words:  # `ClusterName=c PluginDir=/x`: several keys may share a line
            m = _LINE.match(word)
            if m is None:
                continue
            key = m["key"].lower()
            if key not in _NAMES:
                dropped += 1
                continue
            if not _VALUE.match(m["value"]):
                raise ClientConfError(f"{path}: {m['key']}: not one printable word")
            if key in REPEATED:
                values.setdefault(key, []).append(m["value"])
            else:
                values[key] = [m["value"]]
    if "slurmctldhost" not in values and "controlmachine" not in values:
        raise ClientConfError(f"{main}: names no controller (SlurmctldHost)")
    body = [f"{_NAMES[k]}={v}" for k in KEPT for v in values.get(k, [])]
    header = f"# rendered by slurm-sidecars client-conf from {main}: the client keys only\n"
    return Rendered(header + "\n".join(body) + "\n", tuple(k for k in KEPT if k in values), dropped)
