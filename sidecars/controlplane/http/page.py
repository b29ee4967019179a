"""The web page's data: the whole view in one JSON document, and a long poll on its version.

One request per refresh whatever the fleet size: the browser asks `GET /ui/api/state?since=V&wait=S`
and is answered when anything shown changed, or after S seconds with the same document. The large
part (every node and the scale-in order) is encoded once per fleet version and shared by every
viewer; the small parts (drains, drains nobody owns, config, cluster health) are built for each answer.

Node classes, in the order they are decided: `unregistered` (FUTURE, UNKNOWN, NOT_RESPONDING,
INVALID), `down`, `draining` (DRAIN with work still on it), `drained`, `busy`, `idle`, `other`.
A drain's progress runs from when it started (when we wrote it, else when first seen) to its
deadline: the expected end of the work that holds the node (its jobs' start + time limit).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from sidecars.controlplane.fleet import unowned
from sidecars.controlplane.fleet.drain_clock import DrainClock
from sidecars.controlplane.fleet.ranking import FAR_FUTURE
from sidecars.controlplane.fleet.snapshot import FleetNode, FleetSnapshot, FleetView
from sidecars.controlplane.http.config_feed import ConfigFeed
from sidecars.protocol.drains import REASON_PREFIX

CLASSES = ("idle", "busy", "draining", "drained", "down", "unregistered", "other")
_DIGITS = re.compile(r"(\d+)")


def node_class(node: FleetNode) -> str:
    if not node.registered:
        return "unregistered"
    if node.state == "DOWN":
        return "down"
    if node.drain:
        return "draining" if node.busy else "drained"
    if node.busy:
        return "busy"
    return "idle" if node.state == "IDLE" else "other"


def natural(name: str) -> tuple[Any, ...]:
    """n2 before n10."""
    return tuple(int(p) if p.isdigit() else p for p in _DIGITS.split(name))


def _node_json(n: FleetNode) -> dict[str, Any]:
    return {
        "name": n.name,
        "class": node_class(n),
        "state": "+".join([n.state, *n.flags]),
        "reason": n.reason,
        "jobs": list(n.jobs),
        "busy_until": n.busy_until,
        "partitions": list(n.partitions),
    }


SECTIONS = ("maintenance", "upgrade")  # on the page whether or not the control plane has them


@dataclass(eq=False)
class PageState:
    """Everything the page shows, and `wait(since, seconds)`: the long poll the page refreshes by."""

    fleet: FleetView
    _: KW_ONLY
    config: ConfigFeed
    drains: DrainClock
    cluster: Callable[[], Mapping[str, Any]] = dict
    unregistered_pods: Callable[[], list[dict[str, Any]]] = list
    # maintenance windows and upgrades, once the control plane has them (SECTIONS: shown as None till then)
    sections: Mapping[str, Callable[[], Any]] = field(default_factory=dict)
    clock: Callable[[], float] = time.time
    _local: int = field(default=0, init=False)  # bumped by touch(): a change the fleet version does not cover
    _next: asyncio.Future[None] | None = field(default=None, init=False)
    _big: tuple[int, bytes] | None = field(default=None, init=False)
    _closed: bool = field(default=False, init=False)

    # ------------------------------------------------------------------ change
    def touch(self) -> None:
        """Something shown changed outside the fleet snapshot (config, drains, a section): wake polls."""
        self._local += 1
        if self._next is not None and not self._next.done():
            self._next.set_result(None)
        self._next = None

    def close(self) -> None:
        """Answer every parked poll now (shutting down): a browser then retries elsewhere."""
        self._closed = True
        self.touch()

    def version(self) -> str:
        return f"{self.fleet.snapshot.version}.{self._local}"

    async def wait(self, since: str | None, seconds: float) -> bytes:
        """The document once its version differs from `since`, or as it is after `seconds`."""
        deadline = time.monotonic() + seconds
        while since == self.version() and not self._closed:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            if self._next is None:
                self._next = asyncio.get_running_loop().create_future()
            fleet_wait: asyncio.Future[Any] = asyncio.ensure_future(
                self.fleet.wait_change(self.fleet.snapshot.version, left)
            )
            local: asyncio.Future[Any] = self._next
            try:
                # asyncio.wait never cancels the shared future, whatever happens to this waiter
                await asyncio.wait([fleet_wait, local], timeout=left, return_when=asyncio.FIRST_COMPLETED)
            finally:
                fleet_wait.cancel()
                await asyncio.gather(fleet_wait, return_exceptions=True)
        return self.document()

    # ------------------------------------------------------------------ the document
    def _fleet_part(self, snap: FleetSnapshot) -> bytes:
        """Every node and the scale-in order, encoded once per fleet version."""
        if self._big is None or self._big[0] != snap.version:
            nodes = [_node_json(n) for n in sorted(snap.nodes.values(), key=lambda n: natural(n.name))]
            body = json.dumps({"nodes": nodes, "scale_in": list(snap.order)}, separators=(",", ":"))
            self._big = (snap.version, body[1:-1].encode())
        return self._big[1]

    def _drains(self, snap: FleetSnapshot) -> list[dict[str, Any]]:
        out = []
        for name, started in self.drains.started.items():
            node = snap.nodes.get(name)
            if node is None:
                continue
            deadline = node.busy_until if node.busy_until not in (None, FAR_FUTURE) else None
            out.append(
                {
                    "node": name,
                    "reason": node.reason,
                    "ours": (node.reason or "").startswith(REASON_PREFIX),
                    "jobs": list(node.jobs),
                    "started_at": started,
                    "deadline": deadline,
                    "unlimited": node.busy_until == FAR_FUTURE,
                }
            )
        return sorted(out, key=lambda d: (d["deadline"] or FAR_FUTURE, natural(d["node"])))

    def document(self) -> bytes:
        snap = self.fleet.snapshot
        now = self.clock()
        counts = dict.fromkeys(CLASSES, 0)
        for node in snap.nodes.values():
            counts[node_class(node)] += 1
        small = {
            "version": self.version(),
            "now": now,
            "loaded": snap.loaded,
            "cluster": dict(self.cluster()),
            "counts": counts,
            "unregistered_pods": self.unregistered_pods(),
            "drains": self._drains(snap),
            "drains_done": list(reversed(self.drains.done)),
            "unowned": unowned.status(unowned.find(snap.nodes.values())),
            "config": self.config.as_json(),
            **dict.fromkeys(SECTIONS),
            **{name: provide() for name, provide in self.sections.items()},
        }
        head = json.dumps(small, separators=(",", ":")).encode()
        return head[:-1] + b"," + self._fleet_part(snap) + b"}"
