"""Drains nobody owns: every drained, down or failed node whose reason is neither ours (our agents',
our control plane's, an admin's written through our API), nor Slinky's operator's.

Most are Slurm's own ("Prolog error", "Kill task failed", "Not responding"): a node Slurm drains
itself stays out until somebody resumes it by hand, and at 1,000 nodes nobody notices. The rest are
an admin's or another tool's (`UNKNOWN`): listed so they are seen, never acted on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from sidecars.controlplane.fleet.snapshot import FleetNode
from sidecars.slurm import reasons
from sidecars.slurm.reasons import Cause

# nodes listed by name in /status (the oldest first); the counts by class always cover every one
LISTED_MAX = 200
REASON_CHARS = 300  # of a reason, in /status and Events


@dataclass(frozen=True, slots=True)
class Unowned:
    node: str
    state: str  # e.g. IDLE+DRAIN, DOWN+NOT_RESPONDING
    reason: str
    cause: Cause
    since: int | None  # epoch the reason was set, None when Slurm did not say

    def as_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "state": self.state,
            "class": self.cause.value,
            "reason": self.reason,
            "since": self.since,
        }


def scan(nodes: Iterable[FleetNode]) -> Iterator[Unowned]:
    """Every node out of service whose reason nobody owns, in the order given."""
    for n in nodes:
        if (why := reasons.unowned(n.state, n.flags, n.reason)) is not None:
            yield Unowned(
                node=n.name,
                state="+".join([n.state, *n.flags]),
                reason=(n.reason or "")[:REASON_CHARS],
                cause=why,
                since=n.reason_since,
            )


def find(nodes: Iterable[FleetNode]) -> list[Unowned]:
    """The same, the oldest first (unknown age last)."""
    return sorted(scan(nodes), key=lambda u: (u.since is None, u.since or 0, u.node))


def counts(found: Iterable[Unowned]) -> dict[str, int]:
    """How many by class, every class present (0 where none): a metric series never just vanishes."""
    tally = Counter(u.cause.value for u in found)
    return {c.value: tally.get(c.value, 0) for c in Cause}


def status(found: list[Unowned]) -> dict[str, Any]:
    return {
        "counts": counts(found),
        "nodes": [u.as_json() for u in found[:LISTED_MAX]],
        "listed_max": LISTED_MAX,
    }
