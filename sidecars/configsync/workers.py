"""Did the workers take the change? The controller taking a new configuration is half of it: in
the configless (Slinky) shape every slurmd fetches its files from slurmctld, and a change counts as
applied only when every responding worker runs it.

From 23.11 `scontrol reconfigure` restarts every slurmd (24.11 and 26.05 measured: each node's
SlurmdStartTime jumps to the reconfigure's second, 60 ms after it), so a worker runs the new
configuration when its slurmd started at or after the reconfigure, as nebius/soperator checks. A
worker slurmctld cannot reach is marked NOT_RESPONDING by the reconfigure itself, usually at once:
it is named, not waited for. One not marked yet (seen on a loaded machine) has no start time after
24.11's re-exec: it is waited for while the check lasts, then named as not responding too. Where
slurmd serves `/readyz` (25.11+) a worker counts as responding only when that answers too. 26.05's
`GET /v0.0.45/conf` would say more, but answers 401 without an auth/jwt token (its plugin is not
installed with Debian's slurmd): not used. 22.05 reconfigures in place (slurmd keeps its PID and
start time): nothing to check there, and the status says so.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from sidecars.slurm import Node, SlurmClient, SlurmError, health

RESTARTS_FROM = (23, 11)


@dataclass
class Workers:
    """The verdict on the workers after one reconfigure; `method` says what it rests on."""

    method: str  # "slurmd_start_time", "slurmd_start_time+readyz", or "none: ..." (not checked)
    taken: list[str] = field(default_factory=list)
    not_taken: dict[str, str] = field(default_factory=dict)  # responding, still on the old set
    not_responding: dict[str, str] = field(default_factory=dict)  # named, not waited for
    # no slurmd start time: not registered with the controller since it (re)started. Waited for
    # while the check lasts, then named as not responding (a live slurmd registers within ~0.1 s)
    unregistered: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.not_taken

    @property
    def settled(self) -> bool:
        return self.ok and not self.unregistered

    def give_up_waiting(self) -> None:
        """The check's time is up: a worker still unregistered does not answer its controller."""
        for name in self.unregistered:
            self.not_responding[name] = "no registration since the reconfigure (slurmd start time unknown)"
        self.unregistered = []

    def reason(self) -> str:
        return "; ".join(f"worker {n} did not take the change: {why}" for n, why in self.not_taken.items())

    def as_json(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "taken": sorted(self.taken),
            "not_taken": dict(sorted(self.not_taken.items())),
            "not_responding": dict(sorted(self.not_responding.items())),
        }


def judge(nodes: list[Node], since: float) -> Workers:
    """Sort the registered nodes by whether their slurmd started at or after `since` (epoch)."""
    out = Workers("slurmd_start_time")
    second = int(since)  # SlurmdStartTime has 1-s resolution
    for n in nodes:
        if n.state.base == "FUTURE":
            continue  # a record without a worker
        if "NOT_RESPONDING" in n.state.flags:
            out.not_responding[n.name] = "slurmctld cannot reach its slurmd"
        elif not n.slurmd_start_time:
            out.unregistered.append(n.name)
        elif n.slurmd_start_time >= second:
            out.taken.append(n.name)
        else:
            started = time.strftime("%H:%M:%S", time.localtime(n.slurmd_start_time))
            out.not_taken[n.name] = f"slurmd started {started}, before the reconfigure"
    return out


class WorkerCheck:
    def __init__(self, client: SlurmClient, *, wait: float = 5.0) -> None:
        self.client = client
        self.wait = wait
        self.last: Workers | None = None

    async def _readyz(self, nodes: list[Node], verdict: Workers, default_port: int) -> None:
        async with aiohttp.ClientSession() as session:
            probed = {*verdict.taken, *verdict.not_taken, *verdict.unregistered}
            names = [n for n in nodes if n.name in probed]
            answers = await asyncio.gather(
                *(health.probe(session, n.address or "127.0.0.1", n.port or default_port) for n in names)
            )
        for n, a in zip(names, answers, strict=True):
            if a.ok and n.name in verdict.unregistered:
                # it answers, yet has not registered since the reconfigure: not running the change
                verdict.unregistered.remove(n.name)
                verdict.not_taken[n.name] = "answers /readyz but has not registered since the reconfigure"
            elif not a.ok:
                verdict.not_taken.pop(n.name, None)
                for names_of in (verdict.taken, verdict.unregistered):
                    if n.name in names_of:
                        names_of.remove(n.name)
                verdict.not_responding[n.name] = f"/readyz: {a.detail}"

    async def verify(self, since: float) -> Workers:
        """Poll until every responding worker restarted after `since`, at most `wait` seconds."""
        version = await self.client.version()
        if not version.at_least(*RESTARTS_FROM):
            self.last = Workers(f"none: Slurm {version} reconfigures slurmd in place")
            return self.last
        config = await self.client.show_config()
        use_http = health.served(version, config.get("CommunicationParameters", ""))
        port = int(config.get("SlurmdPort", "6818") or 6818)
        deadline = time.monotonic() + self.wait
        while True:
            try:
                nodes = await self.client.nodes()
                verdict = judge(nodes, since)
                if use_http:
                    verdict.method = "slurmd_start_time+readyz"
                    await self._readyz(nodes, verdict, port)
            except SlurmError as exc:
                verdict = Workers("slurmd_start_time", not_taken={"*": f"nodes could not be read: {exc}"})
            if verdict.settled or time.monotonic() >= deadline:
                verdict.give_up_waiting()
                self.last = verdict
                return verdict
            await asyncio.sleep(0.05)  # the restarted slurmd register within ~0.1 s
