"""The JSON and text readers on real output captured from Slurm 22.05, 24.11 and 26.05 (tests/data;
26.05's by `scripts/capture_slurm.py sid tests/data/slurm-26.05`).

The captured scenario, the same on every release: job 1 (gpu:2, 10 min) RUNNING on n1, job 2 (5 min)
RUNNING on n2 which an admin drained ("maint test"), job 3 (no limit) RUNNING on n3, job 4 (gpu:1,
2 min) PENDING for Resources.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sidecars.slurm import BootTime, NodeState, Version, jsonformat, textformat
from sidecars.slurm.errors import SlurmParseError, SlurmUnreachable

DATA = Path(__file__).parent.parent / "data"
RELEASES = ["slurm-22.05", "slurm-24.11", "slurm-26.05"]


def read(release: str, name: str) -> str:
    return (DATA / release / name).read_text()


def json_nodes(release: str) -> list[jsonformat.Obj]:
    name = "sinfo--json.json" if release == "slurm-22.05" else "scontrol-show-nodes--json.json"
    return jsonformat.load(["x"], read(release, name), "nodes")


@pytest.mark.parametrize("release", RELEASES)
def test_nodes_json_and_text_agree(release: str) -> None:
    from_json = {n.name: n for n in map(jsonformat.node, json_nodes(release))}
    from_text = {n.name: n for n in textformat.nodes(read(release, "scontrol--o-show-node.txt"))}
    assert set(from_json) == {"n1", "n2", "n3"}
    for name, n in from_text.items():
        j = from_json[name]
        # the capture's text lacks -d, so GresUsed is absent there; the rest must agree exactly
        assert n.state == j.state and n.reason == j.reason, name
        assert (n.cpus, n.alloc_cpus, n.real_memory, n.gres, n.address, n.hostname, n.partitions) == (
            j.cpus,
            j.alloc_cpus,
            j.real_memory,
            j.gres,
            j.address,
            j.hostname,
            j.partitions,
        )
        assert (n.boot_time, n.slurmd_start_time, n.version) == (j.boot_time, j.slurmd_start_time, j.version)


@pytest.mark.parametrize("release", RELEASES)
def test_node_states_and_reasons(release: str) -> None:
    nodes = {n.name: n for n in map(jsonformat.node, json_nodes(release))}
    assert nodes["n2"].state == NodeState("ALLOCATED", frozenset({"DRAIN"}))
    assert nodes["n2"].state.drain and nodes["n2"].state.busy and not nodes["n2"].state.drained
    assert nodes["n2"].reason is not None
    assert (nodes["n2"].reason.text, nodes["n2"].reason.user) == ("maint test", "root")
    assert nodes["n2"].reason.time and nodes["n2"].reason.time > 1_700_000_000
    assert nodes["n1"].reason is None and nodes["n1"].gres == "gpu:4"


@pytest.mark.parametrize("release", RELEASES)
def test_jobs_json_and_text_agree(release: str) -> None:
    from_json = {
        j.job_id: j
        for j in map(jsonformat.job, jsonformat.load(["x"], read(release, "squeue--json.json"), "jobs"))
    }
    from_text = {j.job_id: j for j in textformat.jobs(read(release, "scontrol--o-show-job--d.txt"))}
    assert from_json == from_text
    j1, j3, j4 = from_json[1], from_json[3], from_json[4]
    assert j1.state == "RUNNING" and j1.nodes == ("n1",) and j1.gpu_indices == {"n1": (0, 1)}
    assert j1.time_limit_minutes == 10 and j1.start_time and j1.end_time == j1.start_time + 600
    assert j3.time_limit_minutes is None and j3.end_time is None  # unlimited: no expected end
    assert j4.state == "PENDING" and j4.start_time is None and j4.state_reason == "Resources"


@pytest.mark.parametrize("release", ["slurm-24.11", "slurm-26.05"])
def test_jobs_from_scontrol_json_agree_with_text(release: str) -> None:
    """What the client reads on 23.02+ (`scontrol show job --json`), not only squeue's document."""
    doc = read(release, "scontrol-show-job--json.json")
    from_json = {j.job_id: j for j in map(jsonformat.job, jsonformat.load(["x"], doc, "jobs"))}
    assert from_json == {j.job_id: j for j in textformat.jobs(read(release, "scontrol--o-show-job--d.txt"))}


@pytest.mark.parametrize("release", RELEASES)
def test_partitions_text(release: str) -> None:
    (p,) = textformat.partitions(read(release, "scontrol--o-show-partition.txt"))
    assert (p.name, p.nodes, p.state, p.max_time_minutes, p.total_cpus) == (
        "debug",
        ("n1", "n2", "n3"),
        "UP",
        None,
        3,
    )


@pytest.mark.parametrize("release", ["slurm-24.11", "slurm-26.05"])
def test_partitions_json_agrees_with_text(release: str) -> None:
    doc = read(release, "scontrol-show-partition--json.json")
    assert [
        jsonformat.partition(o) for o in jsonformat.load(["x"], doc, "partitions")
    ] == textformat.partitions(read(release, "scontrol--o-show-partition.txt"))


@pytest.mark.parametrize(
    ("release", "parser"),
    [("slurm-24.11", "v0.0.42"), ("slurm-26.05", "v0.0.45"), ("slurm-26.05", "v0.0.43")],
)
def test_captures_are_the_data_parser_they_claim(release: str, parser: str) -> None:
    """The readers above were run on each layout jsonformat names, not on one layout twice."""
    name = "squeue--json.json" if parser != "v0.0.43" else "squeue--json=v0.0.43.json"
    doc = json.loads(read(release, name))
    assert doc["meta"]["plugin"]["data_parser"] == f"data_parser/{parser}"
    jobs = {j.job_id: j for j in map(jsonformat.job, jsonformat.load(["x"], read(release, name), "jobs"))}
    assert jobs[1].gpu_indices == {"n1": (0, 1)} and jobs[4].state_reason == "Resources"


@pytest.mark.parametrize("release", RELEASES)
def test_config_ping_and_sdiag(release: str) -> None:
    conf = textformat.config(read(release, "scontrol-show-config.txt"))
    assert conf["SelectType"] == "select/cons_tres" and conf["SlurmctldPort"].isdigit()
    assert textformat.ping(read(release, "scontrol-ping.txt")).up
    rpcs = textformat.sdiag_rpcs(read(release, "sdiag.txt"))
    assert rpcs["REQUEST_NODE_INFO"] > 0 and rpcs["REQUEST_PARTITION_INFO"] > 0


@pytest.mark.parametrize(
    ("release", "booted", "asked"),
    [
        ("slurm-22.05", "2026-11-30T03:04:47", "2026-11-30T03:04:58"),
        ("slurm-24.11", "2026-11-30T03:01:22", "2026-11-30T03:02:13"),
        ("slurm-26.05", "2026-12-01T08:46:16", "2026-12-01T08:46:22"),
    ],
)
def test_boot_time_and_query_time_of_show_config(release: str, booted: str, asked: str) -> None:
    boot = textformat.boot_time(read(release, "scontrol-show-config.txt"))
    assert (boot.booted, boot.asked) == (booted, asked)
    # a section title or a config without the header: what is missing is None, not a guess
    assert textformat.boot_time("BOOT_TIME = 2026-11-30T03:04:47\n") == BootTime("2026-11-30T03:04:47", None)
    assert textformat.boot_time("Configuration data as of 2026-11-30T03:04:58\n") == BootTime(
        None, "2026-11-30T03:04:58"
    )


@pytest.mark.parametrize(
    ("release", "version"),
    [("slurm-22.05", (22, 5, 8)), ("slurm-24.11", (24, 11, 5)), ("slurm-26.05", (26, 5, 5))],
)
def test_client_version(release: str, version: tuple[int, int, int]) -> None:
    v = Version.parse(read(release, "scontrol--version.txt"))
    assert (v.major, v.minor, v.micro) == version


def test_unknown_json_shapes_fail_clearly() -> None:
    with pytest.raises(SlurmParseError, match="not JSON"):
        jsonformat.load(["squeue"], "<html>", "jobs")
    with pytest.raises(SlurmParseError, match="no list 'jobs'"):
        jsonformat.load(["squeue"], "{}", "jobs")
    with pytest.raises(SlurmUnreachable, match="Invalid"):
        jsonformat.load(
            ["squeue"], json.dumps({"errors": [{"description": "Invalid job id"}], "jobs": []}), "jobs"
        )


def test_json_errors_with_exit_0_are_not_an_empty_cluster() -> None:
    """What 22.05's `sinfo --json` prints, with exit 0, while the controller is down (seen here)."""
    doc = {"meta": {}, "errors": [{"error": "Unspecified error", "errno": -1}], "nodes": []}
    with pytest.raises(SlurmUnreachable, match="Unspecified error"):
        jsonformat.load(["sinfo", "--json"], json.dumps(doc), "nodes")


def test_newer_data_parser_shapes() -> None:
    """v0.0.43/44 (Slurm 25.x/26.x) keep the v0.0.42 shapes for what we read: state lists and
    {set, infinite, number} numbers; an unlimited job is `infinite`."""
    obj = {
        "job_id": 7,
        "name": "big",
        "user_name": "alice",
        "job_state": ["RUNNING", "COMPLETING"],
        "partition": "gpu",
        "nodes": "g[1-2]",
        "start_time": {"set": True, "infinite": False, "number": 1000},
        "end_time": {"set": True, "infinite": False, "number": 4600},
        "time_limit": {"set": True, "infinite": False, "number": 60},
        "submit_time": {"set": True, "infinite": False, "number": 900},
        "cpus": {"set": True, "infinite": False, "number": 16},
        "gres_detail": ["gpu:4(IDX:0-3)", "gpu:2(IDX:1,3)"],
        "job_resources": {"nodes": {"allocation": [{"name": "g1"}, {"name": "g2"}]}},
    }
    job = jsonformat.job(obj)
    assert job.state == "RUNNING" and job.nodes == ("g1", "g2") and job.cpus == 16
    assert job.gpu_indices == {"g1": (0, 1, 2, 3), "g2": (1, 3)}
    assert job.end_time == 4600 and job.time_limit_minutes == 60
    unlimited = jsonformat.job({**obj, "time_limit": {"set": False, "infinite": True, "number": 0}})
    assert unlimited.time_limit_minutes is None and unlimited.end_time is None


@pytest.mark.parametrize(
    ("text", "minutes"),
    [("UNLIMITED", None), ("00:10:00", 10), ("1-02:03:00", 1563), ("30:00", 30), ("5", 5), ("00:00:30", 1)],
)
def test_durations(text: str, minutes: int | None) -> None:
    assert textformat.parse_minutes(text) == minutes


def test_text_values_with_spaces_and_repeated_keys() -> None:
    line = (
        "NodeName=x1 OS=Linux 6.1 #1 SMP State=IDLE+DRAIN CPUTot=8 "
        "Reason=needs = care [ops@2026-01-02T03:04:05]"
    )
    (node,) = textformat.nodes(line)
    assert node.state.drained and node.reason is not None
    assert (node.reason.text, node.reason.user) == ("needs = care", "ops")
    job = (
        "JobId=5 JobState=RUNNING NodeList=a[1-3] TimeLimit=01:00:00 StartTime=2026-01-01T00:00:00 "
        "  Nodes=a[1-2] CPU_IDs=0 Mem=0 GRES=gpu:2(IDX:0-1)   Nodes=a3 CPU_IDs=0 Mem=0 GRES=gpu:1(IDX:3)"
    )
    (j,) = textformat.jobs(job)
    assert j.gpu_indices == {"a1": (0, 1), "a2": (0, 1), "a3": (3,)}


def test_a_reason_ends_at_its_stamp_when_a_reservation_follows() -> None:
    # 24.11+ print the node's reservation after its reason on the one-line form
    line = (
        "NodeName=n3 Arch=x86_64 State=IDLE+DRAIN+MAINT+RESERVED Reason=admin: bad DIMM = yes "
        "[root@2026-12-01T10:49:17] ReservationName=slurm-sidecars-maint-racks"
    )
    (node,) = textformat.nodes(line)
    assert node.reason is not None
    assert (node.reason.text, node.reason.user) == ("admin: bad DIMM = yes", "root")
    # a reason with no stamp keeps the whole rest of the line, whatever it holds
    (plain,) = textformat.nodes("NodeName=n1 State=IDLE+DRAIN Reason=x=1 y=2")
    assert plain.reason is not None and plain.reason.text == "x=1 y=2"
