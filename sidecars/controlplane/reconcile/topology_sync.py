"""Topology sync: each worker's Slurm node placed where its Kubernetes Node's labels say (rules in
`topology.py`), decided after each refresh from the snapshot and the watched Nodes.

On 25.05+ a node is moved in place (`scontrol update nodename=N topology=...`) when its place
differs from the one Slurm's node record shows; one call per distinct place, none at steady state.
A slurmctld restart forgets in-place moves (the record's topology is empty again), so they are
made again at the next pass. Older releases have no in-place update: the topology is then only the
rendered file (said once in the log, and in `status()`).

Either way the topology file is rendered from the last good places (topology.yaml on 25.05+,
topology.conf before) and, with `configmap` set, written to that ConfigMap when it changes, for
config-sync to apply (a second `--source`). A refused value (missing, empty, malformed) never
reaches Slurm: the node keeps its last good place, and one Warning Event on its pod says why. A
new place must hold `settle_seconds` before it is applied, so a flapping label moves nothing.
"""

from __future__ import annotations

import time
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

import structlog

from sidecars.controlplane.fleet.slinky import slinky_pod
from sidecars.controlplane.fleet.snapshot import FleetSnapshot
from sidecars.controlplane.reconcile.deps import WriterDeps
from sidecars.controlplane.reconcile.round import Outcome, View, unready
from sidecars.controlplane.reconcile.topology_files import group, render_conf, render_yaml
from sidecars.controlplane.settings import TopologySettings
from sidecars.kube import Pod
from sidecars.kube.topology import Placement, TopologySpec, placement
from sidecars.protocol.events import EventReason
from sidecars.slurm import SlurmError, hostlist

log = structlog.get_logger(__name__)

COMPONENT = "slurm-sidecars-control-plane"


@dataclass(eq=False)
class TopologySync:
    name = "topology"

    deps: WriterDeps
    spec: TopologySpec
    _: KW_ONLY
    settings: TopologySettings = field(default_factory=TopologySettings)
    retry_seconds: float = 60.0
    # the Slurm nodes of Slinky's pods, placed by the operator from the Node's annotation
    # (slinky_specs): kept in the rendered file (the operator needs one), never moved in place by us
    _operators: set[str] = field(default_factory=set, init=False)
    # Slurm node -> its last good place
    placed: dict[str, Placement] = field(default_factory=dict, init=False)
    # Slurm node -> why its labels were refused (reported once)
    refused: dict[str, str] = field(default_factory=dict, init=False)
    # a new place, and since when
    _seen: dict[str, tuple[Placement, float]] = field(default_factory=dict, init=False)
    # node -> (value written, epoch when)
    _sent: dict[str, tuple[str, float]] = field(default_factory=dict, init=False)
    # node -> (value Slurm refused, when)
    _failed: dict[str, tuple[str, float]] = field(default_factory=dict, init=False)
    in_place: bool | None = field(default=None, init=False)  # None until the release is known
    release: str = field(default="", init=False)
    file_name: str = field(default="", init=False)
    rendered: str = field(default="", init=False)
    _written: str | None = field(default=None, init=False)  # the ConfigMap's content as we last wrote it
    last_error: str | None = field(default=None, init=False)
    moves: int = field(default=0, init=False)

    @property
    def ready(self) -> bool:
        return self.deps.nodes.synced.is_set()

    def status(self) -> dict[str, Any]:
        return {
            "labels": list(self.spec.keys),
            "type": self.spec.kind,
            "name": self.spec.name,
            "mode": None if self.in_place is None else ("in-place" if self.in_place else "file"),
            "release": self.release or None,
            "file": self.file_name or None,
            "configmap": self.settings.configmap or None,
            "placed": len(self.placed),
            "refused": dict(sorted(self.refused.items())),
            "moves": self.moves,
            "last_error": self.last_error,
        }

    async def _release(self) -> None:
        if self.in_place is not None:
            return
        version = await self.deps.slurm.version()
        self.release = str(version)
        self.in_place = version.at_least(25, 5)
        self.file_name = "topology.yaml" if self.in_place else "topology.conf"
        if not self.in_place:
            log.warning(
                "topology_in_place_unavailable",
                release=self.release,
                detail="in-place topology update needs Slurm 25.05+: only the rendered topology.conf applies",
                configmap=self.settings.configmap or None,
            )

    async def reconcile(self, view: View) -> Outcome:
        """One pass (leader only, after a refresh): nodes moved in place, the file rendered and written."""
        if (skip := unready(view, self.ready)) is not None:
            return skip
        pods, snap = view.pods, view.snapshot
        moves = self.moves
        await self._release()
        now = self.deps.clock()
        live: set[str] = set()
        self._operators = {self.deps.node_of(p) for p in pods if slinky_pod(p, self.deps.slinky_mode)}
        for pod in pods:
            host = self.deps.nodes.nodes.get(pod.node_name) if pod.node_name else None
            name = self.deps.node_of(pod)
            if host is None or pod.deleting or name not in snap.nodes:
                continue
            live.add(name)
            got = placement(self.spec, host.labels)
            if isinstance(got, str):
                self._seen.pop(name, None)
                if self.refused.get(name) != got:
                    self.refused[name] = got
                    await self._report(pod, host.name, name, got)
                continue
            self.refused.pop(name, None)
            have = self.placed.get(name)
            if have == got:
                self._seen.pop(name, None)
                continue
            seen = self._seen.get(name)
            if seen is None or seen[0] != got:
                self._seen[name] = (got, now)  # a new place must hold `settle_seconds` (a first one need not)
                if have is not None and self.settings.settle_seconds > 0:
                    continue
            elif now - seen[1] < self.settings.settle_seconds:
                continue
            self._seen.pop(name, None)
            self.placed[name] = got
        for held in (self.placed, self.refused, self._seen, self._sent, self._failed):
            for gone in [n for n in held if n not in live]:
                del held[gone]
        if self.in_place:
            await self._move(snap)
        written = await self._publish()
        return Outcome(self.moves - moves + written)

    async def _move(self, snap: FleetSnapshot) -> None:
        now = self.deps.clock()
        wanted: list[tuple[str, str]] = []
        for name, place in self.placed.items():
            if name in self._operators:
                continue
            value = place.in_place(self.spec)
            if snap.nodes[name].topology == value:
                self._failed.pop(name, None)
                continue
            sent = self._sent.get(name)
            if sent is not None and sent[0] == value and snap.taken_at <= sent[1]:
                continue  # written after this snapshot was taken: the next one shows it
            failed = self._failed.get(name)
            if failed is not None and failed[0] == value and now - failed[1] < self.retry_seconds:
                continue
            wanted.append((name, value))
        for value, names in sorted(group(wanted).items()):
            try:
                await self.deps.slurm.set_topology(names, value)
            except SlurmError as exc:
                self.last_error = f"{hostlist.compress(names)} topology={value}: {exc.message}"
                log.warning(
                    "topology_update_refused",
                    nodes=hostlist.compress(names),
                    topology=value,
                    error=exc.message,
                )
                for n in names:
                    self._failed[n] = (value, now)
                continue
            log.info("topology_moved", nodes=hostlist.compress(names), topology=value)
            self.moves += len(names)
            for n in names:
                self._sent[n] = (value, time.time())
                self._failed.pop(n, None)

    async def _publish(self) -> bool:
        """Render the file, and write it to the ConfigMap when it changed; True when written."""
        render = render_yaml if self.in_place else render_conf
        self.rendered = render(self.spec, self.placed)
        if not self.settings.configmap or self.rendered == self._written:
            return False
        try:
            await self.deps.kube.put_config_map(
                self.deps.namespace, self.settings.configmap, {self.file_name: self.rendered}
            )
        except Exception as exc:  # the next pass writes it again
            log.warning("topology_configmap_failed", configmap=self.settings.configmap, error=str(exc))
            return False
        self._written = self.rendered
        log.info(
            "topology_file_written",
            configmap=self.settings.configmap,
            file=self.file_name,
            nodes=len(self.placed),
        )
        return True

    async def _report(self, pod: Pod, kube_node: str, name: str, why: str) -> None:
        message = (
            f"Kubernetes node {kube_node}: {why}; Slurm node {name} keeps its place in the "
            f"{self.spec.name!r} topology (nothing was sent to Slurm)"
        )
        log.warning("topology_refused", node=name, kube_node=kube_node, pod=pod.name, why=why)
        involved = {"kind": "Pod", "name": pod.name, "namespace": pod.namespace, "uid": pod.uid}
        try:
            await self.deps.kube.create_event(
                pod.namespace,
                involved,
                EventReason.SLURM_TOPOLOGY_REFUSED,
                message,
                type="Warning",
                component=COMPONENT,
            )
        except Exception as exc:  # reporting must never stop the sync
            log.warning("kube_event_failed", reason=EventReason.SLURM_TOPOLOGY_REFUSED, error=str(exc))
