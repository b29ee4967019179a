"""Slinky's slurm-operator, reproduced for what the sidecars rely on beside it, against the fake API
server and real Slurm: the NodeSet controller's cordon sync (v1.3, `internal/controller/nodeset/
nodeset_sync.go` syncCordon, `slurmcontrol/slurmcontrol.go` MakeNodeDrain/MakeNodeUndrain/
IsNodeReasonOurs) and the `SlurmNodeState<State>` pod conditions (`pkg/conditions/conditions.go`).

What is reproduced, per NodeSet pod (`slinky.slurm.net` owner), each pass:
- a Slurm node whose reason is set and does not start `slurm-operator: ` is someone else's: left as
  it is, whatever the cordons say (IsNodeReasonOurs); so is one DOWN for "Not responding";
- a cordoned Kubernetes Node (spec.unschedulable): the pod gets `pod-cordon: "true"` and its Slurm
  node is drained with `slurm-operator: Node (<node>) was cordoned, Pod (<ns>/<pod>) must be
  cordoned`, or the Node's `nodeset.slinky.slurm.net/node-cordon-reason`;
- else `pod-cordon: "true"` on the pod: drained with `slurm-operator: Pod (<ns>/<pod>) was cordoned`;
- else: `pod-cordon` removed and the Slurm node undrained (its own reasons only, by the rule above);
- with `sweep` (what doPodScale does for the pods it keeps whenever it scales, and on every pass in
  DaemonSet mode: syncPodUncordon): on a Node not cordoned, any pod's `pod-cordon` is removed and its
  Slurm node undrained, unless the reason is someone else's; this is why the sidecars do not ask
  their drains through `pod-cordon` (it would be lifted at the next scale);
- a drain keeps a reason already set (overrideReason false), and is skipped when drained already;
- the conditions: one `SlurmNodeState<Base>` True per pod, plus `SlurmNodeStateDrain` when drained.

Where it stops: no Slurm client errors (ErrNoSlurmClient), no propagated Node conditions in the
reason, no SlowStartBatch, no scale-in, no pod-deadline writer, no NodeSet status, no Events; the
conditions are written without their transition times. The operator reaches Slurm through
slurmrestd; here `scontrol` stands in (the same state and reason).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from sidecars.slurm import Node, SlurmClient, SlurmError
from tests.fakekube import FakeKube
from tests.helpers import in_background

PREFIX = "slurm-operator: "
POD_CORDON = "nodeset.slinky.slurm.net/pod-cordon"
NODE_CORDON_REASON = "nodeset.slinky.slurm.net/node-cordon-reason"
GROUP = "slinky.slurm.net"


def nodeset_owned(pod: dict[str, Any]) -> bool:
    return any(
        o.get("kind") == "NodeSet" and o.get("apiVersion", "").partition("/")[0] == GROUP
        for o in pod["metadata"].get("ownerReferences") or []
    )


class SlinkyOperator:
    def __init__(self, fake: FakeKube, slurm: SlurmClient, *, sweep: bool = False) -> None:
        self.fake = fake
        self.slurm = slurm
        self.sweep = sweep
        self.drains: list[tuple[str, str]] = []  # (Slurm node, reason) it wrote
        self.undrains: list[str] = []
        self.passes = 0

    async def step(self) -> None:
        pods = [p for p in self.fake.pods.values() if nodeset_owned(p)]
        nodes = {n.name: n for n in await self.slurm.nodes()}
        for pod in pods:  # the "Cordon" sync step
            if (node := nodes.get(self._slurm_name(pod))) is not None:
                await self._cordon(pod, node)
        nodes = {n.name: n for n in await self.slurm.nodes()}
        for pod in pods:  # the "NodeSetPods" step: the pods it keeps
            if (node := nodes.get(self._slurm_name(pod))) is not None:
                if self.sweep:
                    await self._uncordon_kept(pod, node)
                self._conditions(pod, node)
        self.passes += 1

    @staticmethod
    def _slurm_name(pod: dict[str, Any]) -> str:
        return str(pod["spec"].get("hostname") or pod["metadata"]["name"])

    @staticmethod
    def _theirs(node: Node) -> bool:
        """IsNodeReasonOurs, negated: a reason set without the operator's prefix."""
        reason = node.reason.text if node.reason else ""
        return bool(reason) and not reason.startswith(PREFIX)

    async def _uncordon_kept(self, pod: dict[str, Any], node: Node) -> None:
        host = self.fake.nodes.get(pod["spec"].get("nodeName", ""))
        if (host is not None and host["spec"].get("unschedulable")) or self._theirs(node):
            return
        self._annotate(pod, None)
        if node.state.drain:
            await self.slurm.undrain([node.name])
            self.undrains.append(node.name)

    async def _cordon(self, pod: dict[str, Any], node: Node) -> None:
        meta = pod["metadata"]
        who = f"{meta['namespace']}/{meta['name']}"
        if self._theirs(node):
            return  # someone else's reason: preserved
        if node.state.base == "DOWN" and node.reason and "Not responding" in node.reason.text:
            return
        host = self.fake.nodes.get(pod["spec"].get("nodeName", ""))
        cordoned = (meta.get("annotations") or {}).get(POD_CORDON) == "true"
        if host is not None and host["spec"].get("unschedulable"):
            custom = (host["metadata"].get("annotations") or {}).get(NODE_CORDON_REASON)
            why = custom or f"Node ({host['metadata']['name']}) was cordoned, Pod ({who}) must be cordoned"
            self._annotate(pod, "true")
            await self._drain(node, PREFIX + why)
        elif cordoned:
            await self._drain(node, f"{PREFIX}Pod ({who}) was cordoned")
        else:
            self._annotate(pod, None)
            if node.state.drain:
                await self.slurm.undrain([node.name])  # its "Pod (...) was uncordoned" reason not kept
                self.undrains.append(node.name)

    async def _drain(self, node: Node, reason: str) -> None:
        have = node.reason.text if node.reason else ""
        new = have or reason  # a reason already set is kept
        if node.state.drain and have == new:
            return
        await self.slurm.drain([node.name], new)
        self.drains.append((node.name, new))

    def _annotate(self, pod: dict[str, Any], value: str | None) -> None:
        notes = pod["metadata"].setdefault("annotations", {})
        if notes.get(POD_CORDON) == value:
            return
        if value is None:
            notes.pop(POD_CORDON, None)
        else:
            notes[POD_CORDON] = value
        self.fake.touch_pod(pod)

    def _conditions(self, pod: dict[str, Any], node: Node) -> None:
        base = {"IDLE": "Idle", "ALLOCATED": "Allocated", "MIXED": "Mixed", "DOWN": "Down"}.get(
            node.state.base, "Unknown"
        )
        want = {f"SlurmNodeState{base}"} | ({"SlurmNodeStateDrain"} if node.state.drain else set())
        conditions = pod["status"].setdefault("conditions", [])
        have = {c["type"] for c in conditions if c["type"].startswith("SlurmNodeState")}
        if have == want:
            return
        kept = [c for c in conditions if not c["type"].startswith("SlurmNodeState")]
        message = node.reason.text if node.reason else ""
        kept += [{"type": t, "status": "True", "message": message} for t in sorted(want)]
        pod["status"]["conditions"] = kept
        self.fake.touch_pod(pod)

    @contextlib.asynccontextmanager
    async def running(self, every_seconds: float = 0.2) -> AsyncIterator[SlinkyOperator]:
        """Its reconcile loop, as the controller's requeue runs it, for the block's duration."""

        async def loop() -> None:
            while True:
                with contextlib.suppress(SlurmError):
                    await self.step()
                await asyncio.sleep(every_seconds)  # a controller's requeue period, not a test wait

        async with in_background(loop(), "fake_slinky_operator"):
            yield self
