"""kubernetes-asyncio against the fake API server, exactly as production drives it."""

from __future__ import annotations

import asyncio

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from sidecars.kube import KubeClient, KubeError, KubeEventSink, KubeRetry, LeaseConflict, LeaseRecord
from sidecars.runtime.waits import within
from tests.fakekube import FakeKube, configuration


async def test_list_get_and_watch_pods_from_a_resource_version(
    fake: tuple[FakeKube, str], kube: KubeClient
) -> None:
    f, _ = fake
    f.add_pod("w1", hostname="n1")
    f.add_pod("other", labels={"app": "web"})
    pods, rv = await kube.list_pods("slurm", "app=slurmd")
    assert [(p.name, p.hostname, p.ready, p.owner_kind) for p in pods] == [("w1", "n1", True, "ReplicaSet")]
    seen: list[tuple[str, str, bool]] = []

    async def consume() -> None:
        async for kind, pod in kube.watch_pods("slurm", "app=slurmd", rv, timeout_seconds=5):
            seen.append((kind, pod.name, pod.ready))
            if kind == "DELETED":
                return

    task = asyncio.create_task(consume())
    f.add_pod("w2", hostname="n2")
    f.set_ready("w1", False)
    f.add_pod("web2", labels={"app": "web"})
    await asyncio.sleep(0.05)
    assert (await kube.get_pod("slurm", "w2")) is not None
    assert await kube.delete_pod("slurm", "w2")
    await within(task, 5)
    assert seen == [("ADDED", "w2", True), ("MODIFIED", "w1", False), ("DELETED", "w2", True)]
    assert await kube.get_pod("slurm", "w2") is None
    assert not await kube.delete_pod("slurm", "w2")


async def test_one_node_model_carries_annotations_and_schedulability_through_list_and_watch(
    fake: tuple[FakeKube, str], kube: KubeClient
) -> None:
    """Maintenance windows (annotations) and cordon sync (unschedulable, taints) read one model, so
    one list + watch serves both."""
    f, _ = fake
    f.add_node("k1", annotations={"slurm-sidecars.io/maintenance": "2030-01-01T00:00:00Z/1h"})
    f.add_node("k2")
    nodes, rv = await kube.list_nodes()
    by_name = {n.name: n for n in nodes}
    assert by_name["k1"].annotations == {"slurm-sidecars.io/maintenance": "2030-01-01T00:00:00Z/1h"}
    assert not by_name["k1"].unschedulable and by_name["k1"].taints == () and by_name["k1"].resource_version
    seen: list[tuple[str, str, bool, tuple[tuple[str, str], ...], bool]] = []

    async def consume() -> None:
        async for kind, node in kube.watch_nodes(rv, timeout_seconds=5):
            seen.append((kind, node.name, node.unschedulable, node.taints, "x" in node.annotations))
            if len(seen) == 3:
                return

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.05)
    f.set_node_spec("k2", unschedulable=True)
    f.set_node_spec("k1", taints=[{"key": "example.com/gpu", "value": "bad", "effect": "NoExecute"}])
    f.annotate_node("k2", {"x": "1"})
    await within(task, 5)
    taint = (("example.com/gpu", "NoExecute"),)
    assert seen == [
        ("MODIFIED", "k2", True, (), False),
        ("MODIFIED", "k1", False, taint, False),
        ("MODIFIED", "k2", True, (), True),
    ]
    k1 = next(n for n in (await kube.list_nodes())[0] if n.name == "k1")
    assert k1.cordoned(frozenset({"example.com/gpu"})) and not k1.cordoned(frozenset({"other"}))


async def test_watch_from_an_expired_version_raises_410(fake: tuple[FakeKube, str], kube: KubeClient) -> None:
    f, _ = fake
    f.min_watch_rv = 1000
    with pytest.raises(KubeError) as err:
        async for _ in kube.watch_pods("slurm", "", "5", timeout_seconds=2):
            pass
    assert err.value.status == 410 and err.value.reason  # the edge's own error, with the server's reason


async def test_annotation_patch_is_a_strategic_merge_and_retries_409_429_500(
    fake: tuple[FakeKube, str], kube: KubeClient
) -> None:
    f, _ = fake
    f.add_pod("w1")
    for status in (409, 429, 500):
        f.inject("PATCH", "/pods/w1", status)
    pod = await kube.annotate_pod("slurm", "w1", {"controller.kubernetes.io/pod-deletion-cost": "3"})
    assert pod.annotations["controller.kubernetes.io/pod-deletion-cost"] == "3"
    answers = [(r.status, r.content_type) for r in f.answered("PATCH", "/pods/w1")]
    assert answers == [
        (409, "application/strategic-merge-patch+json"),
        (429, "application/strategic-merge-patch+json"),
        (500, "application/strategic-merge-patch+json"),
        (200, "application/strategic-merge-patch+json"),
    ]
    pod = await kube.annotate_pod("slurm", "w1", {"controller.kubernetes.io/pod-deletion-cost": None})
    assert "controller.kubernetes.io/pod-deletion-cost" not in pod.annotations


async def test_label_patch_merges_keeps_other_labels_and_removes_with_none(
    fake: tuple[FakeKube, str], kube: KubeClient
) -> None:
    f, _ = fake
    f.add_pod("w1", labels={"app": "slurmd"})
    f.inject("PATCH", "/pods/w1", 409)
    pod = await kube.label_pod("slurm", "w1", {"slurm-sidecars.io/busy": "true"})
    assert pod.labels == {"app": "slurmd", "slurm-sidecars.io/busy": "true"}
    assert [r.status for r in f.answered("PATCH", "/pods/w1")] == [409, 200]
    assert f.answered("PATCH", "/pods/w1")[-1].body == {
        "metadata": {"labels": {"slurm-sidecars.io/busy": "true"}}
    }
    pod = await kube.label_pod("slurm", "w1", {"slurm-sidecars.io/busy": None})
    assert pod.labels == {"app": "slurmd"}
    assert f.pods[("slurm", "w1")]["metadata"]["labels"] == {"app": "slurmd"}


async def test_retries_are_bounded_and_permanent_errors_are_not_retried(fake: tuple[FakeKube, str]) -> None:
    f, url = fake
    f.add_pod("w1")
    async with KubeClient(
        configuration(url), retry=KubeRetry(attempts=3, initial_wait=0.01, max_wait=0.02)
    ) as k:
        f.inject("GET", "/pods/w1", 503, times=10)
        with pytest.raises(KubeError) as err:
            await k.get_pod("slurm", "w1")
        assert err.value.status == 503
        assert len(f.answered("GET", "/pods/w1")) == 3
        f.faults.clear()
        f.inject("DELETE", "/pods/w1", 403)
        with pytest.raises(KubeError):
            await k.delete_pod("slurm", "w1")
        assert len(f.answered("DELETE", "/pods/w1")) == 1


async def test_a_stalled_request_is_cut_off_and_retried_and_a_stalled_server_is_an_error(
    fake: tuple[FakeKube, str],
) -> None:
    f, url = fake
    f.add_pod("w1")
    retry = KubeRetry(attempts=2, initial_wait=0.01, max_wait=0.02, call_seconds=0.3)
    async with KubeClient(configuration(url), retry=retry) as k:
        f.stall("GET", "/pods/w1", 1.0)  # the first answer comes too late: the second attempt has it
        pod = await k.get_pod("slurm", "w1")
        assert pod is not None and pod.name == "w1"
        assert len(f.answered("GET", "/pods/w1")) == 2
        # every attempt stalls: bounded, then an error. Stalls of 5 s: waited out, the two would take
        # 10 s; cut off, about 0.6 s, and a loaded machine's late timers get room below 3 s
        f.stall("GET", "/pods/w1", 5.0, times=2)
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(TimeoutError):
            await k.get_pod("slurm", "w1")
        assert loop.time() - started < 3.0


async def test_delete_with_a_uid_precondition_spares_a_replacement(
    fake: tuple[FakeKube, str], kube: KubeClient
) -> None:
    f, _ = fake
    f.add_pod("w1")
    with pytest.raises(KubeError) as err:
        await kube.delete_pod("slurm", "w1", uid="not-this-one")
    assert err.value.status == 409
    pod = await kube.get_pod("slurm", "w1")
    assert pod is not None and await kube.delete_pod("slurm", "w1", uid=pod.uid)


async def test_event_sink_writes_events_and_survives_api_failure(
    fake: tuple[FakeKube, str], kube: KubeClient
) -> None:
    f, _ = fake
    sink = KubeEventSink(kube, "slurm", {"kind": "Pod", "name": "ctl-0", "uid": "u1"}, component="cp")
    f.inject("POST", "/events", 500)
    await sink.emit("WorkerRecycled", "pod w1 deleted", "Warning")
    assert [(e["reason"], e["type"], e["involvedObject"]["name"]) for e in f.events] == [
        ("WorkerRecycled", "Warning", "ctl-0")
    ]
    f.inject("POST", "/events", 403, times=5)
    await sink.emit("X", "y")  # logged, not raised


async def test_lease_create_update_and_conflicts(
    fake: tuple[FakeKube, str], kube: KubeClient, new_lease: LeaseRecord
) -> None:
    rec, now = new_lease, new_lease.renew_time
    assert await kube.get_lease("slurm", "cp") is None
    created = await kube.create_lease(rec)
    with pytest.raises(LeaseConflict):
        await kube.create_lease(rec)
    got = await kube.get_lease("slurm", "cp")
    assert got is not None and got.holder == "a" and got.renew_time is not None
    assert abs((got.renew_time - now).total_seconds()) < 0.001
    renewed = await kube.update_lease(got)
    with pytest.raises(LeaseConflict):  # written with the version read before the renewal
        await kube.update_lease(created)
    assert int(renewed.resource_version) > int(created.resource_version)


async def test_fake_speaks_merge_patch_and_refuses_json_patch(
    fake: tuple[FakeKube, str], kube: KubeClient
) -> None:
    f, _ = fake
    f.add_pod("w1")
    await kube.core.patch_namespaced_pod(
        "w1",
        "slurm",
        {"metadata": {"labels": {"x": "1", "app": None}}},
        _content_type="application/merge-patch+json",
    )
    assert f.pods[("slurm", "w1")]["metadata"]["labels"] == {"x": "1"}
    with pytest.raises(ApiException) as err:
        await kube.core.patch_namespaced_pod("w1", "slurm", [{"op": "remove", "path": "/metadata/labels/x"}])
    assert err.value.status == 415
    assert [r.content_type for r in f.answered("PATCH", "/pods/w1")] == [
        "application/merge-patch+json",
        "application/json-patch+json",
    ]


async def test_a_token_review_names_the_pod_a_token_is_bound_to(
    fake: tuple[FakeKube, str], kube: KubeClient
) -> None:
    f, _ = fake
    pod = f.add_pod("w1", hostname="n1", node_name="node-a")
    token = f.issue_token("w1", service_account="worker", audiences=("slurm-sidecars",))
    review = await kube.review_token(token, ("slurm-sidecars",))
    assert review.authenticated and review.username == "system:serviceaccount:slurm:worker"
    assert review.namespace == "slurm" and review.audiences == ("slurm-sidecars",)
    assert review.one("authentication.kubernetes.io/pod-name") == "w1"
    assert review.one("authentication.kubernetes.io/pod-uid") == pod["metadata"]["uid"]
    assert review.one("authentication.kubernetes.io/node-name") == "node-a"
    # another audience, a made-up token, a pod gone: not authenticated, with the API server's words
    other = await kube.review_token(token, ("https://kubernetes.default.svc",))
    assert not other.authenticated and "audiences" in other.error and other.namespace == ""
    assert not (await kube.review_token("a.b.c", ("slurm-sidecars",))).authenticated
    f.remove_pod("slurm", "w1")
    gone = await kube.review_token(token, ("slurm-sidecars",))
    assert not gone.authenticated and "invalidated" in gone.error
    assert f.calls()[("create", "tokenreviews")] == 4
