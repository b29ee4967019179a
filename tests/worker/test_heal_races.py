"""The agent heals only the slurmd that is really gone: a configless slurmd re-executed by a
reconfigure is still ours, and one that someone else started while the agent looked is never killed
by a restart decided on the older look."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from sidecars.devcluster import DevCluster
from sidecars.slurm.models import NodeState
from sidecars.slurm.nodejson import NodeRecord
from sidecars.worker.metrics import WorkerMetrics
from sidecars.worker.observation import Observation
from sidecars.worker.registration import Registration
from sidecars.worker.settings import WorkerSettings
from sidecars.worker.slurmd import Slurmd
from tests.helpers import RecordingEvents, eventually
from tests.settings import build
from tests.worker.agents import http_get, running_agent, settings_for


@pytest.mark.releases("slurm24", "slurm26")
@pytest.mark.cluster(shape="slinky", nodes=1)
@pytest.mark.per_release("each release's re-exec of slurmd at a reconfigure, and the environment it keeps")
async def test_a_configless_slurmd_reexecuted_by_a_reconfigure_is_still_ours(
    cluster: DevCluster, sockdir: Path
) -> None:
    # as Slinky runs the agent: no restart command, slurmd's liveness and dynamic record judged from /proc
    async with running_agent(cluster, settings_for(cluster, sockdir)) as agent:
        before = cluster.hostpid("slurmd-n1")
        assert before is not None and agent.slurmd.find() == before
        await cluster.client().reconfigure()
        after = await eventually(
            lambda: cluster.hostpid("slurmd-n1"), lambda p: p not in (None, before), what="slurmd re-executed"
        )
        # the new process names the copy it fetched (measured: DIR/spool/n1/conf-cache/slurm.conf)
        assert b"/conf-cache/" in Path(f"/proc/{after}/environ").read_bytes()
        _, livez = await http_get(agent, "/livez")
        # before: "slurmd not running for Ns", and after the grace a failed /livez (the kubelet's
        # restart of the agent) and a dynamic node's record kept after its drain
        assert livez["checks"]["slurmd_alive"]["detail"] == f"slurmd pid {after}", livez
        _, status = await http_get(agent, "/status")
        assert status["slurmd_pid"] == after


def record(state: str) -> Observation:
    return Observation("slurm", view=NodeRecord(name="w1", state=NodeState.parse(state), reason=None))


async def fake_slurmd(tmp_path: Path, conf: str) -> asyncio.subprocess.Process:
    """A process named `slurmd` (a copy of sleep) of our cluster (its SLURM_CONF is ours)."""
    binary = tmp_path / "slurmd"
    if not binary.exists():
        shutil.copy("/bin/sleep", binary)
    return await asyncio.create_subprocess_exec(binary, "600", env={"SLURM_CONF": conf})


async def test_a_slurmd_started_by_someone_else_while_the_agent_looked_is_not_restarted(
    tmp_path: Path,
) -> None:
    conf, marker = str(tmp_path / "slurm.conf"), tmp_path / "restart-command-ran"
    settings = build(
        WorkerSettings,
        node_name="w1",
        socket_path=tmp_path / "agent.sock",
        state_dir=tmp_path,
        slurmd_missing_grace_seconds=0.0,
        slurmd_restart_command=("touch", str(marker)),
    )
    events = RecordingEvents()
    reg = Registration(
        settings,
        Slurmd("w1", settings.slurmd_restart_command, env={"SLURM_CONF": conf, "PATH": "/usr/bin:/bin"}),
        events,
        WorkerMetrics(CollectorRegistry()),
        report=lambda ok, why: asyncio.sleep(0),
    )
    first = await fake_slurmd(tmp_path, conf)
    started: list[asyncio.subprocess.Process] = [first]
    try:

        async def never_asked() -> Observation:
            raise AssertionError("a registered node needs no second look")

        await reg.step(record("IDLE"), never_asked)
        assert reg.status.state == "registered" and reg.slurmd.ever_seen
        first.kill()
        await first.wait()

        async def look_while_the_kubelet_starts_it() -> Observation:
            # the order that lost: the agent saw slurmd gone, then, during its second look,
            # the container runtime (or an operator's roll) started the new one
            started.append(await fake_slurmd(tmp_path, conf))
            return record("IDLE+NOT_RESPONDING")

        await reg.step(record("IDLE+NOT_RESPONDING"), look_while_the_kubelet_starts_it)
        second = started[1]
        assert second.returncode is None and reg.slurmd.find() == second.pid
        assert not marker.exists(), "the restart command ran over a slurmd someone else had started"
        assert reg.status.heal_attempts == 0 and events.events == []
        # it now waits for that slurmd's registration, as for any slurmd that has not registered
        await reg.step(record("IDLE+NOT_RESPONDING"), never_asked)
        assert reg.status.state == "pending", reg.status
    finally:
        for proc in started:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
