"""config-sync's history of generations (GET /history): every outcome with the unified diff of what
it changed, key material never shown, bounded in count and in size."""

from __future__ import annotations

import re
from pathlib import Path

import aiohttp
import pytest

from sidecars.configsync.fileset.sources import FileEntry, FileSet
from sidecars.configsync.report.history import History, changes
from sidecars.devcluster import DevCluster
from tests.configsync.harness import bump_max_job_count, config_sync, set_sha


def fileset(files: dict[str, bytes], mode: int = 0o644) -> FileSet:
    return FileSet.build([FileEntry(n, d, mode, len(d), Path("/src")) for n, d in files.items()])


def test_changes_are_unified_diffs_per_file() -> None:
    old = fileset({"slurm.conf": b"A=1\nB=2\n", "gres.conf": b"Name=gpu\n", "old.conf": b"x\n"})
    new = fileset({"slurm.conf": b"A=1\nB=3\n", "gres.conf": b"Name=gpu\n", "new.conf": b"y"})
    got = {c.name: c for c in changes(old, new)}
    assert set(got) == {"slurm.conf", "old.conf", "new.conf"}  # gres.conf did not change
    assert got["slurm.conf"].change == "modified"
    assert got["slurm.conf"].diff is not None
    assert "--- a/slurm.conf\n+++ b/slurm.conf\n" in got["slurm.conf"].diff
    assert "-B=2\n+B=3\n" in got["slurm.conf"].diff
    assert got["old.conf"].change == "removed" and "-x\n" in (got["old.conf"].diff or "")
    assert got["new.conf"].change == "added" and "+y\n" in (got["new.conf"].diff or "")
    first = changes(None, new)
    assert [c.change for c in first] == ["added", "added", "added"]


def test_key_material_and_binary_files_are_named_but_never_shown() -> None:
    old = FileSet.build(
        [
            FileEntry("jwt.key", b"old-secret", 0o644, 10, Path("/s")),
            FileEntry("slurmdbd.conf", b"StoragePass=hunter2\n", 0o600, 20, Path("/s")),
            FileEntry("blob.conf", b"\xff\xfe", 0o644, 2, Path("/s")),
        ]
    )
    new = FileSet.build(
        [
            FileEntry("jwt.key", b"new-secret", 0o644, 10, Path("/s")),
            FileEntry("slurmdbd.conf", b"StoragePass=letmein\n", 0o600, 20, Path("/s")),
            FileEntry("blob.conf", b"\xff\xfd", 0o644, 2, Path("/s")),
        ]
    )
    got = {c.name: c for c in changes(old, new)}
    text = repr([c.as_json() for c in got.values()])
    assert (
        "secret" not in text.replace("key material", "") and "hunter2" not in text and "letmein" not in text
    )
    assert got["jwt.key"].diff is None and "key material" in got["jwt.key"].note
    assert got["slurmdbd.conf"].diff is None and "key material" in got["slurmdbd.conf"].note
    assert got["blob.conf"].diff is None and "UTF-8" in got["blob.conf"].note


async def test_a_huge_diff_is_cut_at_a_line_and_the_history_is_bounded() -> None:
    old = fileset({"slurm.conf": b"".join(b"NodeName=n%d\n" % i for i in range(5000))})
    new = fileset({"slurm.conf": b"".join(b"NodeName=m%d\n" % i for i in range(5000))})
    (c,) = changes(old, new, limit=4096)
    assert c.diff is not None and len(c.diff.encode()) <= 4096 and c.diff.endswith("\n")
    assert "cut at 4096 bytes" in c.note
    history = History(limit=3)
    for i in range(5):
        await history.record("rejected", new, old, at=f"t{i}", generation=None, based_on=1, reason=f"r{i}")
    body = history.as_json()
    assert body["limit"] == 3 and body["version"] == 5
    assert [g["reason"] for g in body["generations"]] == ["r4", "r3", "r2"]  # newest first


@pytest.mark.releases("slurm24")  # the history is ours; Slurm's verdicts are read per release elsewhere
async def test_the_daemon_keeps_applied_rejected_and_held_generations(cluster: DevCluster) -> None:
    async with config_sync(cluster) as sync:
        url = f"http://127.0.0.1:{sync.running.port}/history"
        good = sync.good()
        changed = {**good, "slurm.conf": re.sub(rb"MaxTime=\S+", b"MaxTime=77", good["slurm.conf"])}
        if changed == good:
            changed = {**good, "slurm.conf": good["slurm.conf"] + b"# a comment\n"}
        sync.config.write(changed)
        await sync.wait(set_sha(changed))
        broken = {**changed, "slurm.conf": changed["slurm.conf"] + b"ThisIsNotAKey=1\n"}
        sync.config.write(broken)
        rejected = await sync.wait(set_sha(broken), key="rejected")
        held = bump_max_job_count(changed)
        sync.config.write(held)
        await sync.wait(set_sha(held), key="rejected")
        async with aiohttp.ClientSession() as s, s.get(url) as r:
            assert r.status == 200
            body = await r.json()
    gens = body["generations"]
    assert [g["outcome"] for g in gens] == ["restart_required", "rejected", "applied"]
    applied = gens[2]
    assert applied["generation"] >= 1 and applied["sha256"] == set_sha(changed)
    (f,) = applied["files"]
    assert f["name"] == "slurm.conf" and f["change"] == "modified" and "+" in f["diff"]
    assert gens[1]["reason"] == rejected["rejected"]["reason"] and "ThisIsNotAKey" in gens[1]["reason"]
    assert gens[1]["generation"] is None and gens[1]["based_on"] == applied["generation"]
    assert "+ThisIsNotAKey=<redacted>\n" in gens[1]["files"][0]["diff"]  # a *Key* option's value
    assert (
        "maxjobcount" in gens[0]["reason"].lower() and "+MaxJobCount=12345\n" in gens[0]["files"][0]["diff"]
    )


async def test_a_diff_of_many_differing_lines_is_compared_by_position_worked_out_off_the_loop() -> None:
    # every other line of 50,000 changed: difflib's matching took minutes; by position it is linear
    old = fileset({"slurm.conf": b"".join(b"NodeName=n%d CPUs=1\n" % i for i in range(50_000))})
    new = fileset({"slurm.conf": b"".join(b"NodeName=n%d CPUs=%d\n" % (i, 1 + i % 2) for i in range(50_000))})
    history = History()
    await history.record("rejected", new, old, at="t", generation=None, based_on=1, reason="r")
    (change,) = history.as_json()["generations"][0]["files"]
    assert "over the 1000-line cap: shown line for line by position" in change["note"]
    assert change["diff"].startswith("--- a/slurm.conf\n+++ b/slurm.conf\n@@ -1,")
    assert (
        " NodeName=n0 CPUs=1\n-NodeName=n1 CPUs=1\n+NodeName=n1 CPUs=2\n NodeName=n2 CPUs=1\n"
        in change["diff"]
    )


def test_the_diff_of_a_few_changed_lines_is_difflibs() -> None:
    old = fileset({"slurm.conf": b"".join(b"NodeName=n%d\n" % i for i in range(5000))})
    new = fileset({"slurm.conf": b"".join(b"NodeName=n%d\n" % i for i in range(5000) if i != 2500)})
    (c,) = changes(old, new)
    assert c.note == "" and c.diff is not None and "@@ -2498,7 +2498,6 @@" in c.diff
