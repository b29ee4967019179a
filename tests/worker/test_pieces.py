"""The agent's pure pieces: reasons, the control plane's node object, GPU -> job files, settings."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from sidecars.kube.topology import TopologySpec
from sidecars.runtime.settings import ConfigError
from sidecars.slurm import Job, NodeState
from sidecars.slurm.nodejson import parse_node
from sidecars.worker.jobmap import JobMapping, gpu_jobs
from sidecars.worker.settings import configure, from_args, is_our_reason


def job(job_id: int, state: str, gpus: dict[str, tuple[int, ...]]) -> Job:
    return Job(job_id, "j", "root", state, "None", "debug", tuple(gpus), 0, 0, 0, 1, 1, gpu_indices=gpus)


def test_only_the_agents_terminating_reasons_are_ours() -> None:
    assert is_our_reason("slurm-sidecars: pod ns/w-0 terminating")
    assert is_our_reason("slurm-sidecars: pod ns/w-0 terminating: drain timed out, jobs requeued")
    assert not is_our_reason("slurm-sidecars: maintenance window 4")  # the control plane's own drains
    assert not is_our_reason("disk replacement")
    assert not is_our_reason(None)


def test_control_plane_node_object() -> None:
    view = parse_node(
        {
            "name": "n1",
            "state": "allocated",
            "flags": ["DRAIN"],
            "reason": "x",
            "jobs": [7, 8],
            "busy_until": 1796010000,
            "version": 12,
        }
    )
    assert view.state == NodeState("ALLOCATED", frozenset({"DRAIN"}))
    assert not view.state.drained and view.state.busy
    assert (view.jobs, view.busy_until, view.version, view.reason) == ((7, 8), 1796010000, 12, "x")
    bare = parse_node(
        {
            "name": "n2",
            "state": "IDLE",
            "flags": [],
            "reason": "",
            "jobs": [],
            "busy_until": None,
            "version": 1,
        }
    )
    assert bare.reason is None and bare.jobs == () and bare.busy_until is None


def test_gpu_jobs_count_only_jobs_holding_gpus_on_this_node() -> None:
    jobs = [
        job(1, "RUNNING", {"n1": (0, 1)}),
        job(2, "RUNNING", {"n1": (1,), "n2": (0,)}),  # a shared GPU lists both jobs
        job(3, "COMPLETING", {"n1": (2,)}),  # ending: its GPU is free for attribution
        job(4, "PENDING", {}),
    ]
    assert gpu_jobs(jobs, "n1") == {0: [1], 1: [1, 2]}
    assert gpu_jobs(jobs, "n2") == {0: [2]}


def test_mapping_rewrites_only_what_changed(tmp_path: Path) -> None:
    m = JobMapping(tmp_path)
    assert m.reconcile({0: [5], 1: [5, 6]})
    assert (tmp_path / "1").read_text() == "5\n6\n"
    before = (tmp_path / "0").stat().st_mtime_ns
    assert not m.reconcile({0: [5], 1: [5, 6]})
    assert (tmp_path / "0").stat().st_mtime_ns == before
    assert m.reconcile({1: [6]})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1"]
    assert m.job_ids() == {6}


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    configure(p)
    return p.parse_args(list(argv))


def test_settings_from_flags_and_environment(tmp_path: Path) -> None:
    args = parse(
        "--node-name",
        "gpu-7",
        "--http",
        "0.0.0.0:9100",
        "--socket",
        str(tmp_path / "a.sock"),
        "--slurmd-restart-command",
        "supervisorctl restart 'slurmd main'",
    )
    s = from_args(args, env={"POD_NAME": "worker-7", "POD_NAMESPACE": "hpc"})
    assert s.slurmd_restart_command == ("supervisorctl", "restart", "slurmd main")
    assert s.drain_reason() == "slurm-sidecars: pod hpc/worker-7 terminating"
    assert s.state_dir == tmp_path and s.control_plane is None and s.drain_timeout_policy == "requeue"


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--heal-attempts", "many"], "--heal-attempts"),
        (["--drain-poll-seconds", "-1"], "--drain-poll-seconds"),
        (["--slurmd-restart-command", "restart 'slurmd"], "--slurmd-restart-command"),
        (["--control-plane", "cp:8080", "--token-file", "/x"], "http(s) URL"),
    ],
)
def test_bad_settings_say_which_flag(tmp_path: Path, extra: list[str], says: str) -> None:
    args = parse("--node-name", "n1", "--http", "127.0.0.1:0", "--socket", str(tmp_path / "a.sock"), *extra)
    with pytest.raises(ConfigError, match=says.replace("(", r"\(").replace(")", r"\)")):
        from_args(args, env={})


def test_topology_flags_are_the_control_planes_and_need_kube_node_naming(tmp_path: Path) -> None:
    ds = ("--node-name-from", "kube-node", "--kube-node-name", "k1")
    common = ("--http", "127.0.0.1:0", "--socket", str(tmp_path / "a.sock"))
    assert from_args(parse(*ds, *common), env={}).topology is None  # off unless labels are named
    s = from_args(
        parse(*ds, *common, "--topology-labels", "topology.kubernetes.io/zone, example.com/rack"), env={}
    )
    assert s.topology == TopologySpec(
        ("topology.kubernetes.io/zone", "example.com/rack"), "tree", "kubernetes"
    )
    args = parse(
        *ds, *common, "--topology-labels", "a/zone", "--topology-type", "block", "--topology-name", "b1"
    )
    assert from_args(args, env={}).topology == TopologySpec(("a/zone",), "block", "b1")
    for argv, says in (
        (("--node-name", "n1", *common, "--topology-labels", "zone"), "needs --node-name-from=kube-node"),
        ((*ds, *common, "--topology-labels", "zone,zone"), "--topology-labels: a label key is named twice"),
        ((*ds, *common, "--topology-labels", "a=b"), "--topology-labels: not a label key"),
        ((*ds, *common, "--topology-labels", "zone", "--topology-name", "a:b"), "--topology-name:"),
    ):
        with pytest.raises(ConfigError, match=says):
            from_args(parse(*argv), env={})
