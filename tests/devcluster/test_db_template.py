"""The accounting shape's datadir template: `mariadb-install-db` runs once for the clusters that share
a template directory (a test run's), each cluster starts on a copy of its own, and a template left
half-made by a killed run is made again rather than copied."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from sidecars.devcluster import ClusterSpec, DevCluster, Release, mariadb

# the server is the host's MariaDB whatever the release (the chroots enter only its PID namespace),
# so where its datadir comes from is the same on every release; slurmdbd on it is tested per release
# in test_accounting.py, through the run's template
pytestmark = pytest.mark.releases("slurm22")


def _listing(root: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.mark.timeout(180)
async def test_made_once_then_copied_never_written(release: Release, tmp_path: Path) -> None:
    template_dir = tmp_path / "template"
    template_dir.mkdir()
    # what a run killed during mariadb-install-db leaves: a datadir without the mark
    (template_dir / "data").mkdir()
    (template_dir / "data" / "half-written").write_text("partial\n")
    # two clusters' starts at once (two test workers): one makes it, the other waits for it
    first, second = await asyncio.gather(mariadb.template(template_dir), mariadb.template(template_dir))
    assert first == second == template_dir / "data"
    assert not (first / "half-written").exists(), "a partial template was used as it was"
    assert (first / "mysql").is_dir() and (template_dir / mariadb.TEMPLATE_MADE).exists()

    # a file only the template holds: found in the cluster's datadir, it was copied, not made anew
    (first / "from-the-template").write_text("copied\n")
    before = _listing(first)
    async with DevCluster(release, ClusterSpec(nodes=1, accounting=True), db_template=template_dir) as c:
        assert c.database is not None
        own = c.database.dir / "data"
        assert (own / "from-the-template").read_text() == "copied\n"
        assert own.resolve() != first.resolve()
        assert await c.client(timeout=10.0).accounting_ping()  # slurmdbd made its tables there
        job = await c.sbatch(wrap="true")
        await c.wait_job(job, "COMPLETED", timeout=60)
        assert any((own / "slurm_acct_db").iterdir())
    # the server wrote to its copy only: the template is as it was, for the next cluster
    assert _listing(first) == before
    assert not (first / "slurm_acct_db").exists()


async def test_a_template_that_cannot_be_copied_is_named(tmp_path: Path) -> None:
    db = mariadb.Database(tmp_path / "cluster", port=1)
    gone = tmp_path / "gone" / "data"
    with pytest.raises(mariadb.DatabaseError, match=f"could not copy the datadir template {gone}"):
        await mariadb.start(db, [], template=gone)
    assert not (db.dir / "data").exists()
