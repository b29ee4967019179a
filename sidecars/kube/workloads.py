"""The calls a whole-cluster upgrade makes on the workloads that run Slurm's servers: a StatefulSet
or Deployment read, its container's image patched, its scale set; Jobs created, read and deleted;
the pods of a workload or Job read for their health in their own words. Each is one request through
`KubeConnection.call` (deadlines, retries, fencing); objects come back as plain JSON (the API's
names), read by the small dataclasses here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kubernetes_asyncio import client as k

from sidecars.kube.connection import KubeConnection
from sidecars.kube.errors import KubeError

KINDS = ("StatefulSet", "Deployment")
Json = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Workload:
    """A StatefulSet or Deployment as a rollout is judged: its spec (raw) and its status counts."""

    kind: str
    namespace: str
    name: str
    generation: int
    observed_generation: int
    replicas: int  # spec.replicas
    status_replicas: int  # pods it has, of any revision
    ready: int
    updated: int
    available: int
    selector: Mapping[str, str]  # spec.selector.matchLabels
    spec: Json
    owner: str = ""  # "Kind/name" of the controller that owns it (metadata.ownerReferences), or ""

    @classmethod
    def from_json(cls, kind: str, obj: Json) -> Workload:
        meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
        return cls(
            kind=kind,
            namespace=meta.get("namespace", ""),
            name=meta.get("name", ""),
            generation=int(meta.get("generation") or 0),
            observed_generation=int(status.get("observedGeneration") or 0),
            replicas=int(spec.get("replicas", 1)),
            status_replicas=int(status.get("replicas") or 0),
            ready=int(status.get("readyReplicas") or 0),
            updated=int(status.get("updatedReplicas") or 0),
            available=int(status.get("availableReplicas") or 0),
            selector=dict((spec.get("selector") or {}).get("matchLabels") or {}),
            spec=spec,
            owner=next(
                (
                    f"{r.get('kind', '?')}/{r.get('name', '?')}"
                    for r in meta.get("ownerReferences") or []
                    if isinstance(r, dict) and r.get("controller")
                ),
                "",
            ),
        )

    def containers(self) -> list[Json]:
        return list(((self.spec.get("template") or {}).get("spec") or {}).get("containers") or [])

    def image(self, container: str) -> str | None:
        return next((c.get("image") for c in self.containers() if c.get("name") == container), None)

    def rolled_out(self) -> bool:
        """The controller saw the last change and every replica runs it, ready (and for a
        Deployment no old pod is left: status.replicas counts old and new)."""
        return (
            self.observed_generation >= self.generation
            and self.updated == self.replicas
            and self.ready == self.replicas
            and self.available == self.replicas
            and self.status_replicas == self.replicas
        )


@dataclass(frozen=True, slots=True)
class Ended:
    """A container of a pod that ended (its own exit, not its pod's deletion): as the kubelet says."""

    container: str
    reason: str  # "Error", "OOMKilled", ...
    exit_code: int | None
    message: str  # its termination message (the end of its log with FallbackToLogsOnError)
    finished_at: float | None  # epoch seconds (None: not said)
    restarts: int


@dataclass(frozen=True, slots=True)
class PodHealth:
    name: str
    ready: bool
    phase: str
    words: str  # its containers' waiting or terminated reasons and messages, as the kubelet wrote them
    # a container of this pod (not being deleted, not Ready) that ended: terminated now, or
    # restarted with its last state terminated; seen at once, before any CrashLoopBackOff
    ended: Ended | None = None

    @classmethod
    def from_json(cls, obj: Json) -> PodHealth:
        status = obj.get("status") or {}
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
        )
        deleting = bool((obj.get("metadata") or {}).get("deletionTimestamp"))
        ended = None if ready or deleting else _ended(status.get("containerStatuses") or [])
        said = []
        for c in status.get("containerStatuses") or []:
            for when in ("state", "lastState"):
                for what, detail in (c.get(when) or {}).items():
                    if what == "running" or not isinstance(detail, dict):
                        continue
                    parts = [detail.get("reason") or what]
                    if detail.get("exitCode") is not None:
                        parts.append(f"exit {detail['exitCode']}")
                    if detail.get("message"):
                        parts.append(str(detail["message"]).strip())
                    seen = f"last {what}" if when == "lastState" else what
                    said.append(f"{c.get('name')} ({seen}): {', '.join(parts)}")
        return cls(
            obj.get("metadata", {}).get("name", ""), ready, status.get("phase", ""), "; ".join(said), ended
        )

    @property
    def crash_looping(self) -> bool:
        return "CrashLoopBackOff" in self.words


def _ended(statuses: list[Json]) -> Ended | None:
    """The first container whose state is terminated, or that restarted after a termination."""
    for c in statuses:
        if not isinstance(c, dict):
            continue
        restarts = int(c.get("restartCount") or 0)
        now = (c.get("state") or {}).get("terminated")
        last = (c.get("lastState") or {}).get("terminated") if restarts else None
        done = now if isinstance(now, dict) else last if isinstance(last, dict) else None
        if done is None:
            continue
        code = done.get("exitCode")
        return Ended(
            container=str(c.get("name") or ""),
            reason=str(done.get("reason") or "terminated"),
            exit_code=int(code) if isinstance(code, int) else None,
            message=str(done.get("message") or ""),
            finished_at=_epoch(done.get("finishedAt")),
            restarts=restarts,
        )
    return None


def _epoch(stamp: object) -> float | None:
    """An API time (`2026-12-06T04:19:50Z`) as epoch seconds; None when absent or not one."""
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class JobState:
    name: str
    active: int
    succeeded: int
    failed: int
    finished: str  # "Complete", "Failed" or "" while it runs
    words: str  # the finishing condition's reason and message

    @classmethod
    def from_json(cls, obj: Json) -> JobState:
        status = obj.get("status") or {}
        ended = [
            c
            for c in status.get("conditions") or []
            if c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        ]
        words = "; ".join(
            f"{c.get('reason') or c['type']}: {c.get('message') or ''}".rstrip(": ") for c in ended
        )
        return cls(
            name=(obj.get("metadata") or {}).get("name", ""),
            active=int(status.get("active") or 0),
            succeeded=int(status.get("succeeded") or 0),
            failed=int(status.get("failed") or 0),
            finished=ended[0]["type"] if ended else "",
            words=words,
        )


def _selector(labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


class KubeWorkloads:
    """The workload and Job calls, over a connection's ApiClient (`KubeWorkloads(kube)`)."""

    def __init__(self, kube: KubeConnection) -> None:
        self._kube = kube
        self._batch = k.BatchV1Api(kube.api)
        self._json = kube.api.sanitize_for_serialization

    def _apps(self, kind: str) -> tuple[Any, Any]:
        """AppsV1Api's read and patch of `kind` (each named whole: tests/shipping/test_rbac.py
        derives the Role's rules from the calls written here)."""
        if kind == "StatefulSet":
            return self._kube.apps.read_namespaced_stateful_set, self._kube.apps.patch_namespaced_stateful_set
        if kind == "Deployment":
            return self._kube.apps.read_namespaced_deployment, self._kube.apps.patch_namespaced_deployment
        raise ValueError(f"not a workload kind: {kind!r} (one of {', '.join(KINDS)})")

    async def _found(self, operation: str, fn: Callable[[], Awaitable[Any]]) -> Any | None:
        try:
            return await self._kube.call(operation, fn)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    @staticmethod
    def _op(kind: str, verb: str) -> str:
        return f"{verb}_{kind.lower()}"

    async def get(self, kind: str, namespace: str, name: str) -> Workload | None:
        read, _ = self._apps(kind)
        obj = await self._found(self._op(kind, "get"), lambda: read(name, namespace))
        return None if obj is None else Workload.from_json(kind, self._json(obj))

    async def set_image(self, kind: str, namespace: str, name: str, container: str, image: str) -> Workload:
        """A strategic-merge patch of one container's image (the others, and its other fields, kept:
        containers merge by name)."""
        _, patch = self._apps(kind)
        body = {"spec": {"template": {"spec": {"containers": [{"name": container, "image": image}]}}}}
        strategic: dict[str, Any] = {"_content_type": "application/strategic-merge-patch+json"}
        obj = await self._kube.call(
            self._op(kind, "patch"), lambda: patch(name, namespace, body, **strategic), conflict_too=True
        )
        return Workload.from_json(kind, self._json(obj))

    async def scale_stateful_set(self, namespace: str, name: str, replicas: int) -> None:
        """spec.replicas through the scale subresource (what `kubectl scale` writes)."""
        body = {"spec": {"replicas": replicas}}
        merge: dict[str, Any] = {"_content_type": "application/merge-patch+json"}
        scale = self._kube.apps.patch_namespaced_stateful_set_scale
        await self._kube.call(
            "scale_statefulset", lambda: scale(name, namespace, body, **merge), conflict_too=True
        )

    async def pods(self, namespace: str, labels: Mapping[str, str]) -> list[PodHealth]:
        """The pods whose labels include `labels`, with their health."""
        selector = _selector(labels)
        result = await self._kube.call(
            "list_pods", lambda: self._kube.core.list_namespaced_pod(namespace, label_selector=selector)
        )
        return [PodHealth.from_json(p) for p in self._json(result).get("items") or []]

    async def create_job(self, namespace: str, job: Json) -> str:
        """The Job (a JSON body: a name, or a generateName); its name."""
        body: Any = job  # the client serialises a dict as it is
        obj = await self._kube.call("create_job", lambda: self._batch.create_namespaced_job(namespace, body))
        return str(self._json(obj)["metadata"]["name"])

    async def job(self, namespace: str, name: str) -> JobState | None:
        obj = await self._found("get_job", lambda: self._batch.read_namespaced_job(name, namespace))
        return None if obj is None else JobState.from_json(self._json(obj))

    async def delete_job(self, namespace: str, name: str) -> bool:
        """Delete the Job and its pods (background); False when it was gone already."""
        try:
            await self._kube.call(
                "delete_job",
                lambda: self._batch.delete_namespaced_job(name, namespace, propagation_policy="Background"),
            )
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        return True
