"""Run-time node state across config-sync's restart of slurmctld (a change Slurm takes only by a
restart, `--restart-policy restart`; runstate.py, docs/node-state.md): a restart on the saved
StateSaveLocation loses what a reconfigure loses (features, Weight, 26.05's in-place topology, an
admin's DOWN), measured. A feature and a weight set by `scontrol update`, a topology placed as the
control plane's topology sync places it from a label (25.05+), a drain by an admin, one by us and an
admin's DOWN are each back right after slurmctld answers again, and stay. The window each was seen
lost is printed. Without the put-back, they stay lost."""

from __future__ import annotations

import asyncio
import base64
import time

import aiohttp
import pytest

from sidecars.devcluster import DevCluster
from sidecars.slurm import SlurmError
from tests.configsync.harness import (
    bump_max_job_count,
    cluster_files,
    config_sync,
    container_restarts,
    key_secret,
    set_sha,
)
from tests.configsync.test_node_state_kept import (
    ADMIN,
    CLASSIC,
    DOWN,
    OURS,
    PLACE,
    SLINKY,
    TOPOLOGY_YAML,
    WINDOW_BOUND_SECONDS,
    Watch,
    values,
)

READ_SECONDS = 5.0  # one read of the nodes: a down slurmctld is not waited out (the watch reads again)


class RestartWatch(Watch):
    """`Watch`, through a restart: a read slurmctld does not answer (it is down) is skipped."""

    async def run(self, cluster: DevCluster, topology: bool) -> None:
        client = cluster.client(timeout=READ_SECONDS)
        while not self.stop.is_set():
            try:
                nodes = await client.nodes_named(["n1", "n2", "n3", "n4"])
            except SlurmError:
                await asyncio.sleep(0)  # down for now: the next read that answers says
                continue
            seen = values(nodes, topology)
            now = time.monotonic()
            for key, value in seen.items():
                if value != self.want[key]:
                    self.lost_since.setdefault(key, now)
                elif key in self.lost_since:
                    lost = now - self.lost_since.pop(key)
                    self.windows.setdefault(key, []).append(round(lost, 3))
            await asyncio.sleep(0)  # back to back: each read takes its own time


async def state_kept_across_a_restart(cluster: DevCluster) -> None:
    client = cluster.client()
    topology = cluster.release.short >= "25.05"
    n1 = await client.node("n1")
    assert n1 is not None
    base = sorted(n1.features)  # a Slinky worker's NodeSet feature stays: its partition selects it
    await client.update_nodes(
        ["n1"], AvailableFeatures=",".join([*base, "x", "rt"]), ActiveFeatures=",".join([*base, "rt"])
    )
    await client.update_nodes(["n1"], Weight="77")
    if topology:
        await client.set_topology(["n1"], PLACE)  # what the control plane's topology sync runs
    await client.drain(["n2"], OURS)
    await client.drain(["n3"], ADMIN)
    await client.down(["n4"], DOWN)
    want = values(await client.nodes_named(["n1", "n2", "n3", "n4"]), topology)
    assert want["weight"] == 77 and want["admin's down"] == ("DOWN", DOWN), want

    secrets = key_secret(cluster) if cluster.slinky else {}
    initial = {**cluster_files(cluster), "topology.yaml": TOPOLOGY_YAML.encode()}
    async with (
        config_sync(cluster, secrets=secrets, initial=initial, restart_policy="restart") as sync,
        container_restarts(cluster) as restarts,
    ):
        pid = cluster.hostpid("slurmctld")
        files = bump_max_job_count(sync.good())
        watch = RestartWatch(want)
        watcher = asyncio.create_task(watch.run(cluster, topology), name="node-state-restart-watch")
        try:
            sync.config.write(files)
            sha = set_sha(files, secrets)
            # back, verified, and the run-time state watched as long as a registration may take it
            within = 60.0 + sync.settings.restart_timeout_seconds + sync.settings.registration_seconds
            st = await sync.wait(sha, within=within)
            watch.stop.set()
            await watcher
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)

        windows = watch.windows
        shape = f"{cluster.release.version} {cluster.spec.shape}"
        print(f"\n{shape} restart: each loss seen, back after (s): {windows}")
        print(f"node_state: {st['node_state']}")
        assert restarts and cluster.hostpid("slurmctld") != pid  # applied by a restart, not a reconfigure
        assert values(await client.nodes_named(["n1", "n2", "n3", "n4"]), topology) == want
        assert not watch.lost_since, watch.lost_since  # nothing still lost when the change is applied
        assert all(w <= WINDOW_BOUND_SECONDS for seen in windows.values() for w in seen), windows
        kept = st["node_state"]
        assert kept is not None and kept["not_back"] == [], kept
        put_back = kept["put_back"]
        assert put_back.get("features") == ["n1"] and put_back.get("weight") == ["n1"], kept
        assert put_back.get("down") == ["n4"], kept
        assert "drain" not in put_back, kept  # the saved state keeps drains: checked, nothing to put back
        history = sync.service.history_view()
        said = next(g for g in history["generations"] if g["sha256"] == sha)
        assert "slurmctld restarted on it; run-time node state put back" in (said.get("reason") or ""), said


@pytest.mark.timeout(300)
@pytest.mark.cluster(**CLASSIC)
@pytest.mark.per_release("what a restart wipes differs by release (docs/node-state.md's table)")
async def test_run_time_node_state_is_back_after_a_restart_classic(cluster: DevCluster) -> None:
    await state_kept_across_a_restart(cluster)


@pytest.mark.timeout(300)
@pytest.mark.releases("slurm24", "slurm26")
@pytest.mark.cluster(**SLINKY)
@pytest.mark.per_release("what a restart wipes differs by release (docs/node-state.md's table)")
async def test_run_time_node_state_is_back_after_a_restart_slinky(cluster: DevCluster) -> None:
    await state_kept_across_a_restart(cluster)


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
