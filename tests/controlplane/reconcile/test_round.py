"""The writers after each refresh run in one declared order, each guarded: one that raises is
logged and counted, and the ones after it still run (on real Slurm with the fake API: the
deletion costs are written while the busy label, which runs first, fails every pass)."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from sidecars.controlplane.fleet.metrics import ControlPlaneMetrics
from sidecars.controlplane.reconcile import Outcome, Round, View
from sidecars.controlplane.reconcile.deletion_cost import ANNOTATION
from sidecars.controlplane.service import ControlPlaneService
from sidecars.devcluster import DevCluster
from tests.controlplane.conftest import control_plane
from tests.fakekube import FakeKube
from tests.helpers import eventually, fleet_node, fleet_snapshot

SNAP = fleet_snapshot([fleet_node("n1")])


class Writer:
    def __init__(self, name: str, ran: list[str], fails: bool = False) -> None:
        self.name, self._ran, self._fails = name, ran, fails

    async def reconcile(self, view: View) -> Outcome:
        self._ran.append(self.name)
        if self._fails:
            raise RuntimeError("the API server said no")
        return Outcome(len(view.pods))


async def test_a_writer_that_raises_is_counted_and_the_next_ones_still_run() -> None:
    registry, ran = CollectorRegistry(), []
    writers = Round(
        [Writer("a", ran), Writer("b", ran, fails=True), Writer("c", ran)], ControlPlaneMetrics(registry)
    )
    done = await writers.run(View((), SNAP))
    assert ran == ["a", "b", "c"]  # the declared order, and c after b's failure
    assert done == {"a": Outcome(0), "b": None, "c": Outcome(0)}
    errors = registry.get_sample_value(
        "slurm_sidecars_reconcile_passes_total", {"writer": "b", "result": "error"}
    )
    assert errors == 1
    ok = registry.get_sample_value("slurm_sidecars_reconcile_passes_total", {"writer": "c", "result": "ok"})
    assert ok == 1


def test_two_writers_of_one_name_are_refused() -> None:
    with pytest.raises(ValueError, match="share a name"):
        Round([Writer("a", []), Writer("a", [])], ControlPlaneMetrics(CollectorRegistry()))


@pytest.mark.cluster(nodes=2)
@pytest.mark.releases("slurm26")  # the guard is ours, not Slurm's: one release shows it
async def test_a_failing_first_writer_does_not_stop_the_deletion_costs(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    for i in (1, 2):
        fake.add_pod(f"worker-{i}", hostname=f"n{i}", labels={"app": "slurmd"})

    def prepare(plane: ControlPlaneService) -> None:
        first = plane.writers.writers[0]
        assert first.name == "busy_label"  # declared first: what keeps jobs from eviction

        async def fails(view: View) -> Outcome:
            raise RuntimeError("injected into the busy label")

        first.reconcile = fails  # type: ignore[method-assign]

    async with control_plane(cluster, kube_url=url, prepare=prepare) as cp:

        async def costs() -> dict[str, str | None]:
            return {
                name: pod["metadata"]["annotations"].get(ANNOTATION) for (_, name), pod in fake.pods.items()
            }

        async def passes(writer: str, result: str) -> float:
            return cp.sample("slurm_sidecars_reconcile_passes_total", writer=writer, result=result)

        await eventually(lambda: passes("busy_label", "error"), lambda n: n >= 1, what="busy label failed")
        await eventually(costs, lambda c: None not in c.values(), what="deletion costs written")
        # counted as the pass returns (the fake may show the patches a moment before)
        await eventually(lambda: passes("deletion_cost", "ok"), lambda n: n >= 1, what="its pass counted")
