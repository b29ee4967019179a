"""A paced roll of the demo's workers: what `upgrade start` does to worker pods, done to the demo's
slurmd processes, which are its pods here.

The control plane's own roll (controlplane/changes/upgrade.py) needs the Kubernetes API: it deletes a
drained, empty worker's pod and the StatefulSet (or Deployment) brings the new one. The demo has no
Kubernetes, so the demo plays that controller: "replacing the pod" restarts the node's slurmd (stopped
with SIGTERM as the kubelet stops a container, started again as the pod's new container would be).
The pacing is the control plane's rules, asked of it through its API: at most `budget` workers out
of service, taken in its scale-in order, each drained with `slurm-sidecars: upgrade <revision>`,
replaced only once it runs nothing (its jobs are waited for, never killed), undrained once back. A
worker someone else drained is left alone, as the control plane's roll leaves it.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sidecars.controlplane.changes.budget import parse_budget
from sidecars.demo.polling import until
from sidecars.demo.stack import DemoStack
from sidecars.protocol import drains

Say = Callable[[str], None]


class RollFailed(RuntimeError):
    pass


@dataclass
class Rolled:
    """What the roll did: the order it took the workers in, the jobs it waited for, the restarts."""

    order: list[str] = field(default_factory=list)
    waited: dict[str, list[int]] = field(default_factory=dict)
    pids: dict[str, tuple[int, int]] = field(default_factory=dict)  # node -> (old slurmd, new slurmd)
    left_alone: dict[str, str] = field(default_factory=dict)  # node -> someone else's drain reason
    most_out_at_once: int = 0


class DemoRoll:
    def __init__(
        self, stack: DemoStack, revision: str, budget: str, say: Say, job_timeout: float = 120
    ) -> None:
        self.stack = stack
        self.reason = drains.UPGRADE + revision
        self.budget = budget
        self.say = say
        self.job_timeout = job_timeout
        self.done = Rolled()

    async def _node(self, name: str) -> dict[str, Any]:
        body = await self.stack.get(f"{self.stack.control_plane_url}/v1/nodes/{name}", auth=True)
        if not isinstance(body, dict):
            raise RollFailed(f"the control plane has no node {name}: {body}")
        return body

    async def _ask(self, name: str, action: str) -> None:
        url = f"{self.stack.control_plane_url}/v1/nodes/{name}/{action}"
        status, body = await self.stack.post(url, {"reason": self.reason})
        if status != 202:
            raise RollFailed(f"the control plane refused to {action} {name}: {status} {body}")

    async def run(self) -> Rolled:
        fleet = await self.stack.get(self.stack.control_plane_url + "/v1/nodes", auth=True)
        assert isinstance(fleet, list)
        todo = set()
        for n in fleet:
            theirs = "DRAIN" in n["flags"] and not (n.get("reason") or "").startswith(self.reason)
            if theirs:
                self.done.left_alone[n["name"]] = n.get("reason") or ""
            else:
                todo.add(n["name"])
        per_turn = parse_budget(self.budget, len(fleet))
        running: set[asyncio.Task[None]] = set()
        try:
            while todo or running:
                if todo and len(running) < per_turn:
                    order = await self.stack.get(
                        self.stack.control_plane_url + "/v1/scale-in-order", auth=True
                    )
                    assert isinstance(order, list)
                    name = next((n for n in order if n in todo), sorted(todo)[0])
                    todo.discard(name)
                    self.done.order.append(name)
                    running.add(asyncio.create_task(self._replace(name), name=f"demo-roll-{name}"))
                    continue
                finished, running = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for task in finished:
                    task.result()  # a worker that failed stops the roll, as a paused upgrade would
        finally:
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
        return self.done

    async def _replace(self, name: str) -> None:
        c = self.stack.cluster
        await self._ask(name, "drain")
        node = await until(f"{name} drained", lambda: self._drained(name), 30)
        await self._count_out()
        if node["jobs"]:
            jobs = node["jobs"]
            self.done.waited[name] = jobs
            word = "jobs" if len(jobs) > 1 else "job"
            self.say(f"  {name}: drained, waiting for {word} {', '.join(map(str, jobs))}")
            await until(f"the jobs on {name} to end", lambda: self._idle(name), self.job_timeout)
        before = await c.client().node(name)
        old = c.hostpid(f"slurmd-{name}")
        if before is None or old is None:
            raise RollFailed(f"{name}: no slurmd to replace")
        os.kill(old, signal.SIGTERM)  # as the kubelet stops the old pod's slurmd container
        await until(f"slurmd of {name} to stop", lambda: self._gone(old), 30)
        new = await c.start_slurmd(name)  # the new pod's slurmd
        self.done.pids[name] = (old, new)

        async def back() -> bool:
            node = await c.client().node(name)
            return (
                node is not None
                and node.state.registered
                and node.slurmd_start_time != before.slurmd_start_time
            )

        await until(f"{name} registered again", back, 60)
        await self._ask(name, "undrain")
        await until(f"{name} undrained", lambda: self._undrained(name), 30)
        self.say(f"  {name}: slurmd replaced (pid {old} -> {new}), registered again, undrained")

    async def _count_out(self) -> None:
        """The workers out of service for this roll, as the control plane sees them (the budget's check)."""
        fleet = await self.stack.get(self.stack.control_plane_url + "/v1/nodes", auth=True)
        assert isinstance(fleet, list)
        out = sum(1 for n in fleet if "DRAIN" in n["flags"] and n.get("reason") == self.reason)
        self.done.most_out_at_once = max(self.done.most_out_at_once, out)

    async def _drained(self, name: str) -> dict[str, Any] | None:
        node = await self._node(name)
        return node if "DRAIN" in node["flags"] and node.get("reason") == self.reason else None

    async def _idle(self, name: str) -> bool:
        return not (await self._node(name))["jobs"]

    async def _undrained(self, name: str) -> bool:
        return "DRAIN" not in (await self._node(name))["flags"]

    @staticmethod
    async def _gone(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False
