"""One slurm.conf renderer for both shapes: each shape's files stay as they were when each shape had a
renderer of its own, to the byte. What they were is held here as structure (the lines as key/value
words: one block both shapes share, and what each shape puts around it), not as pasted text."""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecars.devcluster.slurmconf import ClusterSpec, Ports, render

Line = tuple[tuple[str, str], ...]
D = Path("/tmp/dc")
PORTS = {"n1": 7001, "n2": 7002, "n3": 7003}
HEAD = {"ClusterName": "c1", "SlurmctldHost": "h1(127.0.0.1)", "SlurmctldPort": "6817", "SlurmdPort": "6818"}
AUTH = {
    "classic": {
        "AuthType": "auth/munge",
        "AuthInfo": f"socket={D}/munge/munge.sock",
        "CredType": "cred/munge",
    },
    "slinky": {
        "AuthType": "auth/slurm",
        "CredType": "cred/slurm",
        "SlurmctldParameters": "enable_configless",
    },
}
# the block both shapes share, after the head and the authentication; SlurmdTimeout comes from the spec
SHARED = {
    "SlurmUser": "root",
    "SlurmdUser": "root",
    "StateSaveLocation": f"{D}/state",
    "SlurmdSpoolDir": f"{D}/spool/%n",
    "SlurmctldPidFile": f"{D}/run/slurmctld.pid",
    "SlurmdPidFile": f"{D}/run/slurmd-%n.pid",
    "SlurmctldLogFile": f"{D}/log/slurmctld.log",
    "SlurmdLogFile": f"{D}/log/slurmd-%n.log",
    "SlurmctldDebug": "info",
    "SlurmdDebug": "info",
    "MailProg": "/bin/true",
    "ProctrackType": "proctrack/linuxproc",
    "TaskPlugin": "task/none",
    "JobAcctGatherType": "jobacct_gather/none",
    "AccountingStorageType": "accounting_storage/none",
    "JobCompType": "jobcomp/none",
    "SelectType": "select/cons_tres",
    "SelectTypeParameters": "CR_CPU",
    "SchedulerType": "sched/backfill",
    "MpiDefault": "none",
    "SwitchType": "switch/none",
    "SlurmdParameters": "config_overrides",
    "ReturnToService": "2",
    "SlurmctldTimeout": "30",
    "SlurmdTimeout": "{slurmd_timeout}",
    "InactiveLimit": "0",
    "KillWait": "5",
    "MinJobAge": "60",
    "CommunicationParameters": "NoInAddrAny",
}
FULL = {
    "nodes": 2,
    "gpus": 2,
    "cpus": 4,
    "memory": 2000,
    "features": {"n1": "a,b"},
    "extra_conf": "X=1\n",
    "slurmd_timeout": 7,
    "partition_max_time": "60",
}


def node(name: str, cpus: int, memory: int, *more: tuple[str, str]) -> Line:
    where = (
        ("NodeName", name),
        ("NodeAddr", "127.0.0.1"),
        ("NodeHostname", "h1"),
        ("Port", str(PORTS[name])),
    )
    return (*where, ("CPUs", str(cpus)), ("RealMemory", str(memory)), *more, ("State", "UNKNOWN"))


def partition(nodes: str, limit: str) -> Line:
    return (
        ("PartitionName", "debug"),
        ("Nodes", nodes),
        ("Default", "YES"),
        ("MaxTime", limit),
        ("State", "UP"),
    )


def one(**words: str) -> list[Line]:
    return [((k, v),) for k, v in words.items()]


# per spec: the shape, the SlurmdTimeout, the lines after the shared block, and the other files
CASES: dict[str, tuple[ClusterSpec, int, list[Line], dict[str, str]]] = {
    "classic": (
        ClusterSpec(),
        30,
        [*(node(n, 1, 1000) for n in ("n1", "n2", "n3")), partition("ALL", "INFINITE")],
        {},
    ),
    "classic, every option": (
        ClusterSpec(**FULL, max_node_count=9),
        7,
        [
            *one(MaxNodeCount="9", TreeWidth="65533", GresTypes="gpu"),
            node("n1", 4, 2000, ("Gres", "gpu:2"), ("Feature", "a,b")),
            node("n2", 4, 2000, ("Gres", "gpu:2")),
            partition("ALL", "60"),
            *one(X="1"),
        ],
        {"gres.conf": f"Name=gpu File={D}/dev/nvidia[0-1]\n"},
    ),
    "slinky": (
        ClusterSpec(shape="slinky"),
        30,
        [
            *one(MaxNodeCount="11", TreeWidth="65533"),  # room for the nodes and 8 more
            (("NodeSet", "slinky"), ("Feature", "slinky")),
            partition("slinky", "INFINITE"),
        ],
        {"cgroup.conf": "CgroupPlugin=disabled\n"},
    ),
    "slinky, every option": (
        ClusterSpec(**FULL, shape="slinky", max_node_count=20, nodesets={"n2": "gpu"}),
        7,
        [
            *one(MaxNodeCount="20", TreeWidth="65533", GresTypes="gpu"),
            (("NodeSet", "gpu"), ("Feature", "gpu")),
            (("NodeSet", "slinky"), ("Feature", "slinky")),
            partition("gpu,slinky", "60"),
            *one(X="1"),
        ],
        {"cgroup.conf": "CgroupPlugin=disabled\n", "gres.conf": f"Name=gpu File={D}/dev/nvidia[0-1]\n"},
    ),
}


def words(text: str) -> list[Line]:
    return [tuple(tuple(w.split("=", 1)) for w in line.split(" ")) for line in text.splitlines()]


@pytest.mark.parametrize("case", CASES)
def test_each_shape_renders_what_it_did_to_the_byte(case: str) -> None:
    spec, timeout, tail, others = CASES[case]
    shared = {k: v.format(slurmd_timeout=timeout) for k, v in SHARED.items()}
    want = [*one(**HEAD), *one(**AUTH[spec.shape]), *one(**shared), *tail]
    files = render(spec, D, Ports(6817, 6818, {n: PORTS[n] for n in spec.node_names()}), "h1", "c1")
    assert words(files["slurm.conf"]) == want
    text = "".join(" ".join(f"{k}={v}" for k, v in line) + "\n" for line in want)
    assert files == {"slurm.conf": text, **others}  # nothing else, in this order, to the byte
    assert list(files) == ["slurm.conf", *others]
