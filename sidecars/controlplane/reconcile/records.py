"""Node records kept clean: a ghost's record removed, a node registered without its GPUs held out.

A pod killed without its preStop hook (node loss, a forced delete) leaves its dynamic node's record
behind (Slinky PR #233). A dynamic node (`DYNAMIC_NORM`) that no worker pod holds, and that we know
as a worker's (we saw a pod hold it, or Slinky's Comment names a pod of our namespace), has its record
deleted once that has lasted `grace_seconds`, with nothing on it. The rules a pager would ask for:

- never on a read we cannot trust: the controller unreachable, or the snapshot older than
  `stale_seconds`;
- at most `per_pass` deletes a pass; and none at all when more than half of the dynamic records look
  like ghosts at once (that is a lost pod read or a lost rack, for a human, not for us);
- never while a pending or running job holds or names the node: asked again of Slurm just before
  the delete (`squeue` with ReqNodeList: `squeue --nodelist` does not find a pending job that names a
  node, and deleting that node kills it at the next reconfigure, slurm-bridge#43).

A node whose record shows fewer GPUs than its pod's `nvidia.com/gpu` limit (it registered before its
devices were there: `Gres=(null)`, Slinky PR #191) would take jobs it cannot run: it is drained with
a reason naming the GRES. Its record cannot be mended in place (Slurm refuses `gres=` for it, and a
slurmd that registers again keeps the old record: measured on 26.05), so once it is idle, its record
is deleted by the same rules and its slurmd registers anew (the agent restarts a slurmd whose node is
gone); a record that shows the GPUs (new, or mended by an admin) has our drain lifted.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field

import structlog

from sidecars.controlplane.fleet.snapshot import FleetNode, FleetSnapshot
from sidecars.controlplane.reconcile.deps import WriterDeps
from sidecars.controlplane.reconcile.round import Outcome, View, unready
from sidecars.controlplane.settings import RecordSettings
from sidecars.kube import Pod
from sidecars.protocol import drains
from sidecars.protocol.events import EventReason
from sidecars.runtime.events import EventType
from sidecars.slurm import JobNodes, SlurmError

log = structlog.get_logger(__name__)

DYNAMIC = "DYNAMIC_NORM"  # a dynamic node's state flag (`scontrol create` or `slurmd -Z`)
GRES_PREFIX = drains.GRES
ASKED_SECONDS = 30.0  # a drain or undrain asked and not seen is asked again after this


def gres_reason(have: int, want: int) -> str:
    return f"{GRES_PREFIX}registered gpu:{have}, its pod asks for gpu:{want}"


@dataclass(eq=False)
class RecordKeeper:
    name = "records"

    deps: WriterDeps
    _: KW_ONLY
    policy: RecordSettings = field(default_factory=RecordSettings)
    wall: Callable[[], float] = time.time
    known: set[str] = field(default_factory=set, init=False)  # Slurm nodes we saw a worker pod hold
    # Slurm node -> since when no pod holds it
    orphaned: dict[str, float] = field(default_factory=dict, init=False)
    # Slurm node -> the jobs that keep its record
    kept: dict[str, tuple[int, ...]] = field(default_factory=dict, init=False)
    # Slurm node -> the GPUs its pod asks for, while short
    short: dict[str, int] = field(default_factory=dict, init=False)
    # node -> its GRES drain or undrain asked, when
    _asked: dict[str, tuple[str, float]] = field(default_factory=dict, init=False)
    deleted: int = field(default=0, init=False)

    ready = True

    def status(self) -> dict[str, object]:
        return {
            "orphaned": sorted(self.orphaned),
            "kept_for_jobs": {n: list(jobs) for n, jobs in sorted(self.kept.items())},
            "gres_short": dict(sorted(self.short.items())),
            "deleted": self.deleted,
        }

    async def reconcile(self, view: View) -> Outcome:
        if (skip := unready(view)) is not None:
            return skip
        snap = view.snapshot
        if not snap.reachable:
            return Outcome(skipped="the controller does not answer")
        if self.wall() - snap.taken_at > self.policy.stale_seconds:
            return Outcome(skipped="the fleet read is stale")
        held = {self.deps.node_of(p): p for p in view.pods}
        for gone in [n for n in self._asked if n not in snap.nodes]:
            del self._asked[gone]
        writes = await self._gres(held, snap)
        writes += await self._ghosts(held, snap)
        self.deps.metrics.node_records.labels("orphaned").set(len(self.orphaned))
        self.deps.metrics.node_records.labels("gres_short").set(len(self.short))
        return Outcome(writes)

    # ------------------------------------------------------------------ GPUs short
    async def _gres(self, held: Mapping[str, Pod], snap: FleetSnapshot) -> int:
        now, writes = self.deps.clock(), 0
        for name in [n for n in self.short if n not in held]:
            del self.short[name]  # its pod is gone (a record left is a ghost's, below)
        for name, pod in held.items():
            node = snap.nodes.get(name)
            if node is None or pod.gpus <= 0 or pod.deleting or not node.registered:
                continue
            ours = (node.reason or "").startswith(GRES_PREFIX)
            if node.gpus >= pod.gpus:
                if ours and node.drain and self._ask(name, "undrain", now):
                    self.deps.drains.submit(
                        name, "undrain", node.reason or ""
                    )  # only an exact match is undone
                    await self._tell(
                        pod, EventReason.SLURM_GRES_HEALED, f"Slurm node {name} registered gpu:{node.gpus}"
                    )
                    self.deps.metrics.node_record_actions.labels("gres_undrain").inc()
                    writes += 1
                elif name in self.short and not ours:
                    await self._tell(
                        pod, EventReason.SLURM_GRES_HEALED, f"Slurm node {name} registered gpu:{node.gpus}"
                    )
                self.short.pop(name, None)
                continue
            first = name not in self.short
            self.short[name] = pod.gpus
            if node.drain and not ours:
                continue  # someone else's drain holds it out already; theirs to lift
            if not node.drain and self._ask(name, "drain", now):
                self.deps.drains.submit(name, "drain", gres_reason(node.gpus, pod.gpus))
                self.deps.metrics.node_record_actions.labels("gres_drain").inc()
                writes += 1
            if first:
                await self._tell(
                    pod,
                    EventReason.SLURM_GRES_SHORT,
                    f"Slurm node {name} registered gpu:{node.gpus} but pod {pod.name} asks for "
                    f"gpu:{pod.gpus}: drained until it registers them",
                    "Warning",
                )
        return writes

    def _ask(self, name: str, action: str, now: float) -> bool:
        """Whether to ask now: not the same asked within ASKED_SECONDS (in flight until seen)."""
        last = self._asked.get(name)
        if last is not None and last[0] == action and now - last[1] < ASKED_SECONDS:
            return False
        self._asked[name] = (action, now)
        return True

    # ------------------------------------------------------------------ ghosts
    def _ours(self, node: FleetNode) -> bool:
        return node.name in self.known or (node.pod is not None and node.pod.namespace == self.deps.namespace)

    async def _ghosts(self, held: Mapping[str, Pod], snap: FleetSnapshot) -> int:
        now = self.deps.clock()
        dynamic = [n for n in snap.nodes.values() if DYNAMIC in n.flags]
        self.known.update(n for n in held if n in snap.nodes)
        self.known &= snap.nodes.keys()
        ghosts = {n.name for n in dynamic if n.name not in held and self._ours(n)}
        # a node whose pod asks for GPUs it did not register: its record is remade, once idle and drained
        remakes = set()
        for name in self.short:
            node = snap.nodes.get(name)
            ours = node is not None and node.drain and (node.reason or "").startswith(GRES_PREFIX)
            if ours and node is not None and DYNAMIC in node.flags:  # a static record stays: it is the config
                remakes.add(name)
        for name in [n for n in self.orphaned if n not in ghosts | remakes]:
            del self.orphaned[name]
            self.kept.pop(name, None)
        for name in ghosts | remakes:
            self.orphaned.setdefault(name, now)
        due = sorted(n for n, since in self.orphaned.items() if now - since >= self.policy.grace_seconds)
        if not due:
            return 0
        lost = sum(1 for n in due if n in ghosts)
        if lost > max(1, len(dynamic) // 2):
            log.warning("node_records_held", due=lost, dynamic=len(dynamic), why="more than half at once")
            self.deps.metrics.node_record_actions.labels("held").inc()
            return 0
        jobs = await self.deps.slurm.job_nodes()  # asked now, not from the snapshot: a job may have started
        writes = 0
        for name in due:
            if writes >= self.policy.deletes_per_pass:
                self.deps.metrics.node_record_actions.labels("capped").inc()
                break
            writes += await self._delete(snap.nodes[name], jobs, held.get(name))
        return writes

    async def _delete(self, node: FleetNode, jobs: Sequence[JobNodes], pod: Pod | None) -> int:
        name = node.name
        naming = tuple(sorted(j.job_id for j in jobs if j.names(name))) or node.jobs
        if naming or node.busy:
            if self.kept.get(name) != naming:
                self.kept[name] = naming
                self.deps.metrics.node_record_actions.labels("kept").inc()
                log.warning("node_record_kept", node=name, jobs=list(naming))
                await self.deps.events.emit(
                    EventReason.SLURM_RECORD_KEPT,
                    f"Slurm node {name}'s record is kept: jobs {', '.join(map(str, naming))} hold or "
                    "name it (deleting it would kill a pending job at the next reconfigure)",
                    "Warning",
                )
            return 0
        try:
            await self.deps.slurm.delete_node(name)
        except SlurmError as exc:  # the next pass tries again
            self.deps.metrics.node_record_actions.labels("failed").inc()
            log.warning("node_record_delete_failed", node=name, error=exc.message)
            return 0
        why = "its pod asks for GPUs it did not register" if pod is not None else "no worker pod holds it"
        self.deleted += 1
        self.deps.metrics.node_record_actions.labels("deleted").inc()
        log.info("node_record_deleted", node=name, why=why)
        await self.deps.events.emit(
            EventReason.SLURM_RECORD_DELETED, f"Slurm node {name}'s record deleted: {why}"
        )
        for held in (self.orphaned, self.kept, self._asked):
            held.pop(name, None)  # `short` stays: its pod's node is told healed when it registers right
        self.known.discard(name)
        return 1

    async def _tell(self, pod: Pod, reason: EventReason, message: str, type: EventType = "Normal") -> None:
        log.info("node_record_gres", pod=pod.name, reason=reason, detail=message)
        try:
            await self.deps.emit(pod, reason, message, type)
        except Exception as exc:  # reporting must never stop the writer
            log.warning("kube_event_failed", reason=reason, error=str(exc))
