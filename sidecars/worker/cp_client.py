"""The agent's side of the control plane's `/v1/nodes/{name}` API: the long poll, drains, reports."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aiohttp

from sidecars.runtime import answers
from sidecars.slurm.nodejson import NodeRecord, parse_node
from sidecars.worker.observation import Observation

T = TypeVar("T")
# the VersionedNode schema's required fields (controlplane/http/openapi/document.py)
NODE_FIELDS = frozenset({"name", "state", "flags", "reason", "jobs", "busy_until", "version"})


class ControlPlaneUnavailable(RuntimeError):
    """The control plane did not answer usefully: fall back to Slurm."""


class AgentClient:
    """The agent's side of the control plane's `/v1/nodes/{name}` API."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        url: str,
        token: Callable[[], str],
        name: str,
        timeout: float = 5.0,
    ) -> None:
        self.session = session
        self.url = url.rstrip("/")
        self.name = name
        self.timeout = timeout
        self._token = token  # asked at every request: a projected ServiceAccount token rotates

    @property
    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._token()}"}

    async def _call(self, coro: Awaitable[T]) -> T:
        try:
            return await coro
        except (aiohttp.ClientError, TimeoutError, ValueError, KeyError, TypeError) as exc:
            raise ControlPlaneUnavailable(f"{type(exc).__name__}: {exc}") from None

    async def node(self, version: int | None, wait: float) -> Observation:
        params = {"wait": f"{max(wait, 0):g}"}
        if version is not None:
            params["version"] = str(version)

        async def get() -> Observation:
            async with self.session.get(
                f"{self.url}/v1/nodes/{self.name}",
                params=params,
                headers=self._headers,
                timeout=aiohttp.ClientTimeout(total=wait + self.timeout),
            ) as r:
                if r.status == 404:
                    return await self._no_record(r)
                if r.status != 200:
                    said = (await answers.text(r))[:200]
                    raise ControlPlaneUnavailable(f"GET node: HTTP {r.status}: {said}")
                if r.content_type != "application/json":
                    raise ControlPlaneUnavailable(f"GET node: HTTP 200 as {r.content_type}, not JSON")
                return Observation("control-plane", view=self._versioned_node(await answers.json_of(r)))

        return await self._call(get())

    def _versioned_node(self, body: Any) -> NodeRecord:
        """This node in the API's VersionedNode shape, every field there: a 200 from something else
        (a login page, another API, another node) must not stand for the node's state, for it
        could hold a drain open for the whole grace period."""
        if not isinstance(body, dict) or not body.keys() >= NODE_FIELDS or body["name"] != self.name:
            raise ValueError(f"not this node's document: {str(body)[:200]!r}")
        if not isinstance(body["state"], str) or not isinstance(body["version"], int):
            raise ValueError(f"not this node's document: {str(body)[:200]!r}")
        return parse_node(body)

    async def _no_record(self, r: aiohttp.ClientResponse) -> Observation:
        """A 404 is an answer only in the control plane's own shape, naming this node: a wrong URL,
        a proxy's page or the router's own 404 is no word on the node, and must not end a drain."""
        text = (await answers.text(r))[:2000]
        body: Any = None
        if r.content_type == "application/json":
            with contextlib.suppress(ValueError):
                body = json.loads(text)
        if (
            isinstance(body, dict)
            and isinstance(body.get("error"), str)
            and body.get("node") == self.name
            and body.get("slurm") == "no_record"
        ):
            return Observation("control-plane", view=None)
        raise ControlPlaneUnavailable(f"GET node: HTTP 404 not from the control plane's API: {text[:200]!r}")

    async def _post(self, path: str, body: dict[str, Any], expect: int) -> None:
        async def post() -> None:
            async with self.session.post(
                f"{self.url}/v1/nodes/{self.name}/{path}",
                json=body,
                headers=self._headers,
                timeout=aiohttp.ClientTimeout(total=self.timeout),
            ) as r:
                if r.status != expect:
                    said = (await answers.text(r))[:200]
                    raise ControlPlaneUnavailable(f"POST {path}: HTTP {r.status}: {said}")

        await self._call(post())

    async def drain(self, reason: str) -> None:
        await self._post("drain", {"reason": reason}, 202)

    async def undrain(self, reason: str) -> None:
        await self._post("undrain", {"reason": reason}, 202)

    async def report(self, pod_namespace: str, pod_name: str, registered: bool, detail: str) -> None:
        await self._post(
            "report",
            {
                "pod_namespace": pod_namespace,
                "pod_name": pod_name,
                "registered": registered,
                "detail": detail,
            },
            204,
        )

    async def report_version(self, pod_namespace: str, pod_name: str, version: str) -> None:
        """The release this node's slurmd binary is (no `registered`: not a registration report)."""
        body = {"pod_namespace": pod_namespace, "pod_name": pod_name, "slurmd_version": version}
        await self._post("report", body, 204)
