"""The scale-in rank as Slinky's NodeSet controller reads it (slurm-operator v1.3,
`internal/controller/nodeset/utils/sort.go`): a lower `pod-deletion-cost` goes first (an int32;
missing or invalid reads 0), then an earlier `pod-deadline` (RFC 3339; missing or invalid reads as
the zero time, before any other). The operator writes the deadline itself when it has a Slurm
client, from the same start + time limit per running job, and removes it from idle pods: we write
the same instants, compared as instants, so the two writers agree instead of taking turns."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

from sidecars.controlplane.fleet.ranking import FAR_FUTURE

COST = "nodeset.slinky.slurm.net/pod-deletion-cost"
DEADLINE = "nodeset.slinky.slurm.net/pod-deadline"
# Past this (2200-01-01) a deadline is unlimited work: we write 9999-12-31, the operator writes
# start + Go's largest duration (~292 years); both mean "last", neither is rewritten to the other.
UNLIMITED_AFTER = 7258118400
INVALID = -1  # a deadline that does not parse: never equal to one we want, so it is rewritten

Mark = tuple[int | None, int | None]  # (cost, deadline in epoch seconds; None: no annotation)


def read(annotations: Mapping[str, str]) -> Mark:
    """What a pod carries now (an unreadable cost reads None, an unreadable deadline INVALID)."""
    text = annotations.get(COST)
    try:
        cost = int(text) if text is not None else None
    except ValueError:
        cost = None
    if cost is not None and (str(cost) != text or not -(2**31) <= cost < 2**31):
        cost = None  # "+5", "05", " 5" or past an int32: the operator reads 0, so it is rewritten
    return cost, _parse(annotations.get(DEADLINE))


def same(have: Mark, wanted: Mark) -> bool:
    return have[0] == wanted[0] and _key(have[1]) == _key(wanted[1])


def patch(mark: Mark) -> dict[str, str | None]:
    """The annotations to patch (a None deadline removes it, as the operator does for idle pods)."""
    cost, until = mark
    return {COST: None if cost is None else str(cost), DEADLINE: None if until is None else _format(until)}


def _key(until: int | None) -> int | None:
    return UNLIMITED_AFTER if until is not None and until >= UNLIMITED_AFTER else until


def _format(until: int) -> str:
    stamp = dt.datetime.fromtimestamp(min(until, FAR_FUTURE), dt.UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse(text: str | None) -> int | None:
    if text is None:
        return None
    if len(text) < 20 or text[10] not in "Tt":  # Go's RFC 3339 wants the T; Python would take a space
        return INVALID
    try:
        stamp = dt.datetime.fromisoformat(text)
    except ValueError:
        return INVALID
    if stamp.tzinfo is None:  # RFC 3339 requires an offset; Go refuses one without
        return INVALID
    return int(stamp.timestamp())
