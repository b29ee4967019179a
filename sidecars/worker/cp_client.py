"""The agent's side of the control plane's `/v1/nodes/{name}` API: the long poll, drains, reports."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aiohttp

from sidecars.slurm.nodejson import parse_node
from sidecars.worker.observation import Observation

T = TypeVar("T")


class ControlPlaneUnavailable(RuntimeError):
    """The control plane did not answer usefully: fall back to Slurm."""


class ControlPlaneClient:
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
                    return Observation("control-plane", view=None)
                if r.status != 200:
                    raise ControlPlaneUnavailable(f"GET node: HTTP {r.status}: {(await r.text())[:200]}")
                return Observation("control-plane", view=parse_node(await r.json()))

        return await self._call(get())

    async def _post(self, path: str, body: dict[str, Any], expect: int) -> None:
        async def post() -> None:
            async with self.session.post(
                f"{self.url}/v1/nodes/{self.name}/{path}",
                json=body,
                headers=self._headers,
                timeout=aiohttp.ClientTimeout(total=self.timeout),
            ) as r:
                if r.status != expect:
                    raise ControlPlaneUnavailable(f"POST {path}: HTTP {r.status}: {(await r.text())[:200]}")

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
