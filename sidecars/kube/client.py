"""The Kubernetes calls the sidecars make, typed: pods, identities, Deployments, Nodes, compute
domains, Events, Leases and small ConfigMaps. Each is one request through `KubeConnection.call` (or a
watch through its `_watch`), which holds the deadlines, retries and fencing; what comes back is one
of `sidecars.kube.models`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Mapping
from typing import Any

from kubernetes_asyncio import client as k

from sidecars.kube.connection import KubeConnection, KubeRetry
from sidecars.kube.errors import KubeError, LeaseConflict
from sidecars.kube.gpudomain import GROUP, PLURAL, VERSION, ComputeDomain
from sidecars.kube.models import Deployment, KubeNode, LeaseRecord, Pod, ReplicaSet, TokenReview

# KubeRetry is the policy a KubeClient is built with: named here too, where the client is
__all__ = ["KubeClient", "KubeRetry"]


class KubeClient(KubeConnection):
    """`async with KubeClient(conf)`: the typed calls, over one connection to the API server."""

    # ------------------------------------------------------------------ pods
    async def list_pods(
        self, namespace: str, selector: str = "", field_selector: str = ""
    ) -> tuple[list[Pod], str]:
        """The pods matching `selector` (and `field_selector`, e.g. `spec.nodeName=N`) and the
        list's resourceVersion (to watch from)."""
        extra: dict[str, Any] = {"field_selector": field_selector} if field_selector else {}
        result = await self.call(
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
        pod = await self.call(
            "patch_pod", lambda: self.core.patch_namespaced_pod(name, namespace, body), conflict_too=True
        )
        return Pod.from_model(pod)

    async def label_pod(self, namespace: str, name: str, labels: Mapping[str, str | None]) -> Pod:
        """Strategic-merge patch of the pod's labels (None removes one); other labels are kept."""
        body = {"metadata": {"labels": dict(labels)}}
        pod = await self.call(
            "label_pod", lambda: self.core.patch_namespaced_pod(name, namespace, body), conflict_too=True
        )
        return Pod.from_model(pod)

    async def delete_pod(self, namespace: str, name: str, uid: str | None = None) -> bool:
        """Delete the pod (only this incarnation when `uid` is given). False when it was already gone."""
        options = k.V1DeleteOptions(preconditions=k.V1Preconditions(uid=uid) if uid else None)
        try:
            await self.call(
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
        review = await self.call("create_token_review", lambda: self.authentication.create_token_review(body))
        return TokenReview.from_model(review)

    # ------------------------------------------------------------------ deployments
    async def get_deployment(self, namespace: str, name: str) -> Deployment | None:
        d = await self._found("get_deployment", lambda: self.apps.read_namespaced_deployment(name, namespace))
        if d is None:
            return None
        return Deployment.from_model(d, self.api.sanitize_for_serialization)

    async def patch_deployment(self, namespace: str, name: str, patch: Mapping[str, Any]) -> Deployment:
        """A JSON merge patch (RFC 7386: null removes a key) of the Deployment. Retried on 409 too: a
        merge patch names only its own fields, and applies cleanly over a concurrent change."""
        body = dict(patch)
        merge: dict[str, Any] = {"_content_type": "application/merge-patch+json"}
        d = await self.call(
            "patch_deployment",
            lambda: self.apps.patch_namespaced_deployment(name, namespace, body, **merge),
            conflict_too=True,
        )
        return Deployment.from_model(d, self.api.sanitize_for_serialization)

    async def list_replica_sets(self, namespace: str, selector: str = "") -> list[ReplicaSet]:
        result = await self.call(
            "list_replicasets",
            lambda: self.apps.list_namespaced_replica_set(namespace, label_selector=selector),
        )
        return [ReplicaSet.from_model(rs) for rs in result.items]

    # ------------------------------------------------------------------ nodes
    async def list_nodes(self) -> tuple[list[KubeNode], str]:
        """Every Node (cluster-scoped) and the list's resourceVersion, to watch from."""
        result = await self.call("list_nodes", self.core.list_node)
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

    async def annotate_node(self, name: str, annotations: Mapping[str, str | None]) -> KubeNode:
        """Strategic-merge patch of a Node's annotations (None removes one); the others are kept."""
        body = {"metadata": {"annotations": dict(annotations)}}
        node = await self.call("annotate_node", lambda: self.core.patch_node(name, body), conflict_too=True)
        return KubeNode.from_model(node)

    async def get_node(self, name: str) -> KubeNode | None:
        node = await self._found("get_node", lambda: self.core.read_node(name))
        if node is None:
            return None
        return KubeNode.from_model(node)

    # ------------------------------------------------------------------ compute domains
    async def list_compute_domains(self) -> tuple[list[ComputeDomain], str]:
        """NVIDIA's DRA driver ComputeDomains in every namespace (a 404: the CRD is not installed)."""
        result = await self.call(
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
            await self.call("create_event", lambda: self.core.create_namespaced_event(namespace, event))
        except KubeError as exc:
            if exc.status != 409:  # 409: an identical event exists already; nothing lost
                raise

    # ------------------------------------------------------------------ leases
    async def get_lease(self, namespace: str, name: str) -> LeaseRecord | None:
        obj = await self._found("get_lease", lambda: self.coordination.read_namespaced_lease(name, namespace))
        if obj is None:
            return None
        return LeaseRecord.from_model(obj)

    @staticmethod
    def _lease_body(record: LeaseRecord) -> Any:
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
            obj = await self.call(
                "create_lease", lambda: self.coordination.create_namespaced_lease(record.namespace, body)
            )
        except KubeError as exc:
            if exc.status == 409:
                raise LeaseConflict(f"lease {record.name} exists already") from None
            raise
        return LeaseRecord.from_model(obj)

    async def update_lease(self, record: LeaseRecord) -> LeaseRecord:
        """Replace the Lease, guarded by `record.resource_version` (optimistic concurrency)."""
        body = self._lease_body(record)
        try:
            obj = await self.call(
                "update_lease",
                lambda: self.coordination.replace_namespaced_lease(record.name, record.namespace, body),
            )
        except KubeError as exc:
            if exc.status == 409:
                raise LeaseConflict(f"lease {record.name} changed since it was read") from None
            raise
        return LeaseRecord.from_model(obj)

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
            await self.call(
                "replace_configmap", lambda: self.core.replace_namespaced_config_map(name, namespace, body)
            )
        except KubeError as exc:
            if exc.status != 404:
                raise
            await self.call(
                "create_configmap", lambda: self.core.create_namespaced_config_map(namespace, body)
            )
