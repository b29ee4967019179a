"""Each identity does only its own work: a worker agent (its pod's projected ServiceAccount token,
reviewed by the API server) acts on its own node only, the viewer reads, the operator does the rest.

Real Slurm behind the control plane; the fake API server answers TokenReview as a real one does.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from sidecars.devcluster import DevCluster
from tests.controlplane.conftest import TOKEN, VIEWER, Running, control_plane
from tests.fakekube import FakeKube
from tests.helpers import eventually

# who may do what is ours (the HTTP layer, TokenReview); the drains and windows it lets through are
# tested on every release in fleet/test_drains.py and changes/test_maintenance.py
pytestmark = [pytest.mark.cluster(nodes=3), pytest.mark.releases("slurm26")]
REASON = {"reason": "slurm-sidecars: identity test"}  # an operator's
OWN = {"reason": "slurm-sidecars: pod slurm/worker-1 terminating: scale-in"}  # worker-1's agent's
WINDOW = {"name": "w1", "nodes": "n[1-3]", "start": "now", "duration": "1h", "reason": "identity test"}


async def call(cp: Running, method: str, path: str, token: str | None, body: Any = None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with (
        aiohttp.ClientSession() as s,
        s.request(method, cp.url + path, json=body, headers=headers) as r,
    ):
        return r.status, await r.text()


def report(pod: str, registered: bool = False) -> dict[str, Any]:
    return {"pod_namespace": "slurm", "pod_name": pod, "registered": registered, "detail": "test"}


async def test_an_agent_acts_on_its_own_node_only(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    fake.add_workers(3)
    agent = fake.issue_token("worker-1")
    async with control_plane(cluster, kube_url=url, recycle={"grace_seconds": 3600}) as cp:
        await eventually(cp.leading, what="leader with pods listed")
        # its own node: read, drain, undrain, report
        assert (await call(cp, "GET", "/v1/nodes/n1", agent))[0] == 200
        assert (await call(cp, "GET", "/v1/openapi.json", agent))[0] == 200
        assert (await call(cp, "POST", "/v1/nodes/n1/drain", agent, OWN))[0] == 202
        await cluster.wait_node("n1", lambda n: n.state.drain, what="n1 drained by its own agent")
        assert (await call(cp, "POST", "/v1/nodes/n1/undrain", agent, OWN))[0] == 202
        await cluster.wait_node("n1", lambda n: not n.state.drain, what="n1 undrained by its own agent")
        assert (await call(cp, "POST", "/v1/nodes/n1/report", agent, report("worker-1", registered=True)))[
            0
        ] == 204
        # anything else: refused, and nothing happens
        refused = [
            ("GET", "/v1/nodes", None),
            ("GET", "/v1/nodes/n2", None),
            ("GET", "/v1/scale-in-order", None),
            ("GET", "/v1/maintenance", None),
            ("POST", "/v1/nodes/n2/drain", OWN),
            ("POST", "/v1/nodes/n2/undrain", OWN),
            ("POST", "/v1/nodes/n2/report", report("worker-2")),
            # its own node, but not for its pod's termination: an operator's or a window's drain
            ("POST", "/v1/nodes/n1/drain", REASON),
            ("POST", "/v1/nodes/n1/drain", {}),
            ("POST", "/v1/nodes/n1/drain", {"reason": "slurm-sidecars: maintenance w1"}),
            ("POST", "/v1/nodes/n1/drain", {"reason": "slurm-sidecars: pod slurm/worker-2 terminating"}),
            ("POST", "/v1/nodes/n1/undrain", REASON),
            ("POST", "/v1/nodes/n1/undrain", {"reason": "slurm-sidecars: maintenance w1"}),
            ("POST", "/v1/nodes/n1/report", report("worker-2")),  # its own node, another's pod
            ("POST", "/v1/nodes/n1/report", report("ghost")),
            ("POST", "/v1/maintenance", WINDOW),
            ("DELETE", "/v1/maintenance/w1", None),
            ("POST", "/v1/upgrade", {"revision": "new", "budget": "1"}),
            ("POST", "/v1/upgrade/pause", {}),
            ("POST", "/v1/upgrade/resume", {}),
        ]
        for method, path, body in refused:
            status, text = await call(cp, method, path, agent, body)
            assert status == 403, (method, path, status, text)
            assert "own" in text or "operator" in text, text
        assert cp.sample("slurm_sidecars_api_refusals_total", identity="agent", status="403") == len(refused)
        assert cp.plane.k8s.recycler is not None
        assert ("slurm", "worker-2") not in cp.plane.k8s.recycler.reports
        assert ("slurm", "ghost") not in cp.plane.k8s.recycler.reports
        nodes = {n.name: n for n in await cluster.client().nodes()}
        assert not any(n.state.drain for n in nodes.values())
        assert (await call(cp, "GET", "/v1/maintenance", TOKEN))[1] == '{"windows": []}'
        assert not fake.config_maps  # no upgrade plan written


async def test_a_token_not_bound_to_a_current_worker_pod_is_refused(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    fake.add_workers(3)
    fake.add_pod("login-0", hostname="n3", labels={"app": "login"})  # not a worker (selector app=slurmd)
    other_audience = fake.issue_token("worker-1", audiences=("https://kubernetes.default.svc",))
    not_a_worker = fake.issue_token("login-0")
    other_namespace = fake.issue_token("worker-2")
    fake.sa_tokens[other_namespace]["namespace"] = "elsewhere"  # a pod of that name in another namespace
    fake.add_pod("worker-2", namespace="elsewhere", hostname="n2")
    fake.sa_tokens[other_namespace]["pod_uid"] = fake.pods[("elsewhere", "worker-2")]["metadata"]["uid"]
    before_recreate = fake.issue_token("worker-3")
    async with control_plane(cluster, kube_url=url) as cp:
        await eventually(cp.leading, what="leader with pods listed")
        for token in (other_audience, not_a_worker, other_namespace, "a.b.c", "not-a-jwt", ""):
            # the drain worker-1's agent may send: refused here for who sends it, not for what
            for method, path, body in (("GET", "/v1/nodes/n1", None), ("POST", "/v1/nodes/n1/drain", OWN)):
                status, text = await call(cp, method, path, token, body)
                assert status == 401, (token, path, status, text)
        assert (await call(cp, "GET", "/v1/nodes/n3", before_recreate))[0] == 200
        # the pod is deleted and made again under its name (a StatefulSet's way): the old token is refused
        fake.remove_pod("slurm", "worker-3")
        fake.add_pod("worker-3", hostname="n3")
        await eventually(
            lambda: call(cp, "GET", "/v1/nodes/n3", before_recreate),
            lambda r: r[0] == 401,
            what="the earlier incarnation's token refused",
        )
        own = {"reason": "slurm-sidecars: pod slurm/worker-3 terminating"}
        assert (await call(cp, "POST", "/v1/nodes/n3/drain", before_recreate, own))[0] == 401
        fresh = fake.issue_token("worker-3")
        assert (await call(cp, "GET", "/v1/nodes/n3", fresh))[0] == 200
        nodes = {n.name: n for n in await cluster.client().nodes()}
        assert not any(n.state.drain for n in nodes.values())


async def test_the_viewer_reads_and_writes_nothing_and_the_operator_does_all(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    fake.add_workers(3)
    async with control_plane(cluster, kube_url=url) as cp:
        await eventually(cp.leading, what="leader with pods listed")
        for path in ("/v1/nodes", "/v1/nodes/n2", "/v1/scale-in-order", "/v1/maintenance", "/v1/upgrade"):
            status, text = await call(cp, "GET", path, VIEWER)
            assert status == 200, (path, status, text)
        for method, path, body in (
            ("POST", "/v1/nodes/n1/drain", REASON),
            ("POST", "/v1/nodes/n1/undrain", REASON),
            ("POST", "/v1/nodes/n1/report", report("worker-1")),
            ("POST", "/v1/maintenance", WINDOW),
            ("DELETE", "/v1/maintenance/w1", None),
            ("POST", "/v1/upgrade", {"revision": "new", "budget": "1"}),
        ):
            status, text = await call(cp, method, path, VIEWER, body)
            assert status == 403 and "read-only" in text, (method, path, status, text)
        assert (await call(cp, "GET", "/v1/nodes", None))[0] == 401
        # the daemon's /status names nodes, pods and the Lease holder: not for anyone on the network
        assert (await call(cp, "GET", "/status", None))[0] == 401
        assert (await call(cp, "GET", "/status", VIEWER))[0] == 200
        assert (await call(cp, "GET", "/livez", None))[0] == 200  # the probes stay open
        assert (await call(cp, "GET", "/v1/nodes", "wrong"))[0] == 401
        # the page opens with the viewer token, not with the operator's
        async with aiohttp.ClientSession() as s:
            async with s.post(cp.url + "/ui/login", json={"token": TOKEN}) as r:
                assert r.status == 401
            async with s.post(cp.url + "/ui/login", json={"token": VIEWER}) as r:
                assert r.status == 204
        # the operator: another node's drain
        assert (await call(cp, "POST", "/v1/nodes/n2/drain", TOKEN, REASON))[0] == 202
        await cluster.wait_node("n2", lambda n: n.state.drain, what="n2 drained by the operator")
        # the operator is let through to the handlers (no window w1 to delete, no upgrade to pause)
        assert (await call(cp, "DELETE", "/v1/maintenance/w1", TOKEN))[0] == 404
        assert (await call(cp, "POST", "/v1/upgrade/pause", TOKEN, {}))[0] not in (401, 403)


async def test_an_agent_is_told_to_retry_while_the_api_server_cannot_review(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    fake.add_workers(3)
    agent = fake.issue_token("worker-1")
    async with control_plane(cluster, kube_url=url) as cp:
        await eventually(cp.leading, what="leader with pods listed")
        fake.inject("POST", "/tokenreviews", 500, times=1000)
        status, text = await call(cp, "GET", "/v1/nodes/n1", agent)
        assert status == 503 and "cannot tell who is calling" in text, text
        fake.faults.clear()
        assert (await call(cp, "GET", "/v1/nodes/n1", agent))[0] == 200
