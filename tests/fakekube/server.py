"""A small Kubernetes API server: the real REST paths and JSON for pods, events and leases (and
Deployments and ReplicaSets, which tests/fakekube/deployments.py plays the controllers of).

Enough of the API for kubernetes-asyncio to be driven exactly as in production: list and watch
(with resourceVersion, bookmarks and 410 for a too-old version), get, strategic-merge and merge
patches, delete (with a uid precondition), events, and ConfigMaps and leases (named.py). Faults
(409, 429, 500, ...) are injected per method and path; every request is recorded when it arrives
(a watch too, though it answers only when it ends), with its Kubernetes verb and resource, so a test
or a benchmark can count the calls a client makes (`calls()`).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import datetime as dt
import json
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from kubernetes_asyncio.client import Configuration

Obj = dict[str, Any]
BODY = web.RequestKey("json", object)
CONFIG_MAP = {"apiVersion": "v1", "kind": "ConfigMap"}
MERGE_TYPES = {"application/strategic-merge-patch+json", "application/merge-patch+json"}
MUTATING = frozenset({"create", "update", "patch", "delete"})
_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


@dataclass
class Fault:
    method: str
    path_contains: str
    status: int  # 0: answered as usual, only `delay` seconds late (a stalled API server)
    times: int
    delay: float = 0.0
    black_hole: bool = False  # accepted (200, headers sent), then nothing, until the client leaves


@dataclass
class Request:
    method: str
    path: str
    status: int  # 0 while it is still being answered (an open watch)
    content_type: str
    body: Any
    verb: str = ""  # the Kubernetes verb: get, list, watch, create, update, patch, delete
    resource: str = ""  # e.g. pods, pods/status, nodes, leases, events, configmaps
    token: str = ""  # the bearer token it came with: who sent it (the audit log's user)


def verb_and_resource(method: str, path: str, watch: bool) -> tuple[str, str]:
    """The API server's names for a request, as its audit log and RBAC have them: a GET of a
    collection is `list` (`watch` with ?watch=true), of one object `get`; a subresource is
    `resource/sub`."""
    parts = [p for p in path.split("/") if p]
    # /api/v1/... or /apis/<group>/<version>/...; then optional namespaces/<ns>
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if rest[:1] == ["namespaces"] and len(rest) > 2:
        rest = rest[2:]
    if not rest:
        return method.lower(), ""
    resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
    if method == "GET":
        return ("watch" if watch else "list") if len(rest) == 1 else "get", resource
    return _VERBS.get(method, method.lower()), resource


def content_type(request: web.Request) -> str:
    return request.headers.get("Content-Type", "").split(";")[0]


def not_a_merge_patch(request: web.Request) -> web.Response | None:
    """The API server's 415 for a PATCH whose body is neither kind of merge patch."""
    ctype = content_type(request)
    if ctype in MERGE_TYPES:
        return None
    return refusal(415, "UnsupportedMediaType", f"the body of the request was in an unknown format: {ctype}")


def not_found(resource: str, request: web.Request) -> web.Response:
    return refusal(404, "NotFound", f'{resource} "{request.match_info["name"]}" not found')


def patch_of(
    request: web.Request, found: Obj | None, resource: str, part: str | None = None
) -> tuple[Obj, Obj] | web.Response:
    """The object a PATCH names and the patch, or the API server's refusal, in its order: 415 for
    a body that is no merge patch, 404 for no such object, 400 for a patch (or its `part`) that is
    no object."""
    if (refused := not_a_merge_patch(request)) is not None:
        return refused
    if found is None:
        return not_found(resource, request)
    patch = request[BODY]
    if not isinstance(patch, dict) or (part is not None and not isinstance(patch.get(part, {}), dict)):
        return refusal(400, "BadRequest", "patch is not an object")
    return found, patch


def refusal(code: int, reason: str, message: str) -> web.Response:
    return web.json_response(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": code,
        },
        status=code,
    )


def merge_patch(target: Obj, patch: Obj) -> Obj:
    """RFC 7386 merge (also what a strategic merge does for the maps we patch)."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge_patch(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
    return target


def strategic_merge(target: Obj, patch: Obj) -> Obj:
    """A strategic merge as the API server does it for what we patch: maps merged, and lists of
    named objects (containers, volumes, env) merged by name; other lists replaced."""
    for key, value in patch.items():
        here = target.get(key)
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(here, dict):
            strategic_merge(here, value)
        elif isinstance(value, list) and isinstance(here, list) and _named(value) and _named(here):
            by_name = {item["name"]: item for item in here}
            for item in value:
                if item["name"] in by_name:
                    strategic_merge(by_name[item["name"]], item)
                else:
                    here.append(copy.deepcopy(item))
        else:
            target[key] = copy.deepcopy(value)
    return target


def _named(items: list[Any]) -> bool:
    return all(isinstance(i, dict) and "name" in i for i in items)


def _watching(request: web.Request) -> bool:
    return request.query.get("watch") in {"true", "1", "True"}


def _selected(obj: Obj, selector: str | None) -> bool:
    if not selector:
        return True
    labels = obj["metadata"].get("labels") or {}
    for term in selector.split(","):
        key, sep, value = term.partition("=")
        key, value = key.strip().rstrip("!"), value.lstrip("=").strip()
        if not sep:
            if key not in labels:
                return False
        elif term.strip().count("!=") == 1:
            if labels.get(key) == value:
                return False
        elif labels.get(key) != value:
            return False
    return True


def now_micro() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def write_kubeconfig(path: Path, url: str, token: str = "fake-token") -> Path:
    """A kubeconfig file for the fake, as a process outside the test's own loop reads one."""
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: t\n"
        f"clusters: [{{name: t, cluster: {{server: '{url}'}}}}]\n"
        f"users: [{{name: t, user: {{token: {token}}}}}]\n"
        "contexts: [{name: t, context: {cluster: t, user: t}}]\n"
    )
    return path


def configuration(url: str, token: str = "fake-token") -> Configuration:
    """A client Configuration for the fake, built as production builds one (host + bearer token)."""
    return Configuration(host=url, api_key={"BearerToken": token}, api_key_prefix={"BearerToken": "Bearer"})


@dataclass
class FakeKube:
    """State plus an aiohttp app. `async with FakeKube().serving() as url:`."""

    rv: int = 100
    pods: dict[tuple[str, str], Obj] = field(default_factory=dict)
    leases: dict[tuple[str, str], Obj] = field(default_factory=dict)
    events: list[Obj] = field(default_factory=list)
    history: list[tuple[int, str, Obj]] = field(default_factory=list)  # (rv, type, pod) for watches
    nodes: dict[str, Obj] = field(default_factory=dict)  # Kubernetes Nodes (cluster-scoped)
    config_maps: dict[tuple[str, str], Obj] = field(default_factory=dict)
    deployments: dict[tuple[str, str], Obj] = field(default_factory=dict)
    replica_sets: dict[tuple[str, str], Obj] = field(default_factory=dict)
    node_history: list[tuple[int, str, Obj]] = field(default_factory=list)
    # NVIDIA's DRA driver ComputeDomains (resource.nvidia.com/v1beta1), served only when `serve_crds`
    compute_domains: dict[tuple[str, str], Obj] = field(default_factory=dict)
    cd_history: list[tuple[int, str, Obj]] = field(default_factory=list)
    serve_crds: bool = False  # False: the CRD is not installed (its paths answer 404, as a real one does)
    faults: list[Fault] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)
    min_watch_rv: int = 0  # versions older than this answer 410 Gone (compaction)
    bookmark_seconds: float = 60.0  # the API server's watch cache sends a bookmark about once a minute
    token: str = "fake-token"
    tokens: set[str] = field(default_factory=set)  # further accepted tokens (one per simulated replica)
    blocked: set[str] = field(default_factory=set)  # tokens answered 403, e.g. a replica cut off from the API
    # ServiceAccount tokens as the kubelet's TokenRequest makes them for a projected volume: bound
    # to a pod (and invalid once that pod is gone), for the audiences asked for (see issue_token)
    sa_tokens: dict[str, Obj] = field(default_factory=dict)
    stateful_sets: dict[tuple[str, str], Obj] = field(default_factory=dict)  # apps/v1 (workloads.py)
    jobs: dict[tuple[str, str], Obj] = field(default_factory=dict)  # batch/v1 (workloads.py)
    _changed: asyncio.Condition | None = None
    _watches: set[asyncio.Task[Any]] = field(default_factory=set)  # open watches, stalled requests

    # ------------------------------------------------------------------ test helpers
    def _bump(self) -> str:
        self.rv += 1
        return str(self.rv)

    def _record(self, kind: str, pod: Obj, history: list[tuple[int, str, Obj]] | None = None) -> None:
        into = self.history if history is None else history
        into.append((int(pod["metadata"]["resourceVersion"]), kind, copy.deepcopy(pod)))
        if self._changed is not None:
            cond = self._changed

            async def notify() -> None:
                async with cond:
                    cond.notify_all()

            with contextlib.suppress(RuntimeError):
                asyncio.get_running_loop().create_task(notify())

    def add_workers(self, count: int) -> None:
        """Ready pods worker-1 ... worker-`count` (a ReplicaSet's, on no Node) of Slurm nodes n1 ..."""
        for i in range(1, count + 1):
            self.add_pod(f"worker-{i}", hostname=f"n{i}")

    def add_pod(
        self,
        name: str,
        *,
        namespace: str = "slurm",
        hostname: str | None = None,
        node_name: str | None = None,
        labels: dict[str, str] | None = None,
        ready: bool = True,
        owner_kind: str | None = "ReplicaSet",
        created: str | None = None,
        owner_api_version: str = "apps/v1",  # slinky.slurm.net/v1beta1 for a Slinky NodeSet
    ) -> Obj:
        owners = (
            [
                {
                    "apiVersion": owner_api_version,
                    "kind": owner_kind,
                    "name": "workers-abc",
                    "uid": str(uuid.uuid4()),
                    "controller": True,
                }
            ]
            if owner_kind
            else []
        )
        pod: Obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": str(uuid.uuid4()),
                "labels": labels if labels is not None else {"app": "slurmd"},
                "annotations": {},
                "ownerReferences": owners,
                "resourceVersion": self._bump(),
                "creationTimestamp": created or now_micro()[:19] + "Z",
            },
            "spec": {
                "hostname": hostname or name,
                "containers": [{"name": "slurmd", "image": "slurmd"}],
                **({"nodeName": node_name} if node_name else {}),
            },
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            },
        }
        self.pods[(namespace, name)] = pod
        self._record("ADDED", pod)
        return pod

    def issue_token(
        self,
        pod: str,
        *,
        namespace: str = "slurm",
        service_account: str = "slurm-worker",
        audiences: tuple[str, ...] = ("slurm-sidecars",),
    ) -> str:
        """A projected ServiceAccount token for `pod` (which must exist: the token is bound to its
        uid), valid for `audiences`; what a TokenReview says of it is below."""
        bound = self.pods[(namespace, pod)]
        token = "eyJhbGciOiJSUzI1NiJ9." + uuid.uuid4().hex + "." + uuid.uuid4().hex  # a JWT's shape
        self.sa_tokens[token] = {
            "namespace": namespace,
            "service_account": service_account,
            "pod": pod,
            "pod_uid": bound["metadata"]["uid"],
            "node": bound["spec"].get("nodeName", ""),
            "audiences": list(audiences),
            "jti": str(uuid.uuid4()),
        }
        return token

    def add_node(
        self, name: str, annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None
    ) -> Obj:
        """A Kubernetes Node in the shape the API serves (v1 Node, cluster-scoped)."""
        node: Obj = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "uid": str(uuid.uuid4()),
                "labels": {"kubernetes.io/hostname": name, **(labels or {})},
                "annotations": dict(annotations or {}),
                "resourceVersion": self._bump(),
                "creationTimestamp": now_micro()[:19] + "Z",
            },
            "spec": {},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                # every field the real API serves: kubernetes-asyncio's model refuses a node without them
                "nodeInfo": {
                    "architecture": "amd64",
                    "bootID": str(uuid.uuid4()),
                    "containerRuntimeVersion": "containerd://1.7.24",
                    "kernelVersion": "6.1.0-28-amd64",
                    "kubeProxyVersion": "v1.31.4",
                    "kubeletVersion": "v1.31.4",
                    "machineID": uuid.uuid4().hex,
                    "operatingSystem": "linux",
                    "osImage": "Debian GNU/Linux 12 (bookworm)",
                    "systemUUID": str(uuid.uuid4()),
                },
            },
        }
        self.nodes[name] = node
        self._record("ADDED", node, self.node_history)
        return node

    def annotate_node(self, name: str, annotations: dict[str, str | None]) -> None:
        """As `kubectl annotate node`: None removes one."""
        self._patch_node(name, {"metadata": {"annotations": annotations}})

    def label_node(self, name: str, labels: dict[str, str | None]) -> None:
        """As `kubectl label node`: None removes one."""
        self._patch_node(name, {"metadata": {"labels": labels}})

    def _patch_node(self, name: str, patch: Obj) -> None:
        node = self.nodes[name]
        merge_patch(node, patch)
        node["metadata"]["resourceVersion"] = self._bump()
        self._record("MODIFIED", node, self.node_history)

    def set_node_spec(
        self, name: str, *, unschedulable: bool | None = None, taints: list[Obj] | None = None
    ) -> None:
        """As `kubectl cordon/uncordon` (spec.unschedulable) or `kubectl taint` (spec.taints)."""
        node = self.nodes[name]
        if unschedulable is not None:
            if unschedulable:
                node["spec"]["unschedulable"] = True
            else:
                node["spec"].pop("unschedulable", None)
        if taints is not None:
            if taints:
                node["spec"]["taints"] = copy.deepcopy(taints)
            else:
                node["spec"].pop("taints", None)
        node["metadata"]["resourceVersion"] = self._bump()
        self._record("MODIFIED", node, self.node_history)

    def set_node_condition(
        self, name: str, type: str, status: str | None, reason: str = "", message: str = ""
    ) -> None:
        """As a node-problem-detector or NVSentinel writes status.conditions (None removes the type)."""
        node = self.nodes[name]
        kept = [c for c in node["status"]["conditions"] if c["type"] != type]
        if status is not None:
            stamp = now_micro()[:19] + "Z"
            kept.append(
                {
                    "type": type,
                    "status": status,
                    "reason": reason,
                    "message": message,
                    "lastHeartbeatTime": stamp,
                    "lastTransitionTime": stamp,
                }
            )
        node["status"]["conditions"] = kept
        node["metadata"]["resourceVersion"] = self._bump()
        self._record("MODIFIED", node, self.node_history)

    def set_compute_domain(
        self, name: str, nodes: list[str], *, namespace: str = "default", clique: str = "1d5e.7"
    ) -> Obj:
        """Create or update a ComputeDomain as the DRA driver's controller writes it: status.nodes
        lists each Node whose IMEX daemon joined (name, ipAddress, cliqueID, index, status)."""
        key = (namespace, name)
        cd = self.compute_domains.get(key)
        kind = "MODIFIED" if cd is not None else "ADDED"
        if cd is None:
            cd = {
                "apiVersion": "resource.nvidia.com/v1beta1",
                "kind": "ComputeDomain",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "uid": str(uuid.uuid4()),
                    "creationTimestamp": now_micro()[:19] + "Z",
                },
                "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}}},
                "status": {"status": "NotReady"},
            }
            self.compute_domains[key] = cd
        cd["status"] = {
            "status": "Ready" if nodes else "NotReady",
            "nodes": [
                {"name": n, "ipAddress": f"10.0.0.{i + 1}", "cliqueID": clique, "index": i, "status": "Ready"}
                for i, n in enumerate(nodes)
            ],
        }
        cd["metadata"]["resourceVersion"] = self._bump()
        self._record(kind, cd, self.cd_history)
        return cd

    def delete_compute_domain(self, name: str, namespace: str = "default") -> None:
        cd = self.compute_domains.pop((namespace, name))
        cd["metadata"]["resourceVersion"] = self._bump()
        self._record("DELETED", cd, self.cd_history)

    def set_ready(self, name: str, ready: bool, namespace: str = "slurm") -> None:
        pod = self.pods[(namespace, name)]
        pod["status"]["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
        pod["metadata"]["resourceVersion"] = self._bump()
        self._record("MODIFIED", pod)

    def compact(self) -> None:
        """As etcd's compaction (and the watch cache's window moving on): a watch from any version
        before now answers 410 Gone."""
        self.min_watch_rv = self.rv

    def drop_watches(self) -> None:
        """End every open watch at once, without a last bookmark (an API server restarting): each
        watcher resumes from the last version it saw."""
        for task in list(self._watches):
            task.cancel()

    def inject(self, method: str, path_contains: str, status: int, times: int = 1) -> None:
        self.faults.append(Fault(method.upper(), path_contains, status, times))

    def stall(self, method: str, path_contains: str, seconds: float, times: int = 1) -> None:
        """The next `times` matching requests are answered only after `seconds` (a half-open
        connection, an overloaded API server): what a client without a deadline waits on for ever."""
        self.faults.append(Fault(method.upper(), path_contains, 0, times, seconds))

    def black_hole(self, method: str, path_contains: str, times: int = 1) -> None:
        """The next `times` matching requests are accepted (200, headers sent) and then sent nothing,
        not even a bookmark, until the client gives up: a half-open connection, a dropped NAT entry."""
        self.faults.append(Fault(method.upper(), path_contains, 0, times, black_hole=True))

    def writes_by(self, token: str, since: int = 0) -> list[Request]:
        """The audit log: writes sent with `token` from request number `since` on, refused or not."""
        return [r for r in self.mutating(since) if r.token == token]

    def calls(self, since: int = 0) -> Counter[tuple[str, str]]:
        """Requests from number `since` on (an index into `requests`), counted by (verb, resource)."""
        return Counter((r.verb, r.resource) for r in self.requests[since:])

    def mutating(self, since: int = 0) -> list[Request]:
        """The writes among the requests from number `since` on."""
        return [r for r in self.requests[since:] if r.verb in MUTATING]

    def answered(self, method: str, path_contains: str, status: int | None = None) -> list[Request]:
        return [
            r
            for r in self.requests
            if r.method == method.upper()
            and path_contains in r.path
            and (status is None or r.status == status)
        ]

    # ------------------------------------------------------------------ server
    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        body: Any = None
        if request.can_read_body:
            raw = await request.read()
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                return refusal(400, "BadRequest", "body is not JSON")
        request[BODY] = body
        ctype = content_type(request)
        watching = _watching(request)
        verb, resource = verb_and_resource(request.method, request.path, watching)
        given = request.headers.get("Authorization", "").removeprefix("Bearer ")
        record = Request(request.method, request.path, 0, ctype, body, verb, resource, given)
        self.requests.append(record)  # on arrival: an open watch is counted when it is opened
        if given != self.token and given not in self.tokens:
            resp: web.StreamResponse = refusal(401, "Unauthorized", "Unauthorized")
        elif given in self.blocked:
            resp = refusal(403, "Forbidden", "Forbidden")
        else:
            fault = next(
                (
                    f
                    for f in self.faults
                    if f.times > 0 and f.method == request.method and f.path_contains in request.path
                ),
                None,
            )
            if fault is not None:
                fault.times -= 1
            if fault is not None and fault.black_hole:
                resp = await self._black_holed(request)
            elif fault is not None and fault.status == 0:
                await self._held_open(asyncio.sleep(fault.delay))
                resp = await handler(request)
            elif fault is not None:
                resp = refusal(fault.status, "Injected", f"injected {fault.status}")
                if fault.status == 429:
                    resp.headers["Retry-After"] = "0"
            else:
                resp = await handler(request)
        record.status = resp.status
        return resp

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware])
        pods = "/api/v1/namespaces/{ns}/pods"
        app.router.add_get(pods, self.list_pods)
        app.router.add_get(pods + "/{name}", self.get_pod)
        app.router.add_patch(pods + "/{name}", self.patch_pod)
        app.router.add_patch(pods + "/{name}/status", self.patch_pod_status)
        app.router.add_delete(pods + "/{name}", self.delete_pod)
        app.router.add_post("/api/v1/namespaces/{ns}/events", self.create_event)
        app.router.add_get("/apis/resource.nvidia.com/v1beta1/computedomains", self.list_compute_domains)
        apps = "/apis/apps/v1/namespaces/{ns}"
        app.router.add_get(apps + "/deployments/{name}", self.get_deployment)
        app.router.add_patch(apps + "/deployments/{name}", self.patch_deployment)
        app.router.add_get(apps + "/replicasets", self.list_replica_sets)
        app.router.add_get("/api/v1/nodes", self.list_nodes)
        app.router.add_get("/api/v1/nodes/{name}", self.get_node)
        app.router.add_patch("/api/v1/nodes/{name}", self.patch_node)
        app.router.add_post("/apis/authentication.k8s.io/v1/tokenreviews", self.create_token_review)
        # they build on this module's helpers
        from tests.fakekube.named import Named
        from tests.fakekube.workloads import Workloads

        config_maps = Named(self, self.config_maps, "configmaps", CONFIG_MAP, uid=True, optimistic=False)
        config_maps.routes(app, "/api/v1/namespaces/{ns}/configmaps")
        leases = Named(self, self.leases, "leases.coordination.k8s.io", {}, uid=False, optimistic=True)
        leases.routes(app, "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases")
        Workloads(self).routes(app)
        return app

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[str]:
        self._changed = asyncio.Condition()
        runner = web.AppRunner(self.app(), access_log=None, shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            for task in list(self._watches):  # a watch runs until its timeout: end it with the server
                task.cancel()
            await runner.cleanup()

    # ------------------------------------------------------------------ pods
    async def list_pods(self, request: web.Request) -> web.StreamResponse:
        ns, q = request.match_info["ns"], request.query
        selector = q.get("labelSelector")
        if _watching(request):
            return await self._watch(request, ns, selector)
        fields = q.get("fieldSelector") or ""
        if fields and not fields.startswith("spec.nodeName="):
            return refusal(400, "BadRequest", f'"{fields}" is not a known field selector here')
        on_node = fields.partition("=")[2] if fields else None
        items = [
            copy.deepcopy(p)
            for (pns, _), p in sorted(self.pods.items())
            if pns == ns
            and _selected(p, selector)
            and (on_node is None or p["spec"].get("nodeName") == on_node)
        ]
        return self._list("Pod", "v1", items)

    async def _black_holed(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)

        async def silent() -> None:
            while request.transport is not None and not request.transport.is_closing():
                await asyncio.sleep(0.1)

        with contextlib.suppress(asyncio.CancelledError, ConnectionResetError):
            await self._held_open(silent())
        return resp

    async def _held_open(self, wait: Awaitable[Any]) -> None:
        """Wait in a request's handler, ended with the server like an open watch."""
        me = asyncio.current_task()
        assert me is not None
        self._watches.add(me)
        try:
            await wait
        finally:
            self._watches.discard(me)

    def _list(self, kind: str, api_version: str, items: list[Obj]) -> web.Response:
        """A list document as the API server writes it: the items and the version to watch from."""
        return web.json_response(
            {
                "kind": f"{kind}List",
                "apiVersion": api_version,
                "metadata": {"resourceVersion": str(self.rv)},
                "items": items,
            }
        )

    async def _watch(
        self,
        request: web.Request,
        ns: str | None,
        selector: str | None,
        history: list[tuple[int, str, Obj]] | None = None,
    ) -> web.StreamResponse:
        since = int(request.query.get("resourceVersion") or self.rv)
        timeout = float(request.query.get("timeoutSeconds") or 300)
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        if since < self.min_watch_rv:
            gone = {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "reason": "Expired",
                "message": f"too old resource version: {since}",
                "code": 410,
            }
            await resp.write(json.dumps({"type": "ERROR", "object": gone}).encode() + b"\n")
            return resp
        assert self._changed is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        sent = since
        me = asyncio.current_task()
        assert me is not None
        self._watches.add(me)
        bookmarks = request.query.get("allowWatchBookmarks") in {"true", "1", "True"}
        try:
            await self._stream(
                resp,
                request,
                ns=ns,
                selector=selector,
                sent=sent,
                deadline=deadline,
                history=self.history if history is None else history,
                bookmark_kind=("Pod" if history is None else "Node") if bookmarks else None,
            )
        except (asyncio.CancelledError, ConnectionResetError):
            pass
        finally:
            self._watches.discard(me)
        return resp

    async def _stream(
        self,
        resp: web.StreamResponse,
        request: web.Request,
        *,
        ns: str | None,
        selector: str | None,
        sent: int,
        deadline: float,
        history: list[tuple[int, str, Obj]],
        bookmark_kind: str | None = None,
    ) -> None:
        """Events after `sent` until the deadline. With bookmarks asked for, as the API server's
        watch cache does: a BOOKMARK every `bookmark_seconds` and just before the watch times out,
        carrying the current resourceVersion (etcd's progress: every event of this history up to
        it has been sent), so a watcher of a quiet set can resume from a version that compaction has
        not passed. A watch ended by `drop_watches` gets none, as when a connection breaks."""
        assert self._changed is not None
        loop = asyncio.get_running_loop()
        next_bookmark = loop.time() + self.bookmark_seconds

        def alive() -> bool:
            return request.transport is not None and not request.transport.is_closing()

        async def bookmark() -> None:
            mark = {"kind": bookmark_kind, "apiVersion": "v1", "metadata": {"resourceVersion": str(self.rv)}}
            await resp.write(json.dumps({"type": "BOOKMARK", "object": mark}).encode() + b"\n")

        while loop.time() < deadline and alive():
            for rv, kind, pod in list(history):
                here = ns == "*" or pod["metadata"].get("namespace") == ns
                if rv > sent and here and _selected(pod, selector):
                    await resp.write(json.dumps({"type": kind, "object": pod}).encode() + b"\n")
                sent = max(sent, rv)
            if bookmark_kind is not None and loop.time() >= next_bookmark:
                await bookmark()
                next_bookmark = loop.time() + self.bookmark_seconds
            # asyncio.timeout, not wait_for: wait_for runs Condition.wait in a task of its own, which a
            # server shutting down mid-wait left pending ("Lock is not acquired", a leaked task)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(0.2, max(0.01, deadline - loop.time()))), self._changed:
                    await self._changed.wait()
        if bookmark_kind is not None and alive():
            await bookmark()

    # ------------------------------------------------------------------ deployments, replica sets
    def put_pod(self, pod: Obj) -> None:
        """A pod made by a controller (deployments.py), announced to the watches."""
        pod["metadata"]["resourceVersion"] = self._bump()
        self.pods[(pod["metadata"]["namespace"], pod["metadata"]["name"])] = pod
        self._record("ADDED", pod)

    def touch_pod(self, pod: Obj) -> None:
        pod["metadata"]["resourceVersion"] = self._bump()
        self._record("MODIFIED", pod)

    def remove_pod(self, namespace: str, name: str) -> None:
        pod = self.pods.pop((namespace, name), None)
        if pod is not None:
            pod["metadata"]["resourceVersion"] = self._bump()
            self._record("DELETED", pod)

    async def get_deployment(self, request: web.Request) -> web.StreamResponse:
        found = self.deployments.get((request.match_info["ns"], request.match_info["name"]))
        return not_found("deployments.apps", request) if found is None else web.json_response(found)

    async def patch_deployment(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        asked = patch_of(request, self.deployments.get((request.match_info["ns"], name)), "deployments.apps")
        if isinstance(asked, web.Response):
            return asked
        found, patch = asked
        strategic = content_type(request) == "application/strategic-merge-patch+json"
        changed = (strategic_merge if strategic else merge_patch)(copy.deepcopy(found), patch)
        rolling = changed["spec"].get("strategy", {}).get("rollingUpdate") or {}
        if rolling.get("maxSurge", "25%") in {0, "0%"} and rolling.get("maxUnavailable", "25%") in {0, "0%"}:
            return refusal(  # the API server's own validation, in its words
                422,
                "Invalid",
                f'Deployment.apps "{name}" is invalid: spec.strategy.rollingUpdate.maxUnavailable: '
                "Invalid value: 0: may not be 0 when `maxSurge` is 0",
            )
        if changed["spec"] != found["spec"]:
            changed["metadata"]["generation"] = found["metadata"].get("generation", 1) + 1
        changed["metadata"]["resourceVersion"] = self._bump()
        self.deployments[(request.match_info["ns"], name)] = changed
        return web.json_response(changed)

    async def list_replica_sets(self, request: web.Request) -> web.StreamResponse:
        ns, selector = request.match_info["ns"], request.query.get("labelSelector")
        items = [
            copy.deepcopy(r)
            for (rns, _), r in sorted(self.replica_sets.items())
            if rns == ns and _selected(r, selector)
        ]
        return self._list("ReplicaSet", "apps/v1", items)

    # ------------------------------------------------------------------ nodes
    async def list_nodes(self, request: web.Request) -> web.StreamResponse:
        if _watching(request):
            return await self._watch(request, None, request.query.get("labelSelector"), self.node_history)
        items = [copy.deepcopy(n) for _, n in sorted(self.nodes.items())]
        return self._list("Node", "v1", items)

    async def list_compute_domains(self, request: web.Request) -> web.StreamResponse:
        if not self.serve_crds:
            return refusal(404, "NotFound", "the server could not find the requested resource")
        if _watching(request):
            return await self._watch(request, "*", request.query.get("labelSelector"), self.cd_history)
        items = [copy.deepcopy(c) for _, c in sorted(self.compute_domains.items())]
        return self._list("ComputeDomain", "resource.nvidia.com/v1beta1", items)

    async def get_node(self, request: web.Request) -> web.StreamResponse:
        node = self.nodes.get(request.match_info["name"])
        return not_found("nodes", request) if node is None else web.json_response(node)

    async def patch_node(self, request: web.Request) -> web.StreamResponse:
        """Only metadata (annotations, labels) is taken from the patch: spec and status are the
        tests' to set (`set_node_spec`, `set_node_condition`), as a kubelet or an admin would."""
        asked = patch_of(request, self.nodes.get(request.match_info["name"]), "nodes", "metadata")
        if isinstance(asked, web.Response):
            return asked
        node, patch = asked
        meta = {k: v for k, v in (patch.get("metadata") or {}).items() if k in ("annotations", "labels")}
        merge_patch(node["metadata"], meta)
        node["metadata"]["resourceVersion"] = self._bump()
        self._record("MODIFIED", node, self.node_history)
        return web.json_response(node)

    def _pod(self, request: web.Request) -> Obj | None:
        return self.pods.get((request.match_info["ns"], request.match_info["name"]))

    async def get_pod(self, request: web.Request) -> web.StreamResponse:
        pod = self._pod(request)
        return not_found("pods", request) if pod is None else web.json_response(pod)

    async def patch_pod(self, request: web.Request) -> web.StreamResponse:
        asked = patch_of(request, self._pod(request), "pods")
        if isinstance(asked, web.Response):
            return asked
        pod, patch = asked
        merge_patch(pod, patch)
        pod["metadata"]["resourceVersion"] = self._bump()
        self._record("MODIFIED", pod)
        return web.json_response(pod)

    async def patch_pod_status(self, request: web.Request) -> web.StreamResponse:
        """The status subresource: only `status` is taken from the patch; conditions merge by type
        (their strategic-merge key), as the real API server does."""
        asked = patch_of(request, self._pod(request), "pods", "status")
        if isinstance(asked, web.Response):
            return asked
        pod, patch = asked
        status = copy.deepcopy(patch.get("status") or {})
        given = status.pop("conditions", None)
        if given is not None:
            if not isinstance(given, list) or not all(isinstance(c, dict) and c.get("type") for c in given):
                return refusal(422, "Invalid", "status.conditions: each needs a type")
            if content_type(request) == "application/strategic-merge-patch+json":
                current = {c["type"]: c for c in pod["status"].get("conditions") or []}
                for cond in given:
                    current[cond["type"]] = merge_patch(current.get(cond["type"], {}), cond)
                pod["status"]["conditions"] = list(current.values())
            else:  # a JSON merge patch replaces a list whole
                pod["status"]["conditions"] = copy.deepcopy(given)
        merge_patch(pod["status"], status)
        pod["metadata"]["resourceVersion"] = self._bump()
        self._record("MODIFIED", pod)
        return web.json_response(pod)

    async def delete_pod(self, request: web.Request) -> web.StreamResponse:
        pod = self._pod(request)
        if pod is None:
            return not_found("pods", request)
        body = request[BODY] or {}
        uid = (body.get("preconditions") or {}).get("uid")
        if uid and uid != pod["metadata"]["uid"]:
            return refusal(409, "Conflict", "Precondition failed: UID in precondition does not match")
        del self.pods[(request.match_info["ns"], request.match_info["name"])]
        pod["metadata"]["resourceVersion"] = self._bump()
        self._record("DELETED", pod)
        return web.json_response(pod)

    # ------------------------------------------------------------------ events
    async def create_event(self, request: web.Request) -> web.StreamResponse:
        event = request[BODY]
        if not isinstance(event, dict) or "involvedObject" not in event:
            return refusal(422, "Invalid", "event needs involvedObject")
        meta = event.setdefault("metadata", {})
        meta.setdefault("name", (meta.get("generateName") or "event.") + uuid.uuid4().hex[:10])
        meta["namespace"] = request.match_info["ns"]
        meta["resourceVersion"] = self._bump()
        self.events.append(event)
        return web.json_response(event, status=201)

    # ------------------------------------------------------------------ token reviews
    async def create_token_review(self, request: web.Request) -> web.StreamResponse:
        """As the API server answers it: 201 with the review; `status.authenticated` true (with the
        ServiceAccount's user, the bound pod in `user.extra` and the audiences asked for that the
        token holds) or absent (with `status.error`), never an HTTP error for a bad token."""
        review = request[BODY]
        spec = review.get("spec") if isinstance(review, dict) else None
        if not isinstance(spec, dict) or not isinstance(spec.get("token"), str) or not spec["token"]:
            return refusal(
                422, "Invalid", "TokenReview.authentication.k8s.io is invalid: spec.token: Required"
            )
        wanted = spec.get("audiences") or ["https://kubernetes.default.svc.cluster.local"]
        status: Obj = {"user": {}}
        found = self.sa_tokens.get(spec["token"])
        pod = self.pods.get((found["namespace"], found["pod"])) if found else None
        if found is None:
            status["error"] = "[invalid bearer token, token lookup failed]"
        elif pod is None or pod["metadata"]["uid"] != found["pod_uid"]:
            status["error"] = "[invalid bearer token, service account token has been invalidated]"
        elif not set(wanted) & set(found["audiences"]):
            status["error"] = (
                f"[invalid bearer token, token audiences {json.dumps(found['audiences'])} is invalid for "
                f"the target audiences {json.dumps(wanted)}]"
            )
        else:
            ns, sa = found["namespace"], found["service_account"]
            extra = {
                "authentication.kubernetes.io/credential-id": [f"JTI={found['jti']}"],
                "authentication.kubernetes.io/pod-name": [found["pod"]],
                "authentication.kubernetes.io/pod-uid": [found["pod_uid"]],
            }
            if found["node"]:
                extra["authentication.kubernetes.io/node-name"] = [found["node"]]
            status = {
                "authenticated": True,
                "user": {
                    "username": f"system:serviceaccount:{ns}:{sa}",
                    "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{ns}/{sa}")),
                    "groups": [
                        "system:serviceaccounts",
                        f"system:serviceaccounts:{ns}",
                        "system:authenticated",
                    ],
                    "extra": extra,
                },
                "audiences": [a for a in wanted if a in found["audiences"]],
            }
        body = {
            "kind": "TokenReview",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"creationTimestamp": None},
            "spec": spec,
            "status": status,
        }
        return web.json_response(body, status=201)
