"""What the roles need to undo their changes (slurmctld's image and replicas before the upgrade, the
state copy) is kept with the upgrade's status and handed back to the roles of a control plane that
takes over mid-stage: without it, a Kubernetes rollback after a takeover would not know the image to
go back to, nor the copy to restore. No Slurm needed: the machine's bookkeeping and the Kubernetes
roles' own memory; the whole upgrade through the fake API is test_cluster_upgrade_kube.py's."""

from __future__ import annotations

from typing import Any, cast

import pytest

from sidecars.controlplane.changes import KubeClusterRoles, KubeRoleNames
from sidecars.controlplane.changes.cluster_roles.kube_jobs import COPIES
from sidecars.controlplane.changes.cluster_roles.roles import ClusterRoles
from sidecars.controlplane.changes.cluster_upgrade.stages import ClusterUpgrade
from sidecars.controlplane.changes.cluster_upgrade.status import ClusterUpgradeStatus
from sidecars.controlplane.settings import ClusterUpgradeSettings
from sidecars.kube import KubeClient
from sidecars.slurm import Version
from tests.fakekube.server import configuration

pytestmark = [pytest.mark.timeout(30)]

IMAGES = {"slurmdbd": "db:26.05", "slurmctld": "ctld:26.05", "slurmd": "d:26.05"}
NAMES = KubeRoleNames(
    namespace="slurm",
    upgrade=ClusterUpgradeSettings(
        slurmdbd_workload=("StatefulSet", "slurmdbd"),
        slurmctld_statefulset="slurmctld",
        state_image="ours:1",
        without_database_backup=True,
        rollout_timeout_seconds=5.0,
        job_timeout_seconds=5.0,
    ),
)


class Remembering:
    """Roles that remember, on a cluster already on the target: every stage is skipped, and the
    order of what the machine asks is recorded."""

    def __init__(self) -> None:
        self.kept = {"slurmctld_image": "ctld:24.11"}
        self.calls: list[str] = []

    def memory(self) -> dict[str, str]:
        return dict(self.kept)

    def recall(self, memory: dict[str, str]) -> None:
        self.calls.append(f"recall {sorted(memory.items())}")

    async def versions(self) -> dict[str, Version]:
        return {d: Version.parse("26.05.5") for d in ("slurmdbd", "slurmctld:c", "slurmd:n1")}

    async def room(self) -> list[tuple[str, int, int]]:
        self.calls.append("room")  # the preflight: roles start afresh there
        return []

    def controllers(self) -> list[str]:
        return ["c"]


def _roles(kube: KubeClient) -> KubeClusterRoles:
    async def no_roll(image: str, version: Version) -> None:
        raise AssertionError("no roll here")

    return KubeClusterRoles(NAMES, kube, lambda: cast(Any, None), no_roll)


async def test_each_checkpoint_keeps_the_roles_memory_and_a_resumed_upgrade_hands_it_back() -> None:
    saved: list[dict[str, Any]] = []

    async def save(status: ClusterUpgradeStatus) -> None:
        saved.append(status.data())

    first = Remembering()
    upgrade = ClusterUpgrade(cast(ClusterRoles, first), Version.parse("26.05"), IMAGES, save=save)
    await upgrade.checkpoint()
    assert saved[-1]["roles_memory"] == {"slurmctld_image": "ctld:24.11"}

    # a new Lease holder reads the kept status back (through the store's JSON) and starts again
    kept = ClusterUpgradeStatus.from_data(saved[-1])
    assert kept.roles_memory == {"slurmctld_image": "ctld:24.11"}
    second = Remembering()
    second.kept = {}  # it has seen nothing yet
    again = ClusterUpgrade(cast(ClusterRoles, second), Version.parse("26.05"), IMAGES, resume=kept, save=save)
    assert second.calls == []  # not before the preflight, which starts the roles afresh
    assert await again.run() == "complete", again.status.report()
    assert second.calls == ["room", "recall [('slurmctld_image', 'ctld:24.11')]"]
    # roles that have nothing new to say do not wipe what was kept
    assert saved[-1]["roles_memory"] == {"slurmctld_image": "ctld:24.11"}


async def test_the_kubernetes_roles_remember_the_image_replicas_and_copy_and_take_them_back() -> None:
    # nothing is asked of the API here: the address is one where nothing listens
    async with KubeClient(configuration("http://127.0.0.1:9", "t")) as kube:
        _remembers(kube)


def _remembers(kube: KubeClient) -> None:
    roles = _roles(kube)
    assert roles.memory() == {}
    kept = {
        "slurmctld_image": "ctld:24.11",
        "slurmctld_replicas": "1",
        "copy_path": f"{COPIES}/state-20261202T061000",
        "state_location": "/var/spool/slurmctld",
    }
    roles.recall(kept)
    assert roles.memory() == kept
    # a kept status is data anyone with the ConfigMap could have edited: a copy path outside ours is
    # never restored from, and a replica count that is not a number is not taken
    other = _roles(kube)
    other.recall(
        {
            "copy_path": f"{COPIES}/state-20261202T061000/../..",
            "slurmctld_replicas": "many",
            "slurmctld_image": "ctld:24.11 --privileged",
            "state_location": "/var/spool/../../etc",
        }
    )
    assert other.memory() == {}
