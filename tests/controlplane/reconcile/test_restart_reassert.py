"""slurmctld coming back is seen as soon as it answers (fleet/reconfigures.py), and the writers
re-assert what they own then, not at the next fleet read (`--interval-seconds`, two minutes here):

- a restart (a change config-sync applies by one, a crash, a pod restart) loses the topology placed
  in place on 26.05 as a reconfigure does (docs/node-state.md): placed again at once;
- 22.05 reconfigures in place and keeps its BOOT_TIME, and loses a classic node's run-time features:
  the reconfigure is seen by sdiag's count of REQUEST_RECONFIGURE RPCs, and the GPU-domain features
  placed from a Node's label are placed again at once.

The window from slurmctld answering (or the reconfigure returning) until it is back is printed."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

import pytest

from sidecars.controlplane.service import ControlPlaneService
from sidecars.devcluster import DevCluster
from sidecars.kube.gpudomain import CLIQUE_LABEL
from sidecars.slurm import Controllers
from tests.controlplane.conftest import control_plane
from tests.controlplane.reconcile.test_gpu_domains import CLIQUE
from tests.controlplane.reconcile.test_reconfigure_reassert import (
    BOUND_SECONDS,
    EMPTY_TREE,
    INTERVAL_SECONDS,
    LOADED,
    POLL_SECONDS,
    placed_again,
    placed_from_labels,
)
from tests.fakekube import FakeKube
from tests.helpers import eventually

REFRESHED = "slurm_sidecars_fleet_refreshes_total"
READ_SECONDS = 3.0  # the control plane fixture's Slurm client: its timeout, twice (its attempts)
ASK_SECONDS = 5.0  # slurm.Controllers' ask_timeout_seconds: a candidate asked alone
# a read that goes unanswered, then one that answers (or a takeover asked about), then the fleet
# read it asks for; on a loaded machine 5-10x slower
WAIT_SECONDS = LOADED * (2 * READ_SECONDS + ASK_SECONDS + POLL_SECONDS)
HA = {"nodes": 1, "controllers": 2, "slurmctld_timeout_seconds": 5}


# in-place topology is 25.05+: 26.05 shows what a restart loses
@pytest.mark.releases("slurm26")
@pytest.mark.cluster(nodes=2, files={"topology.yaml": EMPTY_TREE})
async def test_the_topology_is_placed_again_as_soon_as_a_restarted_slurmctld_answers(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    client = cluster.client()
    async with placed_from_labels(cluster, fake_kube) as cp:
        await cluster.restart_slurmctld()  # `scontrol shutdown` (state saved), then a start
        lost, window = await placed_again(client)  # ("", ""): the restart lost it, unless placed again
        status = cp.plane.reconfigures.status()
        print(f"\nread right after the restart: {lost}; placed again {window:.3f} s after slurmctld answered")
        print(f"watch: {status}")
        # a restart within the second slurmctld started in (this test's, at once) keeps its BOOT_TIME
        assert status["seen"] + status["returns"] + status["start_second"] >= 1, status


# 22.05 alone reconfigures in place (a new slurmctld from 23.11: BOOT_TIME, the test above's file),
# and loses a classic node's run-time features (docs/node-state.md): the GPU-domain features the
# control plane places from a Node's NVLink clique label are placed again at once
@pytest.mark.releases("slurm22")
@pytest.mark.cluster(nodes=2)
async def test_an_in_place_reconfigure_is_seen_on_22_05(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    fake.serve_crds = True
    fake.add_node("k1", labels={CLIQUE_LABEL: CLIQUE.removeprefix("nvlink-clique-")})
    fake.add_pod("w1", hostname="n1", node_name="k1")
    client = cluster.client()

    async def placed() -> bool:
        n1 = await client.node("n1")
        return n1 is not None and CLIQUE in n1.features

    async with control_plane(
        cluster,
        url,
        gpu={"compute_domains": True},
        reads={"interval_seconds": INTERVAL_SECONDS, "reconfigure_poll_seconds": POLL_SECONDS},
    ) as cp:
        await eventually(lambda: cp.leading("gpu_features"), what="leader with Nodes and ComputeDomains")
        await eventually(placed, what="the clique feature placed")
        watch = cp.plane.reconfigures
        booted = await eventually(lambda: watch.booted, what="slurmctld's start time read once")
        # the watch reads the fleet once past slurmctld's start second after a read within it (a
        # restart in that second may have kept BOOT_TIME): two polls after that second, it has, and
        # the put-back below is the in-place reconfigure's, seen by sdiag's count (its baseline read)
        await eventually(
            client.boot_time,
            lambda b: b.asked is not None and b.asked > booted,
            what="slurmctld's clock past the second it started in",
        )
        polls = watch.status()["polls"]
        await eventually(lambda: watch.status()["polls"], lambda n: n >= polls + 2, what="two polls past it")
        assert watch.status()["in_place"] == 0, watch.status()
        await client.reconfigure()
        returned = time.monotonic()
        lost = await placed()  # False: the reconfigure took it, unless already placed again
        await eventually(placed, within=BOUND_SECONDS, what="the clique feature placed again")
        window = time.monotonic() - returned
        status = watch.status()
        print(f"\nread right after the 22.05 reconfigure: placed={lost}; placed again {window:.3f} s after")
        assert status["in_place"] == 1 and status["last"] == "reconfigured_in_place", status
        assert watch.booted == booted and status["seen"] == 0, status  # BOOT_TIME kept


# BOOT_TIME has 1-s resolution: a controller back in the second the one before started in (a quick
# restart, a standby that started beside it) shows the same one. slurmctld answering again after
# reads it did not answer is taken as its coming back: shown here with the same process, frozen
# (SIGSTOP) until a read goes unanswered, then let go. One release: the watch's own logic
@pytest.mark.releases("slurm26")
@pytest.mark.cluster(nodes=1)
async def test_slurmctld_answering_again_reads_the_fleet_at_once(cluster: DevCluster) -> None:
    async with control_plane(
        cluster, reads={"interval_seconds": INTERVAL_SECONDS, "reconfigure_poll_seconds": POLL_SECONDS}
    ) as cp:
        watch = cp.plane.reconfigures
        booted = await eventually(lambda: watch.booted, what="slurmctld's start time read once")
        await eventually(lambda: cp.sample(REFRESHED, result="ok"), what="the first fleet read")
        pid = cluster.foreground_pid() or cluster.hostpid("slurmctld")
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            # the client's timeout (3 s) and its retries, on a loaded machine
            await eventually(
                lambda: watch.status()["unanswered"], within=WAIT_SECONDS, what="an unanswered read"
            )
            reads = cp.sample(REFRESHED, result="ok")
        finally:
            os.kill(pid, signal.SIGCONT)
        let_go = time.monotonic()
        await eventually(lambda: watch.status()["returns"], lambda n: n == 1, within=WAIT_SECONDS)
        await eventually(lambda: cp.sample(REFRESHED, result="ok"), lambda n: n > reads, within=WAIT_SECONDS)
        print(f"\nslurmctld answering again seen, the fleet read {time.monotonic() - let_go:.3f} s after")
        assert watch.booted == booted and watch.status()["seen"] == 0, watch.status()


def _follow(cluster: DevCluster) -> Callable[[ControlPlaneService], None]:
    """The control plane follows the controller in control (its slurm.conf copies where the
    release's commands see them), as a pod's would."""

    def prepare(plane: ControlPlaneService) -> None:
        plane.slurm.controllers = Controllers({**cluster.env, "TMPDIR": str(cluster.dir)})

    return prepare


# a backup that takes control starts from the saved state and loses Weight and an admin's DOWN
# (measured, docs/node-state.md; the features and topology our writers place are kept): a controller
# of its own, seen by its BOOT_TIME, by the reads that went unanswered meanwhile, or by the controller
# the client follows changing, whichever comes first, and the fleet read at once
@pytest.mark.timeout(240)
@pytest.mark.releases("slurm26")
@pytest.mark.cluster(**HA)
async def test_a_backup_taking_control_reads_the_fleet_at_once(cluster: DevCluster) -> None:
    async with control_plane(
        cluster,
        prepare=_follow(cluster),
        reads={"interval_seconds": INTERVAL_SECONDS, "reconfigure_poll_seconds": POLL_SECONDS},
    ) as cp:
        watch = cp.plane.reconfigures
        booted = await eventually(lambda: watch.booted, what="slurmctld's start time read once")
        await eventually(lambda: cp.sample(REFRESHED, result="ok"), what="the first fleet read")
        reads = cp.sample(REFRESHED, result="ok")
        await cluster.takeover("ctld-b")  # returns once ctld-b serves
        in_control = time.monotonic()
        status = await eventually(
            watch.status,
            lambda s: s["seen"] + s["returns"] >= 1,
            within=WAIT_SECONDS,
            what="the takeover seen",
        )
        await eventually(lambda: cp.sample(REFRESHED, result="ok"), lambda n: n > reads, within=WAIT_SECONDS)
        window = time.monotonic() - in_control
        print(f"\nbefore: {booted}; the fleet read {window:.3f} s after ctld-b served; watch: {status}")
        if status["booted"] == booted:  # both started in one second: seen by the move of control alone
            assert status["returns"] >= 1, status
