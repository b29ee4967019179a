"""The fleet view: one node read and one job read per refresh, kept as a versioned snapshot.

Jobs are read in brief by default (`squeue` with a fixed format): at 50,000 jobs Slurm's JSON is
~250 MB and takes seconds only to decode, the brief form a few MB. `--job-read full` reads the JSON
(one RPC fewer per refresh: squeue's text mode also asks for the partitions) for small clusters.

The version changes only when what the API serves changes (a node's state, flags, reason, jobs or
busy_until), so a long poll wakes for a real change and not for every refresh. Versions start from
the clock at start-up, so an agent still holding a version from a previous control plane never
matches a new one by chance.

At 10,000 nodes and 50,000 jobs the reads' parse and the next snapshot's build take ~0.5 s of CPU:
both run in a thread (runtime.offloop), so /healthz, the Lease's renewal and the API keep answering
meanwhile; the publish stays on the loop. The thread reads only what no one mutates: the parsed
reads, handed over whole, and the snapshot before, frozen once published. One refresh runs at a
time, so each snapshot is built from the one it follows (a version is never given twice).
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import structlog

from sidecars.controlplane.fleet import ranking
from sidecars.runtime import gcpause, offloop
from sidecars.slurm import Job, Node, SlurmClient, SlurmError, SlurmUnreachable, podinfo

log = structlog.get_logger(__name__)

# nodes and jobs together from which the next snapshot is built in a thread: ~1.5 us of CPU each
# (10,000 nodes and 50,000 jobs: 80-100 ms), so from here a build would hold the loop ~15 ms or
# more, well past a thread's start
OFF_LOOP_RECORDS = 10_000


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetNode:
    name: str
    state: str
    flags: tuple[str, ...]
    reason: str | None
    jobs: tuple[int, ...]
    busy_until: int | None
    partitions: tuple[str, ...] = field(compare=False)
    cpus: int = field(compare=False)
    gpus: int = field(compare=False)
    registered: bool = field(compare=False)
    pod: podinfo.PodInfo | None = field(compare=False, default=None)  # Slinky's Comment, where written
    features: tuple[str, ...] = field(compare=False, default=())  # AvailableFeatures (GPU domains)
    active_features: tuple[str, ...] = field(compare=False, default=())
    version: str | None = field(compare=False, default=None)  # what its slurmd registered with
    topology: str = field(compare=False, default="")  # 25.05+: the place set in place, "" when none
    # epoch when the reason was set (Slurm's reason_changed_at / `[user@time]`), None when unknown
    reason_since: int | None = field(compare=False, default=None)

    @property
    def drain(self) -> bool:
        return "DRAIN" in self.flags

    @property
    def busy(self) -> bool:
        return self.state in {"ALLOCATED", "MIXED"} or "COMPLETING" in self.flags

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "state": self.state,
            "flags": list(self.flags),
            "reason": self.reason,
            "jobs": list(self.jobs),
            "busy_until": self.busy_until,
        }


def _gpus(gres: str) -> int:
    """`gpu:4` / `gpu:a100:4(S:0)` / `gpu:2,shard:8` -> the GPU count."""
    total = 0
    for item in gres.split(","):
        parts = item.split("(")[0].split(":")
        if parts[0] == "gpu" and len(parts) >= 2 and parts[-1].isdigit():
            total += int(parts[-1])
    return total


def view(node: Node, jobs: Iterable[Job]) -> FleetNode:
    mine = list(jobs)
    return FleetNode(
        name=node.name,
        state=node.state.base,
        flags=tuple(sorted(node.state.flags)),
        reason=node.reason.text if node.reason else None,
        jobs=tuple(sorted(j.job_id for j in mine)),
        busy_until=ranking.busy_until(mine),
        partitions=node.partitions,
        cpus=node.cpus,
        gpus=_gpus(node.gres),
        registered=node.state.registered,
        pod=podinfo.parse(node.comment),
        features=node.features,
        active_features=node.active_features,
        version=node.version,
        topology=node.topology,
        reason_since=node.reason.time if node.reason else None,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetSnapshot:
    version: int
    nodes: Mapping[str, FleetNode]
    jobs: tuple[Job, ...]
    order: tuple[str, ...]  # scale-in order, first to go first
    # epoch at which the last successful read began (nothing in it is older); 0 before the first
    taken_at: float
    reachable: bool
    error: str | None

    @property
    def loaded(self) -> bool:
        return self.taken_at > 0


def build(nodes: Iterable[Node], jobs: Iterable[Job]) -> tuple[dict[str, FleetNode], tuple[Job, ...]]:
    with gcpause.paused():  # a view and its tuples per node, none in a cycle
        all_jobs = tuple(jobs)
        per_node = ranking.jobs_by_node(all_jobs)
        views = {n.name: view(n, per_node.get(n.name, ())) for n in nodes}
    return views, all_jobs


def successor(
    old: FleetSnapshot, nodes: Iterable[Node], jobs: Iterable[Job], taken_at: float
) -> FleetSnapshot:
    """The snapshot after `old` from one read begun at `taken_at` (epoch). Pure: reads `old` (frozen
    and never mutated once published) and the reads, so it may run in a thread."""
    views, all_jobs = build(nodes, jobs)
    version = old.version + 1 if views != old.nodes else old.version
    order = tuple(ranking.scale_in_order(views.values())) if version != old.version else old.order
    return FleetSnapshot(
        version=version,
        nodes=views,
        jobs=all_jobs,
        order=order,
        taken_at=taken_at,
        reachable=True,
        error=None,
    )


class FleetView:
    """The current snapshot, refreshed by `refresh()`; `wait_change(v, t)` is the long poll."""

    def __init__(
        self, client: SlurmClient, *, clock: Callable[[], float] = time.time, brief_jobs: bool = True
    ) -> None:
        self._client = client
        self._brief_jobs = brief_jobs
        self._clock = clock
        self.snapshot = FleetSnapshot(
            version=int(clock() * 1000),
            nodes={},
            jobs=(),
            order=(),
            taken_at=0.0,
            reachable=False,
            error="not read yet",
        )
        self._next: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._refreshing = asyncio.Lock()  # one refresh at a time (the module's doc: versions)
        self.last_attempt = 0.0  # monotonic, for liveness
        self.refresh_seconds = 0.0

    def publish(self, snapshot: FleetSnapshot) -> None:
        changed = snapshot.version != self.snapshot.version
        self.snapshot = snapshot
        if changed:
            done, self._next = self._next, asyncio.get_running_loop().create_future()
            done.set_result(None)

    async def refresh(self) -> FleetSnapshot:
        """Read nodes then jobs (two commands, whatever the fleet size) and publish what changed.
        Refreshes asked for at once run one after the other, each reading Slurm anew."""
        async with self._refreshing:
            return await self._refresh()

    async def _refresh(self) -> FleetSnapshot:
        started = time.monotonic()
        self.last_attempt = started
        old = self.snapshot
        # stamped before the read: a write that returns while it runs may be missing from it, and
        # whoever compares the stamp with their write's time must see that (topology_sync's resend)
        began = self._clock()
        try:
            nodes = await self._client.nodes()
            # brief: ~60 bytes a job instead of ~5 KB of JSON, but squeue adds a PARTITION_INFO RPC
            jobs = await (self._client.job_summaries() if self._brief_jobs else self._client.jobs())
        except SlurmError as exc:
            reachable = not isinstance(exc, SlurmUnreachable)
            if old.reachable or old.error != exc.message:
                log.warning("fleet_read_failed", error=exc.message, unreachable=not reachable)
            self.publish(replace(old, reachable=reachable, error=exc.message or str(exc)))
            raise
        old = self.snapshot
        if len(nodes) + len(jobs) >= OFF_LOOP_RECORDS:
            build_next = functools.partial(successor, old, nodes, jobs, began)
            nxt = await asyncio.to_thread(offloop.in_lane, build_next)
            if self.snapshot is not old:  # published past the lock meanwhile (a bench, a test)
                nxt = successor(self.snapshot, nodes, jobs, began)
        else:
            nxt = successor(old, nodes, jobs, began)
        self.publish(nxt)
        self.refresh_seconds = time.monotonic() - started
        return self.snapshot

    def assemble(
        self, nodes: Iterable[Node], jobs: Iterable[Job], began: float | None = None
    ) -> FleetSnapshot:
        """The next snapshot from one read begun at `began` (epoch; now if not given), built here on
        the caller's thread; also what the P5 benchmark times."""
        return successor(self.snapshot, nodes, jobs, self._clock() if began is None else began)

    async def wait_change(self, version: int, seconds: float) -> FleetSnapshot:
        """The snapshot once its version differs from `version`, or the current one after `seconds`."""
        if self.snapshot.version != version or seconds <= 0:
            return self.snapshot
        # asyncio.wait never cancels the shared future, whatever happens to this waiter
        await asyncio.wait([self._next], timeout=seconds)
        return self.snapshot
