"""Parsing of Slurm's one-line text output (`scontrol -o show ...`), the path for releases without JSON.

Each record is one line of `Key=Value` words. Values may hold spaces (`OS=Linux 6.1 #1 SMP`,
`Reason=maint test [root@2026-11-30T03:04:53]`), and job detail repeats keys once per node group
(`Nodes=n1 CPU_IDs=0 GRES=gpu:2(IDX:0-1)`), so a record is a list of pairs, not a dict.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Sequence
from datetime import date

from sidecars.slurm import fields, hostlist
from sidecars.slurm.errors import SlurmParseError
from sidecars.slurm.models import BootTime, Job, Node, NodeState, Partition, Ping, Reason, Reservation

_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_:/.\-]*$")
_NULL = {"", "(null)", "N/A", "n/a", "None", "Unknown", "NONE", "n/s"}
# no `[` in a user: each `[` of a line is tried once (with it, a run of `[` was quadratic)
_REASON_STAMP = re.compile(r"\[[^@\[\]\s]+@[0-9T:\-]+\]")
# matched from the line's last `[` only (a lazy head before it retried the rest at each character)
_REASON_TAIL = re.compile(r"\[(?P<user>[^@\[\]]+)@(?P<time>[0-9T:\-]+)\]\s*")
_GPU_IDX = re.compile(r"gpu(?::[^:(),]+)?:\d+\(IDX:(?P<idx>[^)]*)\)")


def pairs(line: str) -> list[tuple[str, str]]:
    """Split one record into (key, value) pairs, gluing space-separated words without `=` to the value.

    `Reason=` takes the rest of the line: an operator's reason may contain anything. Only what follows
    its `[user@time]` tail is read as pairs again: a node in a reservation has `ReservationName=` there.
    """
    out: list[tuple[str, str]] = []
    glued: dict[int, list[str]] = {}  # the words without `=` that belong to a pair's value
    words = line.strip().split(" ")
    i = 0
    while i < len(words):
        word = words[i]
        key, eq, value = word.partition("=")
        if eq and _KEY.match(key):
            if key == "Reason" and out and out[0][0] == "NodeName":
                rest = " ".join([value, *words[i + 1 :]]).strip()
                tail = _REASON_STAMP.search(rest)
                after = rest[tail.end() :].strip() if tail else ""
                more = after.split()
                if tail and more and all("=" in w and _KEY.match(w.partition("=")[0]) for w in more):
                    out.append((key, rest[: tail.end()]))
                    out.extend(pairs(after))
                else:
                    out.append((key, rest))
                break
            out.append((key, value))
        elif out and word:
            glued.setdefault(len(out) - 1, []).append(word)
        i += 1
    for at, more in glued.items():  # joined once: a value re-joined at each word was quadratic
        k, v = out[at]
        out[at] = (k, " ".join([v, *more]))
    return out


def records(text: str) -> Iterator[list[tuple[str, str]]]:
    for line in text.splitlines():
        if line.strip() and "=" in line:
            yield pairs(line)


def nullable(value: str | None) -> str | None:
    return None if value is None or value.strip() in _NULL else value.strip()


def parse_time(value: str | None) -> int | None:
    """`2026-11-30T03:04:53` (the controller's local time, as the client prints it) -> epoch."""
    v = nullable(value)
    if v is None:
        return None
    try:
        fields = _clock_fields(v) or time.strptime(v, "%Y-%m-%dT%H:%M:%S")[:6]
        return int(time.mktime((*fields, 0, 1, -1)))  # -1: the zone's own daylight rule, as strptime
    except ValueError:
        return None


def _clock_fields(v: str) -> tuple[int, int, int, int, int, int] | None:
    """The exact `YYYY-MM-DDTHH:MM:SS` shape Slurm prints, read without strptime (which looks the
    locale up on every call: 3,600 distinct start times were a tenth of a 50,000-job read); None for
    any other shape, left to strptime. Out-of-range fields raise ValueError, as strptime does."""
    if len(v) != 19 or v[4] != "-" or v[7] != "-" or v[10] != "T" or v[13] != ":" or v[16] != ":":
        return None
    digits = (v[0:4], v[5:7], v[8:10], v[11:13], v[14:16], v[17:19])
    if not all(d.isascii() and d.isdigit() for d in digits):
        return None
    y, mo, d, h, mi, sec = map(int, digits)
    date(y, mo, d)  # the day exists (ValueError otherwise)
    if h > 23 or mi > 59 or sec > 61:
        raise ValueError(v)
    return y, mo, d, h, mi, sec


def parse_minutes(value: str | None) -> int | None:
    """A Slurm duration (`UNLIMITED`, `1-02:03:04`, `02:03:04`, `03:04`, `5`) in whole minutes."""
    v = nullable(value)
    if v is None or v.upper() in {"UNLIMITED", "INFINITE"}:
        return None
    days = 0
    if "-" in v:
        d, _, v = v.partition("-")
        days = int(d)
    parts = [int(p) for p in v.split(":")]
    if len(parts) == 3:
        h, m, s = parts
    elif len(parts) == 2:
        h, m, s = 0, parts[0], parts[1]
    else:
        h, m, s = 0, parts[0], 0
    return days * 1440 + h * 60 + m + (1 if s else 0)


def int_or(value: str | None, default: int = 0) -> int:
    v = nullable(value)
    try:
        return int(v) if v is not None else default
    except ValueError:
        return default


def hosts(value: str | None) -> tuple[str, ...]:
    """The names of a hostlist as Slurm prints it (`n[1-3],gpu1`); none for a null word."""
    return tuple(hostlist.expand(nullable(value) or ""))


def _words(value: str | None) -> tuple[str, ...]:
    v = nullable(value)
    return tuple(w for w in v.split(",") if w) if v else ()


def parse_reason(value: str | None, user: str | None = None, when: int | None = None) -> Reason | None:
    v = nullable(value)
    if v is None:
        return None
    at = v.rfind("[")
    m = _REASON_TAIL.fullmatch(v, at) if at >= 0 else None
    if m:
        return Reason(v[:at].rstrip(), m["user"], parse_time(m["time"]))
    return Reason(v, user, when)


def gpu_indices(gres: str | None) -> tuple[int, ...]:
    """`gpu:2(IDX:0-1),gpu:a100:1(IDX:3)` -> (0, 1, 3)."""
    found: list[int] = []
    for m in _GPU_IDX.finditer(gres or ""):
        for item in m["idx"].split(","):
            if not item or item == "N/A":
                continue
            lo, _, hi = item.partition("-")
            found.extend(range(int(lo), int(hi or lo) + 1))
    return tuple(sorted(set(found)))


def _gres(value: str | None) -> str:
    """Drop the `(IDX:...)` detail, which only `-d` prints: `gpu:2(IDX:0-1)` -> `gpu:2`."""
    v = nullable(value) or ""
    return re.sub(r"\(IDX:[^)]*\)|\(S:[^)]*\)", "", v)


def _maybe_count(value: str | None) -> int | None:
    return int_or(value) if value and value.isdigit() else None


def _text(value: str | None) -> str:
    return nullable(value) or ""


def _name(value: str | None) -> str:
    return value or ""


# how this format reads each kind of field in `fields`' tables
_READERS: fields.Readers = {
    fields.Kind.COUNT: int_or,
    fields.Kind.MAYBE_COUNT: _maybe_count,
    fields.Kind.WORDS: _words,
    fields.Kind.GRES: _gres,
    fields.Kind.TEXT: _text,
    fields.Kind.NAME: _name,
    fields.Kind.TIME: parse_time,
}


def node_from_pairs(p: list[tuple[str, str]]) -> Node:
    d = dict(p)
    return Node(
        name=d["NodeName"],
        state=NodeState.parse(d.get("State", "UNKNOWN")),
        reason=parse_reason(d.get("Reason")),
        version=nullable(d.get("Version")),
        port=_maybe_count(d.get("Port")),
        **fields.read_text(fields.NODE, d, _READERS),
    )


def nodes(text: str) -> list[Node]:
    return [node_from_pairs(p) for p in records(text) if p and p[0][0] == "NodeName"]


def job_from_pairs(p: list[tuple[str, str]]) -> Job:
    d: dict[str, str] = {}
    gpus: dict[str, tuple[int, ...]] = {}
    group: list[str] = []
    for key, value in p:
        d.setdefault(key, value)  # the first occurrence is the job's own; later ones are node detail
        if key == "Nodes":
            group = hostlist.expand(value)
        elif key == "GRES" and group:
            idx = gpu_indices(value)
            if idx:
                for n in group:
                    gpus[n] = idx
    state = d.get("JobState", "UNKNOWN").split("+")[0].upper()
    user = d.get("UserId", "")
    start = parse_time(d.get("StartTime"))
    end = parse_time(d.get("EndTime"))
    if state == "PENDING":
        start = end = None  # a pending job's times are estimates, not facts
    return Job(
        job_id=int(d["JobId"]),
        user=user.split("(")[0],
        state=state,
        state_reason=d.get("Reason", "None"),
        nodes=hosts(d.get("NodeList")),
        start_time=start,
        end_time=end,
        time_limit_minutes=parse_minutes(d.get("TimeLimit")),
        gpu_indices=gpus,
        node_count=int_or(d.get("NumNodes", "0").split("-")[0]),
        gpus_per_node=gpus_per_node(nullable(d.get("TresPerNode")) or ""),
        **fields.read_text(fields.JOB, d, _READERS),
    )


def gpus_per_node(tres: str) -> int:
    """`gres:gpu:2` (22.05) or `gres/gpu:2`, `gres/gpu:a100:2` (24.11) -> 2; one GPU when no count."""
    for item in tres.split(","):
        parts = item.replace("/", ":").split(":")
        if len(parts) >= 2 and parts[0] == "gres" and parts[1] == "gpu":
            last = parts[-1]
            return int(last) if last.isdigit() and len(parts) > 2 else 1
    return 0


def jobs(text: str) -> list[Job]:
    return [job_from_pairs(p) for p in records(text) if p and p[0][0] == "JobId"]


def partitions(text: str) -> list[Partition]:
    out = []
    for p in records(text):
        if not p or p[0][0] != "PartitionName":
            continue
        d = dict(p)
        out.append(
            Partition(
                name=d["PartitionName"],
                nodes=hosts(d.get("Nodes")),
                state=d.get("State", "UNKNOWN").upper(),
                max_time_minutes=parse_minutes(d.get("MaxTime")),
                total_cpus=int_or(d.get("TotalCPUs")),
            )
        )
    return out


def reservations(text: str) -> list[Reservation]:
    """`scontrol -o show reservation` (its "No reservations in the system" has no pairs: none)."""
    out: list[Reservation] = []
    for p in records(text):
        d = dict(p)
        if "ReservationName" not in d:
            continue
        out.append(
            Reservation(
                name=d["ReservationName"],
                start=parse_time(d.get("StartTime")),
                end=parse_time(d.get("EndTime")),
                nodes=hosts(d.get("Nodes")),
                flags=frozenset(_words(d.get("Flags"))),
                state=d.get("State", "").strip().upper(),
                comment=nullable(d.get("Comment")),
                users=nullable(d.get("Users")),
            )
        )
    return out


def config(text: str) -> dict[str, str]:
    """`scontrol show config`: `Key  = Value` lines; the header and section titles are skipped."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        key = key.strip()
        if sep and key and " " not in key:
            out[key] = value.strip()
    return out


def boot_time(text: str) -> BootTime:
    """BOOT_TIME of `scontrol show config`, and its header's query time (`Configuration data as of T`)."""
    asked = re.search(r"^Configuration data as of (\S+)", text, re.MULTILINE)
    return BootTime(config(text).get("BOOT_TIME"), asked[1] if asked else None)


def ping(text: str) -> Ping:
    """`Slurmctld(primary) at vm is UP` / `... is DOWN`, one line per controller."""
    controllers: dict[str, bool] = {}
    for m in re.finditer(r"Slurmctld\((\w+)\) at (\S+) is (UP|DOWN)", text):
        controllers[f"{m[1]}:{m[2]}"] = m[3] == "UP"
    return Ping(up=any(controllers.values()), controllers=controllers)


def sdiag_rpcs(text: str) -> dict[str, int]:
    """RPC counts by message type from `sdiag` ("Remote Procedure Call statistics by message type")."""
    out: dict[str, int] = {}
    section = False
    for line in text.splitlines():
        if "statistics by message type" in line:
            section = True
            continue
        if section and "statistics by user" in line:
            break
        # starts only where no blank or word character stands before it (the leftmost match never
        # does): searched, a long run is read once, not again from each character (quadratic)
        m = re.match(r"(?<![\s\w])\s*+(\w++)\s*+\(\s*+\d++\)\s*+count:(\d++)", line)
        if section and m:
            out[m[1]] = int(m[2])
    return out


def sdiag_dbd_queue(text: str) -> int:
    """The records slurmctld holds for slurmdbd that slurmdbd has not taken yet: `sdiag`'s
    "DBD Agent queue size" (printed by every release, 0 without accounting)."""
    m = re.search(r"^DBD Agent queue size:\s*(\d+)\s*$", text, re.MULTILINE)
    if m is None:
        raise SlurmParseError(["sdiag"], "no 'DBD Agent queue size' in its answer")
    return int(m[1])


def accounting_ping(argv: Sequence[str], returncode: int, text: str) -> bool:
    """Whether slurmdbd answered `argv` (SlurmClient.accounting_ping): `sacctmgr ping` prints
    `slurmdbd(primary) at HOST is UP` (or DOWN) per slurmdbd; the older fallback, a cluster list,
    answered when it exited 0."""
    if "ping" in argv:
        return bool(re.search(r"^slurmdbd\(\w+\) at \S+ is UP$", text, re.MULTILINE))
    return returncode == 0
