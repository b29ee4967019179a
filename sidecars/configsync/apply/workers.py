"""Did the workers take the change? The controller taking a new configuration is half of it: in
the configless (Slinky) shape every slurmd fetches its files from slurmctld, and a change counts as
applied only when every responding worker runs it.

From 23.11 `scontrol reconfigure` restarts every slurmd (24.11 and 26.05 measured: each node's
SlurmdStartTime jumps to the reconfigure's second, 60 ms after it), so a worker runs the new
configuration when its slurmd started at or after the reconfigure, as nebius/soperator checks. A
worker slurmctld cannot reach is marked NOT_RESPONDING by the reconfigure itself, usually at once:
it is named, not waited for. One not marked yet (seen on a loaded machine) has no start time after
24.11's re-exec: it is waited for while the check lasts, then named as not responding too. Only
workers whose slurmd answered before the change are judged: a node record without a slurmd (DOWN,
FUTURE, powered down) or a worker not registered yet has no configuration to take. The verdict
rests on the one listing of the fleet the verification reads (apply/applier.py); only the few workers it
waits for are read again, by name. Where
slurmd serves `/readyz` (25.11+) a worker counts as responding only when that answers too. 26.05's
`GET /v0.0.45/conf` would say more, but answers 401 without an auth/jwt token (its plugin is not
installed with Debian's slurmd): not used. 22.05 reconfigures in place (slurmd keeps its PID and
start time): nothing to check there, and the status says so.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from sidecars.slurm import Node, SlurmClient, SlurmError, health

RESTARTS_FROM = (23, 11)
# flags of a node whose slurmd is not expected to answer (powered down, or on its way)
_NO_SLURMD_FLAGS = frozenset({"POWERED_DOWN", "POWERING_DOWN", "POWERING_UP", "POWER_DOWN"})


@dataclass
class WorkerVerdict:
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

    def reason(self, limit: int = 5) -> str:
        """The first few workers that did not take the change, with why, then how many more."""
        named = sorted(self.not_taken.items())
        words = [f"worker {n} did not take the change: {why}" for n, why in named[:limit]]
        if len(named) > limit:
            words.append(f"and {len(named) - limit} more workers did not")
        return "; ".join(words)

    def merge(self, again: WorkerVerdict) -> None:
        """Take a later look at the workers still waited for (`again` judged only those)."""
        waited = set(again.taken) | set(again.not_taken) | set(again.not_responding) | set(again.unregistered)
        for name in waited:
            self.not_taken.pop(name, None)
        self.unregistered = [n for n in self.unregistered if n not in waited]
        self.taken += again.taken
        self.not_taken.update(again.not_taken)
        self.not_responding.update(again.not_responding)
        self.unregistered += again.unregistered

    def waiting(self) -> list[str]:
        """Workers a later look may still see taking the change."""
        return sorted({*self.not_taken, *self.unregistered})

    def as_json(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "taken": sorted(self.taken),
            "not_taken": dict(sorted(self.not_taken.items())),
            "not_responding": dict(sorted(self.not_responding.items())),
        }


def answered(node: Node) -> bool:
    """The node's slurmd registered and answers slurmctld, powered up: a node that does not (a
    record without a slurmd, a powered-down or not-yet-registered one) has nothing a change can
    take from it, and no configuration to take."""
    return node.state.registered and node.state.base != "DOWN" and not node.state.flags & _NO_SLURMD_FLAGS


def expected_workers(before: Mapping[str, Node]) -> set[str]:
    """The workers a reconfigure restarts: those that answered before it."""
    return {name for name, n in before.items() if answered(n) and n.slurmd_start_time}


def judge(nodes: list[Node], since: float, expected: Collection[str] | None = None) -> WorkerVerdict:
    """Sort the nodes by whether their slurmd started at or after `since` (epoch). With `expected`
    only those are judged, and one missing from `nodes` (a dynamic node deleted) is not responding."""
    out = WorkerVerdict("slurmd_start_time")
    second = int(since)  # SlurmdStartTime has 1-s resolution
    if expected is not None:
        listed = {n.name for n in nodes}
        for name in expected:
            if name not in listed:
                out.not_responding[name] = "no longer listed by slurmctld"
    for n in nodes:
        if n.state.base == "FUTURE" or (expected is not None and n.name not in expected):
            continue  # a record without a worker, or a worker with no slurmd before the change
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
        self.last: WorkerVerdict | None = None
        self.latest: dict[str, Node] = {}  # the judged workers as last read, registered again or not

    async def _readyz(self, nodes: list[Node], verdict: WorkerVerdict, default_port: int) -> None:
        probed = {*verdict.taken, *verdict.not_taken, *verdict.unregistered}
        names = [n for n in nodes if n.name in probed]
        async with aiohttp.ClientSession() as session:
            # every probe's end is collected, an unforeseen error included: none is left unretrieved
            answers = await asyncio.gather(
                *(health.probe(session, n.address or "127.0.0.1", n.port or default_port) for n in names),
                return_exceptions=True,
            )
        for n, a in zip(names, answers, strict=True):
            ok = not isinstance(a, BaseException) and a.ok
            if ok and n.name in verdict.unregistered:
                # it answers, yet has not registered since the reconfigure: not running the change
                verdict.unregistered.remove(n.name)
                verdict.not_taken[n.name] = "answers /readyz but has not registered since the reconfigure"
            elif not ok:
                detail = f"{type(a).__name__}: {a}" if isinstance(a, BaseException) else a.detail
                verdict.not_taken.pop(n.name, None)
                for names_of in (verdict.taken, verdict.unregistered):
                    if n.name in names_of:
                        names_of.remove(n.name)
                verdict.not_responding[n.name] = f"/readyz: {detail}"

    async def verify(
        self, since: float, before: Mapping[str, Node], nodes: list[Node], config: Mapping[str, str]
    ) -> WorkerVerdict:
        """The verdict on the workers that answered `before` the reconfigure at `since`, from the
        fleet's listing `nodes` after it; those that have not restarted yet are read again by name
        until they have, at most `wait` seconds. `config` is slurmctld's (keys in lower case)."""
        version = await self.client.version()
        if not version.at_least(*RESTARTS_FROM):
            self.last = WorkerVerdict(f"none: Slurm {version} reconfigures slurmd in place")
            self.latest = {}
            return self.last
        use_http = health.served(version, config.get("communicationparameters", ""))
        port = int(config.get("slurmdport", "6818") or 6818)
        deadline = time.monotonic() + self.wait
        verdict = judge(nodes, since, expected_workers(before))
        latest = {n.name: n for n in nodes}
        while not verdict.settled and time.monotonic() < deadline:
            await asyncio.sleep(0.05)  # the restarted slurmd register within ~0.1 s
            waited = verdict.waiting()
            try:
                fresh = await self.client.nodes_named(waited)
            except SlurmError as exc:
                verdict.merge(
                    WorkerVerdict(verdict.method, not_taken=dict.fromkeys(waited, f"unreadable: {exc}"))
                )
                continue
            latest.update(fresh)
            verdict.merge(judge(list(fresh.values()), since, waited))
        verdict.give_up_waiting()
        if use_http:
            verdict.method = "slurmd_start_time+readyz"
            await self._readyz(list(latest.values()), verdict, port)
        self.last = verdict
        self.latest = latest
        return verdict
