"""Drain requests arriving together become one scontrol call; an undrain never clears another's drain."""

from __future__ import annotations

import asyncio

import pytest

from sidecars.devcluster import DevCluster
from sidecars.runtime.waits import within
from tests.controlplane.conftest import Running, control_plane
from tests.helpers import eventually

pytestmark = pytest.mark.cluster(nodes=4)
REASON = "slurm-sidecars: preStop"


async def test_a_burst_of_drains_is_one_call_and_undrain_respects_other_reasons(cluster: DevCluster) -> None:
    # a window a loaded machine cannot outlast between requests sent together (CI: 8 workers, 2 cores)
    async with control_plane(cluster, batch_window_seconds=1.0) as cp:
        client = cluster.client()
        await client.drain(["n4"], "admin: bad DIMM")  # someone else's drain
        updates = cp.sample("slurm_sidecars_slurm_commands_total", command="scontrol update", result="ok")
        answers = await asyncio.gather(
            *(cp.post(f"/v1/nodes/{n}/drain", {"reason": REASON}) for n in ("n1", "n2", "n3"))
        )
        assert [s for s, _ in answers] == [202, 202, 202]
        nodes = await cluster.wait_nodes(
            lambda ns: all(n.state.drain for n in ns if n.name in {"n1", "n2", "n3"}), what="n1-n3 drained"
        )
        assert {n.name: n.reason.text for n in nodes if n.reason} == {
            "n1": REASON,
            "n2": REASON,
            "n3": REASON,
            "n4": "admin: bad DIMM",
        }
        # Slurm shows the drains before our write's command has returned and been counted
        await eventually(
            lambda: asyncio.sleep(0.05, written(cp, "drain")), lambda n: n >= 3, what="the drains counted"
        )
        after = cp.sample("slurm_sidecars_slurm_commands_total", command="scontrol update", result="ok")
        assert after - updates == 1  # one `scontrol update nodename=n[1-3]` for the three requests
        assert cp.sample("slurm_sidecars_drain_batches_total", action="drain", result="ok") == 1

        # the view shows the drains; then undrain n1 with our reason, n4 with ours (not its reason)
        await eventually(lambda: cp.get("/v1/nodes/n1"), lambda r: "DRAIN" in r[1]["flags"], what="view")
        # sent together, as the drains were: one batch
        undrains = [cp.post(f"/v1/nodes/{name}/undrain", {"reason": REASON}) for name in ("n1", "n2", "n4")]
        undrains.append(cp.post("/v1/nodes/n3/undrain", {"reason": "slurm-sidecars: something else"}))
        assert [s for s, _ in await asyncio.gather(*undrains)] == [202, 202, 202, 202]
        await cluster.wait_nodes(
            lambda ns: not any(n.state.drain for n in ns if n.name in {"n1", "n2"}), what="n1,n2 undrained"
        )
        # `drains_pending` empties when a batch is taken, before it is decided and written: wait for
        # each of the four requests to be decided (two written, two refused) instead
        await eventually(
            lambda: asyncio.sleep(0.05, written(cp, "undrain") + not_ours(cp)),
            lambda n: n >= 4,
            what="the four undrains decided",
        )
        nodes = {n.name: n for n in await client.nodes()}
        assert nodes["n4"].state.drain and nodes["n4"].reason is not None
        assert nodes["n4"].reason.text == "admin: bad DIMM"
        assert nodes["n3"].state.drain  # a different reason than the one it was drained with
        assert cp.sample("slurm_sidecars_drain_batches_total", action="undrain", result="ok") == 1
        assert cp.sample("slurm_sidecars_drain_requests_total", action="undrain", result="not_ours") == 2


def written(cp: Running, action: str) -> float:
    """Requests of this action written to Slurm: counted once the write's command has returned."""
    return cp.sample("slurm_sidecars_drain_requests_total", action=action, result="written")


def not_ours(cp: Running) -> float:
    return cp.sample("slurm_sidecars_drain_requests_total", action="undrain", result="not_ours")


async def test_drain_of_a_busy_node_refreshes_fast_until_drained(cluster: DevCluster) -> None:
    # a 60 s interval against bounds of 20 s: only the fast refresh while draining can meet them, on
    # a loaded machine too (a scancel'd job takes seconds to end there)
    async with control_plane(cluster, reads={"interval_seconds": 60.0, "fast_interval_seconds": 0.1}) as cp:
        job = await cluster.sbatch("-w", "n2", wrap="sleep 300")
        await cluster.wait_job(job, "RUNNING")
        assert (await cp.post("/v1/nodes/n2/drain", {"reason": REASON}))[0] == 202
        node = await eventually(
            lambda: cp.get("/v1/nodes/n2"), lambda r: "DRAIN" in r[1]["flags"], what="drain"
        )
        assert node[1]["state"] in {"ALLOCATED", "MIXED"}
        assert cp.plane.draining == {"n2"}
        version = node[1]["version"]
        await cluster.scancel(job)
        status, changed = await within(cp.get(f"/v1/nodes/n2?version={version}&wait=30"), 20.0)
        assert status == 200 and changed["version"] != version
        drained = (
            await eventually(
                lambda: cp.get("/v1/nodes/n2"), lambda r: r[1]["state"] == "IDLE", within=20.0, what="drained"
            )
        )[1]
        assert drained["jobs"] == [] and "DRAIN" in drained["flags"]
        await eventually(
            lambda: asyncio.sleep(0.05, cp.plane.draining), lambda d: not d, within=20, what="calm"
        )


async def test_drains_rest_on_slurms_state_now_not_on_the_snapshot(cluster: DevCluster) -> None:
    # a 60 s interval: the snapshot predates what the admin does below, and stays so
    async with control_plane(cluster, reads={"interval_seconds": 60.0, "fast_interval_seconds": 60.0}) as cp:
        client = cluster.client()
        assert (await cp.post("/v1/nodes/n2/drain", {"reason": REASON}))[0] == 202
        await cluster.wait_node("n2", lambda n: n.state.drain)
        await eventually(lambda: cp.get("/v1/nodes/n2"), lambda r: r[1]["reason"] == REASON, what="view")
        await client.drain(["n1"], "admin: firmware")  # n1 not drained in the snapshot
        await client.drain(["n2"], "admin: reseat GPU")  # n2 drained by us in the snapshot
        assert (await cp.get("/v1/nodes/n1"))[1]["flags"] == []
        assert (await cp.get("/v1/nodes/n2"))[1]["reason"] == REASON  # stale, as intended

        assert (await cp.post("/v1/nodes/n1/drain", {"reason": REASON}))[0] == 202
        assert (await cp.post("/v1/nodes/n2/undrain", {"reason": REASON}))[0] == 202
        await eventually(
            lambda: cp.get("/status"), lambda r: not r[1]["drains_pending"], what="batch flushed"
        )
        await cp.counted(
            "slurm_sidecars_drain_requests_total",
            lambda n: n == 1,
            what="undrain decided",
            action="undrain",
            result="not_ours",
        )
        nodes = await client.nodes_named(["n1", "n2"])
        assert {n: (v.state.drain, v.reason.text if v.reason else None) for n, v in nodes.items()} == {
            "n1": (True, "admin: firmware"),
            "n2": (True, "admin: reseat GPU"),
        }
        assert cp.sample("slurm_sidecars_drain_requests_total", action="drain", result="already") == 1
        assert cp.sample("slurm_sidecars_drain_batches_total", action="undrain", result="ok") == 0


@pytest.mark.cluster(nodes=3, extra_conf="ReturnToService=1")  # =2 would bring it back by itself
@pytest.mark.per_release("RESUME of a DOWN node under ReturnToService=1: each release's own rule")
async def test_undrain_of_our_timed_out_drain_resumes_the_down_node(cluster: DevCluster) -> None:
    async with control_plane(cluster) as cp:
        client = cluster.client()
        ours = f"{REASON}: drain timed out, jobs requeued"
        await client.down(["n3"], ours)
        await cluster.wait_node("n3", lambda n: n.state.base == "DOWN")
        assert (await cp.post("/v1/nodes/n3/undrain", {"reason": ours}))[0] == 202
        # UNDRAIN would leave it DOWN; ours, it is given back whole
        await cluster.wait_node("n3", lambda n: n.state.base == "IDLE" and not n.state.drain)


async def test_a_drain_asked_while_slurmctld_is_down_is_written_once_it_is_back(cluster: DevCluster) -> None:
    async with control_plane(cluster) as cp:
        await cluster.stop_slurmctld()
        assert (await cp.post("/v1/nodes/n1/drain", {"reason": REASON}))[0] == 202
        # the read the batch rests on fails: nothing is written, the request waits
        await cp.counted(
            "slurm_sidecars_drain_requests_total",
            what="the batch deferred",
            action="drain",
            result="deferred",
        )
        assert cp.sample("slurm_sidecars_drain_batches_total", action="drain", result="ok") == 0
        await cluster.start_slurmctld()
        node = await cluster.wait_node("n1", lambda n: n.state.drain)
        assert node.reason is not None and node.reason.text == REASON
        # Slurm shows the drain before our write's command has returned and been counted
        await cp.counted(
            "slurm_sidecars_drain_batches_total", what="the batch counted", action="drain", result="ok"
        )
        assert cp.sample("slurm_sidecars_drain_batches_total", action="drain", result="ok") == 1


async def test_a_bare_post_drains_and_undrains_with_the_documented_reason(cluster: DevCluster) -> None:
    async with control_plane(cluster) as cp:
        _, doc = await cp.get("/v1/openapi.json")
        body = doc["paths"]["/v1/nodes/{name}/drain"]["post"]["requestBody"]
        default = body["content"]["application/json"]["schema"]["properties"]["reason"]["default"]
        assert body["required"] is False and default.startswith("slurm-sidecars:")
        # what `curl -X POST -H "Authorization: Bearer ..." .../drain` sends: no body, no content type
        async with cp.session.post(cp.url + "/v1/nodes/n2/drain") as r:
            assert r.status == 202, await r.text()
        node = await cluster.wait_node("n2", lambda n: n.state.drain, what="n2 drained")
        assert node.reason is not None and node.reason.text == default
        async with cp.session.post(cp.url + "/v1/nodes/n2/undrain") as r:
            assert r.status == 202, await r.text()
        await cluster.wait_node("n2", lambda n: not n.state.drain, what="n2 undrained")
