"""Who is calling /v1/, and what they may do there: operator, viewer, or the agent of one node.

- The operator's and the viewer's tokens are shared secrets from files, compared in constant time.
- A worker agent presents its pod's projected ServiceAccount token (its own audience, rotated by
  the kubelet). The API server's TokenReview says whether it is valid for our audience and which
  pod it is bound to (`authentication.kubernetes.io/pod-name` and `pod-uid`); that pod must be one
  of our worker pods, the same incarnation (uid), holding its Slurm node (claims). Its node is the
  one the pod cache names for it, the rule every other feature uses. Verdicts are cached for a
  short time by the token's hash, so 1,000 long-polling agents cost the API server a review per
  agent per minute, and a flood of made-up tokens costs at most a few reviews at a time.

Rules: reads (GET) for all three, an agent only its own node's record and the document; an
agent may drain, undrain and report its own node only (a report names its own pod); everything
else that writes (other nodes, maintenance, upgrades) is the operator's.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

import structlog
from aiohttp import web

from sidecars.protocol import drains

if TYPE_CHECKING:  # the type only: the Kubernetes client is loaded by whoever reviews tokens
    from sidecars.kube import TokenReview

log = structlog.get_logger(__name__)

Role = Literal["operator", "viewer", "agent"]
READS = frozenset({"GET", "HEAD", "OPTIONS"})
AGENT_WRITES = frozenset({"/v1/nodes/{name}/drain", "/v1/nodes/{name}/undrain", "/v1/nodes/{name}/report"})
AGENT_READS = frozenset({"/v1/nodes/{name}", "/v1/openapi.json"})
POD_NAME = "authentication.kubernetes.io/pod-name"
POD_UID = "authentication.kubernetes.io/pod-uid"
MAX_TOKEN_BYTES = 16 * 1024  # a ServiceAccount JWT is about 1 KB
REVIEWED_SECONDS = 60.0  # how long a verdict stands: a deleted pod's token is refused within this
REFUSED_SECONDS = 10.0
MAX_CACHED = 8192
MAX_REVIEWS_AT_ONCE = 8


@dataclass(frozen=True, slots=True)
class Caller:
    role: Role
    node: str = ""  # an agent's Slurm node
    namespace: str = ""  # an agent's pod
    pod: str = ""

    def refusal(self, method: str, route: str, name: str | None) -> str | None:
        """Why this caller may not make this request (None: it may)."""
        if self.role == "operator":
            return None
        if method in READS:
            if self.role == "viewer" or (route in AGENT_READS and name in (None, self.node)):
                return None
            return f"the agent of {self.node} reads its own node only"
        if self.role == "viewer":
            return "the viewer credential is read-only"
        if route in AGENT_WRITES and name == self.node:
            return None
        return f"the agent of {self.node} acts on its own node only; this needs the operator credential"

    def reason_refusal(self, action: str, reason: str) -> str | None:
        """Why an agent may not drain or undrain its own node with this reason (None: it may). It
        drains for its own pod's termination and gives back only such drains, an earlier pod's
        too, and for a fault its GPU check found (given back once the check passes): never an
        operator's, a maintenance window's or a cordon's drain of its node."""
        if self.role != "agent":
            return None
        own = drains.agent_reason(self.namespace, self.pod)
        if action == "drain" and (reason == own or reason.startswith(own + ":")):
            return None
        if action == "undrain" and reason.startswith(drains.AGENT) and " terminating" in reason:
            return None
        if reason.startswith(drains.GPU_CHECK):  # its own GPUs' check: drained, and given back
            return None
        return (
            f"an agent {action}s only for its pod's termination ({own!r}); this needs the operator credential"
        )


def roles(method: str, route: str) -> tuple[Role, ...]:
    """Who may make a request of this kind at all (an agent: on its own node only); the OpenAPI
    document's per-operation `security` is this."""
    if method.upper() in READS:
        return ("operator", "viewer", "agent") if route in AGENT_READS else ("operator", "viewer")
    return ("operator", "agent") if route in AGENT_WRITES else ("operator",)


# (namespace, pod, uid) -> the Slurm node that worker pod holds: "" when the pod is none of ours (or
# not this incarnation, or refused its claim), None while the pods are not known yet
Located = Callable[[str, str, str], str | None]


class Reviewer(Protocol):
    def __call__(self, token: str, audiences: tuple[str, ...]) -> Awaitable[TokenReview]: ...


class Unavailable(Exception):
    """The caller cannot be told apart now (the API server or the pod list is not there yet)."""


CALLER = web.RequestKey("caller", Caller)


class Access:
    def __init__(
        self,
        operator_token: str,
        viewer_token: str | None,
        *,
        review: Reviewer | None = None,
        audience: str = "",
        locate: Located | None = None,
        clock: Callable[[], float] = time.monotonic,
        refused: Callable[[str, int], None] = lambda identity, status: None,
    ) -> None:
        self._operator = f"Bearer {operator_token}".encode()
        self._viewer = f"Bearer {viewer_token}".encode() if viewer_token else None
        self._review = review if audience else None
        self._audience = audience
        self._locate = locate
        self._clock = clock
        self._refused = refused  # (identity, HTTP status): a metric a pager can watch
        self._verdicts: OrderedDict[bytes, tuple[float, TokenReview]] = OrderedDict()
        self._reviewing = asyncio.Semaphore(MAX_REVIEWS_AT_ONCE)

    async def identify(self, header: str) -> Caller | str:
        """The caller behind an Authorization header, or why none."""
        given = header.encode("utf-8", "replace")
        # both compared every time: which one matched takes no longer than a miss
        operator = hmac.compare_digest(given, self._operator)
        viewer = self._viewer is not None and hmac.compare_digest(given, self._viewer)
        if operator:
            return Caller("operator")
        if viewer:
            return Caller("viewer")
        token = header.removeprefix("Bearer ").strip() if header.startswith("Bearer ") else ""
        if not token or self._review is None:
            return "missing or wrong bearer token"
        if len(token) > MAX_TOKEN_BYTES or token.count(".") != 2:  # not a JWT: not worth a review
            return "missing or wrong bearer token"
        review = await self._reviewed(token)
        if not review.authenticated or self._audience not in review.audiences:
            return "missing or wrong bearer token"
        namespace, pod, uid = review.namespace, review.one(POD_NAME), review.one(POD_UID)
        if not namespace or not pod:
            return "a ServiceAccount token bound to a worker pod is needed"
        if self._locate is None:
            return "agent tokens are not accepted here"
        node = self._locate(namespace, pod, uid)
        if node is None:
            raise Unavailable("the worker pods are not listed yet")
        if not node:
            return f"pod {namespace}/{pod} is not a worker pod holding a Slurm node"
        return Caller("agent", node=node, namespace=namespace, pod=pod)

    async def _reviewed(self, token: str) -> TokenReview:
        key = hashlib.sha256(token.encode()).digest()
        now = self._clock()
        cached = self._verdicts.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        assert self._review is not None
        async with self._reviewing:
            try:
                review = await self._review(token, (self._audience,))
            except Exception as exc:  # the API server's trouble: say so, refuse nothing for good
                log.warning("token_review_failed", error=str(exc))
                raise Unavailable("cannot review the token now") from None
        ttl = REVIEWED_SECONDS if review.authenticated else REFUSED_SECONDS
        self._verdicts[key] = (self._clock() + ttl, review)
        self._verdicts.move_to_end(key)
        while len(self._verdicts) > MAX_CACHED:
            self._verdicts.popitem(last=False)
        return review

    async def check(self, request: web.Request) -> web.Response | None:
        """Identify and authorise a /v1/ request (the caller kept in `request[CALLER]`), or the
        refusal to answer with."""
        try:
            caller = await self.identify(request.headers.get("Authorization", ""))
        except Unavailable as exc:
            resp = web.json_response({"error": f"cannot tell who is calling: {exc}"}, status=503)
            resp.headers["Retry-After"] = "1"
            return resp
        if isinstance(caller, str):
            self._refused("unknown", 401)
            return web.json_response({"error": caller}, status=401)
        route = request.match_info.route.resource
        canonical = route.canonical if route is not None else request.path
        refused = caller.refusal(request.method, canonical, request.match_info.get("name"))
        if refused is not None:
            self._refused(caller.role, 403)
            if caller.role == "agent":  # a worker pod asking beyond its node: worth a look
                log.warning(
                    "agent_refused",
                    node=caller.node,
                    pod=f"{caller.namespace}/{caller.pod}",
                    method=request.method,
                    path=request.path[:200],
                )
            return web.json_response({"error": refused}, status=403)
        request[CALLER] = caller
        return None
