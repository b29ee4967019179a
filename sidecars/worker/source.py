"""Where the agent learns its node's state, and how it changes it.

Alone, it asks Slurm itself, at a low rate (fast only while a drain waits). Coordinated, it long-polls
the control plane, which reads the whole cluster once per interval, and sends its drains there; when
the control plane cannot be reached it falls back to Slurm, so an outage never blocks a drain.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import aiohttp
import structlog

from sidecars.slurm import Job, NodeState, SlurmClient, SlurmError, SlurmUnreachable

log = structlog.get_logger(__name__)

Origin = Literal["slurm", "control-plane"]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class NodeView:
    """What the agent acts on, whichever source it came from."""

    name: str
    state: NodeState
    reason: str | None
    jobs: tuple[int, ...] | None = None  # None: this source does not say
    busy_until: int | None = None
    version: int | None = None  # the control plane's snapshot version


@dataclass(frozen=True, slots=True)
class Observation:
    """One look at the node. `view is None and error is None`: Slurm has no record of it.
    `error`: the look failed and nothing is known (a failed lookup never counts as drained)."""

    origin: Origin
    view: NodeView | None = None
    error: str | None = None
    controller_down: bool = False
    at: float = field(default_factory=time.monotonic)

    @property
    def ok(self) -> bool:
        return self.error is None


class ControlPlaneUnavailable(RuntimeError):
    """The control plane did not answer usefully: fall back to Slurm."""


class SlurmSource:
    """The node straight from Slurm. After a failed look it pings first (fast) before asking again
    (a down controller makes `scontrol show node` retry for ~9 s)."""

    def __init__(self, client: SlurmClient, name: str) -> None:
        self.client = client
        self.name = name
        self._controller_down = False

    async def observe(self) -> Observation:
        if self._controller_down:
            try:
                ping = await self.client.ping()
            except SlurmError as exc:  # even `scontrol ping` can time out
                return Observation("slurm", error=str(exc), controller_down=True)
            if not ping.up:
                return Observation(
                    "slurm", error="controller unreachable (scontrol ping)", controller_down=True
                )
        try:
            node = await self.client.node(self.name)
        except SlurmUnreachable as exc:
            self._controller_down = True
            return Observation("slurm", error=str(exc), controller_down=True)
        except SlurmError as exc:
            return Observation("slurm", error=str(exc))
        self._controller_down = False
        if node is None:
            return Observation("slurm", view=None)
        reason = node.reason.text if node.reason else None
        return Observation("slurm", view=NodeView(node.name, node.state, reason))

    async def jobs_here(self) -> list[Job]:
        return [j for j in await self.client.jobs() if self.name in j.nodes]

    async def drain(self, reason: str) -> bool:
        """Set DRAIN with our reason, unless the node is drained already: a write with a reason
        replaces the one there, so it rests on a look taken just before it, never on an older one
        (Slurm has no conditional update; what is left is the few milliseconds between the two)."""
        now = await self._fresh()
        if now.view is None or now.view.state.drain:
            return False
        await self.client.drain([self.name], reason)
        return True

    async def undrain(self, reason: str) -> bool:
        """Clear a drain (or a time-out's DOWN) only while its reason is still exactly `reason`,
        looked at now: the control plane's rule, so both paths behave alike."""
        now = await self._fresh()
        if now.view is None or now.view.reason != reason:
            return False
        state = now.view.state
        # RESUME also clears a DOWN we set on a drain time-out; UNDRAIN alone keeps DOWN
        if state.base == "DOWN":
            await self.client.resume([self.name])
        elif state.drain:
            await self.client.undrain([self.name])
        else:
            return False
        return True

    async def _fresh(self) -> Observation:
        now = await self.observe()
        if not now.ok:
            raise SlurmError(("scontrol", "show", "node"), now.error or "lookup failed")
        return now


def view_from_json(obj: dict[str, Any]) -> NodeView:
    """The control plane's node object: `{"name","state","flags","reason","jobs","busy_until","version"}`."""
    state = NodeState(
        str(obj.get("state") or "UNKNOWN").upper(), frozenset(str(f).upper() for f in obj.get("flags") or [])
    )
    jobs = obj.get("jobs")
    busy = obj.get("busy_until")
    version = obj.get("version")
    return NodeView(
        name=str(obj["name"]),
        state=state,
        reason=obj.get("reason") or None,
        jobs=tuple(int(j) for j in jobs) if isinstance(jobs, list) else None,
        busy_until=int(busy) if isinstance(busy, int | float) else None,
        version=int(version) if isinstance(version, int) else None,
    )


class ControlPlaneClient:
    """The agent's side of the control plane's `/v1/nodes/{name}` API."""

    def __init__(
        self, session: aiohttp.ClientSession, url: str, token: str, name: str, timeout: float = 5.0
    ) -> None:
        self.session = session
        self.url = url.rstrip("/")
        self.name = name
        self.timeout = timeout
        self._headers = {"Authorization": f"Bearer {token}"}

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
                return Observation("control-plane", view=view_from_json(await r.json()))

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


class NodeSource:
    """Either source, with the fallback: the control plane when configured and answering, else Slurm."""

    def __init__(self, slurm: SlurmSource) -> None:
        self.slurm = slurm
        self.cp: ControlPlaneClient | None = None
        self.retry_seconds = 5.0
        self._cp_retry_at = 0.0
        self._version: int | None = None
        self.mode: str = "alone"
        self._on_fallback: Callable[[], None] | None = None

    def attach(
        self,
        cp: ControlPlaneClient,
        *,
        retry_seconds: float = 5.0,
        on_fallback: Callable[[], None] | None = None,
    ) -> None:
        """Coordinated mode: ask the control plane first, Slurm when it does not answer
        (and the control plane again `retry_seconds` later)."""
        self.cp = cp
        self.retry_seconds = retry_seconds
        self.mode = "control-plane"
        self._on_fallback = on_fallback

    def _fell_back(self, what: str, exc: Exception) -> None:
        if self.mode != "fallback":
            log.warning("control_plane_unreachable_falling_back", during=what, error=str(exc))
        self.mode = "fallback"
        self._cp_retry_at = time.monotonic() + self.retry_seconds
        self._version = None
        if self._on_fallback is not None:
            self._on_fallback()

    @property
    def using_cp(self) -> bool:
        return self.cp is not None and time.monotonic() >= self._cp_retry_at

    async def observe(self, wait: float, wake: asyncio.Event) -> Observation | None:
        """The node's state after at most `wait` seconds; None when `wake` interrupted the wait."""
        if self.cp is not None and self.using_cp:
            poll = asyncio.ensure_future(self.cp.node(self._version, wait))
            woke = asyncio.ensure_future(wake.wait())
            try:
                await asyncio.wait({poll, woke}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                woke.cancel()
                if not poll.done():
                    poll.cancel()
                    with contextlib.suppress(asyncio.CancelledError, ControlPlaneUnavailable):
                        await poll
            if poll.cancelled():
                return None
            try:
                obs = poll.result()
            except ControlPlaneUnavailable as exc:
                self._fell_back("observe", exc)
                return await self.slurm.observe()
            if self.mode != "control-plane":
                log.info("control_plane_back")
            self.mode = "control-plane"
            self._version = obs.view.version if obs.view else None
            return obs
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), wait)
        if wake.is_set():
            return None
        return await self.slurm.observe()

    async def drain(self, reason: str) -> bool:
        """Ask for our drain; False when Slurm, looked at just now, shows the node drained already.
        The control plane makes the same check itself before its batched write."""
        if self.cp is not None and self.using_cp:
            try:
                await self.cp.drain(reason)
                return True
            except ControlPlaneUnavailable as exc:
                self._fell_back("drain", exc)
        return await self.slurm.drain(reason)

    async def undrain(self, reason: str) -> bool:
        if self.cp is not None and self.using_cp:
            try:
                await self.cp.undrain(reason)
                return True
            except ControlPlaneUnavailable as exc:
                self._fell_back("undrain", exc)
        return await self.slurm.undrain(reason)

    async def report(self, pod_namespace: str, pod_name: str, registered: bool, detail: str) -> None:
        """Best effort: the readiness probe, metric and Event say the same."""
        if self.cp is None:
            return
        try:
            await self.cp.report(pod_namespace, pod_name, registered, detail)
        except ControlPlaneUnavailable as exc:
            log.warning("report_not_delivered", error=str(exc))
