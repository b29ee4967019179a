"""A change that would end or requeue running jobs is held, named with the jobs and why, until
forced: by a `slurm-sidecars.force` key in the set naming who, or by --allow-job-loss."""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecars.configsync.fileset import conffile
from sidecars.configsync.fileset.sources import FileEntry, FileSet
from sidecars.configsync.judge import jobs
from sidecars.devcluster import DevCluster
from sidecars.protocol.configsync import FORCE_FILE
from sidecars.slurm.models import JobPlacement
from tests.configsync.harness import config_sync, set_sha

T = Path("/etc/slurm")
P2 = b"PartitionName=p2 Nodes=n2 State=UP"


def without_p2(files: dict[str, bytes]) -> dict[str, bytes]:
    return {**files, "slurm.conf": files["slurm.conf"].replace(P2, b"")}


def parse(text: str) -> conffile.SlurmConf:
    data = text.encode()
    return conffile.parse(
        FileSet.build([FileEntry("slurm.conf", data, 0o644, len(data), T)]), "slurm.conf", T
    )


def placed(
    job_id: int, state: str, parts: str, nodes: str = "", resv: str = "", qos: str = "normal"
) -> JobPlacement:
    return JobPlacement(
        job_id, state, tuple(parts.split(",")), tuple(n for n in nodes.split(",") if n), resv, qos
    )


def test_the_direct_comparison_names_what_each_job_loses() -> None:
    old = parse(
        "NodeName=n[1-3] CPUs=1\nPartitionName=a Nodes=n1\nPartitionName=b Nodes=n[2-3]\n"
        "PartitionName=c Nodes=n3 AllowQos=normal,high\n"
    )
    new = parse("NodeName=n[1-2] CPUs=1\nPartitionName=a Nodes=n1\nPartitionName=c Nodes=n2 AllowQos=high\n")
    found = jobs.compare(
        old,
        new,
        [
            placed(1, "RUNNING", "a", "n1"),  # untouched
            placed(2, "RUNNING", "b", "n2"),  # its partition goes
            placed(3, "PENDING", "b,a"),  # may still run in a
            placed(4, "PENDING", "b"),  # nowhere left to run
            placed(5, "RUNNING", "a", "n1", resv="r1"),  # its reservation loses n3
            placed(6, "PENDING", "c", qos="normal"),  # its QOS is no longer allowed
            placed(7, "RUNNING", "dyn", "d1"),  # a dynamic node and a partition made at run time
        ],
        {"r1": ("n1", "n3")},
    )
    assert set(found) == {2, 4, 5, 6}
    assert "partition b it runs in is removed" in found[2]
    assert "partition b it waits for" in found[4]
    assert "reservation r1" in found[5] and "n3" in found[5]
    assert "QOS normal" in found[6]


def test_a_busy_nodes_resources_or_address_redefined_is_a_risk_to_its_jobs() -> None:
    lines = [
        "NodeName=DEFAULT CPUs=4 RealMemory=1000",
        "NodeName=n[1-2] Port=7001",
        "NodeName=n3 CPUs=2 Port=7003 Feature=a",
        "PartitionName=a Nodes=n[1-3]",
    ]

    def edited(i: int, line: str) -> conffile.SlurmConf:
        return parse("\n".join([*lines[:i], line, *lines[i + 1 :]]) + "\n")

    old = parse("\n".join(lines) + "\n")
    running = [placed(1, "RUNNING", "a", "n1"), placed(2, "RUNNING", "a", "n3"), placed(3, "PENDING", "a")]
    # a DEFAULT line's change reaches every node line after it; n2 is idle, job 3 runs nowhere yet
    found = jobs.compare(old, edited(0, lines[0] + " Sockets=2 CoresPerSocket=2"), running, {})
    assert found == {
        1: "node n1 it runs on is redefined (sockets, corespersocket)",
        2: "node n3 it runs on is redefined (sockets, corespersocket)",
    }
    assert jobs.compare(old, edited(2, "NodeName=n3 cpus=2 Port=7093 Feature=a"), running, {}) == {
        2: "node n3 it runs on is redefined (port)"
    }
    assert jobs.compare(old, edited(2, "NodeName=n3 CPUs=2 Port=7003 Feature=b"), running, {}) == {}
    # the same nodes written out without the DEFAULT line: nothing changed
    flat = parse(
        "NodeName=n[1-2] CPUs=4 RealMemory=1000 Port=7001\n"
        "NodeName=n3 CPUs=2 RealMemory=1000 Port=7003 Feature=a\nPartitionName=a Nodes=n[1-3]\n"
    )
    assert jobs.compare(old, flat, running, {}) == {}


def test_jobs_at_or_past_a_new_max_job_id_are_a_risk() -> None:
    old = parse("NodeName=n1 CPUs=1\nPartitionName=a Nodes=n1\n")
    new = parse("NodeName=n1 CPUs=1\nPartitionName=a Nodes=n1\nMaxJobId=7\n")
    found = jobs.compare(old, new, [placed(6, "RUNNING", "a", "n1"), placed(7, "PENDING", "a")], {})
    assert found == {7: "its id is not below the new MaxJobId=7"}


def test_who_forced_it() -> None:
    def fs(**extra: bytes) -> FileSet:
        entries = {"slurm.conf": b"x=1\n", **extra}
        return FileSet.build([FileEntry(n, d, 0o644, len(d), T) for n, d in entries.items()])

    assert jobs.forced_by(fs(), flag=False) is None
    assert jobs.forced_by(fs(), flag=True) == "--allow-job-loss"
    marker = {FORCE_FILE: b"alice: p2 is retired (CHG-42)\n"}
    assert jobs.forced_by(fs(**marker), flag=False) == f"{FORCE_FILE}: alice: p2 is retired (CHG-42)"
    assert jobs.forced_by(fs(**{FORCE_FILE: b"\n"}), flag=False) == f"{FORCE_FILE} (unsigned)"


@pytest.mark.cluster(nodes=2, foreground_ctld=True, extra_conf=P2.decode())
@pytest.mark.per_release(
    "forced, the change reaches each release's slurmctld -D with the job on the partition"
)
async def test_held_for_the_jobs_then_forced_by_a_marker_naming_who(cluster: DevCluster) -> None:
    job = await cluster.sbatch("-p", "p2", wrap="sleep 600")
    started = (await cluster.wait_job(job, "RUNNING")).start_time
    async with config_sync(cluster) as sync:
        good = sync.target_sha()
        files = without_p2(sync.good())
        sync.config.write(files)
        st = await sync.wait(set_sha(files), key="rejected")
        reason = st["rejected"]["reason"]
        assert st["held_for_jobs"] == [job] and st["rejected"]["jobs"] == [job]
        assert reason.startswith("held:") and f"job {job}" in reason and "p2" in reason
        assert FORCE_FILE in reason  # says how to force it
        assert st["restart_required"] is False and sync.target_sha() == good
        assert await sync.metric("slurm_sidecars_config_applies_total", result="held") == 1
        assert await sync.metric("slurm_sidecars_config_held_jobs") == 1
        assert [m for r, m, t in sync.events.events if r == "ConfigHeldForJobs" and t == "Warning"]
        assert (await cluster.wait_job(job, "RUNNING")).start_time == started
        # forced: the marker names who, and the report says so
        forced = {**files, FORCE_FILE: b"alice: p2 is retired (CHG-42)\n"}
        sync.config.write(forced)
        st = await sync.wait(set_sha(forced))
        assert st["held_for_jobs"] == [] and st["rejected"] is None
        assert st["applied"]["forced"]["by"] == f"{FORCE_FILE}: alice: p2 is retired (CHG-42)"
        assert st["applied"]["forced"]["jobs"] == [job]
        assert await sync.metric("slurm_sidecars_config_held_jobs") == 0
        applied = [m for r, m, _ in sync.events.events if r == "ConfigApplied"]
        assert "forced by slurm-sidecars.force: alice" in applied[-1] and f"job {job}" in applied[-1]
        assert {p.name for p in await cluster.client().partitions()} == {"debug"}


@pytest.mark.cluster(nodes=2, extra_conf=P2.decode())
@pytest.mark.per_release("forced, the change reaches each release's slurmctld with the job on the partition")
async def test_the_flag_forces_every_change(cluster: DevCluster) -> None:
    job = await cluster.sbatch("-p", "p2", wrap="sleep 600")
    await cluster.wait_job(job, "RUNNING")
    async with config_sync(cluster, allow_job_loss=True) as sync:
        files = without_p2(sync.good())
        sync.config.write(files)
        st = await sync.wait(set_sha(files))
        assert st["applied"]["forced"]["by"] == "--allow-job-loss" and st["applied"]["forced"]["jobs"] == [
            job
        ]


@pytest.mark.cluster(nodes=2, extra_conf=P2.decode())
async def test_a_held_change_applies_once_its_jobs_ended(cluster: DevCluster) -> None:
    job = await cluster.sbatch("-p", "p2", wrap="sleep 600")
    await cluster.wait_job(job, "RUNNING")
    async with config_sync(cluster, rehash_seconds=1.0) as sync:
        files = without_p2(sync.good())
        sync.config.write(files)
        st = await sync.wait(set_sha(files), key="rejected")
        assert st["held_for_jobs"] == [job]
        held_events = sum(1 for r, _, _ in sync.events.events if r == "ConfigHeldForJobs")
        await cluster.scancel(job)
        st = await sync.wait(set_sha(files), within=30.0)
        assert st["applied"]["forced"] is None and st["held_for_jobs"] == []
        # judged again at each re-hash while held, but reported once
        assert sum(1 for r, _, _ in sync.events.events if r == "ConfigHeldForJobs") == held_events == 1


def test_placements_and_reservations_as_squeue_and_scontrol_print_them() -> None:
    from sidecars.slurm import squeueformat, textformat

    out = squeueformat.job_placements(
        "7|RUNNING|p2|n[2-3]|(null)|normal\n8|PENDING|p2,debug||r1|normal\n9|COMPLETING|debug|n1|(null)|(null)\n"
    )
    assert out == [
        placed(7, "RUNNING", "p2", "n2,n3"),
        placed(8, "PENDING", "p2,debug", resv="r1"),
        JobPlacement(9, "COMPLETING", ("debug",), ("n1",), "", ""),
    ]
    assert out[0].running and not out[1].running and out[2].running
    resv = textformat.reservations(
        "ReservationName=r1 StartTime=2026-12-01T09:00:00 EndTime=2027-12-01T09:00:00 Duration=365-00:00:00 "
        "Nodes=n[1-2] NodeCnt=2 CoreCnt=2 Features=(null) PartitionName=(null) Flags=MAINT,SPEC_NODES\n"
    )
    assert [(r.name, r.nodes) for r in resv] == [("r1", ("n1", "n2"))]
