"""Parsing of Slurm's JSON output, every data-parser layout in one place.

- 22.05 (openapi/v0.0.38): `"state":"allocated","state_flags":["DRAIN"]`, plain integer times,
  unlimited = null, features as a comma string, `job_resources.allocated_nodes[].nodename`.
- 23.02+ and 24.11 (data_parser v0.0.40-v0.0.42): state lists `["ALLOCATED","DRAIN"]`, numbers as
  `{"set":..,"infinite":..,"number":..}`, features as lists, `job_resources.nodes.allocation[].name`.
- 25.x/26.x (v0.0.43-v0.0.45, checked field by field against Slurm's published OpenAPI documents):
  the v0.0.42 shapes for every field read here (only enum lists grow: EXTERNAL and BLOCKED node
  states in v0.0.44), so the same readers apply.
"""

from __future__ import annotations

import json
import re
from typing import Any

from sidecars.runtime import gcpause, limits
from sidecars.slurm import fields, hostlist
from sidecars.slurm.errors import SlurmParseError, SlurmUnreachable
from sidecars.slurm.models import Job, Node, NodeState, Partition, Reason
from sidecars.slurm.textformat import gpu_indices, gpus_per_node

Obj = dict[str, Any]

_SPACE = re.compile(r"[ \t\n\r]*")  # JSON's whitespace, as the json module skips it
_DECODER = json.JSONDecoder()


def _skip(text: str, pos: int) -> int:
    end = _SPACE.match(text, pos)
    return pos if end is None else end.end()


def _decode_by_item(text: str) -> Any:
    """`json.loads(text)` for a top-level object, each item of its top-level lists decoded in a call
    of its own: 10,000 nodes' JSON is one 100 ms C call in `json.loads`, which holds the interpreter
    lock throughout (the loop's thread cannot run), and ~10 us a call here, between which the lock
    is handed over. Anything else (not an object, not JSON) is left to `json.loads`, whose answer
    (its error) is the one given."""
    try:
        doc = _object_by_item(text)
    except (ValueError, IndexError):  # cut short, or a value not JSON
        doc = None
    return json.loads(text) if doc is None else doc  # json.loads says where it is not JSON


def _after_value(text: str, pos: int, close: str) -> int:
    """Past what follows a value: at the next value, or at `close`. Anything else (a trailing comma
    included) is not JSON: ValueError, and json.loads says where."""
    pos = _skip(text, pos)
    if text[pos] == close:
        return pos
    if text[pos] == ",":
        pos = _skip(text, pos + 1)
        if text[pos] != close:
            return pos
    raise ValueError(f"not JSON at {pos}")


def _object_by_item(text: str) -> dict[str, Any] | None:
    """The top-level object, or None where the text is anything else (ValueError, IndexError where
    it is not JSON)."""
    doc: dict[str, Any] = {}
    pos = _skip(text, 0)
    if text[pos] != "{":
        return None
    pos = _skip(text, pos + 1)
    while text[pos] != "}":
        name, pos = _DECODER.raw_decode(text, pos)
        pos = _skip(text, pos)
        if not isinstance(name, str) or text[pos] != ":":
            return None
        pos = _skip(text, pos + 1)
        if text[pos] == "[":
            items: list[Any] = []
            pos = _skip(text, pos + 1)
            while text[pos] != "]":
                item, pos = _DECODER.raw_decode(text, pos)
                items.append(item)
                pos = _after_value(text, pos, "]")
            doc[name], pos = items, pos + 1
        else:
            doc[name], pos = _DECODER.raw_decode(text, pos)
        pos = _after_value(text, pos, "}")
    return doc if _skip(text, pos + 1) == len(text) else None  # nothing after the object


def load(argv: list[str], text: str, key: str) -> list[Obj]:
    """Decode a document and return its list under `key`, or raise with Slurm's own errors."""
    try:
        # a large one item by item: in a thread (runtime.offloop), the loop keeps its turns
        doc = _decode_by_item(text) if len(text) >= limits.OFF_LOOP_CHARS else json.loads(text)
    except json.JSONDecodeError as exc:
        raise SlurmParseError(argv, f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise SlurmParseError(argv, "JSON document is not an object")
    errors = [e for e in doc.get("errors") or [] if isinstance(e, dict)]
    if errors:
        # 22.05's `sinfo/squeue --json` exit 0 with `"errors":[{"error":"Unspecified error"}]` and an
        # empty list when the controller is down: never read that as "no nodes", retry it instead
        msg = "; ".join(
            " ".join(str(e[k]) for k in ("source", "description", "error") if e.get(k)) or str(e)
            for e in errors
        )
        raise SlurmUnreachable(argv, f"Slurm reported errors: {msg}")
    items = doc.get(key)
    if not isinstance(items, list):
        raise SlurmParseError(argv, f"JSON document has no list {key!r}")
    return [i for i in items if isinstance(i, dict)]


def nodes(argv: list[str], text: str) -> list[Node]:
    """Every node of a `scontrol show nodes --json` (or 22.05 `sinfo --json`) document."""
    with gcpause.paused():  # a million short-lived containers at 10,000 nodes, none in a cycle
        return [node(o) for o in load(argv, text, "nodes")]


def jobs(argv: list[str], text: str) -> list[Job]:
    """Every job of a `scontrol show job --json` (or 22.05 `squeue --json`) document."""
    with gcpause.paused():
        return [job(o) for o in load(argv, text, "jobs")]


def number(value: Any) -> int | None:
    """A plain number, or a `{set, infinite, number}` object; None when unset or infinite."""
    if isinstance(value, dict):
        if value.get("infinite") or not value.get("set", True):
            return None
        value = value.get("number")
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return int(value)
    return None


def _time(value: Any) -> int | None:
    n = number(value)
    return n if n else None  # Slurm writes 0 for "not set"


def _words(value: Any) -> tuple[str, ...]:
    if isinstance(value, list):
        return tuple(str(v) for v in value if v)
    if isinstance(value, str) and value:
        return tuple(v for v in value.split(",") if v)
    return ()


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _hosts(value: Any) -> tuple[str, ...]:
    return tuple(hostlist.expand(_str(value)))


def _gres(value: Any) -> str:
    v = _str(value)
    return "" if v in {"", "N/A", "(null)"} else v


def _count(value: Any) -> int:
    return number(value) or 0


# how this format reads each kind of field in `fields`' tables
_READERS: fields.Readers = {
    fields.Kind.COUNT: _count,
    fields.Kind.MAYBE_COUNT: number,
    fields.Kind.WORDS: _words,
    fields.Kind.GRES: _gres,
    fields.Kind.TEXT: _str,
    fields.Kind.NAME: _str,
    fields.Kind.TIME: _time,
}


def node_state(obj: Obj) -> NodeState:
    state = obj.get("state")
    if isinstance(state, list):
        return NodeState.from_words([str(s) for s in state])
    flags = [str(f) for f in obj.get("state_flags") or []]
    return NodeState.from_words([str(state or "UNKNOWN"), *flags])


def node(obj: Obj) -> Node:
    reason_text = _str(obj.get("reason"))
    reason = (
        Reason(reason_text, _str(obj.get("reason_set_by_user")) or None, _time(obj.get("reason_changed_at")))
        if reason_text
        else None
    )
    return Node(
        name=str(obj["name"]),
        state=node_state(obj),
        reason=reason,
        version=_str(obj.get("version") or obj.get("slurmd_version")) or None,
        port=number(obj.get("port")) or None,
        **fields.read_json(fields.NODE, obj, _READERS),
    )


def _allocation_order(obj: Obj) -> list[str]:
    res = obj.get("job_resources")
    if isinstance(res, dict):
        old = res.get("allocated_nodes")  # v0.0.38
        if isinstance(old, list):
            return [str(n.get("nodename")) for n in old if isinstance(n, dict)]
        new = res.get("nodes")  # v0.0.40+
        if isinstance(new, dict) and isinstance(new.get("allocation"), list):
            return [str(n.get("name")) for n in new["allocation"] if isinstance(n, dict)]
    return hostlist.expand(_str(obj.get("nodes")))


def job(obj: Obj) -> Job:
    state_v = obj.get("job_state")
    state = (state_v[0] if isinstance(state_v, list) and state_v else str(state_v or "UNKNOWN")).upper()
    gpus: dict[str, tuple[int, ...]] = {}
    # gres_detail has one entry per allocated node, in allocation order
    for name, detail in zip(_allocation_order(obj), obj.get("gres_detail") or [], strict=False):
        idx = gpu_indices(str(detail))
        if idx:
            gpus[name] = idx
    start, end = _time(obj.get("start_time")), _time(obj.get("end_time"))
    time_limit = obj.get("time_limit")
    limit = number(time_limit)
    if state == "PENDING":
        start = end = None
    elif limit is None and start is not None:
        end = None  # Slurm reports start + 365 days for an unlimited job: it is not an expected end
    return Job(
        job_id=int(number(obj.get("job_id")) or 0),
        user=_str(obj.get("user_name")),
        state=state,
        state_reason=_str(obj.get("state_reason")) or "None",
        nodes=_hosts(obj.get("nodes")),
        start_time=start,
        end_time=end,
        time_limit_minutes=limit,
        gpu_indices=gpus,
        node_count=number(obj.get("node_count")) or 0,
        gpus_per_node=gpus_per_node(_str(obj.get("tres_per_node"))),
        **fields.read_json(fields.JOB, obj, _READERS),
    )


def partition(obj: Obj) -> Partition:
    nodes = obj.get("nodes")
    conf = nodes.get("configured") if isinstance(nodes, dict) else nodes
    part = obj.get("partition")
    state = part.get("state") if isinstance(part, dict) else obj.get("state")
    state_s = state[0] if isinstance(state, list) and state else str(state or "UNKNOWN")
    maximums = obj.get("maximums")
    max_time = number(maximums.get("time")) if isinstance(maximums, dict) else None
    cpus = obj.get("cpus")
    total = number(cpus.get("total")) if isinstance(cpus, dict) else number(obj.get("total_cpus"))
    return Partition(
        name=str(obj["name"]),
        nodes=_hosts(conf),
        state=state_s.upper(),
        max_time_minutes=max_time,
        total_cpus=total or 0,
    )
