"""Fencing: a leader frozen past its Lease (SIGSTOP: a long pause, a stalled VM) writes nothing once
it wakes, after another replica took over: two real control-plane processes against the fake API
server, whose log of requests says who sent each write. And a replica in a cluster whose service
account it cannot read exits 2 instead of leading alone."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client import CollectorRegistry

from sidecars.controlplane.leader import LeaderElector
from sidecars.controlplane.reconcile.busy_label import LABEL
from sidecars.devcluster import DevCluster, free_port
from sidecars.kube import KubeClient, KubeError
from sidecars.kube.client import KubeRetry
from sidecars.runtime.waits import within
from sidecars.slurm import SlurmClient, SlurmFenced, SlurmMetrics
from tests.controlplane.conftest import control_plane
from tests.fakekube import FakeKube, configuration, write_kubeconfig
from tests.helpers import control_plane_process, eventually

CLI = str(Path(sys.executable).parent / "slurm-sidecars")
TOKEN = "api-token-for-agents-3c8e1f0a7b5d9264"
VIEWER = "viewer-token-for-fencing-6e2a9d4c1f7b0835"
LEASE_SECONDS = 3


class Replica:
    def __init__(self, name: str, proc: asyncio.subprocess.Process, port: int, kube_token: str) -> None:
        self.name, self.proc, self.port, self.kube_token = name, proc, port, kube_token

    async def status(self) -> dict[str, Any]:
        try:
            async with (
                aiohttp.ClientSession() as s,
                s.get(
                    f"http://127.0.0.1:{self.port}/status",
                    headers={"Authorization": f"Bearer {VIEWER}"},
                    timeout=aiohttp.ClientTimeout(total=5),
                ) as r,
            ):
                body: dict[str, Any] = await r.json()
                return body
        except (aiohttp.ClientError, TimeoutError):
            return {}


@contextlib.asynccontextmanager
async def replica(
    cluster: DevCluster, tmp_path: Path, kube_url: str, name: str, kube_token: str
) -> AsyncIterator[Replica]:
    """A control-plane process `name`, talking to the fake API server with its own token."""
    (tmp_path / "token").write_text(TOKEN + "\n")
    (tmp_path / "viewer").write_text(VIEWER + "\n")
    kubeconfig = write_kubeconfig(tmp_path / f"kubeconfig-{name}", kube_url, kube_token)
    port = free_port()
    env = {
        **cluster.env,
        "SIDECARS_TOKEN_FILE": str(tmp_path / "token"),
        "SIDECARS_VIEWER_TOKEN_FILE": str(tmp_path / "viewer"),
        "SIDECARS_KUBECONFIG": str(kubeconfig),
        "SIDECARS_IDENTITY": name,
        "SIDECARS_NAMESPACE": "slurm",
        "SIDECARS_WORKER_SELECTOR": "app=slurmd",
        "SIDECARS_LEASE_SECONDS": str(LEASE_SECONDS),
        "SIDECARS_RENEW_SECONDS": "0.5",
        "SIDECARS_INTERVAL_SECONDS": "0.3",
        "SIDECARS_FAST_INTERVAL_SECONDS": "0.2",
        "SIDECARS_BUSY_RELEASE_SECONDS": "1",
        "SIDECARS_CONDITION_SETTLE_SECONDS": "0",
        "SIDECARS_DELETION_COST_QPS": "50",
    }
    env.pop("KUBERNETES_SERVICE_HOST", None)
    proc = await control_plane_process(env, port)
    try:
        yield Replica(name, proc, port, kube_token)
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGCONT)
            proc.send_signal(signal.SIGTERM)
        assert await within(proc.wait(), 20) == 0
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
            await proc.wait()


def holder(fake: FakeKube) -> str | None:
    lease = next(iter(fake.leases.values()), None)
    return None if lease is None else lease["spec"].get("holderIdentity")


def busy(fake: FakeKube, pod: str) -> bool:
    return fake.pods[("slurm", pod)]["metadata"].get("labels", {}).get(LABEL) == "true"


def taken_over(fake: FakeKube, token: str, identity: str, since: int) -> int | None:
    """The index of the Lease write that made `identity` the holder (from request `since` on)."""
    for i, r in enumerate(fake.requests[since:], start=since):
        body = r.body if isinstance(r.body, dict) else {}
        spec = body.get("spec") or {}
        ours = r.token == token and r.resource == "leases" and r.status in {200, 201}
        if ours and spec.get("holderIdentity") == identity:
            return i
    return None


# the fence (the Lease, the write deadline) is ours; Slurm only receives the writes it lets through
@pytest.mark.releases("slurm24")
@pytest.mark.cluster(nodes=2)
async def test_a_frozen_leader_writes_nothing_after_the_takeover(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str], tmp_path: Path
) -> None:
    fake, url = fake_kube
    fake.tokens |= {"tok-a", "tok-b"}
    fake.bookmark_seconds = 0.5
    for node in ("n1", "n2"):
        fake.add_pod(f"w-{node}", hostname=node, labels={"app": "slurmd"})
    async with replica(cluster, tmp_path, url, "cp-a", "tok-a") as a:
        await eventually(lambda: holder(fake), lambda h: h == "cp-a", within=30, what="cp-a leading")
        async with replica(cluster, tmp_path, url, "cp-b", "tok-b") as b:
            await eventually(
                b.status, lambda s: s.get("lease_holder") == "cp-a", within=30, what="cp-b follows"
            )
            first = await cluster.sbatch("-t", "2", "-w", "n1", wrap="sleep 120")
            await cluster.wait_job(first, "RUNNING")
            # the leader writes: its busy label protects the pod running the job
            await eventually(lambda: busy(fake, "w-n1"), within=30, what="cp-a labels w-n1 busy")
            assert any(r.resource == "pods" for r in fake.writes_by("tok-a"))

            frozen = len(fake.requests)
            a.proc.send_signal(signal.SIGSTOP)
            second = await cluster.sbatch("-t", "2", "-w", "n2", wrap="sleep 120")
            await cluster.wait_job(second, "RUNNING")
            takeover = await eventually(
                lambda: taken_over(fake, "tok-b", "cp-b", frozen),
                lambda i: i is not None,
                within=LEASE_SECONDS * 5,
                what="cp-b takes the Lease over",
            )
            assert takeover is not None
            await eventually(lambda: busy(fake, "w-n2"), within=30, what="cp-b labels w-n2 busy")

            # the old leader wakes: it has a job to protect in its view, a pod cache and a Lease
            # record that are out of date, and loops that were in the middle of their work
            await cluster.scancel(first)
            a.proc.send_signal(signal.SIGCONT)
            woke = len(fake.requests)
            await eventually(
                a.status,
                lambda s: s.get("leader") is False and s.get("lease_holder") == "cp-b",
                within=30,
                what="cp-a sees it lost the Lease",
            )
            # and it has read the fleet since (the job ended: a label to take off, were it leading)
            await eventually(a.status, lambda s: s.get("version", 0) > 0, what="cp-a reading")
            await eventually(lambda: not busy(fake, "w-n1"), within=30, what="cp-b takes w-n1's label off")
            assert fake.calls(woke)[("get", "leases")] >= 1, "cp-a never looked at the Lease again"
            # no write of the old identity after the takeover; the one exception is a Lease update
            # already past its last check when the process froze (on the wire on waking), which the
            # API server refuses on its stale resourceVersion: the Lease's own fence (docs/faults.md)
            late = [
                (r.method, r.path, r.status)
                for r in fake.writes_by("tok-a", takeover)
                if not (r.resource == "leases" and r.status == 409)
            ]
            assert late == [], late
            assert holder(fake) == "cp-b"
            await cluster.scancel(second)


async def test_in_a_cluster_without_its_config_the_control_plane_exits_2(tmp_path: Path) -> None:
    (tmp_path / "token").write_text(TOKEN + "\n")
    (tmp_path / "viewer").write_text(VIEWER + "\n")
    env = {
        **os.environ,
        "KUBERNETES_SERVICE_HOST": "10.0.0.1",  # in a pod, but no service account mounted here
        "KUBERNETES_SERVICE_PORT": "443",
        "KUBECONFIG": str(tmp_path / "none"),
        "SIDECARS_TOKEN_FILE": str(tmp_path / "token"),
        "SIDECARS_VIEWER_TOKEN_FILE": str(tmp_path / "viewer"),
    }
    proc = await asyncio.create_subprocess_exec(
        CLI,
        "control-plane",
        "--http",
        f"127.0.0.1:{free_port()}",
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        _, err = await within(proc.communicate(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 2, err
    assert err.decode().count("\n") == 1 and "KUBERNETES_SERVICE_HOST" in err.decode(), err


async def test_the_write_deadline_runs_from_the_renewals_start(fake_kube: tuple[FakeKube, str]) -> None:
    """A renewal answered late extends nothing: the other replicas' clocks started when the API
    server wrote it, which may be as early as the request's arrival. And a write past the deadline
    is not sent at all."""
    fake, url = fake_kube
    fake.add_pod("w-n1", hostname="n1", labels={"app": "slurmd"})
    # the right deadline is 4 s from the request, the wrong one 6 s (from the late answer): a loaded
    # machine's late timers get a second of room between them
    lease, late = 6.0, 2.0
    retry = KubeRetry(attempts=2, initial_wait=0.01, max_wait=0.02, call_seconds=10)
    async with KubeClient(configuration(url), retry=retry) as kube:
        lead = LeaderElector(kube, "slurm", "cp", "cp-a", lease_seconds=lease, renew_seconds=0.5)
        kube.fence = lambda: lead.is_leader
        stop = asyncio.Event()
        task = asyncio.create_task(lead.run(stop), name="leader")
        try:
            await eventually(lambda: lead.is_leader, what="leading")
            await kube.annotate_pod("slurm", "w-n1", {"a": "1"})  # a leader's write goes out
            # the next renewal is answered late, and every one after it fails
            fake.stall("PUT", "/leases", late)
            puts = len(fake.answered("PUT", "/leases"))
            sent_at = None
            while lead.is_leader:
                if sent_at is None and len(fake.answered("PUT", "/leases")) > puts:
                    sent_at = time.monotonic()  # it arrived: the server may write it from now on
                    fake.inject("PUT", "/leases", 500, times=1000)
                    fake.inject("GET", "/leases", 500, times=1000)
                await asyncio.sleep(0.02)
            lapsed = time.monotonic()
            assert sent_at is not None
            # 2/3 of the Lease from the request, not from its late answer (that would be 6 s)
            assert lapsed - sent_at <= lease * 2 / 3 + 1.0, lapsed - sent_at
            before = len(fake.requests)
            with pytest.raises(KubeError):
                await kube.annotate_pod("slurm", "w-n1", {"a": "2"})
            assert fake.writes_by(fake.token, before) == []
        finally:
            stop.set()
            await within(task, 10)


async def test_a_slurm_write_past_the_fence_is_never_run() -> None:
    registry = CollectorRegistry()
    client = SlurmClient(metrics=SlurmMetrics(registry), fence=lambda: False)  # the Lease lost
    for write in (
        client.drain(["n1"], "slurm-sidecars: x"),
        client.undrain(["n1"]),
        client.delete_reservation("maint-1"),
        client.set_topology(["n1"], "default:s1"),
    ):
        with pytest.raises(SlurmFenced):
            await write
    assert registry.get_sample_value("slurm_sidecars_slurm_commands_total", {"command": "scontrol"}) is None


async def test_a_write_is_fenced_again_right_before_it_is_sent(fake_kube: tuple[FakeKube, str]) -> None:
    # the Lease held when the write starts, lost by the time its connection is ready (a process
    # frozen in between): the second ask stops it
    fake, url = fake_kube
    fake.add_pod("w-n1", hostname="n1", labels={"app": "slurmd"})
    asks: list[bool] = []

    def fence() -> bool:
        asks.append(not asks)
        return asks[-1]

    async with KubeClient(configuration(url), fence=fence) as kube:
        with pytest.raises(KubeError):
            await kube.annotate_pod("slurm", "w-n1", {"a": "1"})
    assert asks == [True, False]
    assert fake.writes_by(fake.token) == []


@pytest.mark.releases("slurm24")  # the shutdown's order is ours, not Slurm's
@pytest.mark.cluster(nodes=1)
async def test_shutdown_stops_the_writers_before_it_hands_the_lease_back(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    fake.add_pod("w-n1", hostname="n1", labels={"app": "slurmd"})
    async with control_plane(cluster, url) as cp:
        await eventually(cp.leading, what="leading")
        kube = cp.plane.kube
        assert kube is not None

        async def writer() -> None:  # a writer busy to the end, as a loop in mid-cycle is
            n = 0
            while True:
                n += 1
                with contextlib.suppress(KubeError):
                    await kube.annotate_pod("slurm", "w-n1", {"n": str(n)})
                await asyncio.sleep(0.01)

        cp.plane.tasks.start("busy_writer", writer())
        await eventually(lambda: len(fake.writes_by(fake.token)) > 20, what="writing")
    released = [
        i
        for i, r in enumerate(fake.requests)
        if r.resource == "leases" and isinstance(r.body, dict) and not r.body["spec"].get("holderIdentity")
    ]
    assert released, "the Lease was never handed back"
    after = [r for r in fake.requests[released[0] :] if r.resource == "pods" and r.verb == "patch"]
    assert after == [], f"{len(after)} writes after the Lease was handed back"
