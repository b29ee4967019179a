"""A paced roll of a Deployment on real Slurm, the fake Kubernetes playing the Deployment and
ReplicaSet controllers (tests/fakekube/deployments.py) and the preStop drain hook's wait: never
more than the budget out of service, the pods Kubernetes deletes are always ones already empty (so
no preStop ever had to drain one), idle workers first, no job killed, a restart mid-roll losing
nothing, and the Deployment given back as it was."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from sidecars.controlplane.changes.deploy_roll import ANNOTATION
from sidecars.devcluster import DevCluster
from sidecars.protocol.drains import UPGRADE as REASON_PREFIX
from tests.controlplane.changes.paced import (
    complete_once_long_ends,
    idle_first_then_soonest,
    long_and_soon,
    n1_next_once_soon_ends,
)
from tests.controlplane.conftest import control_plane, eventually
from tests.fakekube import FakeKube
from tests.fakekube.deployments import DeploymentController

pytestmark = [pytest.mark.releases("slurm24", "slurm26"), pytest.mark.cluster(nodes=4)]
MACHINES = ["n1", "n2", "n3", "n4"]


async def test_a_deployment_roll_keeps_to_its_budget_and_kubernetes_only_takes_empty_pods(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    client = cluster.client()
    prestop_drained: list[str] = []

    async def prestop(pod: str, node: str) -> None:
        """The drain hook: drain the node unless it is drained already, return once it is empty."""
        found = await client.node(node)
        if found is not None and not found.state.drain:
            prestop_drained.append(node)
            await client.drain([node], f"slurm-sidecars: pod slurm/{pod} terminating")
        await cluster.wait_node(node, lambda n: not n.state.busy, timeout=120)

    def handover_over() -> bool:
        """What the paced roll rests on (deploy_roll.py): the control plane pauses the Deployment
        again before a new pod becomes available, which would let Kubernetes take one more pod, one
        not empty. In a cluster `minReadySeconds` keeps that window open; here a new pod turns Ready
        only once the Deployment is paused (or not ours), so a slow control plane is no race."""
        d = kube.deployment
        return bool(d["spec"].get("paused")) or ANNOTATION not in d["metadata"]["annotations"]

    kube = DeploymentController(fake, "workers", MACHINES, prestop, ready_when=handover_over)
    kube.create(4, "slurmd:24.11")
    long, soon = await long_and_soon(cluster)
    held: list[set[str]] = []  # per sample: machines drained by the upgrade, or with no Ready pod

    def ready_machines() -> set[str]:
        return {
            p["spec"]["nodeName"]
            for p in list(fake.pods.values())
            if "nodeName" in p["spec"]
            and "deletionTimestamp" not in p["metadata"]
            and p["status"]["conditions"][0]["status"] == "True"
        }

    async def watch_budget() -> None:
        while True:
            drained = {
                n.name
                for n in await client.nodes()
                if n.state.drain and n.reason and n.reason.text.startswith(REASON_PREFIX)
            }
            held.append(drained | (set(MACHINES) - ready_machines()))
            await asyncio.sleep(0.1)

    async with kube.running():
        await eventually(lambda: asyncio.sleep(0.05, ready_machines()), lambda m: m == set(MACHINES))
        first = {p["metadata"]["labels"]["pod-template-hash"] for p in fake.pods.values()}
        watcher = asyncio.create_task(watch_budget(), name="budget-watch")
        try:
            async with control_plane(cluster, kube_url=url) as cp:
                for body, code, words in (
                    ({"deployment": "nope", "budget": "1"}, 404, "no Deployment nope"),
                    ({"deployment": "workers", "revision": "x", "budget": "1"}, 422, "exactly one of"),
                ):
                    status, text = await cp.post("/v1/upgrade", body)
                    assert status == code and words in text, (body, status, text)
                assert fake.config_maps == {}
                status, text = await cp.post("/v1/upgrade", {"deployment": "workers", "budget": "1"})
                assert status == 201, text
                d = kube.deployment
                assert d["spec"]["paused"] and d["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == 0
                await eventually(
                    lambda: cp.get("/v1/upgrade"),
                    lambda r: "new template" in (r[1]["upgrade"]["waiting_for"] or ""),
                    what="waiting for the new template",
                )
                assert not any(n.state.drain for n in await client.nodes())  # nothing to roll to yet
                kube.set_image("slurmd:24.11.6")
                # idle workers first, one at a time, each handed to Kubernetes once empty
                await idle_first_then_soonest(cluster, cp, kube.deleted, soon)
            assert kube.deployment["spec"]["paused"]  # the control plane gone: Kubernetes holds still
            async with control_plane(cluster, kube_url=url, identity="cp-b") as cp:
                await n1_next_once_soon_ends(cluster, soon)
                assert kube.deleted[2] == "n2"
                await complete_once_long_ends(cluster, cp, long)
                await eventually(
                    lambda: asyncio.sleep(0.05, kube.deployment),
                    lambda d: not d["spec"]["paused"],
                    what="the Deployment given back",
                )
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        d = kube.deployment
        assert d["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": "25%", "maxUnavailable": "25%"}
        assert ANNOTATION not in d["metadata"]["annotations"]
        assert kube.deleted == ["n3", "n4", "n2", "n1"]  # idle (by name), soonest ending, last
        now = {p["metadata"]["labels"]["pod-template-hash"] for p in fake.pods.values()}
        assert len(now) == 1 and now != first and len(fake.pods) == 4
        final = await client.nodes()
        assert not any(n.state.drain for n in final), [(n.name, n.reason) for n in final if n.state.drain]
    assert prestop_drained == []  # every pod Kubernetes took had been drained and emptied in its turn
    assert held and max(len(h) for h in held) == 1, max(held, key=len)
