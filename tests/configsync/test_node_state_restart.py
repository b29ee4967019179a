"""Run-time node state across config-sync's restart of slurmctld (a change Slurm takes only by a
restart, `--restart-policy restart`; runstate.py, docs/node-state.md): a restart on the saved
StateSaveLocation loses what a reconfigure loses (features, Weight, 26.05's in-place topology, an
admin's DOWN), measured. A feature and a weight set by `scontrol update`, a topology placed as the
control plane's topology sync places it from a label (25.05+), a drain by an admin, one by us and an
admin's DOWN are each back right after slurmctld answers again, and stay. The window each was seen
lost is printed. Without the put-back, they stay lost. The body is test_node_state_kept.py's."""

from __future__ import annotations

import base64

import aiohttp
import pytest

from sidecars.devcluster import DevCluster
from tests.configsync.harness import bump_max_job_count, config_sync, set_sha
from tests.configsync.test_node_state_kept import ADMIN, CLASSIC, DOWN, RESTART, SLINKY, state_kept_across


@pytest.mark.timeout(300)
@pytest.mark.cluster(**CLASSIC)
@pytest.mark.per_release("what a restart wipes differs by release (docs/node-state.md's table)")
async def test_run_time_node_state_is_back_after_a_restart_classic(cluster: DevCluster) -> None:
    await state_kept_across(cluster, RESTART)


@pytest.mark.timeout(300)
@pytest.mark.releases("slurm24", "slurm26")
@pytest.mark.cluster(**SLINKY)
@pytest.mark.per_release("what a restart wipes differs by release (docs/node-state.md's table)")
async def test_run_time_node_state_is_back_after_a_restart_slinky(cluster: DevCluster) -> None:
    await state_kept_across(cluster, RESTART)


# a restart on the saved state wipes what a reconfigure does (the measured table): a plan of a
# change that needs one lists it too. Our reading of the table, the same on every release: one
@pytest.mark.timeout(120)
@pytest.mark.releases("slurm26")
@pytest.mark.cluster(nodes=4)
async def test_plan_lists_what_the_change_s_restart_would_wipe(cluster: DevCluster) -> None:
    client = cluster.client()
    await client.update_nodes(["n1"], AvailableFeatures="x,rt", ActiveFeatures="rt", Weight="77")
    await client.drain(["n3"], ADMIN)  # kept by every release: not listed
    await client.down(["n4"], DOWN)
    token = "operator-token-for-the-node-state-plan-0123456789"
    async with config_sync(cluster, operator_token=token) as sync:
        files = bump_max_job_count(sync.good())
        body = {"files": [{"name": n, "data": base64.b64encode(d).decode()} for n, d in files.items()]}
        url = f"http://127.0.0.1:{sync.running.port}/v1/plan"
        auth = {"Authorization": f"Bearer {token}"}
        async with aiohttp.ClientSession() as s, s.post(url, json=body, headers=auth) as r:
            assert r.status == 200, await r.text()
            answer = await r.json()
        assert answer["verdict"] == "restart-required", answer
        assert answer["wipes"] == {"features": ["n1"], "weight": ["n1"], "down": ["n4"]}, answer
        assert sync.target_sha() != set_sha(files)  # a plan changes nothing
