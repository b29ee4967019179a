"""Kubernetes' Deployment and ReplicaSet controllers played on the fake's objects, with the rules a
paced roll rests on (kube-controller-manager's deployment/rolling.go, sync.go and replica_set.go):

- unpaused, RollingUpdate: the new ReplicaSet is scaled up while the total stays within replicas +
  maxSurge; old ones are scaled down while the available pods stay at replicas - maxUnavailable,
  unhealthy old pods first. A terminating pod counts for nothing (ReplicaSets leave it out).
- paused: no new ReplicaSet and no roll, but a total that is off is corrected proportionally, the
  difference going to the largest ReplicaSet.
- a ReplicaSet with too many pods deletes, in order: unscheduled, pending, not ready, the lowest
  `controller.kubernetes.io/pod-deletion-cost`, the newest. A deleted pod stays (terminating) until
  its preStop hook returns.
- pods use the host network: a new pod waits (Pending) for a machine no pod holds, terminating ones
  included, and takes its hostname; it is Ready `ready_after` seconds after it starts, and once
  `ready_when()` holds (a test's stand-in for a `minReadySeconds` that outlasts what it waits for).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import hashlib
import json
import math
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from tests.fakekube.server import FakeKube, Obj, now_micro

COST = "controller.kubernetes.io/pod-deletion-cost"


def _hash(template: Obj) -> str:
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]


def _resolve(value: Any, replicas: int, up: bool) -> int:
    if isinstance(value, str) and value.endswith("%"):
        exact = replicas * int(value[:-1]) / 100
        return math.ceil(exact) if up else math.floor(exact)
    return int(value)


@dataclass
class DeploymentController:
    fake: FakeKube
    name: str
    machines: list[str]  # the Kubernetes Nodes (and so the Slurm node names) the pods run on
    prestop: Callable[[str, str], Awaitable[None]]  # (pod, machine): the pod goes when it returns
    namespace: str = "slurm"
    ready_after: float = 0.3
    ready_when: Callable[[], bool] = lambda: True  # checked with ready_after: a new pod's readiness gate
    deleted: list[str] = field(default_factory=list)  # machines whose pods it deleted, in order
    _seq: dict[str, int] = field(default_factory=dict)  # creation order of ReplicaSets and pods
    _ready_at: dict[str, float] = field(default_factory=dict)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    # ------------------------------------------------------------------ what a user does
    def create(self, replicas: int, image: str) -> None:
        labels = {"app": "slurmd"}
        self.fake.deployments[(self.namespace, self.name)] = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "uid": str(uuid.uuid4()),
                "generation": 1,
                "labels": dict(labels),
                "annotations": {},
                "resourceVersion": self.fake._bump(),
                "creationTimestamp": now_micro()[:19] + "Z",
            },
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": dict(labels)},
                "strategy": {
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"},
                },
                "template": {
                    "metadata": {"labels": dict(labels)},
                    "spec": {"hostNetwork": True, "containers": [{"name": "slurmd", "image": image}]},
                },
            },
            "status": {},
        }

    @property
    def deployment(self) -> Obj:
        return self.fake.deployments[(self.namespace, self.name)]

    def set_image(self, image: str) -> None:
        """`kubectl set image`: a new template, a new generation."""
        d = self.deployment
        d["spec"]["template"]["spec"]["containers"][0]["image"] = image
        d["metadata"]["generation"] += 1
        d["metadata"]["resourceVersion"] = self.fake._bump()

    # ------------------------------------------------------------------ the controllers
    def _sets(self) -> list[Obj]:
        owned = [
            rs
            for (ns, _), rs in self.fake.replica_sets.items()
            if ns == self.namespace and rs["metadata"]["ownerReferences"][0]["name"] == self.name
        ]
        return sorted(owned, key=lambda rs: self._seq[rs["metadata"]["name"]])

    def _pods(self, rs: Obj) -> list[Obj]:
        return [
            p
            for (ns, _), p in self.fake.pods.items()
            if ns == self.namespace
            and any(o["name"] == rs["metadata"]["name"] for o in p["metadata"]["ownerReferences"])
            and "deletionTimestamp" not in p["metadata"]
        ]

    @staticmethod
    def _ready(pod: Obj) -> bool:
        return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"]["conditions"])

    def _available(self, rs: Obj) -> int:
        return sum(1 for p in self._pods(rs) if self._ready(p))

    def _new_set(self, template: Obj, replicas: int) -> Obj:
        h = _hash(template)
        d = self.deployment
        labels = {**template["metadata"]["labels"], "pod-template-hash": h}
        name = f"{self.name}-{h}"
        rs: Obj = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "uid": str(uuid.uuid4()),
                "labels": labels,
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "Deployment",
                        "name": self.name,
                        "uid": d["metadata"]["uid"],
                        "controller": True,
                    }
                ],
                "resourceVersion": self.fake._bump(),
            },
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": labels},
                "template": {**copy.deepcopy(template), "metadata": {"labels": labels}},
            },
        }
        self._seq[name] = len(self._seq)
        self.fake.replica_sets[(self.namespace, name)] = rs
        return rs

    def _sync_deployment(self) -> None:
        d = self.deployment
        spec, n = d["spec"], d["spec"]["replicas"]
        rolling = spec["strategy"].get("rollingUpdate") or {}
        surge = _resolve(rolling.get("maxSurge", "25%"), n, up=True)
        unavailable = _resolve(rolling.get("maxUnavailable", "25%"), n, up=False)
        if surge == 0 and unavailable == 0:
            unavailable = 1
        sets = self._sets()
        h = _hash(spec["template"])
        new = next((rs for rs in sets if rs["metadata"]["labels"]["pod-template-hash"] == h), None)
        if spec.get("paused"):
            self._scale_paused(sets, n + surge, n)
        else:
            if new is None:
                new = self._new_set(spec["template"], 0 if sets else n)
                sets.append(new)
            self._roll(sets, new, n, surge, unavailable)
        d["status"] = {
            "observedGeneration": d["metadata"]["generation"],
            "replicas": sum(len(self._pods(rs)) for rs in sets),
            "availableReplicas": sum(self._available(rs) for rs in sets),
            "updatedReplicas": len(self._pods(new)) if new is not None else 0,
        }

    @staticmethod
    def _scale_paused(sets: list[Obj], allowed: int, n: int) -> None:
        active = [rs for rs in sets if rs["spec"]["replicas"] > 0]
        if len(active) == 1:
            active[0]["spec"]["replicas"] = n
            return
        diff = allowed - sum(rs["spec"]["replicas"] for rs in active)
        if len(active) > 1 and diff != 0:
            largest = max(active, key=lambda rs: rs["spec"]["replicas"])
            largest["spec"]["replicas"] += diff

    def _roll(self, sets: list[Obj], new: Obj, n: int, surge: int, unavailable: int) -> None:
        old = [rs for rs in sets if rs is not new]
        total = sum(rs["spec"]["replicas"] for rs in sets)
        if new["spec"]["replicas"] < n and total < n + surge:  # reconcileNewReplicaSet
            new["spec"]["replicas"] += min(n + surge - total, n - new["spec"]["replicas"])
            return
        if not sum(rs["spec"]["replicas"] for rs in old):
            return
        minimum = n - unavailable  # reconcileOldReplicaSets
        new_unavailable = new["spec"]["replicas"] - self._available(new)
        room = total - minimum - new_unavailable
        if room <= 0:
            return
        for rs in old:  # cleanupUnhealthyReplicas, oldest first
            unhealthy = rs["spec"]["replicas"] - self._available(rs)
            take = max(0, min(unhealthy, room))
            rs["spec"]["replicas"] -= take
            room -= take
        excess = sum(self._available(rs) for rs in sets) - minimum
        for rs in old:  # scaleDownOldReplicaSetsForRollingUpdate
            take = max(0, min(rs["spec"]["replicas"], excess))
            rs["spec"]["replicas"] -= take
            excess -= take

    def _sync_replica_sets(self) -> None:
        for rs in self._sets():
            pods = self._pods(rs)
            want = rs["spec"]["replicas"]
            for _ in range(want - len(pods)):
                self._create_pod(rs)
            if len(pods) > want:

                def rank(p: Obj) -> tuple[bool, bool, bool, int, int]:
                    cost = int(p["metadata"].get("annotations", {}).get(COST, "0"))
                    return (
                        "nodeName" in p["spec"],
                        p["status"]["phase"] == "Running",
                        self._ready(p),
                        cost,
                        -self._seq[p["metadata"]["name"]],
                    )

                for victim in sorted(pods, key=rank)[: len(pods) - want]:
                    self._delete(victim)

    def _create_pod(self, rs: Obj) -> None:
        name = f"{rs['metadata']['name']}-{uuid.uuid4().hex[:5]}"
        self._seq[name] = len(self._seq)
        tpl = rs["spec"]["template"]
        self.fake.put_pod(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": self.namespace,
                    "uid": str(uuid.uuid4()),
                    "labels": dict(tpl["metadata"]["labels"]),
                    "annotations": {},
                    "ownerReferences": [
                        {
                            "apiVersion": "apps/v1",
                            "kind": "ReplicaSet",
                            "name": rs["metadata"]["name"],
                            "uid": rs["metadata"]["uid"],
                            "controller": True,
                        }
                    ],
                    "creationTimestamp": now_micro()[:19] + "Z",
                },
                "spec": copy.deepcopy(tpl["spec"]),
                "status": {"phase": "Pending", "conditions": [{"type": "Ready", "status": "False"}]},
            }
        )

    def _delete(self, pod: Obj) -> None:
        meta = pod["metadata"]
        meta["deletionTimestamp"] = now_micro()[:19] + "Z"
        self.fake.touch_pod(pod)
        machine = pod["spec"].get("nodeName", "")
        if machine:
            self.deleted.append(machine)

        async def terminate() -> None:
            if machine:
                await self.prestop(meta["name"], machine)
            self.fake.remove_pod(self.namespace, meta["name"])

        task = asyncio.get_running_loop().create_task(terminate(), name=f"terminate-{meta['name']}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _schedule(self) -> None:
        """The scheduler and the kubelet: a free machine for each pending pod, Ready a moment later."""
        pods = [p for (ns, _), p in self.fake.pods.items() if ns == self.namespace]
        held = {p["spec"].get("nodeName") for p in pods}
        now, gate = time.monotonic(), self.ready_when()
        for pod in pods:
            name = pod["metadata"]["name"]
            if "nodeName" not in pod["spec"] and "deletionTimestamp" not in pod["metadata"]:
                free = [m for m in self.machines if m not in held]
                if not free:
                    continue
                pod["spec"].update(nodeName=free[0], hostname=free[0])
                pod["status"]["phase"] = "Running"
                held.add(free[0])
                self._ready_at[name] = now + self.ready_after
                self.fake.touch_pod(pod)
            elif name in self._ready_at and now >= self._ready_at[name] and not self._ready(pod) and gate:
                pod["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
                self.fake.touch_pod(pod)

    def sync(self) -> None:
        self._sync_deployment()
        self._sync_replica_sets()
        self._schedule()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[DeploymentController]:
        async def loop() -> None:
            while True:
                self.sync()
                await asyncio.sleep(0.02)

        task = asyncio.get_running_loop().create_task(loop(), name=f"deployment-{self.name}")
        try:
            yield self
        finally:
            task.cancel()
            for t in list(self._tasks):
                t.cancel()
            for t in [task, *self._tasks]:
                with contextlib.suppress(asyncio.CancelledError):
                    await t
