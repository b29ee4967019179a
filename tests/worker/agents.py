"""Helpers: running a real worker agent against the test's dev cluster, with every interval short."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

from sidecars.devcluster import DevCluster
from sidecars.drainhook import drain
from sidecars.runtime.waits import within
from sidecars.slurm import Job
from sidecars.worker.observation import Observation
from sidecars.worker.service import Agent
from sidecars.worker.settings import WorkerSettings
from tests.helpers import RecordingEvents, eventually
from tests.settings import build


def settings_for(cluster: DevCluster, sockdir: Path, node: str = "n1", **overrides: Any) -> WorkerSettings:
    """An agent of the test's cluster: `node`, its socket and drain record in `sockdir`."""
    where = {"socket_path": sockdir / "agent.sock", "state_dir": sockdir, "pod_name": f"worker-{node}"}
    return build(WorkerSettings, **{"node_name": node, **where, **overrides})


@contextlib.asynccontextmanager
async def running(agent: Agent, ready: Callable[[], bool], what: str) -> AsyncIterator[Agent]:
    """`agent` running in this event loop until the block ends; yields once `ready()` holds, raises
    what stopped it if it stopped first, and stops it (or cancels it after 30 s) at the end."""
    stop = asyncio.Event()
    task = asyncio.ensure_future(agent.run(stop))
    try:
        await eventually(lambda: ready() or task.done(), what=what)
        if task.done():
            task.result()  # raise what stopped it
        assert ready(), f"the agent stopped before {what}"
        yield agent
    finally:
        stop.set()
        try:
            await within(task, 30)
        finally:
            if not task.done():
                task.cancel()


@contextlib.asynccontextmanager
async def running_agent(
    cluster: DevCluster, settings: WorkerSettings, events: RecordingEvents | None = None
) -> AsyncIterator[Agent]:
    """An agent running in this event loop until the block ends; yields once it has looked at its node."""
    agent = Agent(settings, env=cluster.env, events=events or RecordingEvents())
    async with running(agent, lambda: agent.last_tick is not None, "a first look") as a:
        yield a


@contextlib.asynccontextmanager
async def registered_by_its_restart(
    cluster: DevCluster, sockdir: Path, node: str, slurmd: tuple[str, ...]
) -> AsyncIterator[Agent]:
    """An agent of `node`, whose slurmd -Z never came up (Slurm has no record of it): yields once
    the agent's one restart (`slurmd`, its command) has it registered as a dynamic node."""
    s = settings_for(
        cluster, sockdir, node=node, registration_timeout_seconds=0.5, slurmd_restart_command=slurmd
    )
    async with running_agent(cluster, s) as agent:
        await eventually(lambda: agent.registration.status.heal_attempts == 1, what="a restart")
        await eventually(lambda: agent.registration.status.state == "registered", what="registered")
        yield agent


async def hook(settings: WorkerSettings, within: float = 60.0, reason: str | None = None) -> tuple[int, Any]:
    return await drain(str(settings.socket_path), within, reason)


async def drained_under_a_job(
    cluster: DevCluster, s: WorkerSettings, *sbatch: str, wrap: str
) -> tuple[int, float]:
    """A job submitted (`sbatch`'s words and `wrap`) and seen RUNNING, then the preStop hook run: it
    must answer `drained` (exit 0). The job, and when the hook returned (epoch seconds)."""
    job = await cluster.sbatch("-t", "1", *sbatch, wrap=wrap)
    await cluster.wait_job(job, "RUNNING")
    code, answer = await hook(s, within=60)
    returned = time.time()
    assert (code, answer["result"]) == (0, "drained"), answer
    return job, returned


async def completed(cluster: DevCluster, job: int) -> Job:
    """The job at its end, which must be COMPLETED (exit 0): a drain never cancels or fails it."""
    done = await cluster.wait_job(job, {"COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL"})
    assert done.state == "COMPLETED", done
    return done


async def http_get(agent: Agent, path: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{agent.http_port}{path}") as r:
        if r.content_type == "application/json":
            return r.status, await r.json()
        return r.status, await r.text()


def stale_look_once(agent: Agent, when: Callable[[], bool], then: Callable[[], Awaitable[Any]]) -> list[bool]:
    """Make the first look of the agent's loop taken while `when()` holds predate `then()`: the look
    is taken, `then()` changes the node, and the loop gets the older look. Looks the agent takes
    right before a write (straight from SlurmSource) are left alone. The list says it fired."""
    real = agent.source.observe
    fired: list[bool] = []

    async def observe(wait: float, wake: asyncio.Event) -> Observation | None:
        obs = await real(wait, wake)
        if obs is not None and not fired and when():
            fired.append(True)
            await then()
        return obs

    agent.source.observe = observe  # type: ignore[method-assign]
    return fired


def slurm_commands(agent: Agent) -> dict[str, float]:
    out: dict[str, float] = {}
    for metric in agent.slurm_metrics.commands.collect():
        for sample in metric.samples:
            if sample.name.endswith("_total"):
                key = sample.labels["command"]
                out[key] = out.get(key, 0) + sample.value
    return out


def token_file(folder: Path, token: str) -> Path:
    """A file holding `token`, as a mounted Secret or projected token volume holds it."""
    path = folder / "cp-token"
    path.write_text(token + "\n")
    return path
