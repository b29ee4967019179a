"""The worker's GPU check, with a fake `nvidia-smi` first on PATH that prints the real tool's answer
shapes kept in tests/data/nvidia-smi/ (their origin is there): a fault fails readiness and drains
the real Slurm node with a reason naming the GPU; the check passing again undrains it; an admin's
drain is never lifted; a tool that hangs, is missing or prints junk drains nothing."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sidecars.controlplane.http.access import Caller
from sidecars.devcluster import DevCluster
from sidecars.worker.gpu.check import QUERY, UNKNOWN_LIMIT, GpuCheck, judge
from sidecars.worker.service import Agent
from tests.controlplane.conftest import control_plane
from tests.fakekube import FakeKube
from tests.helpers import RecordingEvents, eventually
from tests.worker.agents import http_get, running, settings_for, slurm_commands, token_file

DATA = Path(__file__).parent.parent / "data" / "nvidia-smi"
FAKE = """#!/bin/sh
# a stand-in for nvidia-smi: answers the agent's query with the case the test put in place
here=$(dirname "$0")
echo "$@" >> "$here/asked"
[ -e "$here/hang" ] && exec sleep 3600
cat "$here/case.out" 2>/dev/null
cat "$here/case.err" 1>&2 2>/dev/null
exit "$(cat "$here/case.rc" 2>/dev/null || echo 0)"
"""


def fake_tool(folder: Path) -> Path:
    """A bin directory holding the fake nvidia-smi; `answer()` sets what it prints."""
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "nvidia-smi"
    tool.write_text(FAKE)
    tool.chmod(0o755)
    return bin_dir


def answer(bin_dir: Path, case: str) -> None:
    for part in ("out", "err", "rc"):
        kept, put = DATA / f"{case}.{part}", bin_dir / f"case.{part}"
        if kept.exists():
            shutil.copyfile(kept, put)
        else:
            put.unlink(missing_ok=True)


def kept(case: str) -> tuple[int, str, str]:
    def read(part: str) -> str:
        f = DATA / f"{case}.{part}"
        return f.read_text() if f.exists() else ""

    return int(read("rc") or 0), read("out"), read("err")


def test_each_kept_answer_is_judged() -> None:
    healthy = judge(*kept("healthy-8"))
    assert (healthy.state, healthy.gpus, healthy.faults) == ("healthy", 8, ())
    ecc = judge(*kept("ecc-uncorrectable"))
    assert ecc.state == "faulty"
    assert ecc.faults == (
        "GPU 3 (00000000:5D:00.0): 2 uncorrectable ECC errors",
        "GPU 3 (00000000:5D:00.0): rows waiting for remapping (reset needed)",
    )
    assert judge(*kept("remap-failed")).faults == ("GPU 6 (00000000:BA:00.0): row remapping failed",)
    reset = judge(*kept("requires-reset"))
    assert reset.state == "faulty" and reset.faults[0].startswith("GPU 5 (00000000:AB:00.0): ")
    assert "[GPU requires reset]" in reset.faults[0]
    lost = judge(*kept("xid79-lost"))
    assert lost.state == "faulty" and "00:9A:00.0" in lost.faults[0]
    # a driver that cannot be reached: a fault only where the GPUs were seen healthy before
    assert judge(*kept("no-driver")).state == "unknown"
    assert judge(*kept("no-driver"), driver_seen=True).faults == (
        "nvidia-smi cannot reach the NVIDIA driver",
    )
    assert judge(*kept("junk")).state == "unknown"
    # unsupported fields are not faults; a wrong field count, a non-number or an odd exit are unknown
    na = "0, GPU-x, 00000000:01:00.0, [N/A], [N/A], [N/A], [N/A]\n"
    assert judge(0, na, "").state == "healthy"
    assert judge(0, "0, GPU-x, 00000000:01:00.0, 0, No\n", "").state == "unknown"
    assert judge(0, "0, GPU-x, 00000000:01:00.0, lots, No, No, No\n", "").state == "unknown"
    assert judge(0, "", "").state == "unknown"
    assert judge(4, "Insufficient Permissions\n", "").state == "unknown"


async def test_a_hang_junk_or_no_tool_is_unknown_and_fails_readiness_only_in_a_row(tmp_path: Path) -> None:
    bin_dir = fake_tool(tmp_path)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    gpu = GpuCheck("auto", 0.5, env)
    answer(bin_dir, "healthy-8")
    assert (await gpu.once()).state == "healthy" and gpu.check().ok
    assert (bin_dir / "asked").read_text().split() == list(QUERY)  # the query we parse, nothing else
    (bin_dir / "hang").touch()
    for n in range(1, UNKNOWN_LIMIT):
        verdict = await gpu.once()  # killed at the timeout, its process group too
        assert verdict.state == "unknown" and "no answer within 0.5s" in verdict.detail
        assert gpu.verdict.state == "healthy" and gpu.check().ok, n  # the last verdict stands
    (bin_dir / "hang").unlink()
    answer(bin_dir, "junk")
    await gpu.once()
    assert gpu.verdict.state == "unknown" and not gpu.check().ok  # 3 in a row: not ready, says so
    assert "3 in a row" in gpu.check().detail
    answer(bin_dir, "healthy-8")
    await gpu.once()
    assert gpu.check().ok and gpu.unknown_in_a_row == 0
    # no tool: auto checks nothing (no GPUs here); on says it is missing
    bare = {"PATH": str(tmp_path / "empty")}
    assert (await GpuCheck("auto", 1, bare).once()).state == "absent"
    on = GpuCheck("on", 1, bare)
    await on.once()
    assert not on.check().ok and "no nvidia-smi on PATH" in on.check().detail


async def test_a_tool_a_job_could_have_planted_is_never_run(tmp_path: Path) -> None:
    """A PATH directory any uid may write (an emptyDir the kubelet made 0777): the agent, with its
    powers, must not run what a job's user could put there."""
    bin_dir = fake_tool(tmp_path)
    answer(bin_dir, "healthy-8")
    bin_dir.chmod(0o777)
    gpu = GpuCheck("auto", 5, {"PATH": f"{bin_dir}:/usr/bin:/bin"})
    verdict = await gpu.once()
    assert verdict.state == "unknown" and "nvidia-smi not run" in verdict.detail, verdict
    assert "writable" in verdict.detail or "0777" in verdict.detail, verdict.detail
    assert not (bin_dir / "asked").exists()  # never run
    bin_dir.chmod(0o755)
    (bin_dir / "nvidia-smi").chmod(0o777)  # the tool itself writable by anyone
    assert "nvidia-smi not run" in (await gpu.once()).detail
    assert not (bin_dir / "asked").exists()
    (bin_dir / "nvidia-smi").chmod(0o755)
    assert (await gpu.once()).state == "healthy"  # the same tool, safe again, is run


@pytest.mark.releases("slurm26")
@pytest.mark.cluster(nodes=1)
async def test_a_gpu_fault_drains_the_node_clearing_undrains_and_an_admins_drain_stays(
    cluster: DevCluster, sockdir: Path
) -> None:
    bin_dir = fake_tool(sockdir)
    answer(bin_dir, "healthy-8")
    env = {**cluster.env, "PATH": f"{bin_dir}:{cluster.env.get('PATH', '/usr/bin:/bin')}"}
    settings = settings_for(cluster, sockdir, gpu_check="on", gpu_check_interval_seconds=0.2)
    events = RecordingEvents()
    agent = Agent(settings, env=env, events=events)
    client = cluster.client()
    async with running(agent, lambda: agent.last_tick is not None, "a first look"):
        await eventually(lambda: http_get(agent, "/readyz"), lambda r: r[0] == 200, what="ready")

        answer(bin_dir, "ecc-uncorrectable")
        _, body = await eventually(
            lambda: http_get(agent, "/readyz"), lambda r: r[0] == 503, what="not ready"
        )
        assert "GPU 3 (00000000:5D:00.0): 2 uncorrectable ECC errors" in body["checks"]["gpu_check"]["detail"]
        node = await cluster.wait_node("n1", lambda n: n.state.drain, what="n1 drained")
        assert node.reason is not None
        assert (
            node.reason.text
            == "slurm-sidecars: gpu check failed: GPU 3 (00000000:5D:00.0): 2 uncorrectable ECC errors"
        )
        # told once the drain's command has returned: after Slurm shows it
        await eventually(events.reasons, lambda r: "SlurmGpuCheckFailed" in r, what="the drain's Event")
        _, st = await http_get(agent, "/status")
        assert st["gpu_check"]["state"] == "faulty" and len(st["gpu_check"]["faults"]) == 2
        _, metrics = await http_get(agent, "/metrics")
        assert 'slurm_sidecars_worker_gpu_check{state="faulty"} 1.0' in metrics

        answer(bin_dir, "healthy-8")  # reset, the check passes: given back
        await cluster.wait_node("n1", lambda n: not n.state.drain, what="n1 undrained")
        await eventually(lambda: http_get(agent, "/readyz"), lambda r: r[0] == 200, what="ready again")
        await eventually(events.reasons, lambda r: "SlurmGpuCheckPassed" in r, what="the undrain's Event")

        # an admin's drain: the GPU fault adds nothing, and its clearing lifts nothing
        await client.drain(["n1"], "admin: reseat GPU 5")
        answer(bin_dir, "xid79-lost")
        await eventually(lambda: http_get(agent, "/readyz"), lambda r: r[0] == 503, what="not ready (Xid 79)")
        answer(bin_dir, "healthy-8")
        await eventually(lambda: http_get(agent, "/readyz"), lambda r: r[0] == 200, what="ready again")
        checks = agent.gpu.checked_at
        await eventually(
            lambda: agent.gpu.checked_at, lambda t: t is not None and checks is not None and t > checks + 0.5
        )
        node = await client.node("n1")
        assert node is not None and node.state.drain and node.reason is not None
        assert node.reason.text == "admin: reseat GPU 5"
        assert events.reasons().count("SlurmGpuCheckFailed") == 1


def test_an_agent_may_drain_and_give_back_its_own_node_for_its_gpu_check_only() -> None:
    agent = Caller("agent", node="n1", namespace="slurm", pod="w1")
    gpu = "slurm-sidecars: gpu check failed: GPU 3 (00000000:5D:00.0): 2 uncorrectable ECC errors"
    assert agent.reason_refusal("drain", gpu) is None and agent.reason_refusal("undrain", gpu) is None
    for theirs in ("admin: reseat GPU", "slurm-sidecars: health KernelDeadlock on kubernetes node k1"):
        assert agent.reason_refusal("undrain", theirs) is not None
        assert agent.reason_refusal("drain", theirs) is not None
    assert agent.refusal("POST", "/v1/nodes/{name}/drain", "n2") is not None  # its own node only


@pytest.mark.releases("slurm26")
@pytest.mark.cluster(nodes=1)
async def test_through_the_control_plane_the_agent_drains_and_gives_back_its_own_node(
    cluster: DevCluster, sockdir: Path, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    fake.add_pod("worker-n1", hostname="n1")
    identity = token_file(sockdir, fake.issue_token("worker-n1"))
    bin_dir = fake_tool(sockdir)
    answer(bin_dir, "remap-failed")
    env = {**cluster.env, "PATH": f"{bin_dir}:{cluster.env.get('PATH', '/usr/bin:/bin')}"}
    async with control_plane(cluster, kube_url=url) as cp:
        s = settings_for(
            cluster, sockdir, control_plane=cp.url, token_file=identity, gpu_check_interval_seconds=0.2
        )
        agent = Agent(s, env=env, events=RecordingEvents())
        async with running(agent, lambda: agent.last_tick is not None, "a first look"):
            node = await cluster.wait_node("n1", lambda n: n.state.drain, what="n1 drained")
            assert node.reason is not None
            assert (
                node.reason.text
                == "slurm-sidecars: gpu check failed: GPU 6 (00000000:BA:00.0): row remapping failed"
            )
            answer(bin_dir, "healthy-8")
            await cluster.wait_node("n1", lambda n: not n.state.drain, what="n1 undrained")
            assert agent.source.mode == "control-plane"
            assert "scontrol update" not in slurm_commands(agent)  # the control plane wrote both
            assert cp.sample("slurm_sidecars_api_refusals_total", identity="agent", status="403") == 0


async def test_a_driver_never_seen_is_unknown_and_one_that_went_away_is_a_fault(tmp_path: Path) -> None:
    bin_dir = fake_tool(tmp_path)
    gpu = GpuCheck("on", 5, {"PATH": f"{bin_dir}:/usr/bin:/bin"})
    answer(bin_dir, "no-driver")  # a node coming up while its driver is installed or rolled
    for _ in range(UNKNOWN_LIMIT + 1):
        verdict = await gpu.once()
        assert verdict.state == "unknown" and "no driver seen on this node yet" in verdict.detail
    assert gpu.verdict.state == "unknown" and not gpu.check().ok  # not ready after 3 in a row: says why
    answer(bin_dir, "healthy-8")
    assert (await gpu.once()).state == "healthy"
    answer(bin_dir, "no-driver")  # the driver was there and is gone: a fault, and stays one
    for _ in range(2):
        verdict = await gpu.once()
        assert verdict.state == "faulty" and verdict.faults == ("nvidia-smi cannot reach the NVIDIA driver",)


@pytest.mark.releases("slurm26")
@pytest.mark.cluster(nodes=1)
async def test_a_driver_roll_at_start_drains_nothing(cluster: DevCluster, sockdir: Path) -> None:
    bin_dir = fake_tool(sockdir)
    answer(bin_dir, "no-driver")
    env = {**cluster.env, "PATH": f"{bin_dir}:{cluster.env.get('PATH', '/usr/bin:/bin')}"}
    settings = settings_for(cluster, sockdir, gpu_check="on", gpu_check_interval_seconds=0.2)
    agent = Agent(settings, env=env, events=RecordingEvents())
    async with running(agent, lambda: agent.last_tick is not None, "a first look"):
        # one check past the limit: the agent has acted on (at least) UNKNOWN_LIMIT unknowns
        await eventually(lambda: agent.gpu.unknown_in_a_row > UNKNOWN_LIMIT, what="checks past the limit")
        _, body = await http_get(agent, "/readyz")
        assert "no driver seen on this node yet" in body["checks"]["gpu_check"]["detail"]
        assert not (await cluster.client().node("n1")).state.drain
        # once seen working, a driver that goes away is a fault: drained, with the reason
        answer(bin_dir, "healthy-8")
        await eventually(lambda: http_get(agent, "/readyz"), lambda r: r[0] == 200, what="ready")
        answer(bin_dir, "no-driver")
        node = await cluster.wait_node("n1", lambda n: n.state.drain, what="n1 drained")
        assert node.reason is not None
        assert (
            node.reason.text == "slurm-sidecars: gpu check failed: nvidia-smi cannot reach the NVIDIA driver"
        )
