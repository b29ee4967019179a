"""The check of a controller a whole-cluster upgrade just started: its first answer judged."""

from __future__ import annotations

import asyncio
import time

from sidecars.controlplane.changes.cluster_roles.roles import ClusterRoles, StageFailed
from sidecars.controlplane.changes.cluster_upgrade.status import LIVE_JOBS, same_release
from sidecars.slurm import Version


async def controller_verified(
    roles: ClusterRoles,
    controller: str,
    jobs_before: dict[int, str],
    nodes_before: set[str],
    *,
    target: Version,
    expect_target: bool,
    timeout_seconds: float,
    interval_seconds: float,
) -> None:
    """Poll until the controller answers, then judge its first answer: the release expected (the
    target; with `expect_target` false, any release but the target's: a rollback), every live job and
    every node it had (a job that ended meanwhile may have aged out). StageFailed says what differs.

    The first answer is final: slurmctld loads its whole state before it serves a request, so
    a job missing then stays missing; and a controller without a job kills it as an orphan as
    soon as its node registers (seconds after its start), so it must be stopped at once."""
    live = {j for j, s in jobs_before.items() if s in LIVE_JOBS}
    deadline = time.monotonic() + timeout_seconds
    while True:
        try:
            jobs, nodes = await roles.jobs(), await roles.nodes()
            runs = (await roles.versions()).get(f"slurmctld:{controller}")
            break
        except Exception as e:  # not answering yet: polled again until the deadline
            if time.monotonic() >= deadline:
                raise StageFailed(
                    f"it did not answer within {timeout_seconds:g}s: {type(e).__name__}: {e}"
                ) from None
        await asyncio.sleep(interval_seconds)
    missing_jobs, missing_nodes = sorted(live - set(jobs)), sorted(nodes_before - nodes)
    if expect_target and (runs is None or not same_release(runs, target)):
        raise StageFailed(f"it runs {runs}, not {target}")
    if not expect_target and (runs is None or same_release(runs, target)):
        raise StageFailed(f"{controller} runs {runs}, not its release of before")
    if missing_jobs or missing_nodes:
        raise StageFailed(
            f"it came up missing jobs {missing_jobs[:20]} ({len(missing_jobs)}) and nodes "
            f"{missing_nodes[:20]} ({len(missing_nodes)})"
        )
