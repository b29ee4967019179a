"""The Slurm client against real daemons, on every release: states, GRES, writes, failures."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from sidecars.devcluster import DevCluster
from sidecars.slurm import (
    RetryPolicy,
    SlurmClient,
    SlurmCommandError,
    SlurmMetrics,
    SlurmTimeout,
    SlurmUnreachable,
)
from sidecars.slurm.runner import run
from tests.conftest import descendants
from tests.helpers import eventually

pytestmark = pytest.mark.per_release(
    "the client reads each release's own output: states, JSON, GRES, error words"
)


@pytest.mark.cluster(nodes=2)
async def test_drain_running_node_then_drained_when_job_ends_then_resume(cluster: DevCluster) -> None:
    client = cluster.client()
    go = cluster.out_dir / "go"
    # runs until the test says so: still running when the drain is read, whatever the machine's load
    job = await cluster.sbatch("-w", "n1", wrap=f"while [ ! -e {go} ]; do sleep 0.2; done")
    await cluster.wait_job(job, "RUNNING")
    await client.drain(["n1"], "slurm-sidecars: test drain")
    node = await client.node("n1")
    assert node is not None
    assert node.state.drain and node.state.busy and not node.state.drained  # DRAINING
    assert node.reason is not None and node.reason.text == "slurm-sidecars: test drain"
    assert node.reason.user == "root" and node.reason.time is not None
    go.touch()
    finished = await cluster.wait_job(job, "COMPLETED", timeout=30)
    assert finished.state == "COMPLETED"  # the drain let it finish
    await cluster.wait_node("n1", lambda n: n.state.drained)  # the default 30 s: a loaded machine's room
    await client.resume(["n1"])
    await cluster.wait_node("n1", lambda n: not n.state.drain and n.state.base == "IDLE")


@pytest.mark.cluster(nodes=3)
async def test_nodes_named_reads_just_those_and_skips_unknown_names(cluster: DevCluster) -> None:
    client = cluster.client()
    await client.drain(["n2"], "admin: fan")
    named = await client.nodes_named(["n2", "n3"])
    assert sorted(named) == ["n2", "n3"]
    assert named["n2"].state.drain and named["n2"].reason is not None
    assert named["n2"].reason.text == "admin: fan"
    assert named["n2"] == await client.node("n2")
    # an unknown name makes scontrol exit non-zero; the known ones are still answered
    assert sorted(await client.nodes_named(["n1", "gone9"])) == ["n1"]
    assert await client.nodes_named([]) == {}


@pytest.mark.cluster(nodes=2, gpus=4)
async def test_gres_job_gpu_indices(cluster: DevCluster) -> None:
    a = await cluster.sbatch("-w", "n1", "--gres=gpu:2", wrap="sleep 60")
    b = await cluster.sbatch("-w", "n2", "--gres=gpu:3", wrap="sleep 60")
    ja = await cluster.wait_job(a, "RUNNING")
    jb = await cluster.wait_job(b, "RUNNING")
    assert ja.gpu_indices == {"n1": (0, 1)}
    assert jb.gpu_indices == {"n2": (0, 1, 2)}
    n1 = await cluster.client().node("n1")
    assert n1 is not None and n1.gres == "gpu:4" and n1.gres_used.startswith("gpu:2")


@pytest.mark.cluster(nodes=2, gpus=2)
async def test_json_and_text_readers_agree_on_a_live_cluster(cluster: DevCluster) -> None:
    running = await cluster.sbatch("-w", "n1", "--gres=gpu:1", "-t", "5", wrap="sleep 60")
    await cluster.sbatch("-w", "n2", "-t", "1", wrap="true")
    await cluster.wait_job(running, "RUNNING")
    await cluster.sbatch("-w", "n1", "--gres=gpu:2", wrap="true")  # pending behind the first
    auto, text = cluster.client(), cluster.client(output="text")
    await auto.drain(["n2"], "admin: maintenance window")

    async def both() -> tuple[Any, ...]:
        return await auto.nodes(), await text.nodes(), await auto.jobs(), await text.jobs()

    # the cluster moves on between two reads (the short job ends, n2's drain lands): a quiet moment,
    # which a loaded machine can be seconds in coming, compares equal
    read = await eventually(
        both, lambda r: r[0] == r[1] and r[2] == r[3], every=0.5, what="the readers agreeing"
    )
    assert len(read[2]) == 3
    assert await auto.partitions() == await text.partitions()


@pytest.mark.cluster(nodes=1)
async def test_reconfigure_keeps_running_jobs(cluster: DevCluster) -> None:
    client = cluster.client()
    job = await cluster.sbatch(wrap="sleep 120")
    await cluster.wait_job(job, "RUNNING")
    conf = cluster.conf_path.read_text().replace("MaxTime=INFINITE", "MaxTime=90")
    cluster.conf_path.write_text(conf)
    result = await client.reconfigure()
    assert result.returncode == 0
    (part,) = await cluster.client().partitions()
    deadline = time.monotonic() + 30  # a loaded machine's re-exec takes seconds
    while part.max_time_minutes != 90 and time.monotonic() < deadline:  # 24.11 re-execs the controller
        await asyncio.sleep(0.1)
        (part,) = await client.partitions()
    assert part.max_time_minutes == 90
    assert (await cluster.wait_job(job, "RUNNING")).state == "RUNNING"


@pytest.mark.cluster(nodes=1)
async def test_controller_down_is_unreachable_after_bounded_retries_then_recovers(
    cluster: DevCluster,
) -> None:
    registry = CollectorRegistry()
    # Slurm's own clients retry a refused connection for ~9 s before saying so; a shorter timeout of
    # ours turns each attempt into a SlurmTimeout, which is just as transient
    client = SlurmClient(
        env=cluster.env,
        timeout=2.0,
        metrics=SlurmMetrics(registry),
        retry=RetryPolicy(attempts=3, max_seconds=30, initial_wait=0.05, max_wait=0.2),
    )
    await client.version()
    await cluster.stop_slurmctld(crash=True)
    started = time.monotonic()
    with pytest.raises(SlurmUnreachable):
        await client.nodes()
    assert time.monotonic() - started < 15
    command = "sinfo" if (await client.version()).major == 22 else "scontrol show"
    attempts = sum(
        registry.get_sample_value(
            "slurm_sidecars_slurm_commands_total", {"command": command, "result": result}
        )
        or 0
        for result in ("timeout", "unreachable")
    )
    assert attempts == 3  # bounded: exactly the attempts allowed
    assert not (await client.ping()).up
    await cluster.start_slurmctld()
    assert [n.name for n in await client.nodes()] == ["n1"]
    assert (await client.ping()).up


@pytest.mark.cluster(nodes=1)
async def test_permanent_errors_are_raised_at_once_with_slurms_words(cluster: DevCluster) -> None:
    registry = CollectorRegistry()
    client = SlurmClient(env=cluster.env, metrics=SlurmMetrics(registry))
    with pytest.raises(SlurmCommandError) as info:
        await client.drain(["nosuch"], "slurm-sidecars: x")
    assert "Invalid node name" in info.value.message
    assert (
        registry.get_sample_value(
            "slurm_sidecars_slurm_commands_total", {"command": "scontrol update", "result": "error"}
        )
        == 1
    )
    assert await client.node("nosuch") is None


@pytest.mark.cluster(nodes=1)
async def test_a_slurm_answer_past_the_cap_is_killed_and_named(cluster: DevCluster) -> None:
    """Real `scontrol show config` (several KB) under a 1 KiB cap: refused, naming the command and the
    cap, counted, and the child gone (the leak guard checks it)."""
    registry = CollectorRegistry()
    with pytest.raises(SlurmCommandError) as info:
        await run(
            ["scontrol", "show", "config"],
            env=cluster.env,
            metrics=SlurmMetrics(registry),
            max_output_bytes=1024,
        )
    assert str(info.value).startswith("scontrol show config:") and "passed 1024 bytes" in str(info.value)
    assert (
        registry.get_sample_value(
            "slurm_sidecars_slurm_commands_total", {"command": "scontrol show", "result": "too_large"}
        )
        == 1
    )
    assert (await run(["scontrol", "show", "config"], env=cluster.env)).stdout  # the default cap: read whole


async def test_timeout_kills_the_child() -> None:
    started = time.monotonic()
    with pytest.raises(SlurmTimeout):
        await run(["sleep", "30"], timeout=0.2)
    assert time.monotonic() - started < 5  # and the leak guard checks that `sleep` is gone


async def test_cancellation_kills_the_child() -> None:
    task = asyncio.ensure_future(run(["sleep", "30"], timeout=60))
    # cancel only once the child runs, so what is tested is the kill, not a cancel before the start
    deadline = time.monotonic() + 10
    while not [pid for pid, name in descendants(os.getpid()) if name == "sleep"]:
        assert time.monotonic() < deadline, "the child never started"
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not [pid for pid, name in descendants(os.getpid()) if name == "sleep"]
