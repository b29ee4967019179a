"""Pods, events and leases through kubernetes-asyncio, with transient failures retried at this edge.

Retried: 429 (throttled), 5xx and connection errors, for every call; 409 for pod patches (a
concurrent writer; a strategic-merge patch of annotations applies cleanly on the next try). A 409
on a Lease is not retried: it means another replica wrote first, and the caller must re-read.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp
import structlog
from kubernetes_asyncio import client as k
from kubernetes_asyncio import watch
from kubernetes_asyncio.client.exceptions import ApiException
from prometheus_client import CollectorRegistry, Counter
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_random_exponential,
)

from sidecars.kube.gpudomain import GROUP, PLURAL, VERSION, ComputeDomain
from sidecars.runtime.waits import within

log = structlog.get_logger(__name__)

T = TypeVar("T")
W = TypeVar("W")
RETRYABLE = frozenset({429, 500, 502, 503, 504})


class KubeError(Exception):
    """The API server refused a call (after the retries of this edge): its HTTP status and reason.
    kubernetes-asyncio's own exception stays inside this module."""

    def __init__(self, operation: str, status: int, reason: str) -> None:
        self.operation = operation
        self.status = status
        self.reason = reason
        super().__init__(f"{operation}: HTTP {status} {reason}".rstrip())


class LeaseConflict(Exception):
    """Someone else created or updated the Lease first (HTTP 409): re-read it."""


@dataclass(frozen=True, slots=True)
class KubeRetry:
    attempts: int = 5
    max_seconds: float = 20.0
    initial_wait: float = 0.1
    max_wait: float = 3.0
    # one attempt's deadline: a request on a half-open connection would otherwise wait for ever
    # (kubernetes-asyncio sets none), and with it a leader's renewal and its step-down deadline
    call_seconds: float = 30.0


@dataclass(frozen=True, slots=True)
class Pod:
    namespace: str
    name: str
    uid: str
    hostname: str  # spec.hostname (Slinky sets it to the Slurm node name); "" when unset
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    ready: bool
    phase: str
    owner_kind: str  # kind of the controller owner ("ReplicaSet", "StatefulSet", ...) or ""
    deleting: bool
    resource_version: str
    node_name: str = ""  # spec.nodeName: the Kubernetes Node it was scheduled to; "" while pending
    conditions: tuple[tuple[str, str, str], ...] = ()  # status.conditions as (type, status, message)
    created: str = ""  # metadata.creationTimestamp (RFC 3339, UTC): which of two claimants came first

    @classmethod
    def from_model(cls, pod: Any) -> Pod:
        meta, spec, status = pod.metadata, pod.spec, pod.status
        owner = next((o for o in meta.owner_references or [] if o.controller), None)
        ready = any(c.type == "Ready" and c.status == "True" for c in (status and status.conditions) or [])
        return cls(
            namespace=meta.namespace or "",
            name=meta.name or "",
            uid=meta.uid or "",
            hostname=(spec and spec.hostname) or "",
            labels=dict(meta.labels or {}),
            annotations=dict(meta.annotations or {}),
            ready=ready,
            phase=(status and status.phase) or "",
            owner_kind=owner.kind if owner else "",
            deleting=meta.deletion_timestamp is not None,
            resource_version=meta.resource_version or "",
            node_name=(spec and spec.node_name) or "",
            conditions=tuple(
                (c.type or "", c.status or "", c.message or "") for c in (status and status.conditions) or []
            ),
            created=_stamp(meta.creation_timestamp),
        )


POD_NAME = "authentication.kubernetes.io/pod-name"  # a bound token's pod (TokenReview's user.extra)
POD_UID = "authentication.kubernetes.io/pod-uid"
SA_PREFIX = "system:serviceaccount:"


@dataclass(frozen=True, slots=True)
class TokenReview:
    """The API server's verdict on a ServiceAccount token (TokenReview's status)."""

    authenticated: bool
    username: str = ""  # system:serviceaccount:NAMESPACE:NAME for a ServiceAccount
    audiences: tuple[str, ...] = ()  # those of the asked-for audiences the token holds
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    error: str = ""

    @classmethod
    def from_model(cls, review: Any) -> TokenReview:
        status = review.status
        user = status.user if status is not None else None
        return cls(
            authenticated=bool(status and status.authenticated),
            username=(user and user.username) or "",
            audiences=tuple((status and status.audiences) or ()),
            extra={key: tuple(values or ()) for key, values in ((user and user.extra) or {}).items()},
            error=(status and status.error) or "",
        )

    @property
    def namespace(self) -> str:
        """The ServiceAccount's namespace ("" for a user that is none)."""
        ns, _, name = self.username.removeprefix(SA_PREFIX).partition(":")
        return ns if self.username.startswith(SA_PREFIX) and ns and name else ""

    def one(self, key: str) -> str:
        """The single value of an extra field ("" when absent or not single)."""
        values = self.extra.get(key, ())
        return values[0] if len(values) == 1 else ""


@dataclass(frozen=True, slots=True)
class KubeNode:
    """A Kubernetes Node, as far as the sidecars read it: its annotations (maintenance windows), its
    labels (topology sync) and its schedulability (cordon sync: `kubectl cordon` sets
    spec.unschedulable; taints are (key, effect)). One model for every reader, so one list + watch
    serves them all."""

    name: str
    annotations: Mapping[str, str]
    unschedulable: bool
    taints: tuple[tuple[str, str], ...]
    resource_version: str
    labels: Mapping[str, str] = field(default_factory=dict)  # topology (zone/rack), GPU clique

    @classmethod
    def from_model(cls, node: Any) -> KubeNode:
        meta, spec = node.metadata, node.spec
        return cls(
            name=meta.name or "",
            annotations=dict(meta.annotations or {}),
            unschedulable=bool(spec and spec.unschedulable),
            taints=tuple((t.key or "", t.effect or "") for t in (spec and spec.taints) or []),
            resource_version=meta.resource_version or "",
            labels=dict(meta.labels or {}),
        )

    def cordoned(self, taint_keys: frozenset[str]) -> bool:
        """Unschedulable, or carrying one of `taint_keys` with a NoSchedule or NoExecute effect."""
        return self.unschedulable or any(
            key in taint_keys and effect in {"NoSchedule", "NoExecute"} for key, effect in self.taints
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Deployment:
    """An apps/v1 Deployment, as far as a paced roll reads it. `template` is a digest of
    spec.template (a change of it is what starts a new ReplicaSet); the strategy's fields keep
    Kubernetes' int-or-percentage form ("25%", 1) as given."""

    namespace: str
    name: str
    generation: int
    replicas: int
    paused: bool
    strategy: str  # RollingUpdate or Recreate
    max_surge: int | str | None
    max_unavailable: int | str | None
    selector: Mapping[str, str]  # matchLabels
    template: str
    annotations: Mapping[str, str]
    observed_generation: int
    available: int
    updated: int

    @classmethod
    def from_model(cls, d: Any, api: k.ApiClient) -> Deployment:
        meta, spec, status = d.metadata, d.spec, d.status
        rolling = spec.strategy.rolling_update if spec.strategy else None
        template = json.dumps(api.sanitize_for_serialization(spec.template), sort_keys=True)
        return cls(
            namespace=meta.namespace or "",
            name=meta.name or "",
            generation=int(meta.generation or 0),
            replicas=1 if spec.replicas is None else int(spec.replicas),
            paused=bool(spec.paused),
            strategy=(spec.strategy and spec.strategy.type) or "RollingUpdate",
            max_surge=rolling.max_surge if rolling else None,
            max_unavailable=rolling.max_unavailable if rolling else None,
            selector=dict((spec.selector and spec.selector.match_labels) or {}),
            template=hashlib.sha256(template.encode()).hexdigest()[:16],
            annotations=dict(meta.annotations or {}),
            observed_generation=int((status and status.observed_generation) or 0),
            available=int((status and status.available_replicas) or 0),
            updated=int((status and status.updated_replicas) or 0),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaSet:
    name: str
    revision: str  # its pod-template-hash label
    replicas: int  # spec.replicas: what its controller keeps
    owner: str  # the Deployment that controls it, or ""

    @classmethod
    def from_model(cls, rs: Any) -> ReplicaSet:
        meta = rs.metadata
        owner = next((o for o in meta.owner_references or [] if o.controller), None)
        return cls(
            name=meta.name or "",
            revision=(meta.labels or {}).get("pod-template-hash", ""),
            replicas=int(rs.spec.replicas or 0),
            owner=owner.name if owner and owner.kind == "Deployment" else "",
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseRecord:
    namespace: str
    name: str
    holder: str | None
    duration_seconds: int
    acquire_time: dt.datetime | None
    renew_time: dt.datetime | None
    transitions: int
    resource_version: str

    def expired(self, now: dt.datetime) -> bool:
        if not self.holder or self.renew_time is None:
            return True
        return now >= self.renew_time + dt.timedelta(seconds=self.duration_seconds)


def _stamp(when: dt.datetime | None) -> str:
    if when is None:
        return ""
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _error(operation: str, exc: ApiException) -> KubeError:
    return KubeError(operation, int(exc.status or 0), str(exc.reason or ""))


def _bookmark(event: Mapping[str, Any]) -> str:
    """A BOOKMARK event's resourceVersion (kubernetes-asyncio leaves its object a plain dict)."""
    obj = event.get("raw_object") or event.get("object")
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    return str(meta.get("resourceVersion") or "") if isinstance(meta, dict) else ""


def _retryable(exc: BaseException, conflict_too: bool) -> bool:
    if isinstance(exc, ApiException):
        return exc.status in RETRYABLE or (conflict_too and exc.status == 409)
    return isinstance(exc, aiohttp.ClientError | asyncio.TimeoutError)


@dataclass
class KubeClient:
    """One ApiClient for the process; `async with KubeClient(conf)` closes it."""

    configuration: k.Configuration
    retry: KubeRetry = field(default_factory=KubeRetry)
    registry: CollectorRegistry | None = None

    def __post_init__(self) -> None:
        self.api = k.ApiClient(self.configuration)
        self.core = k.CoreV1Api(self.api)
        self.coordination = k.CoordinationV1Api(self.api)
        self.custom = k.CustomObjectsApi(self.api)
        self.apps = k.AppsV1Api(self.api)
        self.authentication = k.AuthenticationV1Api(self.api)
        self.requests: Counter | None = None
        if self.registry is not None:
            self.requests = Counter(
                "slurm_sidecars_kube_requests",
                "Kubernetes API calls by outcome",
                ["operation", "result"],
                registry=self.registry,
            )

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.api.close()

    def _count(self, operation: str, result: str) -> None:
        if self.requests is not None:
            self.requests.labels(operation=operation, result=result).inc()

    async def _watch(
        self,
        operation: str,
        list_fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        resource_version: str,
        timeout_seconds: int,
        convert: Callable[[Any], W | None],
        bookmark: Callable[[str], W],
    ) -> AsyncIterator[tuple[str, W]]:
        """One watch from `resource_version`: (ADDED|MODIFIED|DELETED, object) until the server ends
        it, and (BOOKMARK, an object carrying only the version to resume from); a 410 raises.
        `list_fn` itself, not a wrapper: the watch reads the model to decode into from its docstring."""
        async with watch.Watch() as w:
            stream = w.stream(
                list_fn,
                *args,
                **kwargs,
                resource_version=resource_version,
                timeout_seconds=timeout_seconds,
                allow_watch_bookmarks=True,
            )
            try:
                async for event in stream:
                    kind = event["type"]
                    if kind in {"ADDED", "MODIFIED", "DELETED"}:
                        obj = convert(event["object"])
                        if obj is not None:
                            yield kind, obj
                    elif kind == "BOOKMARK" and (rv := _bookmark(event)):
                        yield kind, bookmark(rv)
            except ApiException as exc:
                raise _error(operation, exc) from exc

    async def _found(self, operation: str, fn: Callable[[], Awaitable[T]]) -> T | None:
        """A read through `_call`: None when the object is not there (404)."""
        try:
            return await self._call(operation, fn)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    async def _call(self, operation: str, fn: Callable[[], Awaitable[T]], *, conflict_too: bool = False) -> T:
        policy = self.retry

        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            status = exc.status if isinstance(exc, ApiException) else type(exc).__name__
            self._count(operation, f"retry_{status}")
            log.info("kube_retry", operation=operation, status=status, attempt=state.attempt_number)

        try:
            async for attempt in AsyncRetrying(
                retry=retry_if_exception(lambda e: _retryable(e, conflict_too)),
                stop=stop_after_attempt(policy.attempts) | stop_after_delay(policy.max_seconds),
                wait=wait_random_exponential(multiplier=policy.initial_wait, max=policy.max_wait),
                before_sleep=before_sleep,
                reraise=True,
            ):
                with attempt:
                    try:
                        result = await within(fn(), policy.call_seconds)
                    except TimeoutError:
                        self._count(operation, "timeout")
                        raise
                    except ApiException as exc:
                        self._count(operation, str(exc.status))
                        raise
                    self._count(operation, "ok")
                    return result
        except ApiException as exc:
            raise _error(operation, exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    # ------------------------------------------------------------------ pods
    async def list_pods(
        self, namespace: str, selector: str = "", field_selector: str = ""
    ) -> tuple[list[Pod], str]:
        """The pods matching `selector` (and `field_selector`, e.g. `spec.nodeName=N`) and the
        list's resourceVersion (to watch from)."""
        extra: dict[str, Any] = {"field_selector": field_selector} if field_selector else {}
        result = await self._call(
            "list_pods", lambda: self.core.list_namespaced_pod(namespace, label_selector=selector, **extra)
        )
        return [Pod.from_model(p) for p in result.items], result.metadata.resource_version or ""

    def watch_pods(
        self, namespace: str, selector: str, resource_version: str, timeout_seconds: int = 300
    ) -> AsyncIterator[tuple[str, Pod]]:
        """(ADDED|MODIFIED|DELETED, pod) from `resource_version` until the server ends the watch;
        and (BOOKMARK, a pod with only `resource_version`): the version to resume from, which a
        quiet set of pods would otherwise never move on, so that each reopen after compaction
        (410) would list every pod again.

        An expired resourceVersion (410) raises KubeError: the caller lists again.
        """

        def bookmark(rv: str) -> Pod:
            return Pod(
                namespace="",
                name="",
                uid="",
                hostname="",
                labels={},
                annotations={},
                ready=False,
                phase="",
                owner_kind="",
                deleting=False,
                resource_version=rv,
            )

        return self._watch(
            "watch_pods",
            self.core.list_namespaced_pod,
            (namespace,),
            {"label_selector": selector},
            resource_version,
            timeout_seconds,
            Pod.from_model,
            bookmark,
        )

    async def get_pod(self, namespace: str, name: str) -> Pod | None:
        pod = await self._found("get_pod", lambda: self.core.read_namespaced_pod(name, namespace))
        if pod is None:
            return None
        return Pod.from_model(pod)

    async def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> Pod:
        """Strategic-merge patch of the pod's annotations (None removes one)."""
        body = {"metadata": {"annotations": dict(annotations)}}
        pod = await self._call(
            "patch_pod", lambda: self.core.patch_namespaced_pod(name, namespace, body), conflict_too=True
        )
        return Pod.from_model(pod)

    async def label_pod(self, namespace: str, name: str, labels: Mapping[str, str | None]) -> Pod:
        """Strategic-merge patch of the pod's labels (None removes one); other labels are kept."""
        body = {"metadata": {"labels": dict(labels)}}
        pod = await self._call(
            "label_pod", lambda: self.core.patch_namespaced_pod(name, namespace, body), conflict_too=True
        )
        return Pod.from_model(pod)

    async def delete_pod(self, namespace: str, name: str, uid: str | None = None) -> bool:
        """Delete the pod (only this incarnation when `uid` is given). False when it was already gone."""
        options = k.V1DeleteOptions(preconditions=k.V1Preconditions(uid=uid) if uid else None)
        try:
            await self._call(
                "delete_pod", lambda: self.core.delete_namespaced_pod(name, namespace, body=options)
            )
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    # ------------------------------------------------------------------ identities
    async def review_token(self, token: str, audiences: tuple[str, ...]) -> TokenReview:
        """Who a bearer token is, by the API server's TokenReview, valid for one of `audiences`
        (the token itself is never logged)."""
        body = k.V1TokenReview(spec=k.V1TokenReviewSpec(token=token, audiences=list(audiences)))
        review = await self._call(
            "create_token_review", lambda: self.authentication.create_token_review(body)
        )
        return TokenReview.from_model(review)

    # ------------------------------------------------------------------ deployments
    async def get_deployment(self, namespace: str, name: str) -> Deployment | None:
        d = await self._found("get_deployment", lambda: self.apps.read_namespaced_deployment(name, namespace))
        if d is None:
            return None
        return Deployment.from_model(d, self.api)

    async def patch_deployment(self, namespace: str, name: str, patch: Mapping[str, Any]) -> Deployment:
        """A JSON merge patch (RFC 7386: null removes a key) of the Deployment. Retried on 409 too: a
        merge patch names only its own fields, and applies cleanly over a concurrent change."""
        body = dict(patch)
        merge: dict[str, Any] = {"_content_type": "application/merge-patch+json"}
        d = await self._call(
            "patch_deployment",
            lambda: self.apps.patch_namespaced_deployment(name, namespace, body, **merge),
            conflict_too=True,
        )
        return Deployment.from_model(d, self.api)

    async def list_replica_sets(self, namespace: str, selector: str = "") -> list[ReplicaSet]:
        result = await self._call(
            "list_replicasets",
            lambda: self.apps.list_namespaced_replica_set(namespace, label_selector=selector),
        )
        return [ReplicaSet.from_model(rs) for rs in result.items]

    # ------------------------------------------------------------------ nodes
    async def list_nodes(self) -> tuple[list[KubeNode], str]:
        """Every Node (cluster-scoped) and the list's resourceVersion, to watch from."""
        result = await self._call("list_nodes", self.core.list_node)
        return [KubeNode.from_model(n) for n in result.items], result.metadata.resource_version or ""

    def watch_nodes(
        self, resource_version: str, timeout_seconds: int = 300
    ) -> AsyncIterator[tuple[str, KubeNode]]:
        """(ADDED|MODIFIED|DELETED, node) from `resource_version`, and (BOOKMARK, a node with only
        `resource_version`), as `watch_pods`; a 410 raises KubeError."""
        return self._watch(
            "watch_nodes",
            self.core.list_node,
            (),
            {},
            resource_version,
            timeout_seconds,
            KubeNode.from_model,
            lambda rv: KubeNode(name="", annotations={}, unschedulable=False, taints=(), resource_version=rv),
        )

    async def get_node(self, name: str) -> KubeNode | None:
        node = await self._found("get_node", lambda: self.core.read_node(name))
        if node is None:
            return None
        return KubeNode.from_model(node)

    # ------------------------------------------------------------------ compute domains
    async def list_compute_domains(self) -> tuple[list[ComputeDomain], str]:
        """NVIDIA's DRA driver ComputeDomains in every namespace (a 404: the CRD is not installed)."""
        result = await self._call(
            "list_computedomains", lambda: self.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)
        )
        items = [ComputeDomain.from_json(o) for o in result.get("items") or [] if isinstance(o, dict)]
        return items, str((result.get("metadata") or {}).get("resourceVersion") or "")

    def watch_compute_domains(
        self, resource_version: str, timeout_seconds: int = 300
    ) -> AsyncIterator[tuple[str, ComputeDomain]]:
        """(ADDED|MODIFIED|DELETED, domain) from `resource_version`, and (BOOKMARK, a domain with
        only `resource_version`), as `watch_pods`; a 410 raises KubeError."""
        return self._watch(
            "watch_computedomains",
            self.custom.list_cluster_custom_object,
            (GROUP, VERSION, PLURAL),
            {},
            resource_version,
            timeout_seconds,
            lambda obj: ComputeDomain.from_json(obj) if isinstance(obj, dict) else None,
            lambda rv: ComputeDomain("", "", rv, ()),
        )

    # ------------------------------------------------------------------ events
    async def create_event(
        self,
        namespace: str,
        involved: Mapping[str, str],
        reason: str,
        message: str,
        *,
        type: str = "Normal",
        component: str = "slurm-sidecars",
    ) -> None:
        """A core/v1 Event about `involved` ({kind, name, namespace, uid?, apiVersion?})."""
        now = dt.datetime.now(dt.UTC)
        name = involved.get("name", "object")
        event = k.CoreV1Event(
            metadata=k.V1ObjectMeta(generate_name=f"{name}.", namespace=namespace),
            involved_object=k.V1ObjectReference(
                kind=involved.get("kind", "Pod"),
                name=name,
                namespace=involved.get("namespace", namespace),
                uid=involved.get("uid"),
                api_version=involved.get("apiVersion", "v1"),
            ),
            reason=reason,
            message=message[:1024],
            type=type,
            source=k.V1EventSource(component=component),
            first_timestamp=now,
            last_timestamp=now,
            count=1,
            reporting_component=component,
            reporting_instance=involved.get("reporter", component),
        )
        try:
            await self._call("create_event", lambda: self.core.create_namespaced_event(namespace, event))
        except KubeError as exc:
            if exc.status != 409:  # 409: an identical event exists already; nothing lost
                raise

    # ------------------------------------------------------------------ leases
    @staticmethod
    def _lease(obj: Any) -> LeaseRecord:
        spec = obj.spec or k.V1LeaseSpec()
        return LeaseRecord(
            namespace=obj.metadata.namespace or "",
            name=obj.metadata.name or "",
            holder=spec.holder_identity,
            duration_seconds=int(spec.lease_duration_seconds or 15),
            acquire_time=spec.acquire_time,
            renew_time=spec.renew_time,
            transitions=int(spec.lease_transitions or 0),
            resource_version=obj.metadata.resource_version or "",
        )

    async def get_lease(self, namespace: str, name: str) -> LeaseRecord | None:
        obj = await self._found("get_lease", lambda: self.coordination.read_namespaced_lease(name, namespace))
        if obj is None:
            return None
        return self._lease(obj)

    def _lease_body(self, record: LeaseRecord) -> Any:
        return k.V1Lease(
            metadata=k.V1ObjectMeta(
                name=record.name, namespace=record.namespace, resource_version=record.resource_version or None
            ),
            spec=k.V1LeaseSpec(
                holder_identity=record.holder,
                lease_duration_seconds=record.duration_seconds,
                acquire_time=record.acquire_time,
                renew_time=record.renew_time,
                lease_transitions=record.transitions,
            ),
        )

    async def create_lease(self, record: LeaseRecord) -> LeaseRecord:
        body = self._lease_body(record)
        try:
            obj = await self._call(
                "create_lease", lambda: self.coordination.create_namespaced_lease(record.namespace, body)
            )
        except KubeError as exc:
            if exc.status == 409:
                raise LeaseConflict(f"lease {record.name} exists already") from None
            raise
        return self._lease(obj)

    async def update_lease(self, record: LeaseRecord) -> LeaseRecord:
        """Replace the Lease, guarded by `record.resource_version` (optimistic concurrency)."""
        body = self._lease_body(record)
        try:
            obj = await self._call(
                "update_lease",
                lambda: self.coordination.replace_namespaced_lease(record.name, record.namespace, body),
            )
        except KubeError as exc:
            if exc.status == 409:
                raise LeaseConflict(f"lease {record.name} changed since it was read") from None
            raise
        return self._lease(obj)

    # ------------------------------------------------------------------ config maps (small state)
    async def get_config_map(self, namespace: str, name: str) -> dict[str, str] | None:
        """A ConfigMap's data, or None when there is none."""
        obj = await self._found(
            "get_configmap", lambda: self.core.read_namespaced_config_map(name, namespace)
        )
        if obj is None:
            return None
        return dict(obj.data or {})

    async def put_config_map(self, namespace: str, name: str, data: Mapping[str, str]) -> None:
        """Create or replace a ConfigMap's data (last writer wins: only the Lease holder writes it)."""
        body = k.V1ConfigMap(metadata=k.V1ObjectMeta(name=name, namespace=namespace), data=dict(data))
        try:
            await self._call(
                "replace_configmap", lambda: self.core.replace_namespaced_config_map(name, namespace, body)
            )
        except KubeError as exc:
            if exc.status != 404:
                raise
            await self._call(
                "create_configmap", lambda: self.core.create_namespaced_config_map(namespace, body)
            )
