"""The slurmctld stage stops the old controller only once slurmdbd took the records it held for it.

A slurmdbd away for a while (moved, restarted) leaves slurmctld holding every record of the jobs
submitted meanwhile (on a busy cluster thousands: here 1,500 held jobs). A controller stopped with
them saves them beside its state (`dbd.messages`), and the new release reads them back and sends
them before it answers any request: seconds of a controller that does not answer, and records
carried across a release change. On real daemons, 24.11 -> 26.05.

The queue is made, not hoped for: slurmdbd is stopped once its stage is done and the jobs are
submitted then, so the records are all queued when the slurmctld stage begins whatever the load;
slurmdbd comes back only when the stage says it waits for it. (Submitted while slurmdbd ran, the
records were queued only where slurmdbd took them slower than sbatch made them: on a loaded machine
sbatch was the slower, and the queue was empty by the stage's start.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecars.controlplane.changes.cluster_upgrade.queue import ACCOUNTING_QUEUE_SETTLED
from sidecars.controlplane.changes.cluster_upgrade.stages import ClusterUpgrade
from sidecars.devcluster import ClusterSpec, Release
from sidecars.devcluster.release import build_chroot
from sidecars.devcluster.swap import SwappableCluster
from sidecars.devcluster.swap_roles import DevClusterRoles
from sidecars.slurm import Version

IMAGES = {"slurmdbd": "sid", "slurmctld": "sid", "slurmd": "sid"}
HELD = 1_500


def _saved_records(state_copy: str) -> int:
    """The bytes of records for slurmdbd the stopped controller saved with its state."""
    path = Path(state_copy) / "dbd.messages"
    return path.stat().st_size if path.exists() else 0


@pytest.mark.timeout(420)
@pytest.mark.releases("slurm24")  # the move is 24.11 -> 26.05
async def test_the_old_controller_stops_once_slurmdbd_took_what_it_held(release: Release) -> None:
    newer = await build_chroot(name="sid")
    spec = ClusterSpec(nodes=1, accounting=True, foreground_ctld=True, max_job_count=2 * HELD)
    async with SwappableCluster(release, spec) as c:
        roles = DevClusterRoles(c, {"chroot": release, "sid": newer}, worker_timeout_seconds=60)
        said: list[tuple[str, str, str]] = []
        held: list[int] = []
        queued_at_slurmctld: list[int] = []
        failed: list[Exception] = []  # the upgrade logs an emit's failure and goes on: kept here

        async def emit(stage: str, state: str, message: str) -> None:
            said.append((stage, state, message))
            try:
                if (stage, state) == ("slurmdbd", "done"):
                    # slurmdbd away while the cluster takes jobs: slurmctld queues their records
                    await c.stop_slurmdbd()
                    held.extend(await c.submit_held(HELD))
                elif (stage, state) == ("slurmctld", "running") and not queued_at_slurmctld:
                    queued_at_slurmctld.append(await roles.accounting_queue())
                elif (stage, state) == ("slurmctld", "running") and "waiting for slurmdbd" in message:
                    await c.start_slurmdbd()  # the stage read the queue and waits: slurmdbd takes it now
            except Exception as e:
                failed.append(e)
                raise

        up = ClusterUpgrade(roles, Version.parse(newer.version), IMAGES, emit=emit, verify_timeout_seconds=60)
        assert await up.run() == "complete", (up.status.report(), failed)
        assert not failed, failed

        # the case is real: slurmdbd had not taken the jobs' records when the stage began
        assert queued_at_slurmctld[0] > ACCOUNTING_QUEUE_SETTLED, queued_at_slurmctld
        waits = [m for s, st, m in said if s == "slurmctld" and "waiting for slurmdbd" in m]
        assert len(waits) == 1, said
        # what the stopped 24.11 controller saved with its state holds no queue of records
        assert _saved_records(up.status.state_copy) < 1_000, _saved_records(up.status.state_copy)
        detail = up.status.stage("slurmctld").detail
        assert "still queued" not in detail and "could not be read" not in detail, detail
        # nothing lost on the way: every held job is there on the new controller
        assert set(held) <= set(await roles.jobs())


@pytest.mark.timeout(120)
@pytest.mark.releases("slurm24")
async def test_a_queue_that_cannot_be_read_does_not_hold_the_stop(release: Release) -> None:
    newer = await build_chroot(name="sid")
    spec = ClusterSpec(nodes=1, accounting=True, foreground_ctld=True)
    async with SwappableCluster(release, spec) as c:

        class Unreadable(DevClusterRoles):
            async def accounting_queue(self) -> int:
                raise RuntimeError("sdiag refused")

        roles = Unreadable(c, {"chroot": release, "sid": newer}, worker_timeout_seconds=60)
        up = ClusterUpgrade(roles, Version.parse(newer.version), IMAGES, verify_timeout_seconds=60)
        assert await up.run() == "complete", up.status.report()
        detail = up.status.stage("slurmctld").detail
        assert "queue for slurmdbd could not be read (RuntimeError: sdiag refused)" in detail, detail
