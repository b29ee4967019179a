"""The fake API server counts every request by the API server's own verb and resource, a watch
from the moment it is opened: what the call-count tests and the kube_calls benchmark rest on."""

from __future__ import annotations

import asyncio

from sidecars.kube import KubeClient, LeaseRecord
from sidecars.kube.podstatus import patch_pod_conditions
from sidecars.runtime.waits import within
from tests.fakekube import FakeKube
from tests.fakekube.server import verb_and_resource


def test_paths_are_named_as_the_api_server_names_them() -> None:
    assert verb_and_resource("GET", "/api/v1/namespaces/slurm/pods", False) == ("list", "pods")
    assert verb_and_resource("GET", "/api/v1/namespaces/slurm/pods", True) == ("watch", "pods")
    assert verb_and_resource("GET", "/api/v1/namespaces/slurm/pods/w1", False) == ("get", "pods")
    assert verb_and_resource("PATCH", "/api/v1/namespaces/slurm/pods/w1/status", False) == (
        "patch",
        "pods/status",
    )
    assert verb_and_resource("GET", "/api/v1/nodes", True) == ("watch", "nodes")
    assert verb_and_resource("GET", "/api/v1/nodes/k1", False) == ("get", "nodes")
    assert verb_and_resource("PUT", "/apis/coordination.k8s.io/v1/namespaces/slurm/leases/cp", False) == (
        "update",
        "leases",
    )
    assert verb_and_resource("POST", "/api/v1/namespaces/slurm/events", False) == ("create", "events")
    assert verb_and_resource("DELETE", "/api/v1/namespaces/slurm/pods/w1", False) == ("delete", "pods")


async def test_every_call_is_counted_and_an_open_watch_when_opened(
    fake: tuple[FakeKube, str], kube: KubeClient, new_lease: LeaseRecord
) -> None:
    f, _ = fake
    f.add_pod("w1", hostname="n1")
    f.add_node("k1")
    _, rv = await kube.list_pods("slurm", "app=slurmd")
    await kube.list_nodes()
    await kube.annotate_pod("slurm", "w1", {"a": "1"})
    await patch_pod_conditions(kube, "slurm", "w1", [{"type": "SlurmNodeReady", "status": "True"}])
    await kube.create_event("slurm", {"kind": "Pod", "name": "w1"}, "Test", "a test")
    lease = await kube.create_lease(new_lease)
    await kube.update_lease(lease)
    assert await kube.get_pod("slurm", "w1") is not None
    before = len(f.requests)
    opened = asyncio.Event()

    async def watch() -> None:
        async for _ in kube.watch_pods("slurm", "app=slurmd", rv, timeout_seconds=30):
            opened.set()

    task = asyncio.create_task(watch())
    try:
        await within(opened.wait(), 10)  # the patches above are replayed to it
        assert f.calls(before) == {("watch", "pods"): 1}  # counted while it is still open
        assert f.requests[before].status == 0
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert f.calls() == {
        ("list", "pods"): 1,
        ("list", "nodes"): 1,
        ("patch", "pods"): 1,
        ("patch", "pods/status"): 1,
        ("create", "events"): 1,
        ("create", "leases"): 1,
        ("update", "leases"): 1,
        ("get", "pods"): 1,
        ("watch", "pods"): 1,
    }
    assert [(r.verb, r.resource) for r in f.mutating()] == [
        ("patch", "pods"),
        ("patch", "pods/status"),
        ("create", "events"),
        ("create", "leases"),
        ("update", "leases"),
    ]
    assert not f.mutating(before)
