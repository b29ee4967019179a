"""The job analysis reads the queued jobs only for a change that can touch a queued job: most
changes read the running ones alone (a queue of 10,000 costs 0.3 s a read), and none it holds for
goes unseen."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from sidecars.configsync.fileset import conffile
from sidecars.configsync.fileset.sources import FileEntry, FileSet
from sidecars.configsync.judge import jobs
from sidecars.configsync.judge.validate import Validator
from sidecars.configsync.settings import Settings
from sidecars.devcluster import DevCluster
from sidecars.slurm import SlurmClient
from sidecars.slurm.models import JobPlacement
from tests.configsync.harness import config_sync, set_sha

T = Path("/etc/slurm")
P2 = b"PartitionName=p2 Nodes=n2 State=UP"

# a small cluster's lines; each edit below changes one thing about it
BASE = [
    "NodeName=n[1-3] CPUs=2",
    "PartitionName=a Nodes=n1",
    "PartitionName=b Nodes=n[2-3] AllowQos=normal,high",
    "PartitionName=c Nodes=n3 DenyQos=low",
]
EDITS: list[tuple[int, str]] = [
    (0, "NodeName=n[1-2] CPUs=2"),  # a node goes
    (0, "NodeName=n[1-3] CPUs=4"),  # nodes reshaped
    (1, "PartitionName=a Nodes=n1 MaxTime=30"),  # a limit only
    (1, ""),  # a partition goes
    (2, "PartitionName=b Nodes=n[2-3] AllowQos=high"),  # a QOS no longer allowed
    (2, "PartitionName=b Nodes=n[2-3] AllowQos=normal,high Default=YES"),
    (3, "PartitionName=c Nodes=n3 DenyQos=low,normal"),  # a QOS denied
    (3, "PartitionName=c Nodes=n[2-3] DenyQos=low"),
    (3, "PartitionName=c Nodes=n3 DenyQos=low\nMaxJobId=3"),
]
QUEUED = [
    JobPlacement(1, "PENDING", ("a",), (), "", "normal"),
    JobPlacement(2, "PENDING", ("b",), (), "", "normal"),
    JobPlacement(3, "PENDING", ("c",), (), "", "normal"),
    JobPlacement(4, "PENDING", ("a", "c"), (), "r1", "low"),
    JobPlacement(5, "PENDING", ("b",), (), "r2", "high"),
]


def parse(lines: Sequence[str]) -> conffile.SlurmConf:
    data = ("\n".join(line for line in lines if line) + "\n").encode()
    return conffile.parse(
        FileSet.build([FileEntry("slurm.conf", data, 0o644, len(data), T)]), "slurm.conf", T
    )


def edited(edits: Sequence[tuple[int, str]]) -> list[str]:
    lines = list(BASE)
    for i, line in edits:
        lines[i] = line
    return lines


@pytest.mark.parametrize("count", [1, 2])
def test_no_change_that_puts_a_queued_job_at_risk_goes_without_reading_the_queue(count: int) -> None:
    """Every edit and every pair of them: when the analysis would name a queued job, the queue is read."""
    old = parse(BASE)
    resv = {"r1": ("n1",), "r2": ("n3",)}
    cheap = 0
    for edits in itertools.combinations(EDITS, count):
        if len({i for i, _ in edits}) < count:
            continue  # two edits of one line
        new = parse(edited(edits))
        at_risk = jobs.compare(old, new, QUEUED, resv)
        if at_risk:
            assert jobs.pending_at_risk(old, new), (edits, at_risk)
        cheap += not jobs.pending_at_risk(old, new)
    assert cheap  # and some changes do go without it
    assert not jobs.pending_at_risk(old, parse(edited([(1, "PartitionName=a Nodes=n1 MaxTime=30")])))


@pytest.mark.cluster(nodes=2, extra_conf=P2.decode())
async def test_a_limit_reads_the_running_jobs_alone_and_a_removed_partition_holds_for_a_queued_one(
    cluster: DevCluster,
) -> None:
    running = await cluster.sbatch(wrap="sleep 600")
    queued = await cluster.sbatch("--hold", "-p", "p2", wrap="sleep 600")  # waits for p2 alone
    await cluster.wait_job(running, "RUNNING")
    squeues: list[list[str]] = []

    def seen(argv: Sequence[str]) -> None:
        if argv and argv[0] == "squeue":
            squeues.append(list(argv))

    def recording(_: SlurmClient, settings: Settings) -> Validator:
        return Validator.from_settings(settings, cluster.client(guard=seen))

    async with config_sync(cluster, validator_factory=recording) as sync:
        conf = sync.good()["slurm.conf"]
        limit = {**sync.good(), "slurm.conf": conf.replace(P2, P2 + b" MaxTime=30")}
        sync.config.write(limit)
        st: dict[str, Any] = await sync.wait(set_sha(limit))
        assert st["rejected"] is None
        assert squeues and all("--states=R,S,CG,CF" in a for a in squeues), squeues
        squeues.clear()
        gone = {**sync.good(), "slurm.conf": conf.replace(P2, b"")}
        sync.config.write(gone)
        st = await sync.wait(set_sha(gone), key="rejected")
        assert st["held_for_jobs"] == [queued], st["rejected"]
        assert "p2" in st["rejected"]["reason"] and f"job {queued}" in st["rejected"]["reason"]
        assert any("--states=PD,R,S,CG,CF" in a for a in squeues), squeues
