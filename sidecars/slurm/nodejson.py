"""A Slurm node as the control plane serves it, `{"name","state","flags","reason","jobs","busy_until",
"version"}`, read in one place for everyone who asks for it: the worker agent's long poll and `status`.
It lives at the Slurm edge, beside the node models it is made of, so that both roles can use it."""

from __future__ import annotations

from dataclasses import dataclass

from sidecars.slurm.models import NodeState


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeRecord:
    """One node as the control plane serves it; the agent also builds one from its own Slurm look."""

    name: str
    state: NodeState
    reason: str | None
    jobs: tuple[int, ...] | None = None  # None: the source does not say
    busy_until: int | None = None  # epoch seconds: when the last job on it is expected to end
    version: int | None = None  # the control plane's snapshot version


def _int_or_none(value: object, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{what}: expected a number, got {value!r:.40}")
    return int(value)


def parse_node(obj: object) -> NodeRecord:
    """A `NodeRecord` from decoded JSON; anything that is not a node object raises ValueError."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        raise ValueError(f"not a node: {obj!r:.100}")
    flags, jobs = obj.get("flags") or [], obj.get("jobs")
    if not isinstance(flags, list) or not (jobs is None or isinstance(jobs, list)):
        raise ValueError(f"node {obj['name']}: flags and jobs must be lists")
    # `MIXED+DRAIN` is how Slurm itself writes it: accepted too, the flags land with the others
    base, *more = str(obj.get("state") or "UNKNOWN").upper().split("+")
    try:
        job_ids = None if jobs is None else tuple(int(j) for j in jobs)
    except (TypeError, ValueError):
        raise ValueError(f"node {obj['name']}: jobs must be job ids, got {jobs!r:.60}") from None
    return NodeRecord(
        name=obj["name"],
        state=NodeState(base or "UNKNOWN", frozenset(str(f).upper() for f in flags) | frozenset(more)),
        reason=obj.get("reason") or None,
        jobs=job_ids,
        busy_until=_int_or_none(obj.get("busy_until"), f"node {obj['name']}: busy_until"),
        version=_int_or_none(obj.get("version"), f"node {obj['name']}: version"),
    )
