"""Stand-ins for the parts a writer's rules read and write, for tests that need no Slurm: the shared
Node cache (listed) and the drain batcher (which records what it was asked)."""

from __future__ import annotations

import asyncio
from typing import Any

from sidecars.kube import KubeNode


class Nodes:
    """The Node cache, listed, holding these Nodes."""

    def __init__(self, *nodes: KubeNode) -> None:
        self.nodes = {n.name: n for n in nodes}
        self.synced = asyncio.Event()
        self.synced.set()


class Drains:
    """The drain batcher: what was asked, in order; `pending` as the test sets it."""

    def __init__(self) -> None:
        self.pending: dict[str, Any] = {}
        self.asked: list[tuple[str, str, str]] = []

    def submit(self, node: str, action: str, reason: str) -> None:
        self.asked.append((node, action, reason))
