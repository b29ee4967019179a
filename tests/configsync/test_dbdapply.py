"""A new slurmdbd.conf on a real slurmdbd and MariaDB, on every release: applied by a restart and
verified by slurmdbd answering; a file slurmdbd cannot run on (it passes every check that needs no
database) is rolled back, and a job that ended during the outage still reaches sacct."""

from __future__ import annotations

import asyncio
import re
import time

import pytest

from sidecars.configsync import dbdconf
from sidecars.configsync.dbdapply import DbdApplier
from sidecars.devcluster import DevCluster, free_port


def _applier(c: DevCluster, timeout: float) -> DbdApplier:
    async def restart() -> None:  # what the container runtime does after slurmdbd exits
        await c.stop_slurmdbd()
        await c.start_slurmdbd(wait=False)

    return DbdApplier(
        c.dir / "etc" / dbdconf.CONF_NAME,
        c.client(timeout=10.0),
        restart=restart,
        restart_timeout_seconds=timeout,
    )


async def _recorded(c: DevCluster, job: int, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while (state := (await c.sacct(job)).get(job, ("", ""))[0]) in ("", "PENDING", "RUNNING"):
        assert time.monotonic() < deadline, f"job {job} not in sacct: {state!r}"
        await asyncio.sleep(0.2)
    return state


@pytest.mark.timeout(180)
@pytest.mark.cluster(nodes=1, accounting=True)
async def test_a_change_is_applied_by_a_restart(cluster: DevCluster) -> None:
    c = cluster
    path = c.dir / "etc" / dbdconf.CONF_NAME
    new = path.read_bytes() + b"CommitDelay=1\n"
    assert dbdconf.check(new, 0o100600) == [] and dbdconf.restart_reasons(path.read_bytes(), new)
    before = c.hostpid("slurmdbd")
    outcome = await _applier(c, 60.0).apply(new)
    assert outcome.applied and not outcome.rolled_back, outcome
    assert path.read_bytes() == new and path.stat().st_mode & 0o777 == 0o600
    assert c.hostpid("slurmdbd") not in (None, before)
    job = await c.sbatch(wrap="true")
    assert await _recorded(c, job) == "COMPLETED"


@pytest.mark.timeout(240)
@pytest.mark.cluster(nodes=1, accounting=True)
async def test_a_file_slurmdbd_cannot_run_on_is_rolled_back(cluster: DevCluster) -> None:
    c = cluster
    path = c.dir / "etc" / dbdconf.CONF_NAME
    good = path.read_bytes()
    # a database port nothing listens on: every check without the database passes
    bad = re.sub(rb"StoragePort=\d+", f"StoragePort={free_port()}".encode(), good)
    assert bad != good and dbdconf.check(bad, 0o100600) == []
    applier = _applier(c, 15.0)
    applying = asyncio.ensure_future(applier.apply(bad))
    # a job that ends while slurmdbd is away: slurmctld keeps its record until slurmdbd is back
    job = await c.sbatch(wrap="true")
    await c.wait_job(job, "COMPLETED", timeout=60)
    outcome = await applying
    assert not outcome.applied and outcome.rolled_back, outcome
    assert "previous file is back and slurmdbd answers" in outcome.reason
    assert path.read_bytes() == good
    assert await c.client().accounting_ping()
    assert await _recorded(c, job) == "COMPLETED"
