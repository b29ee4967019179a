"""A whole-cluster upgrade's kept status: written whole and read back the same, a stage left
`running` read as `interrupted` (and kept so), and anything else refused with what is wrong with it
(the file store here; the ConfigMap's on the fake Kubernetes API in test_cluster_upgrade_resume.py)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from sidecars.controlplane.changes import ClusterUpgradeMetrics, ClusterUpgrades
from sidecars.controlplane.changes.cluster_upgrade.status import ClusterUpgradeStatus
from sidecars.controlplane.changes.cluster_upgrade.store import MAX_BYTES, FileStore

pytestmark = [pytest.mark.timeout(30)]

IMAGES = {"slurmdbd": "sid", "slurmctld": "sid", "slurmd": "sid"}


def _cut_in_slurmctld() -> ClusterUpgradeStatus:
    status = ClusterUpgradeStatus("26.05.0", dict(IMAGES), backup="/b.sql", state_copy="/state-1")
    for name, state in (("preflight", "done"), ("slurmdbd", "done"), ("slurmctld", "running")):
        status.stage(name).state = state
    status.stage("slurmctld").started_at = 1_700_000_000.0
    status.jobs_before, status.nodes_before = [3, 4], ["n1", "n2"]
    return status


async def test_the_file_keeps_the_status_whole_and_a_running_stage_reads_back_interrupted(
    tmp_path: Path,
) -> None:
    store = FileStore(tmp_path / "dir" / "status.json")
    assert await store.load() is None  # nothing kept yet
    status = _cut_in_slurmctld()
    await store.save(status.data())
    assert store.path.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in store.path.parent.iterdir()] == ["status.json"]  # no temporary left
    data = await store.load()
    assert data is not None
    back = ClusterUpgradeStatus.from_data(data)
    assert back == status and back.state == "running"
    cut = back.interrupted()
    assert cut is not None and cut.name == "slurmctld"
    assert back.state == "interrupted" and "2023-11-14T22:13:20Z" in cut.detail
    assert back.interrupted() is None  # once
    # the report names the lists' sizes, not thousands of ids
    assert back.report()["jobs_before"] == 2 and back.report()["state"] == "interrupted"


def _spoiled(**change: Any) -> dict[str, Any]:
    return {**_cut_in_slurmctld().data(), **change}


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({}, "not a cluster upgrade's status (KeyError"),
        (_spoiled(stages="all done"), "not a cluster upgrade's status"),
        (_spoiled(stages=[{"name": "preflight", "state": "done"}]), "its stages are [('preflight', 'done')]"),
        (_spoiled(target="latest"), "its target is 'latest'"),
        (_spoiled(jobs_before=["x"]), "ValueError"),
        (
            _spoiled(
                stages=[
                    {"name": n, "state": "exploded"}
                    for n in ("preflight", "slurmdbd", "slurmctld", "workers")
                ]
            ),
            "'exploded'",
        ),
        (_spoiled(stages=[{"name": "preflight", "state": "done", "owner": "x"}]), "TypeError"),
    ],
)
def test_a_status_not_written_by_us_is_refused_saying_why(data: dict[str, Any], words: str) -> None:
    with pytest.raises(ValueError) as e:
        ClusterUpgradeStatus.from_data(data)
    assert words in str(e.value)


async def test_a_file_that_is_not_a_status_or_too_big_is_refused_saying_why(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "status.json")
    store.path.write_text("{not json")
    with pytest.raises(ValueError, match=f"{store.path} holds no JSON"):
        await store.load()
    store.path.write_text(json.dumps([1, 2]))
    with pytest.raises(ValueError, match="holds list, not a status"):
        await store.load()
    huge = _cut_in_slurmctld()
    huge.jobs_before = list(range(MAX_BYTES // 4))
    with pytest.raises(ValueError, match="more than"):
        await store.save(huge.data())
    assert store.path.read_text() == json.dumps([1, 2])  # what was there is untouched


async def test_the_control_plane_reads_a_kept_upgrade_back_once_and_marks_a_cut_stage(tmp_path: Path) -> None:
    path = tmp_path / "status.json"
    path.mkdir()  # a read that fails (not a status, but no answer): tried again at the next ask
    upgrades = ClusterUpgrades(None, "no roles here", ClusterUpgradeMetrics(CollectorRegistry()))
    upgrades.store = FileStore(path)
    await upgrades.ensure_loaded()
    assert "could not be read now" in upgrades.store_error and upgrades.report() is None
    path.rmdir()
    await FileStore(path).save(_cut_in_slurmctld().data())
    said: list[int] = []
    upgrades.on_change = lambda: said.append(1)
    await asyncio.gather(upgrades.ensure_loaded(), upgrades.ensure_loaded())
    assert upgrades.store_error == "" and said == [1]  # one read, one mark said
    report = upgrades.report()
    assert report is not None and report["state"] == "interrupted" and report["backup"] == "/b.sql"
    kept = json.loads(path.read_text())
    assert [s["state"] for s in kept["stages"]] == ["done", "done", "interrupted", "pending"]
    # unreadable content stays reported (nothing starts over it) until the next term re-reads
    path.write_text("{not json")
    upgrades.forget()
    await upgrades.ensure_loaded()
    assert "cannot be read" in upgrades.store_error
    path.write_text(json.dumps(kept))
    await upgrades.ensure_loaded()
    assert "cannot be read" in upgrades.store_error
    upgrades.forget()
    await upgrades.ensure_loaded()
    assert upgrades.store_error == "" and upgrades.report() is not None
