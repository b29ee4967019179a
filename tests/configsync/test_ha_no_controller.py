"""Never without a controller: with the primary down, a reconfigure that fails on the backup in
control leaves Slurm with no controller in control (24.11 puts the backup in standby after its
"reconfigure failed"). config-sync beside that backup sees it, puts the last good set back and asks
Slurm to take over (configsync/ha/control.py); the controller-less time stays under 10 s."""

from __future__ import annotations

import asyncio
import time

import pytest

from sidecars.devcluster import DevCluster
from tests.configsync.hapair import HA_SPEC, ha_pair
from tests.configsync.harness import parser_only, set_sha
from tests.configsync.hawatch import watching_control

pytestmark = [
    pytest.mark.releases("slurm24", "slurm26"),
    pytest.mark.cluster(**HA_SPEC),
    pytest.mark.timeout(400),
]

WITHIN = 180.0  # generous on a loaded machine; the bound under test is the gap, measured by Slurm's view


@pytest.mark.per_release("24.11 puts the backup in standby after a failed reconfigure; 26.05 its own way")
async def test_a_failed_reconfigure_on_the_backup_in_control_leaves_no_controller_for_seconds_only(
    cluster: DevCluster,
) -> None:
    async with ha_pair(cluster, validators={"ctld-b": parser_only}) as pair:
        b = pair.pods["ctld-b"]
        await pair.all_hold(set_sha(pair.good()), within=60)
        # the primary's pod lost: the backup takes control
        await cluster.kill_controller("ctld-a")
        await pair.stop("ctld-a")
        await cluster.wait_primary("ctld-b", timeout=90)
        await b.service.wait_until(lambda st: st["ha"]["role"] == "in control", 60)

        async with watching_control(cluster) as gaps:
            # a set only the live slurmctld refuses (a partition naming an unknown node): the dry run
            # would refuse it, so ctld-b's config-sync checks with the parser alone
            bad = pair.good()
            bad["slurm.conf"] += b"PartitionName=p2 Nodes=n9\n"
            pair.config.write(bad)
            await b.service.wait_until(
                lambda st: bool(st["rejected"] and st["rejected"]["sha256"] == set_sha(bad)), WITHIN
            )
            reconfigures = b.commands("scontrol reconfigure")
            # the Event, and /status, say what happened and what was done
            deadline = time.monotonic() + WITHIN
            while not [m for r, m, _ in b.events.events if r == "SlurmctldNoController"]:
                assert time.monotonic() < deadline, (b.events.events, gaps, b.service.status())
                await asyncio.sleep(0.1)
            # until the backup serves again
            while gaps.in_control != "ctld-b" or gaps.since is not None:
                assert time.monotonic() < deadline, (gaps, b.service.status())
                await asyncio.sleep(0.1)
        # back in control by our request, it does not try the refused set again (it would drop
        # control again): its first passes in control keep the rejection
        await b.service.wait_until(
            lambda st: st["ha"]["no_controller"]["last_gap_seconds"] is not None and not st["pending"], WITHIN
        )
        assert b.commands("scontrol reconfigure") == reconfigures, b.service.history_view()
        assert b.service.status()["rejected"]["sha256"] == set_sha(bad)
        print(f"\ncontroller-less: {gaps.longest():.1f}s (each gap: {[round(g, 1) for g in gaps.gaps]})")
        # the goal is 10 s (measured 4.1-6.8 s, beside a CPU hog too); the gap is read through
        # Slurm's commands every 0.1 s, which a loaded CI machine slows: twice the goal is allowed
        # there, still far from the 180 s and more of before
        assert gaps.longest() < 2 * 10.0, gaps
        st = b.service.status()["ha"]["no_controller"]
        assert st["acted"] and "takeover" in st["words"], st
        assert b.target_sha() == set_sha(pair.good())
