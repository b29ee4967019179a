"""Did the change hurt the fleet? And, when it did, undo what Slurm did because of it.

A worker that took a change may still be hurt by it: slurmctld judges every registration against what
slurm.conf and gres.conf now say, and a worker that reports less (GRES, memory, CPUs, features,
topology) is set INVALID_REG and DRAINed with a reason of Slurm's own (measured, a configless GPU
worker whose gres.conf was dropped: `gres/gpu count reported lower than configured (0 < 1)`, on 24.11
and 26.05 in both shapes, and on 22.05 in the classic one). Putting the good set back does not lift
those drains: Slurm keeps a drain until someone resumes the node.

So the fleet is read before and after every apply (`Health`: each node's state and reason, each
partition's usable nodes, how many nodes are in each state), and a node that answered before and now
carries a drain, DOWN, FAIL or INVALID state whose reason Slurm set at or after the change's second
is harmed by it. Only those are undone after the rollback, each matched by Slurm's exact reason and
its time: a healthy node is resumed, a node an admin had drained gets the admin's reason back (24.11
and 26.05 overwrite it with theirs). A drain anyone set for another reason, or before the change,
is never touched.

The judge adds no wait of its own to a change that hurts nobody: from 23.11 every slurmd restarts on
a reconfigure and registers again, and its SlurmdStartTime moving past the change is the sign its
registration was judged (Slurm sets the start time and the verdict in one step under its node lock).
workers.py already waits for that; the judge reads what it read. 22.05 reconfigures slurmd in place,
with no such sign: there the fleet is read after the settle period (registration measured within
0.6 s of the reconfigure).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from sidecars.configsync.apply.workers import answered
from sidecars.slurm import SlurmClient, SlurmError
from sidecars.slurm.models import Node, Partition

log = structlog.get_logger(__name__)

# what makes a node unusable, as Slurm says it (`DOWN` is a base state, the rest flags)
UNHEALTHY_FLAGS = frozenset({"DRAIN", "INVALID", "INVALID_REG", "FAIL", "NOT_RESPONDING"})
_HARM_FLAGS = frozenset({"DRAIN", "INVALID", "INVALID_REG", "FAIL"})
# the reasons slurmctld sets when it judges a registration, as the releases we run word them (read
# off 22.05's, 24.11's and 26.05's slurmctld and libslurmfull, docs/config-sync-harm.md): GRES
# (`gres/gpu count reported lower than configured (0 < 1)`, `... count too low (1 < 2)`), resources
# (`Low RealMemory (reported:...)`, `Low CPUs`, ...) and 26.05's topology (`Failed to set topology
# 'x:y'`, a new dynamic worker's). None sets one for features: a slurmd reports none without a
# node_features plugin. A reason matching none of these is someone else's: an admin's drain worded
# "feature" or "Invalid DIMM" at the change's second is not the change's (a node Slurm marked
# INVALID is judged by the mark, whatever the words)
REGISTRATION_REASON = re.compile(
    r"count reported lower than configured|count too low \(|^Low (CPUs|RealMemory|TmpDisk|socket)|"
    r"Failed to set topology|^Node unexpectedly rebooted"
)
NAMED_AT_MOST = 5


def healthy(node: Node) -> bool:
    """Usable: its slurmd answers and nothing of Slurm's or anyone's keeps jobs off it."""
    return answered(node) and not node.state.flags & UNHEALTHY_FLAGS


def usable(parts: Mapping[str, Partition], nodes: Mapping[str, Node]) -> dict[str, int]:
    """Each partition's healthy nodes, by name."""
    return {p.name: sum(1 for n in p.nodes if n in nodes and healthy(nodes[n])) for p in parts.values()}


def state_counts(nodes: Iterable[Node]) -> dict[str, int]:
    """Node records per state (`IDLE+DRAIN`, ...), as P1-scale counts them."""
    return dict(Counter("+".join([n.state.base, *sorted(n.state.flags)]) for n in nodes))


@dataclass(frozen=True, slots=True)
class Harmed:
    """One node the change hurt: how it was before, and what Slurm set on it because of the change."""

    name: str
    reason: str  # Slurm's, exactly
    reason_time: int  # epoch seconds, as Slurm listed it after the change
    state: str  # e.g. IDLE+DRAIN+INVALID_REG
    admin_reason: str | None  # the drain someone had set before the change (given back at the undo)


@dataclass
class Harm:
    """The judge's verdict on one change."""

    since: int  # the change's second (epoch)
    harmed: list[Harmed] = field(default_factory=list)
    usable_before: dict[str, int] = field(default_factory=dict)
    usable_after: dict[str, int] = field(default_factory=dict)
    states_before: dict[str, int] = field(default_factory=dict)
    states_after: dict[str, int] = field(default_factory=dict)
    # partitions whose every usable node left them with the change (a NodeSet's feature no worker
    # has, a node list naming none of them): jobs queue there forever. Judged as harm
    emptied: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.harmed and not self.emptied

    def reason(self) -> str:
        by_why: dict[str, list[str]] = {}
        for h in self.harmed:
            by_why.setdefault(h.reason, []).append(h.name)
        words = []
        for why, names in sorted(by_why.items()):
            listed = sorted(names)
            head = ", ".join(listed[:NAMED_AT_MOST])
            more = f" and {len(listed) - NAMED_AT_MOST} more" if len(listed) > NAMED_AT_MOST else ""
            words.append(f"Slurm drained {head}{more} after the change ({why})")
        lost = {
            p: (self.usable_before[p], n)
            for p, n in sorted(self.usable_after.items())
            if n < self.usable_before.get(p, 0)
        }
        for p in self.emptied:
            words.append(f"partition {p} has no usable node left after the change (its nodes left it)")
        if lost:
            words.append(
                "usable nodes: " + ", ".join(f"partition {p} {a} -> {b}" for p, (a, b) in lost.items())
            )
        return "; ".join(words)

    def as_json(self) -> dict[str, Any]:
        return {
            "since": self.since,
            "harmed": [
                {"node": h.name, "reason": h.reason, "state": h.state, "admin_reason": h.admin_reason}
                for h in sorted(self.harmed, key=lambda h: h.name)
            ],
            "usable_before": self.usable_before,
            "usable_after": self.usable_after,
            "states_before": self.states_before,
            "states_after": self.states_after,
            "emptied": self.emptied,
        }


def _set_by_change(before: Node, now: Node, since: int) -> bool:
    """`now` carries a state Slurm set because of the change. A node usable before that Slurm
    marked INVALID at registration since: Slurm's alone (24.11 keeps a resumed node's last reason,
    and drains it again under that old text and time: the mark, not the reason, tells). Otherwise
    an unhealthy state under a reason of Slurm's registration checks, set at or after the change's
    second, and not the one the node had."""
    bad = bool(now.state.flags & _HARM_FLAGS) or now.state.base == "DOWN"
    if not bad or now.reason is None:
        return False
    if healthy(before) and now.state.flags & {"INVALID", "INVALID_REG"}:
        return True
    r = now.reason
    if r.time is None or r.time < since:
        return False
    if before.reason is not None and before.reason.text == r.text and before.reason.time == r.time:
        return False  # the same drain as before the change
    invalid = bool(now.state.flags & {"INVALID", "INVALID_REG"})
    return invalid or bool(REGISTRATION_REASON.search(r.text))


def judge(
    before: Mapping[str, Node],
    after: Mapping[str, Node],
    since: float,
    parts_before: Mapping[str, Partition] | None = None,
    parts_after: Mapping[str, Partition] | None = None,
) -> Harm:
    """The nodes that answered before the change at `since` (epoch) and that Slurm made unusable
    because of it. A node not listed after (a dynamic node gone) is the workers' verdict's business."""
    second = int(since)
    harm = Harm(
        second, states_before=state_counts(before.values()), states_after=state_counts(after.values())
    )
    if parts_before is not None:
        harm.usable_before = usable(parts_before, before)
        harm.usable_after = usable(parts_after or parts_before, after)
        for name, was_part in parts_before.items():
            now_part = (parts_after or {}).get(name)
            kept = [n for n in was_part.nodes if n in before and healthy(before[n])]
            if now_part is None or not kept or harm.usable_after.get(name, 0):
                continue
            if not set(kept) & set(now_part.nodes):  # they left it, rather than turned unusable
                harm.emptied.append(name)
    for name, was in before.items():
        now = after.get(name)
        if now is None or not answered(was) or not _set_by_change(was, now, second):
            continue
        assert now.reason is not None
        admin = was.reason.text if was.state.drain and was.reason is not None else None
        state = "+".join([now.state.base, *sorted(now.state.flags)])
        harm.harmed.append(Harmed(name, now.reason.text, now.reason.time or 0, state, admin))
    return harm


@dataclass
class Undone:
    """What the undo did after a rollback: resumed, given back their admin's drain, or left."""

    resumed: list[str] = field(default_factory=list)
    redrained: list[str] = field(default_factory=list)
    left: dict[str, str] = field(default_factory=dict)  # node -> why it was not touched
    registered_seconds: float | None = None  # the rollback's reconfigure until the harmed re-registered
    not_answering: list[str] = field(default_factory=list)  # resumed, yet not answering Slurm's ping

    def describe(self) -> str:
        words = []
        if self.resumed:
            words.append(f"resumed {', '.join(sorted(self.resumed))}")
        if self.redrained:
            words.append(f"gave {', '.join(sorted(self.redrained))} their earlier drain back")
        words += [f"left {n}: {why}" for n, why in sorted(self.left.items())]
        if self.not_answering:
            words.append(f"resumed, not answering yet: {', '.join(self.not_answering)}")
        return "; ".join(words)

    def as_json(self) -> dict[str, Any]:
        return {
            "resumed": sorted(self.resumed),
            "redrained": sorted(self.redrained),
            "left": dict(sorted(self.left.items())),
            "registered_seconds": self.registered_seconds,
            "not_answering": self.not_answering,
        }


async def _read(client: SlurmClient, names: list[str]) -> dict[str, Node]:
    try:
        return await client.nodes_named(names)
    except SlurmError as exc:
        log.warning("harm_nodes_unreadable", error=exc.message)
        return {}


async def registered_again(
    client: SlurmClient, names: Iterable[str], since: float, within: float, *, restarts: bool
) -> tuple[dict[str, Node], float | None]:
    """The nodes as Slurm lists them once each registered after `since` (epoch) with no INVALID mark
    left, read by name until then, at most `within` s; with how long that took (None: not all did).
    With `restarts` (23.11+) a registration shows as the slurmd's start time; 22.05 reconfigures
    slurmd in place and shows none: there the INVALID mark going is the only sign."""
    wanted = sorted(names)
    started = time.monotonic()
    deadline = started + within
    second = int(since)
    while True:
        nodes = await _read(client, wanted)
        if len(nodes) == len(wanted) and all(
            (not restarts or (n.slurmd_start_time or 0) >= second)
            and not n.state.flags & {"INVALID", "INVALID_REG"}
            for n in nodes.values()
        ):
            return nodes, time.monotonic() - started
        if time.monotonic() >= deadline:
            return nodes, None
        await asyncio.sleep(0.1)


async def answering(client: SlurmClient, names: list[str], within: float) -> list[str]:
    """Slurm marks a resumed node NOT_RESPONDING until its next ping answers: wait for that, at
    most `within` s, so that what is reported is the fleet as it is. The names still not answering."""
    deadline = time.monotonic() + within
    while True:
        nodes = await _read(client, names)
        late = sorted(n for n in names if n not in nodes or "NOT_RESPONDING" in nodes[n].state.flags)
        if not late or time.monotonic() >= deadline:
            return late
        await asyncio.sleep(0.1)


async def undo(client: SlurmClient, harm: Harm, since: float, within: float, *, restarts: bool) -> Undone:
    """After the rollback's reconfigure at `since`: once the harmed nodes registered on the good
    set, take back what Slurm set because of the change, each node matched by its exact reason and
    time. A node whose registration on the good set failed too keeps its state (said, not hidden)."""
    out = Undone()
    if not harm.harmed:
        return out
    nodes, took = await registered_again(
        client, (h.name for h in harm.harmed), since, within, restarts=restarts
    )
    out.registered_seconds = took
    resume: list[str] = []
    for h in harm.harmed:
        now = nodes.get(h.name)
        r = now.reason if now is not None else None
        if now is None:
            out.left[h.name] = "no longer listed by slurmctld"
        elif r is None or r.text != h.reason or (r.time or 0) < h.reason_time:
            out.left[h.name] = "its state changed since (someone else's now)"
        elif now.state.flags & {"INVALID", "INVALID_REG"}:
            out.left[h.name] = "its registration on the good set failed too"
        elif restarts and (now.slurmd_start_time or 0) < int(since):
            out.left[h.name] = f"not registered again within {within:g}s of the rollback"
        elif h.admin_reason is not None:
            try:
                await client.drain([h.name], h.admin_reason)
                out.redrained.append(h.name)
            except SlurmError as exc:
                out.left[h.name] = f"drain failed: {exc.message}"
        else:
            resume.append(h.name)
    if resume:
        try:
            await client.resume(resume)
            out.resumed += resume
        except SlurmError as exc:
            for n in resume:
                out.left[n] = f"resume failed: {exc.message}"
    if out.resumed:
        late = await answering(client, out.resumed, within)
        out.not_answering = late
    log.info("harm_undone", **out.as_json())
    return out
