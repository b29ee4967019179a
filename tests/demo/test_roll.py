"""The demo's paced roll: never more workers out than the budget, busy ones waited for (their jobs
complete), a worker someone else drained left alone with their reason, every other slurmd replaced."""

from __future__ import annotations

import pytest

from sidecars.demo.polling import until
from sidecars.demo.roll import DemoRoll
from sidecars.demo.stack import DemoStack
from sidecars.devcluster import Release


@pytest.mark.timeout(180)
@pytest.mark.releases("slurm22")  # the budget and order are ours; the tour rolls every release
async def test_a_roll_keeps_its_budget_waits_for_jobs_and_leaves_an_admins_drain(release: Release) -> None:
    said: list[str] = []
    async with DemoStack(release, nodes=4) as stack:
        c = stack.cluster
        client = c.client()
        await client.drain(["n4"], "admin: bad DIMM")
        jobs = [await c.sbatch("-w", n, "-t", "1", wrap="sleep 6") for n in ("n1", "n2")]
        for job in jobs:
            await c.wait_job(job, "RUNNING", timeout=30)

        async def seen_busy() -> bool:  # the control plane's order ranks what it has read
            fleet = await stack.get(stack.control_plane_url + "/v1/nodes", auth=True)
            assert isinstance(fleet, list)
            return all(n["jobs"] for n in fleet if n["name"] in {"n1", "n2"})

        await until("the control plane to see the jobs", seen_busy, timeout=30)
        rolled = await DemoRoll(stack, "r2", "2", said.append).run()
        # both busy workers were out together (the budget allows two), never three
        assert rolled.most_out_at_once == 2, (rolled, said)
        # idle first, as the scale-in order ranks them
        assert set(rolled.waited) == {"n1", "n2"} and rolled.order[0] == "n3", (rolled, said)
        assert rolled.left_alone == {"n4": "admin: bad DIMM"}
        assert set(rolled.pids) == {"n1", "n2", "n3"} and all(old != new for old, new in rolled.pids.values())
        for job in jobs:
            assert (await c.wait_job(job, {"COMPLETED", "FAILED", "CANCELLED"})).state == "COMPLETED"
        # every replaced worker back in service (a ping slurmctld sent the old slurmd may still mark
        # it NOT_RESPONDING a moment after it registered again: Slurm's next ping clears it)
        rolled_names = {"n1", "n2", "n3"}
        after = await c.wait_nodes(
            lambda ns: all(n.state.registered and not n.state.drain for n in ns if n.name in rolled_names),
            what="the rolled workers in service",
        )
        nodes = {n.name: n for n in after}
        n4 = nodes["n4"]
        assert n4.state.drain and n4.reason is not None and n4.reason.text == "admin: bad DIMM"
