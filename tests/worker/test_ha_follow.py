"""The agent beside two controllers: the primary lost with its pod's node (killed, and its address
silent: nothing answers, not even a refusal) costs each of its commands `TCPTimeout` until it learns
who is in control; then its commands go there first, and a drain asked across it drains."""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecars.devcluster import DevCluster
from sidecars.runtime import process
from sidecars.slurm import Controllers
from sidecars.worker.service import Agent
from tests.helpers import RecordingEvents, eventually
from tests.worker.agents import hook, running, settings_for

HA = {"nodes": 1, "controllers": 2, "slurmctld_timeout_seconds": 5}
pytestmark = [pytest.mark.releases("slurm22", "slurm24", "slurm26"), pytest.mark.cluster(**HA)]


async def silence(cluster: DevCluster, index: int) -> None:
    """Packets to controller `index` go to a hardware address no one has: dropped without an answer,
    as for an address whose pod is gone. The entry lives on the cluster's own link, and goes with it."""
    c = cluster.controllers[index]
    link = cluster.links[index]
    argv = [
        "ip",
        "neigh",
        "replace",
        c.address,
        "lladdr",
        "02:00:00:5e:00:53",
        "dev",
        link,
        "nud",
        "permanent",
    ]
    done = await process.run(argv, timeout=10, merge_stderr=True)
    assert done.returncode == 0, done.text()


def first_named(controllers: Controllers, env: dict[str, str]) -> list[str]:
    """The `SlurmctldHost` names, in the order the agent's commands now read them."""
    conf = Path(controllers.env(env)["SLURM_CONF"])  # type: ignore[index]
    lines = conf.read_text().splitlines()
    return [ln.split("=", 1)[1].split("(")[0] for ln in lines if ln.startswith("SlurmctldHost=")]


@pytest.mark.timeout(240)
@pytest.mark.per_release("each release's backup takes control its own way")
async def test_the_agent_follows_a_lost_primary_and_its_drain_completes(cluster: DevCluster, sockdir) -> None:
    s = settings_for(cluster, sockdir, poll_seconds=0.5)
    agent = Agent(s, env=cluster.env, events=RecordingEvents())
    # its copies where the release's commands see them (a chroot sees only the cluster's directory)
    agent.client.controllers = Controllers({**cluster.env, "TMPDIR": str(cluster.dir)})
    async with running(agent, lambda: agent.last_tick is not None, "a first look"):
        job = await cluster.sbatch("-w", "n1", "-t", "1", wrap="sleep 8; echo finished")
        await cluster.wait_job(job, "RUNNING")
        await cluster.job_state_saved(job)  # what a backup recovers is only what was saved
        await cluster.kill_controller("ctld-a")
        await silence(cluster, 0)
        await cluster.wait_primary("ctld-b", timeout=60)
        ctl = agent.client.controllers
        # its own looks are slow now (TCPTimeout on the silent one): it learns who is in control
        await eventually(lambda: ctl.primary, lambda p: p == "ctld-b", within=60, what="ctld-b learnt")
        assert first_named(ctl, cluster.env) == ["ctld-b", "ctld-a"]
        status = agent.status()["controllers"]
        # no move counted: it first learnt after the move (an agent pings only when its looks are slow)
        assert status["primary"] == "ctld-b" and status["takeovers"] == 0, status
        assert status["controllers"] == [
            {"host": "ctld-a", "role": "down"},
            {"host": "ctld-b", "role": "in control"},
        ]
        code, answer = await hook(s, within=120)
        assert (code, answer["result"]) == (0, "drained"), answer
        done = await cluster.wait_job(job, {"COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL"}, timeout=60)
        assert done.state == "COMPLETED"
