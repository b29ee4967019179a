"""What the sidecars read of Kubernetes objects, as frozen dataclasses: pods, Nodes, Deployments,
ReplicaSets, Leases and TokenReviews. Each `from_model` reads kubernetes-asyncio's model object (or
anything of its shape) and keeps only what the sidecars act on; this module imports nothing of
kubernetes-asyncio, so a role may hold these types without loading the client.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


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
    owner_api_version: str = ""  # apiVersion of the controller owner ("slinky.slurm.net/v1beta1", ...)
    gpus: int = 0  # the GPUs its containers' limits ask for (`nvidia.com/gpu`): what its node should register

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
            owner_api_version=(owner.api_version or "") if owner else "",
            gpus=_gpus(spec),
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
    # status.conditions as (type, status, reason, message): health signals (node-problem-detector...)
    conditions: tuple[tuple[str, str, str, str], ...] = ()
    taint_values: Mapping[str, str] = field(default_factory=dict)  # taint key -> value (health signals)

    @classmethod
    def from_model(cls, node: Any) -> KubeNode:
        meta, spec, status = node.metadata, node.spec, node.status
        return cls(
            name=meta.name or "",
            annotations=dict(meta.annotations or {}),
            unschedulable=bool(spec and spec.unschedulable),
            taints=tuple((t.key or "", t.effect or "") for t in (spec and spec.taints) or []),
            resource_version=meta.resource_version or "",
            labels=dict(meta.labels or {}),
            conditions=tuple(
                (c.type or "", c.status or "", c.reason or "", c.message or "")
                for c in (status and status.conditions) or []
            ),
            taint_values={t.key or "": t.value or "" for t in (spec and spec.taints) or []},
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
    def from_model(cls, d: Any, serialize: Callable[[Any], Any]) -> Deployment:
        """`serialize`: the API client's own model-to-JSON (its field names, not Python's)."""
        meta, spec, status = d.metadata, d.spec, d.status
        rolling = spec.strategy.rolling_update if spec.strategy else None
        template = json.dumps(serialize(spec.template), sort_keys=True)
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

    @classmethod
    def from_model(cls, obj: Any) -> LeaseRecord:
        spec, meta = obj.spec, obj.metadata
        return cls(
            namespace=meta.namespace or "",
            name=meta.name or "",
            holder=spec.holder_identity if spec else None,
            duration_seconds=int((spec and spec.lease_duration_seconds) or 15),
            acquire_time=spec.acquire_time if spec else None,
            renew_time=spec.renew_time if spec else None,
            transitions=int((spec and spec.lease_transitions) or 0),
            resource_version=meta.resource_version or "",
        )


GPU_RESOURCE = "nvidia.com/gpu"


def _gpus(spec: Any) -> int:
    """The GPUs a pod's containers are limited to (a device plugin gives exactly that many); a
    quantity that is no whole number counts as none."""
    total = 0
    for container in (spec and spec.containers) or []:
        limits = (container.resources and container.resources.limits) or {}
        value = str(limits.get(GPU_RESOURCE, "0")).strip()
        total += int(value) if value.isdigit() else 0
    return total


def _stamp(when: dt.datetime | None) -> str:
    if when is None:
        return ""
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
