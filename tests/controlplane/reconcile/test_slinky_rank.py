"""Slinky mode: worker pods owned by a slurm-operator NodeSet get the scale-in rank as the NodeSet
controller reads it (`nodeset.slinky.slurm.net/pod-deletion-cost`, then `.../pod-deadline`), from
the real end times of real jobs, and never `controller.kubernetes.io/pod-deletion-cost`.

The operator's side is reproduced from its source (v1.3, `internal/controller/nodeset/utils/sort.go`
and `internal/utils/structutils/map.go`) only for what the order needs: a missing or invalid cost
reads 0, a missing or invalid deadline reads as the zero time, the lower cost then the earlier
deadline goes first. Its other tie-breaks (phase, readiness, cordon, ordinal, age) and its own
deadline writer are not reproduced; the last is stood in for by annotations the test writes."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from sidecars.controlplane.flag_kinds import SLINKY_MODE
from sidecars.controlplane.fleet.metrics import ControlPlaneMetrics
from sidecars.controlplane.fleet.pods import node_name
from sidecars.controlplane.reconcile.deletion_cost import ANNOTATION, DeletionCostWriter
from sidecars.devcluster import DevCluster
from sidecars.kube import KubeClient
from sidecars.runtime.settings import ConfigError
from tests.controlplane.conftest import control_plane, one_pass, writer_deps
from tests.fakekube import FakeKube, configuration
from tests.helpers import eventually, fleet_node, fleet_snapshot

COST = "nodeset.slinky.slurm.net/pod-deletion-cost"
DEADLINE = "nodeset.slinky.slurm.net/pod-deadline"
SLINKY = "slinky.slurm.net/v1beta1"  # a NodeSet owner of this apiVersion: Slinky's
ZERO = dt.datetime.min.replace(tzinfo=dt.UTC)  # Go's zero time: what a missing deadline reads as


def rfc3339(epoch: int) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def notes(fake: FakeKube, pod: str) -> dict[str, str]:
    return dict(fake.pods[("slurm", pod)]["metadata"].get("annotations") or {})


def operator_order(fake: FakeKube, pods: list[str]) -> list[str]:
    """The NodeSet controller's scale-in order of these pods, by cost then deadline."""

    def key(pod: str) -> tuple[int, dt.datetime, str]:
        a = notes(fake, pod)
        try:
            cost = int(a.get(COST, "0"))
        except ValueError:
            cost = 0
        try:
            deadline = dt.datetime.fromisoformat(a[DEADLINE]) if DEADLINE in a else ZERO
        except ValueError:
            deadline = ZERO
        return cost, deadline, pod

    return sorted(pods, key=key)


def kube_cost_patches(fake: FakeKube) -> list[str]:
    """Pods we patched with Kubernetes' own deletion cost."""
    return [
        r.path.rsplit("/", 1)[1]
        for r in fake.answered("PATCH", "/pods/")
        if ANNOTATION in (((r.body or {}).get("metadata") or {}).get("annotations") or {})
    ]


@pytest.mark.releases("slurm24", "slurm26")
@pytest.mark.cluster(nodes=4, cpus=2)
async def test_nodeset_pods_are_ranked_by_slinky_annotations_from_real_job_ends(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    pods = {f"w{i}": f"n{i}" for i in range(1, 5)}
    for pod, node in pods.items():
        fake.add_pod(pod, hostname=node, owner_kind="NodeSet", owner_api_version=SLINKY)
    long = await cluster.sbatch("-w", "n1", "-n", "1", "-t", "30", wrap="sleep 600")
    shorter = await cluster.sbatch("-w", "n1", "-n", "1", "-t", "10", wrap="sleep 600")
    soon = await cluster.sbatch("-w", "n2", "-n", "1", "-t", "5", wrap="sleep 600")
    forever = await cluster.sbatch("-w", "n3", "-n", "1", "-t", "UNLIMITED", wrap="sleep 600")
    ends = {}
    for job in (long, shorter, soon):
        running = await cluster.wait_job(job, "RUNNING")
        assert running.end_time is not None
        ends[job] = running.end_time
    await cluster.wait_job(forever, "RUNNING")
    async with control_plane(cluster, url) as cp:
        await eventually(cp.leading, what="leader with pods")
        expected = {
            "w1": rfc3339(max(ends[long], ends[shorter])),  # the latest end of the jobs on n1
            "w2": rfc3339(ends[soon]),
            "w3": "9999-12-31T23:59:59Z",  # unlimited: last
            "w4": None,  # idle: no deadline, as the operator leaves an idle pod
        }

        async def deadlines() -> dict[str, str | None]:
            return {pod: notes(fake, pod).get(DEADLINE) for pod in pods}

        await eventually(
            deadlines,
            lambda d: d == expected and all(COST in notes(fake, p) for p in pods),
            what="Slinky's annotations on every pod",
        )
        assert notes(fake, "w4")[COST] == "0"
        assert operator_order(fake, list(pods)) == ["w4", "w2", "w1", "w3"]
        assert cp.sample("slurm_sidecars_slinky_mode") == 1.0

        # the longest job on n1 ends: its pod's deadline is now the other job's end
        await cluster.scancel(long)
        await eventually(
            deadlines,
            lambda d: d["w1"] == rfc3339(ends[shorter]),
            what="w1's deadline follows the job left",
        )
        assert operator_order(fake, list(pods)) == ["w4", "w2", "w1", "w3"]
        # n1 and n3 go idle: no deadline, cost 0, first to go with w4
        await cluster.scancel(shorter)
        await cluster.scancel(forever)
        await eventually(deadlines, lambda d: d["w1"] is None and d["w3"] is None, what="n1, n3 idle")
        assert notes(fake, "w1")[COST] == notes(fake, "w3")[COST] == "0"
        assert operator_order(fake, list(pods))[-1] == "w2"
        await cluster.scancel(soon)
    assert kube_cost_patches(fake) == []  # nothing the NodeSet controller would not read
    assert all(ANNOTATION not in notes(fake, p) for p in pods)


@pytest.mark.releases("slurm26")
@pytest.mark.cluster(nodes=3)
async def test_slinky_mode_is_overridden_both_ways(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    fake.add_pod("w1", hostname="n1", owner_kind="NodeSet", owner_api_version=SLINKY)
    fake.add_pod("w2", hostname="n2", owner_kind="NodeSet", owner_api_version=SLINKY)
    fake.add_pod("w3", hostname="n3")  # a ReplicaSet's
    job = await cluster.sbatch("-w", "n1", "-t", "20", wrap="sleep 600")
    end = (await cluster.wait_job(job, "RUNNING")).end_time
    assert end is not None

    async def w3_cost() -> str | None:
        return notes(fake, "w3").get(ANNOTATION)

    # false: Kubernetes' cost on the ReplicaSet pod; the NodeSet's pods are left alone (nothing
    # there reads Kubernetes' annotation)
    async with control_plane(cluster, url, slinky_mode=False) as cp:
        await eventually(cp.leading, what="leader with pods")
        await eventually(w3_cost, lambda c: c == "0", what="w3's Kubernetes deletion cost")
        start = cp.sample("slurm_sidecars_fleet_refreshes_total", result="ok")
        await eventually(lambda: _refreshes(cp), lambda n: n >= start + 3, what="3 more refreshes")
        assert cp.sample("slurm_sidecars_slinky_mode") == 0.0
    assert set(kube_cost_patches(fake)) == {"w3"}
    assert all(COST not in notes(fake, p) and DEADLINE not in notes(fake, p) for p in ("w1", "w2", "w3"))

    # true: Slinky's annotations on every worker pod, whoever owns it, and no Kubernetes' cost write
    async with control_plane(cluster, url, slinky_mode=True) as cp:
        await eventually(cp.leading, what="leader with pods")
        await eventually(
            lambda: _deadlines(fake),
            lambda d: (
                d == {"w1": rfc3339(end), "w2": None, "w3": None}
                and all(COST in notes(fake, p) for p in ("w1", "w2", "w3"))
            ),
            what="Slinky's annotations on all three",
        )
        assert cp.sample("slurm_sidecars_slinky_mode") == 1.0
    assert kube_cost_patches(fake) == ["w3"]  # only the one from the false run
    assert notes(fake, "w3")[ANNOTATION] == "0"  # ours from before, not removed (a write)
    await cluster.scancel(job)


async def _refreshes(cp: Any) -> float:
    return float(cp.sample("slurm_sidecars_fleet_refreshes_total", result="ok"))


async def _deadlines(fake: FakeKube) -> dict[str, str | None]:
    return {p: notes(fake, p).get(DEADLINE) for p in ("w1", "w2", "w3")}


async def test_auto_mode_ranks_each_pod_by_its_owner_and_agrees_with_the_operators_deadlines(
    fake_kube: tuple[FakeKube, str],
) -> None:
    """The rules that need no Slurm: a mixed fleet, and deadlines the operator already wrote."""
    fake, url = fake_kube
    now = time.time()
    end = int(now) + 3600
    fake.add_pod(
        "w1", hostname="n1", owner_kind="NodeSet", owner_api_version=SLINKY
    )  # the operator wrote the same instant, another way
    fake.add_pod(
        "w2", hostname="n2", owner_kind="NodeSet", owner_api_version=SLINKY
    )  # the operator's unlimited: start + ~292 years
    fake.add_pod("w3", hostname="n3", owner_kind="NodeSet", owner_api_version=SLINKY)  # unreadable: rewritten
    fake.add_pod("w4", hostname="n4")  # a ReplicaSet's: Kubernetes' cost
    fake.add_pod("w5", hostname="n5", owner_kind="NodeSet")  # another group's NodeSet: not Slinky's
    fake.add_pod("w6", hostname="n6", owner_kind="NodeSet", owner_api_version=SLINKY)  # cost "+7": reads 0
    same_instant = dt.datetime.fromtimestamp(end, dt.timezone(dt.timedelta(hours=2))).isoformat()
    bucket = "7"  # an hour left
    fake.pods[("slurm", "w1")]["metadata"]["annotations"] = {COST: bucket, DEADLINE: same_instant}
    fake.pods[("slurm", "w2")]["metadata"]["annotations"] = {COST: "32", DEADLINE: "2318-03-01T10:00:00Z"}
    fake.pods[("slurm", "w3")]["metadata"]["annotations"] = {COST: bucket, DEADLINE: "soon"}
    fake.pods[("slurm", "w6")]["metadata"]["annotations"] = {COST: "+" + bucket, DEADLINE: rfc3339(end)}
    snap = fleet_snapshot(
        [
            fleet_node("n1", busy_until=end),
            fleet_node("n2", busy_until=253402300799),
            fleet_node("n3", busy_until=end),
            fleet_node("n4", busy_until=end),
            fleet_node("n5", busy_until=end),
            fleet_node("n6", busy_until=end),
        ],
        taken_at=now,
    )
    metrics = ControlPlaneMetrics(CollectorRegistry())
    async with KubeClient(configuration(url)) as kube:
        pods, _ = await kube.list_pods("slurm", "app=slurmd")
        writer = DeletionCostWriter(
            writer_deps(kube=kube, metrics=metrics, node_of=node_name, slinky_mode=None), clock=lambda: now
        )
        assert await one_pass(writer, pods, snap) == 3  # w3, w4 and w6 only
        assert writer.slinky
        assert metrics.slinky_mode._value.get() == 1
        pods, _ = await kube.list_pods("slurm", "app=slurmd")
        assert await one_pass(writer, pods, snap) == 0
    assert notes(fake, "w3") == {COST: bucket, DEADLINE: rfc3339(end)}
    assert notes(fake, "w4") == {ANNOTATION: bucket}
    assert notes(fake, "w1")[DEADLINE] == same_instant
    assert notes(fake, "w2")[DEADLINE] == "2318-03-01T10:00:00Z"
    assert notes(fake, "w5") == {}
    assert notes(fake, "w6") == {COST: bucket, DEADLINE: rfc3339(end)}
    assert kube_cost_patches(fake) == ["w4"]


def test_slinky_mode_reads_auto_true_false_and_refuses_anything_else() -> None:
    assert [SLINKY_MODE.parse(t, "--slinky-mode") for t in ("auto", "true", "false")] == [None, True, False]
    assert [SLINKY_MODE.show(v) for v in (None, True, False)] == ["auto", "true", "false"]
    with pytest.raises(ConfigError, match="--slinky-mode: one of auto, true, false, got 'on'"):
        SLINKY_MODE.parse("on", "--slinky-mode")
