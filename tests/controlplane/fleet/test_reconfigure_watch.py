"""The reconfigure watch's reads in a forced order (fleet/reconfigures.py): BOOT_TIME has 1-s
resolution, and a restart that is over between two polls, its new slurmctld started in the second
the one before did, shows neither a new BOOT_TIME nor an unanswered read. Seen on the real cluster
(tests/controlplane/reconcile/test_restart_reassert.py: a restart 0.5 s after the start, 3 of 4
runs on a quiet machine); here the reads are scripted, so the ordering is certain."""

from __future__ import annotations

from typing import cast

from sidecars.controlplane.fleet.reconfigures import ReconfigureWatch
from sidecars.slurm import BootTime, SlurmClient, Version

S = "2026-12-06T14:30:31"  # the second both slurmctlds started in
NEXT, LATER = "2026-12-06T14:30:32", "2026-12-06T14:30:33"


class Answers:
    """The watch's Slurm client: `scontrol show config` answers in the order given; one controller."""

    controllers = None

    def __init__(self, *asked: str) -> None:
        self._reads = [BootTime(S, a) for a in asked]

    async def boot_time(self) -> BootTime:
        return self._reads.pop(0)

    async def version(self) -> Version:
        return Version.parse("26.05.5")  # a reconfigure is a new slurmctld: no sdiag count read


async def checks(*asked: str) -> tuple[list[bool], ReconfigureWatch]:
    told: list[None] = []
    watch = ReconfigureWatch(
        cast(SlurmClient, Answers(*asked)), seconds=1.0, on_seen=lambda: told.append(None)
    )
    seen = [await watch.check() for _ in asked]
    assert len(told) == sum(seen), (told, seen)
    return seen, watch


async def test_a_read_past_the_start_second_after_one_within_it_reads_the_fleet() -> None:
    # read within S (the old one), restarted within S, read within S (the new one, or the old one),
    # then past it: whichever answered, a restart in S cannot be ruled out
    seen, watch = await checks(S, S, NEXT, LATER)
    assert seen == [False, False, True, False], watch.status()  # once: S is over, a later start moves it
    assert watch.status()["start_second"] == 1 and watch.last_why == "start_second", watch.status()
    assert watch.seen == 0 and watch.returns == 0, watch.status()
    assert not watch.recent(3600.0)  # it may not have happened: one fleet read, not the fast ones


async def test_a_slurmctld_first_read_past_its_start_second_reads_nothing_more() -> None:
    seen, watch = await checks(NEXT, LATER, LATER)
    assert seen == [False, False, False] and watch.status()["start_second"] == 0, watch.status()
