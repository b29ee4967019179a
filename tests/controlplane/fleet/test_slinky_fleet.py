"""The control plane over a Slinky-shaped cluster: dynamic workers in the fleet view, batched drains,
scale-in order and deletion costs on the pods Slinky's Comment names, and workers that come and go
while the fleet is being read."""

from __future__ import annotations

import asyncio
import json

import pytest

from sidecars.controlplane.reconcile.deletion_cost import ANNOTATION
from sidecars.devcluster import DevCluster
from tests.controlplane.conftest import control_plane
from tests.fakekube import FakeKube
from tests.helpers import eventually

pytestmark = [pytest.mark.releases("slurm24", "slurm26"), pytest.mark.cluster(shape="slinky", nodes=4)]
REASON = "slurm-sidecars: preStop"


async def name_pods_in_comments(cluster: DevCluster, fake: FakeKube, names: list[str]) -> None:
    """Pods named apart from their nodes (no spec.hostname): only the Comment Slinky's operator
    writes, `{"namespace","podName","node"}`, ties a pod to its Slurm node."""
    client = cluster.client()
    for i, name in enumerate(names):
        fake.add_pod(f"slinky-{i}", hostname="", labels={"app": "slurmd"})
        ident = {"namespace": "slurm", "podName": f"slinky-{i}", "node": "kube-a"}
        await client.update_nodes([name], comment=json.dumps(ident, separators=(",", ":")))


@pytest.mark.per_release("each release's dynamic nodes, their Comment and drains")
async def test_fleet_view_order_costs_and_batched_drains_over_dynamic_workers(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    await name_pods_in_comments(cluster, fake, cluster.node_names)
    long = await cluster.sbatch("-w", "n1", "-t", "10", wrap="sleep 600")
    short = await cluster.sbatch("-w", "n2", "-t", "5", wrap="sleep 600")
    for job in (long, short):
        await cluster.wait_job(job, "RUNNING")
    # a batch window a loaded machine cannot outlast between the two drains sent together
    async with control_plane(cluster, kube_url=url, batch_window_seconds=1.0) as cp:
        _, nodes = await cp.get("/v1/nodes")
        assert sorted(n["name"] for n in nodes) == ["n1", "n2", "n3", "n4"]
        assert all("DYNAMIC_NORM" in n["flags"] for n in nodes)
        order = (await eventually(lambda: cp.get("/v1/scale-in-order"), lambda r: r[1][-2:] == ["n2", "n1"]))[
            1
        ]
        assert sorted(order[:2]) == ["n3", "n4"]

        async def costs() -> dict[str, str | None]:
            return {
                name: pod["metadata"]["annotations"].get(ANNOTATION) for (_, name), pod in fake.pods.items()
            }

        final = await eventually(costs, lambda c: all(v is not None for v in c.values()), what="costs")
        assert final["slinky-2"] == final["slinky-3"] == "0"  # idle workers go first
        assert 0 < int(final["slinky-1"] or 0) < int(final["slinky-0"] or 0)
        assert fake.answered("DELETE", "/pods/") == []  # every pod found its node: nothing to recycle

        updates = cp.sample("slurm_sidecars_slurm_commands_total", command="scontrol update", result="ok")
        answers = await asyncio.gather(
            *(cp.post(f"/v1/nodes/{n}/drain", {"reason": REASON}) for n in order[:2])
        )
        assert [s for s, _ in answers] == [202, 202]
        await cluster.wait_nodes(lambda ns: all(n.state.drained for n in ns if n.name in order[:2]))
        # Slurm shows the drains before our write's command has returned and been counted
        await cp.counted(
            "slurm_sidecars_drain_requests_total",
            lambda n: n >= 2,
            what="the drains counted",
            action="drain",
            result="written",
        )
        after = cp.sample("slurm_sidecars_slurm_commands_total", command="scontrol update", result="ok")
        assert after - updates == 1  # one `scontrol update nodename=n[3-4]` for both


@pytest.mark.per_release("each release's dynamic nodes registering and deleted under reads")
async def test_workers_that_come_and_go_while_the_fleet_is_read(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    await name_pods_in_comments(cluster, fake, cluster.node_names)
    client = cluster.client()
    async with control_plane(cluster, kube_url=url, reads={"interval_seconds": 0.1}) as cp:
        errors = cp.sample("slurm_sidecars_fleet_refreshes_total", result="error")
        # scale-out and scale-in of dynamic workers, racing the refresh loop's reads
        for round_ in range(3):
            name = f"x{round_}"
            # a read in flight while the worker registers, and another while its record goes
            await asyncio.gather(cp.plane.fleet.refresh(), cluster.start_slurmd(name))
            await eventually(lambda: cp.get("/v1/nodes"), lambda r, n=name: n in [x["name"] for x in r[1]])
            await cluster.kill_slurmd(name)
            await asyncio.gather(cp.plane.fleet.refresh(), client.delete_node(name), cp.get("/v1/nodes"))
            await eventually(
                lambda: cp.get("/v1/nodes"), lambda r, n=name: n not in [x["name"] for x in r[1]]
            )
        assert cp.sample("slurm_sidecars_fleet_refreshes_total", result="error") == errors
        _, nodes = await cp.get("/v1/nodes")
        assert sorted(n["name"] for n in nodes) == ["n1", "n2", "n3", "n4"]

        # a worker whose record is gone (its slurmd never came back) while its pod stays Ready:
        # the pod the Comment named is recycled after the grace
        await cluster.kill_slurmd("n4")
        await client.delete_node("n4")

        async def deleted() -> list[str]:
            return [r.path.rsplit("/", 1)[1] for r in fake.answered("DELETE", "/pods/", 200)]

        assert await eventually(deleted, lambda d: d == ["slinky-3"], what="slinky-3 recycled") == [
            "slinky-3"
        ]
