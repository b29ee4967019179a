"""The accounting shape: a MariaDB and a slurmdbd of the cluster's own, on every release. Jobs reach
`sacct` with their real end; the storage password is nowhere a local user can read it; and the
database and slurmdbd end with the cluster (test_killed_owner.py kills an owner of one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecars.devcluster import ClusterError, ClusterSpec, DevCluster, Release
from sidecars.devcluster.slurmconf import Ports, render
from sidecars.runtime import process
from tests.controlplane.changes.upgrade_records import finished_record

REPO = Path(__file__).resolve().parents[2]


def test_slurm_conf_points_at_slurmdbd() -> None:
    d = Path("/tmp/slc-x")
    conf = render(ClusterSpec(nodes=1, accounting=True), d, Ports(1, 2, {"n1": 3}, slurmdbd=4), "h", "c")
    lines = conf["slurm.conf"].splitlines()
    assert "AccountingStorageType=accounting_storage/slurmdbd" in lines
    assert "AccountingStoragePort=4" in lines
    assert "AccountingStorageType=accounting_storage/none" not in lines
    plain = render(ClusterSpec(nodes=1), d, Ports(1, 2, {"n1": 3}), "h", "c")["slurm.conf"]
    assert "AccountingStorageType=accounting_storage/none" in plain.splitlines()


def test_accounting_needs_the_classic_shape(release: Release) -> None:
    with pytest.raises(ClusterError, match="classic shape"):
        DevCluster(release, ClusterSpec(shape="slinky", accounting=True))


@pytest.mark.timeout(180)
@pytest.mark.cluster(nodes=1, accounting=True)
@pytest.mark.per_release("each release's slurmdbd, MariaDB schema and sacct")
async def test_jobs_are_recorded_in_sacct(cluster: DevCluster) -> None:
    c = cluster
    ok = await c.sbatch(wrap="true")
    failed = await c.sbatch(wrap="exit 3")
    await c.wait_job(ok, "COMPLETED", timeout=60)
    await c.wait_job(failed, "FAILED", timeout=60)
    assert await finished_record(c, ok) == ("COMPLETED", "0:0")
    assert await finished_record(c, failed) == ("FAILED", "3:0")
    # the controller registered its cluster with slurmdbd by itself
    clusters = await process.run(
        ["sacctmgr", "-n", "-P", "list", "cluster", "format=cluster"], timeout=20, env=c.env
    )
    assert c.conf_path.read_text().split("ClusterName=", 1)[1].split()[0] in clusters.stdout.decode().split()
    assert await c.client().accounting_ping()


@pytest.mark.timeout(120)
@pytest.mark.cluster(nodes=1, accounting=True)
@pytest.mark.per_release("the files and processes each release's slurmdbd reads and leaves")
async def test_the_storage_password_is_not_readable(cluster: DevCluster) -> None:
    c = cluster
    assert c.database is not None
    conf = c.dir / "etc" / "slurmdbd.conf"
    assert f"StoragePass={c.database.password}" in conf.read_text()
    assert conf.stat().st_mode & 0o777 == 0o600  # slurmdbd refuses more; a job's user gets nothing
    secret = c.database.password.encode()
    for pid in c.processes():
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        assert secret not in argv, f"the password is in the command line of {argv[:80]!r}"


@pytest.mark.timeout(120)
@pytest.mark.cluster(nodes=1, accounting=True)
@pytest.mark.per_release("each release's slurmdbd stop, start and ping")
async def test_a_down_slurmdbd_is_seen_and_comes_back(cluster: DevCluster) -> None:
    c = cluster
    client = c.client(timeout=10.0)
    assert await client.accounting_ping()
    await c.stop_slurmdbd()
    assert c.hostpid("slurmdbd") is None
    assert not await client.accounting_ping()
    await c.start_slurmdbd()
    assert await client.accounting_ping()
