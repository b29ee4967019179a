"""The load the control plane's polls put on slurmctld with one controller (bench P3): the reconfigure
watch reads BOOT_TIME every poll and nothing more; no `scontrol ping` to follow a controller when
slurm.conf names one, however slow each command is (a loaded machine's commands all are)."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from sidecars.controlplane.fleet.reconfigures import ReconfigureWatch
from sidecars.devcluster import DevCluster
from sidecars.slurm import Controllers, SlurmClient, SlurmMetrics

POLLS = 5


@pytest.mark.cluster(nodes=1)
async def test_one_controller_polls_ping_nothing_even_when_every_command_is_slow(
    cluster: DevCluster,
) -> None:
    registry = CollectorRegistry()
    # as the control plane builds its client; every command counts as slow, re-learning always due
    ctl = Controllers(cluster.env, relearn_seconds=0.0, slow_command_seconds=0.0)
    client = SlurmClient(env=cluster.env, metrics=SlurmMetrics(registry), controllers=ctl)
    seen: list[None] = []
    watch = ReconfigureWatch(client, seconds=1.0, on_seen=lambda: seen.append(None))
    try:
        for _ in range(POLLS):
            await watch.check()
            await client.nodes()
    finally:
        ctl.close()

    def ran(command: str) -> float:
        return (
            registry.get_sample_value(
                "slurm_sidecars_slurm_commands_total", {"command": command, "result": "ok"}
            )
            or 0.0
        )

    # every poll answered (one may count as seen: a fresh cluster's slurmctld started within the
    # second of the first read, fleet/reconfigures.py's start_second)
    assert watch.polls == POLLS, watch.status()
    assert ran("scontrol show") >= POLLS  # BOOT_TIME read every poll (the count is of real commands)
    assert ran("scontrol ping") == 0.0, "one controller: no ping to follow it"
