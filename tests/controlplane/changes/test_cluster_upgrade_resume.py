"""A whole-cluster upgrade 24.11 -> 26.05 whose control plane dies in the slurmctld stage (between
the old controller's stop and the new one's start), on real daemons with MariaDB and the fake
Kubernetes API: its status is kept in a ConfigMap, one Event per stage start, end and rollback is
on the Lease holder's pod; the next holder reports the upgrade `interrupted` at that stage (with
its backup and state copy), refuses an upgrade to another target over it, and a new start to the
same target goes on from there with every job there after. A holder that loses the Lease
mid-upgrade stops it where it is, and the next holder reports it the same way."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sidecars.controlplane.changes.cluster_upgrade.status import ClusterUpgradeStatus
from sidecars.controlplane.changes.cluster_upgrade.store import CONFIG_MAP, KEY
from sidecars.controlplane.service import ControlPlaneService
from sidecars.devcluster import Release
from sidecars.devcluster.swap import SwappableCluster
from sidecars.devcluster.swap_roles import DevClusterRoles
from sidecars.operator.upgrade import render
from tests.controlplane.changes.upgrade_records import finished_record
from tests.controlplane.conftest import PRODUCT_LEASE_SECONDS, Running, control_plane
from tests.fakekube import FakeKube
from tests.helpers import eventually

TEST_SECONDS = 360.0
pytestmark = [pytest.mark.releases("slurm24"), pytest.mark.timeout(TEST_SECONDS)]

IMAGES = {"slurmdbd": "sid", "slurmctld": "sid", "slurmd": "sid"}
NS = "slurm"
# the product's Lease (15 s: a holder may write for 10 s after a renewal is sent); a 3 s Lease left
# 2 s, which one slow renewal on a loaded machine ate: the upgrade's first status write was fenced
# and it ended "not started" (seen beside the hog). The holders hand over by releasing it, and renew
# and look often, so no wait grows with it.
LEASE: dict[str, Any] = {
    "lease": {"name": "cp", "duration_seconds": PRODUCT_LEASE_SECONDS, "renew_seconds": 0.5}
}


class CutAtStart(DevClusterRoles):
    """Roles whose control plane is killed in the slurmctld stage: with `started` False, the old
    controller stopped and its state copied, the new one not started; with `started` True, the new
    one started and not yet verified."""

    def __init__(self, *args: Any, started: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.started = started
        self.cut = asyncio.Event()

    async def start_slurmctld(self, controller: str, image: str) -> None:
        if self.started:
            await super().start_slurmctld(controller, image)
        self.cut.set()
        await asyncio.Event().wait()  # until the control plane's end cancels it


@pytest.fixture
async def cluster(swappable_cluster: SwappableCluster) -> SwappableCluster:
    return swappable_cluster


async def _report(plane: Running) -> dict[str, Any]:
    status, body = await plane.get("/v1/upgrade")
    assert status == 200, body
    return dict(body)


def _stages(report: dict[str, Any]) -> dict[str, str]:
    return {s["name"]: s["state"] for s in report["cluster"]["stages"]}


def _reasons(fake: FakeKube, pod: str) -> list[str]:
    return [
        e["reason"]
        for e in fake.events
        if e["reason"].startswith("ClusterUpgrade") and e["involvedObject"]["name"] == pod
    ]


async def _until(
    plane: Running, ok: Callable[[dict[str, Any]], bool], within: float, what: str
) -> dict[str, Any]:
    """The upgrade report once `ok` holds of it."""

    async def read() -> dict[str, Any]:
        return await _report(plane)

    return await eventually(read, ok, within=within, what=what)


async def _leading(plane: Running) -> None:
    await eventually(lambda: plane.plane.leader.is_leader, what="the Lease held", within=30)


@pytest.mark.parametrize("started", [False, True], ids=["before-the-new-start", "before-the-verification"])
async def test_a_control_plane_killed_in_the_slurmctld_stage_is_reported_and_resumed(
    cluster: SwappableCluster,
    release: Release,
    newer: Release,
    fake_kube: tuple[FakeKube, str],
    started: bool,
) -> None:
    fake, url = fake_kube
    releases = {"chroot": release, "sid": newer}
    go = cluster.out_dir / "go"
    spanning = await cluster.sbatch(wrap=f"while [ ! -e {go} ]; do sleep 0.2; done")
    await cluster.wait_job(spanning, "RUNNING", timeout=60)
    held = await cluster.sbatch("--hold", wrap="true")
    before = {j.job_id for j in await cluster.client().jobs()}

    cut = CutAtStart(cluster, releases, started=started, worker_timeout_seconds=30)

    def hand_cut(p: ControlPlaneService) -> None:
        p.cluster_upgrades.roles = cut

    async with control_plane(cluster, url, prepare=hand_cut, identity="cp-a", pod_name="cp-a", **LEASE) as a:
        await _leading(a)
        status, text = await a.post("/v1/upgrade/cluster", {"slurm_version": "26.05", "images": IMAGES})
        assert status == 201, text
        # the stage cut there, or the upgrade ended without reaching it: said at once, with its
        # stages, not after a bound (its stages are bounded by their own settings)
        report = await _until(
            a,
            lambda r: cut.cut.is_set() or r["cluster"]["state"] not in ("running", "paused"),
            within=TEST_SECONDS,
            what="the slurmctld stage between stop and start, or the upgrade's end",
        )
        assert cut.cut.is_set(), report["cluster"]["stages"]
        # what a killed control plane leaves: the ConfigMap says the stage runs, with its copies
        kept = ClusterUpgradeStatus.from_data(json.loads(fake.config_maps[(NS, CONFIG_MAP)]["data"][KEY]))
        assert kept.stage("slurmctld").state == "running" and kept.state_copy and kept.backup
        assert set(kept.jobs_before) == before  # the running job and the held one
    # the control plane is gone with the stage cut; slurmctld is down, or the new one runs unjudged
    assert (cluster.foreground_pid() is not None) == started
    assert cluster.release_of("slurmctld") == (newer if started else release)
    assert _reasons(fake, "cp-a") == [
        "ClusterUpgradePreflightStarted",
        "ClusterUpgradePreflightDone",
        "ClusterUpgradeSlurmdbdStarted",
        "ClusterUpgradeSlurmdbdDone",
        "ClusterUpgradeSlurmctldStarted",
    ]

    def hand_roles(p: ControlPlaneService) -> None:
        p.cluster_upgrades.roles = DevClusterRoles(cluster, releases, worker_timeout_seconds=30)

    async with control_plane(
        cluster, url, prepare=hand_roles, ready=False, identity="cp-b", pod_name="cp-b", **LEASE
    ) as b:
        await _leading(b)
        report = await _until(
            b,
            lambda r: r["cluster"] is not None,
            within=30,
            what="the kept upgrade read back by the new holder",
        )
        up = report["cluster"]
        assert up["state"] == "interrupted", up
        assert _stages(report) == {
            "preflight": "done",
            "slurmdbd": "done",
            "slurmctld": "interrupted",
            "workers": "pending",
        }
        assert "control plane stopped during this stage" in up["stages"][2]["detail"]
        assert up["backup"] == kept.backup and Path(up["backup"]).stat().st_size > 0
        assert up["state_copy"] == kept.state_copy and (Path(up["state_copy"]) / "job_state").exists()
        said = render(report)
        assert said[0] == "cluster upgrade to 26.05.0: interrupted"
        assert any(kept.state_copy in line for line in said)
        # the report reads the status as found; its gauge and Event are set after it is kept again
        await eventually(
            lambda: b.sample("slurm_sidecars_cluster_upgrade_stage_state", stage="slurmctld"),
            lambda state: state == 7,  # interrupted
            what="the slurmctld stage's gauge at interrupted",
        )
        await eventually(lambda: _reasons(fake, "cp-b"), what="the interrupted stage's Event")
        assert _reasons(fake, "cp-b") == ["ClusterUpgradeSlurmctldInterrupted"]
        # kept so: a third holder would find it interrupted, not running
        again = json.loads(fake.config_maps[(NS, CONFIG_MAP)]["data"][KEY])
        assert ClusterUpgradeStatus.from_data(again).state == "interrupted"

        # never a second upgrade beside it: another target is refused, saying how to go on
        status, text = await b.post("/v1/upgrade/cluster", {"slurm_version": "26.05.1", "images": IMAGES})
        assert status == 409 and "was interrupted at its slurmctld stage" in text, text
        assert "--slurm-version 26.05.0" in text and kept.state_copy in text
        assert (cluster.foreground_pid() is not None) == started  # the refusal started nothing

        # the same target goes on from the stage cut: slurmdbd is not moved again
        status, text = await b.post("/v1/upgrade/cluster", {"slurm_version": "26.05", "images": IMAGES})
        assert status == 201, text
        await _until(b, lambda r: _stages(r)["workers"] != "pending", within=120, what="the workers stage")
        go.touch()  # the roll waits for the job on its worker: it ends now, as jobs do
        report = await _until(
            b,
            lambda r: r["cluster"]["state"] not in ("running", "paused"),
            within=180,
            what="the resumed upgrade's end",
        )
        up = report["cluster"]
        assert up["state"] == "complete", up["stages"]
        assert up["resumed_from"] == "slurmctld"
        assert _stages(report) == {
            "preflight": "done",
            "slurmdbd": "skipped",
            "slurmctld": "done",
            "workers": "done",
        }
        if started:  # it answers, on the target: judged against the jobs kept from before its stop
            assert "resumed at the slurmctld stage" in up["stages"][0]["detail"]
        else:  # none answers: the stage goes on without the window read again
            assert "resuming the slurmctld stage" in up["stages"][0]["detail"]
        assert (await cluster.client().show_config())["SLURM_VERSION"].startswith("26.05")
        jobs = {j.job_id: j.state for j in await cluster.client().jobs()}
        assert before <= set(jobs) and jobs[held] == "PENDING"
        assert await finished_record(cluster, spanning) == ("COMPLETED", "0:0")
        resumed = _reasons(fake, "cp-b")
        for stage in ("Preflight", "Slurmctld", "Workers"):
            assert f"ClusterUpgrade{stage}Started" in resumed and f"ClusterUpgrade{stage}Done" in resumed
        assert "ClusterUpgradeSlurmdbdSkipped" in resumed
        messages = [e["message"] for e in fake.events if e["reason"] == "ClusterUpgradeSlurmctldDone"]
        assert messages and messages[0].startswith("upgrade to 26.05.0: slurmctld 26.05.0 on the same state")
        final = json.loads(fake.config_maps[(NS, CONFIG_MAP)]["data"][KEY])
        assert ClusterUpgradeStatus.from_data(final).state == "complete"


class HeldAtBackup(DevClusterRoles):
    """Roles whose database backup waits until the control plane's task is cancelled."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.waiting = asyncio.Event()

    async def backup_database(self) -> str:
        self.waiting.set()
        await asyncio.Event().wait()
        raise AssertionError("never reached")


async def test_a_holder_that_loses_the_lease_stops_and_the_next_reports_the_upgrade_interrupted(
    cluster: SwappableCluster, release: Release, newer: Release, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    held = HeldAtBackup(cluster, {"chroot": release, "sid": newer})

    def hand_held(p: ControlPlaneService) -> None:
        p.cluster_upgrades.roles = held

    def hand_roles(p: ControlPlaneService) -> None:
        p.cluster_upgrades.roles = DevClusterRoles(cluster, {"chroot": release, "sid": newer})

    async with control_plane(cluster, url, prepare=hand_held, identity="cp-a", pod_name="cp-a", **LEASE) as a:
        await _leading(a)
        status, text = await a.post("/v1/upgrade/cluster", {"slurm_version": "26.05", "images": IMAGES})
        assert status == 201, text
        await eventually(held.waiting.is_set, what="the slurmdbd stage under way", within=60)
        # another replica took the Lease while this one was cut off: it must act no more
        lease = fake.leases[("slurm", "cp")]
        lease["spec"]["holderIdentity"] = "cp-b"
        lease["metadata"]["resourceVersion"] = "999999"
        await eventually(lambda: not a.plane.leader.is_leader, what="cp-a follows", within=30)
        await eventually(
            lambda: not a.plane.cluster_upgrades.running, what="cp-a's upgrade stopped", within=10
        )
        async with control_plane(
            cluster, url, prepare=hand_roles, identity="cp-b", pod_name="cp-b", **LEASE
        ) as b:
            await _leading(b)
            report = await _until(
                b, lambda r: r["cluster"] is not None, within=30, what="the upgrade read back by cp-b"
            )
            assert report["cluster"]["state"] == "interrupted"
            assert _stages(report)["slurmdbd"] == "interrupted" and _stages(report)["preflight"] == "done"
            assert _reasons(fake, "cp-b") == ["ClusterUpgradeSlurmdbdInterrupted"]
            # cp-a said nothing after it lost the Lease, and moved nothing
            assert "ClusterUpgradeSlurmdbdInterrupted" not in _reasons(fake, "cp-a")
            assert (await cluster.client().show_config())["SLURM_VERSION"].startswith("24.11")
