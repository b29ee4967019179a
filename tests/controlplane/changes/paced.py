"""What the paced rolls of workers (a StatefulSet's, test_upgrade.py; a Deployment's,
test_upgrade_deployment.py) show alike on four machines: idle workers first, one at a time, then
the one whose job ends soonest, and no job killed across a restart of the control plane."""

from __future__ import annotations

import asyncio

from sidecars.devcluster import DevCluster
from tests.controlplane.conftest import Running
from tests.helpers import eventually


async def long_and_soon(cluster: DevCluster) -> tuple[int, int]:
    """A job on n1 that runs long and one on n2 that ends sooner (by their time limits), running."""
    long = await cluster.sbatch("-w", "n1", "-t", "30", wrap="sleep 300")
    soon = await cluster.sbatch("-w", "n2", "-t", "5", wrap="sleep 300")
    await cluster.wait_job(long, "RUNNING")
    await cluster.wait_job(soon, "RUNNING")
    return long, soon


async def idle_first_then_soonest(cluster: DevCluster, cp: Running, replaced: list[str], soon: int) -> None:
    """Idle n3 and n4 are replaced first, one at a time; then n2, whose job ends soonest, is drained
    and reported waiting for it, while n1 is queued."""
    await eventually(
        lambda: asyncio.sleep(0.1, list(replaced)),
        lambda r: sorted(r) == ["n3", "n4"],
        within=60,
        what="idle n3 and n4 replaced",
    )
    await cluster.wait_node("n2", lambda n: n.state.drain and n.state.busy, timeout=60)
    _, report = await eventually(
        lambda: cp.get("/v1/upgrade"),
        lambda r: r[1]["upgrade"]["nodes"].get("n2") == f"waiting for jobs {soon}",
        what="n2 reported waiting",
    )
    assert report["upgrade"]["nodes"]["n1"] == "queued"


async def n1_next_once_soon_ends(cluster: DevCluster, soon: int) -> None:
    """n1 keeps working while n2 waits (not its turn), and n2's job is never killed: once it ends,
    n1 is drained next."""
    node = await cluster.client().node("n1")
    assert node is not None and not node.state.drain  # not its turn: it keeps working
    assert (await cluster.wait_job(soon, "RUNNING")).state == "RUNNING"  # never killed
    await cluster.scancel(soon)
    await cluster.wait_node("n1", lambda n: n.state.drain and n.state.busy, timeout=60)


async def complete_once_long_ends(cluster: DevCluster, cp: Running, long: int) -> None:
    """n1's long job ends (cancelled): the roll, n1 last, completes."""
    await cluster.scancel(long)
    await eventually(
        lambda: cp.get("/v1/upgrade"),
        lambda r: r[1]["upgrade"]["complete"],
        within=60,
        what="the roll complete",
    )
