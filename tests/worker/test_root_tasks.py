"""The agent's loop is its root task and is guarded: a loop that dies stops the agent with the
failure (exit 1) and fails liveness naming it, instead of leaving the drain hook unserved."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from sidecars.devcluster import DevCluster
from sidecars.runtime.tasks import RootTaskFailed
from sidecars.runtime.waits import within
from sidecars.worker.service import Agent
from tests.helpers import RecordingEvents, dies_when_armed, eventually
from tests.worker.agents import settings_for


@pytest.mark.cluster(nodes=1)
@pytest.mark.releases("slurm22")  # a task's guard is ours, not Slurm's: one release shows it
async def test_a_loop_that_dies_stops_the_agent_and_fails_liveness(
    cluster: DevCluster, sockdir: Path
) -> None:
    agent = Agent(settings_for(cluster, sockdir), env=cluster.env, events=RecordingEvents())
    armed = asyncio.Event()
    # the real loop looks at the node until armed, then dies of a bug
    agent._loop = dies_when_armed(agent._loop, armed, "the agent loop")  # type: ignore[method-assign]
    stop = asyncio.Event()
    run = asyncio.ensure_future(agent.run(stop))
    try:
        await eventually(lambda: agent.last_tick is not None or run.done(), what="a first look")
        ok, checks = await agent.http().liveness.run()
        assert ok and checks["root_tasks"].ok, checks
        armed.set()
        with pytest.raises(RootTaskFailed, match="agent_loop: RuntimeError: injected"):
            await within(run, 30)
        ok, checks = await agent.http().liveness.run()
        assert not ok
        assert checks["root_tasks"].detail == "agent_loop ended: RuntimeError: injected into the agent loop"
    finally:
        stop.set()
        if not run.done():
            run.cancel()
        await asyncio.gather(run, return_exceptions=True)
