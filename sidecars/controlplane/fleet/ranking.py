"""Who goes first on scale-in: idle nodes, then those whose running work ends soonest."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from sidecars.slurm import Job

# An unlimited job: never ends by itself. 9999-12-31T23:59:59Z, still a plain JSON integer.
FAR_FUTURE = 253402300799
MAX_BUCKET = 32


class Ranked(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def busy_until(self) -> int | None: ...


def busy_until(jobs: Iterable[Job]) -> int | None:
    """The latest (start + time limit) over the running jobs; None when nothing runs (free now)."""
    latest: int | None = None
    for job in jobs:
        if not job.running:
            continue
        if job.time_limit_minutes is None:
            return FAR_FUTURE
        if job.start_time is not None:
            end = job.start_time + 60 * job.time_limit_minutes
        else:
            end = job.end_time if job.end_time is not None else FAR_FUTURE
        latest = end if latest is None else max(latest, end)
    return latest


def scale_in_order(nodes: Iterable[Ranked]) -> list[str]:
    """Names, first to go first: idle nodes (by name), then the soonest busy_until."""
    return [
        n.name for n in sorted(nodes, key=lambda n: (n.busy_until is not None, n.busy_until or 0, n.name))
    ]


def bucket(until: int | None, now: float) -> int:
    """A coarse rank that changes rarely: 0 idle, then one bucket per doubling of the minutes left,
    MAX_BUCKET for unlimited work. Used as the pod-deletion-cost (lower goes first)."""
    if until is None:
        return 0
    if until >= FAR_FUTURE:
        return MAX_BUCKET
    minutes = max(0, int(until - now) // 60)
    return 1 + min(MAX_BUCKET - 2, minutes.bit_length())


def jobs_by_node(jobs: Iterable[Job]) -> Mapping[str, list[Job]]:
    out: dict[str, list[Job]] = {}
    for job in jobs:
        if job.running:
            for name in job.nodes:
                out.setdefault(name, []).append(job)
    return out
