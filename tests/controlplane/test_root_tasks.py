"""Each of the control plane's root tasks is guarded: one that dies fails liveness naming it, and
the daemon's wait ends with the failure (exit 1), instead of serving on with that part dead."""

from __future__ import annotations

import asyncio

import pytest

from sidecars.controlplane.service import ControlPlaneService
from sidecars.devcluster import DevCluster, free_port
from sidecars.runtime.tasks import RootTaskFailed, until_stopped
from sidecars.runtime.waits import within
from tests.controlplane.conftest import control_plane
from tests.fakekube import FakeKube
from tests.helpers import dies_when_armed, eventually

# how each root task is reached on a built ControlPlaneService, to make it raise
TARGETS = {
    "refresh_loop": lambda p: (p, "refresh_loop"),
    "drain_loop": lambda p: (p, "drain_loop"),
    "act_loop": lambda p: (p, "act_loop"),
    "leader": lambda p: (p.leader, "run"),
    "pod_watch": lambda p: (p.workers.pods, "run"),
    "config_feed": lambda p: (p.face.config_feed, "run"),
    "slurmctld_loop": lambda p: (p, "slurmctld_loop"),
    "reconfigure_watch": lambda p: (p.reconfigures, "run"),
}


@pytest.mark.cluster(nodes=1)
@pytest.mark.releases("slurm26")  # a task's guard is ours, not Slurm's: one release shows it
@pytest.mark.parametrize("task", list(TARGETS))
async def test_a_root_task_that_dies_is_reported(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str], task: str
) -> None:
    _, url = fake_kube
    armed = asyncio.Event()

    def prepare(plane: ControlPlaneService) -> None:
        owner, attr = TARGETS[task](plane)
        # the real task runs until armed (so the plane reads its fleet), then dies of a bug
        setattr(owner, attr, dies_when_armed(getattr(owner, attr), armed, task))

    # a config-sync URL that answers nothing: the feed runs (and keeps retrying) like any other task
    async with control_plane(
        cluster, url, prepare=prepare, config_sync=f"http://127.0.0.1:{free_port()}"
    ) as cp:
        status, body = await cp.get("/livez")
        assert status == 200 and body["checks"]["root_tasks"]["ok"], body
        armed.set()
        status, body = await eventually(lambda: cp.get("/livez"), lambda r: r[0] == 503, what="livez 503")
        detail = body["checks"]["root_tasks"]["detail"]
        assert detail == f"{task} ended: RuntimeError: injected into {task}"
        with pytest.raises(RootTaskFailed, match=task):
            await within(until_stopped(asyncio.Event(), cp.plane.tasks), 10)
