"""Large reads decoded without the cyclic collector walking them, one collection at the end: what
keeps the control plane's refresh at 10,000 nodes inside its second (P5). Real documents captured
from Slurm, repeated."""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator

import pytest

from sidecars.controlplane.fleet import snapshot
from sidecars.slurm import SlurmParseError, jsonformat, squeueformat
from tests.conftest import DATA

NODES = 2_000


@pytest.fixture
def collections() -> Iterator[list[int]]:
    """The generation of every automatic collection while the test runs."""
    seen: list[int] = []

    def note(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    gc.callbacks.append(note)
    try:
        yield seen
    finally:
        gc.callbacks.remove(note)
        gc.enable()


def many_nodes(release: str, key: str, name: str) -> str:
    doc = json.loads((DATA / f"slurm-{release}" / name).read_text())
    first = doc[key][0]
    doc[key] = [{**first, "name": f"n{i:05d}", "hostname": f"n{i:05d}"} for i in range(NODES)]
    return json.dumps(doc)


@pytest.mark.parametrize(
    ("release", "name"),
    [
        ("22.05", "sinfo--json.json"),
        ("24.11", "scontrol-show-nodes--json.json"),
        ("26.05", "scontrol-show-nodes--json.json"),
    ],
)
def test_a_large_node_read_sets_off_one_collection_at_most_and_reads_the_same(
    collections: list[int], release: str, name: str
) -> None:
    text = many_nodes(release, "nodes", name)
    expected = [jsonformat.node(o) for o in jsonformat.load(["x"], text, "nodes")]
    gc.collect()
    collections.clear()
    got = jsonformat.nodes(["x"], text)
    # ~40 containers a node: hundreds of collections without the pause, one (of what it kept) with it
    assert len(collections) <= 1
    assert gc.isenabled()
    assert got == expected and len(got) == NODES


def test_a_large_job_read_sets_off_one_collection_at_most(collections: list[int]) -> None:
    doc = json.loads((DATA / "slurm-24.11" / "scontrol-show-job--json.json").read_text())
    doc["jobs"] = [{**j, "job_id": i} for i in range(1, 501) for j in doc["jobs"][:1]]
    text = json.dumps(doc)
    collections.clear()
    got = jsonformat.jobs(["x"], text)
    assert len(collections) <= 1 and gc.isenabled()
    assert [j.job_id for j in got] == list(range(1, 501))


def test_a_long_brief_job_read_sets_off_one_collection_at_most(collections: list[int]) -> None:
    line = (DATA / "slurm-24.11" / "squeue--summary.txt").read_text().splitlines()[0]
    rest = line.split("|", 1)[1]
    text = "".join(f"{i}|{rest}\n" for i in range(1, 20_001))
    collections.clear()
    got = squeueformat.job_summaries(text)
    assert len(collections) <= 1 and gc.isenabled()
    assert len(got) == 20_000 and got[-1].job_id == 20_000


def test_the_snapshot_of_a_large_read_is_built_with_one_collection(collections: list[int]) -> None:
    nodes = jsonformat.nodes(["x"], many_nodes("24.11", "nodes", "scontrol-show-nodes--json.json"))
    jobs = squeueformat.job_summaries(
        "".join(
            f"{i}|RUNNING|debug|1|1|5:00|2026-11-30T03:56:35|gres/gpu:2|n{i % NODES:05d}|None\n"
            for i in range(1, 10_001)
        )
    )
    gc.collect()
    collections.clear()
    views, kept = snapshot.build(nodes, jobs)
    assert len(collections) <= 1 and gc.isenabled()
    assert len(views) == NODES and len(kept) == 10_000
    assert all(len(v.jobs) == 5 for v in views.values())


def test_a_bad_document_leaves_the_collector_as_it_was(collections: list[int]) -> None:
    with pytest.raises(SlurmParseError):
        jsonformat.nodes(["scontrol"], "<html>")
    assert gc.isenabled()
    gc.disable()  # whoever turned it off before finds it off after
    jsonformat.nodes(["x"], many_nodes("24.11", "nodes", "scontrol-show-nodes--json.json"))
    squeueformat.job_summaries("1|RUNNING|debug|1|1|5:00|N/A|N/A|n1|None\n")
    assert not gc.isenabled()
