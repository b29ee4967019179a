"""P7: a rolling upgrade of 64 workers with a mix of job lengths, budget 25 %.

A simulation (stated as such: 64 real slurmd and week-long jobs do not fit this machine), the same
job mix for both policies, one simulated minute per step:

- ours: the control plane's own `Upgrade.step` (sidecars/controlplane/changes/upgrade.py, unchanged) drives
  the fleet: at most 25 % of the workers out of service, idle ones first, then soonest-ending; a
  worker keeps taking work until its turn; its pod is deleted once empty.
- baseline: Kubernetes' rolling update with maxUnavailable 25 % and a preStop drain that waits for
  the jobs (no job killed either): Kubernetes picks the old pods in its own order (here a fixed
  shuffle: it does not know the jobs), each terminating pod drained at once until its jobs end.

Each worker has 4 GPU slots, one job per slot; the queue never runs dry (a busy cluster), so a free
slot on a worker that takes work is filled at once. A replaced pod is back 5 minutes after its
deletion. Idle node-hours: slot-hours free on workers that cannot take work (drained, or being
replaced), divided by the slots per worker. A job is "killed" if its pod is deleted while it runs.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from _report import result

from sidecars.controlplane.changes.upgrade import Upgrade, UpgradePlan
from sidecars.controlplane.fleet import ranking
from sidecars.controlplane.fleet.snapshot import FleetNode
from sidecars.kube import KubeClient, Pod
from sidecars.runtime import logs

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the simulated fleet is built as the tests build theirs
from tests.helpers import fleet_node, fleet_pod  # noqa: E402

SLOTS = 4
REPLACE_MINUTES = 5
EPOCH = 1_800_000_000  # the simulation's clock starts here (epoch seconds)


def job_minutes(rng: random.Random) -> int:
    """40 % short (10-60 min), 40 % medium (1-8 h), 20 % long (8-48 h)."""
    roll = rng.random()
    if roll < 0.4:
        return rng.randint(10, 60)
    if roll < 0.8:
        return rng.randint(60, 480)
    return rng.randint(480, 2880)


@dataclass
class Worker:
    name: str
    jobs: list[tuple[int, int]] = field(default_factory=list)  # (ends at minute, limit ends at minute)
    drained: bool = False
    reason: str | None = None
    revision: str = "old"
    gone_until: int | None = None  # pod deleted: back at this minute
    uid: int = 0


class Fleet:
    """The workers, their jobs from one seeded stream per worker (the same for both policies)."""

    def __init__(self, count: int, seed: int) -> None:
        self.workers = {f"w{i:03d}": Worker(f"w{i:03d}") for i in range(count)}
        self._rngs = {name: random.Random(f"{seed}-{name}") for name in self.workers}
        self.minute = 0
        self.idle_slot_minutes = 0
        self.killed = 0
        for name, w in self.workers.items():
            if self._rngs[name].random() < 0.25:
                continue  # a quarter start idle (between jobs)
            for _ in range(SLOTS):
                self._start(w, started=-self._rngs[name].randint(0, 600))

    def _start(self, w: Worker, started: int | None = None) -> None:
        rng = self._rngs[w.name]
        length = job_minutes(rng)
        begin = self.minute if started is None else started
        end = max(begin + length, self.minute + 1)
        w.jobs.append((end, int(begin + length * rng.uniform(1.0, 1.5)) + 1))

    def takes_work(self, w: Worker) -> bool:
        return not w.drained and w.gone_until is None

    def tick(self) -> None:
        """One minute: jobs end, free slots fill where work is taken, idle capacity is counted."""
        self.minute += 1
        for w in self.workers.values():
            w.jobs = [j for j in w.jobs if j[0] > self.minute]
            if w.gone_until is not None and self.minute >= w.gone_until:
                w.gone_until = None  # the new pod is back, on the new revision
            if self.takes_work(w):
                while len(w.jobs) < SLOTS:
                    self._start(w)
            else:
                self.idle_slot_minutes += SLOTS - len(w.jobs)

    def delete(self, w: Worker) -> None:
        self.killed += len(w.jobs)
        w.jobs = []
        w.gone_until = self.minute + REPLACE_MINUTES
        w.revision = "new"
        w.uid += 1

    def done(self) -> bool:
        return all(
            w.revision == "new" and w.gone_until is None and not w.drained for w in self.workers.values()
        )

    def view(self, w: Worker) -> FleetNode:
        busy = len(w.jobs)
        state = "IDLE" if not busy else ("ALLOCATED" if busy == SLOTS else "MIXED")
        return fleet_node(
            w.name,
            state=state,
            drained=w.drained,
            reason=w.reason,
            jobs=tuple(range(busy)),
            busy_until=max((EPOCH + 60 * lim for _, lim in w.jobs), default=None) if busy else None,
            partitions=("gpu",),
            cpus=SLOTS,
            gpus=SLOTS,
            registered=w.gone_until is None,
        )


class SimKube:
    """The three calls `Upgrade` makes to the Kubernetes edge, against the simulated fleet."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.data: dict[str, str] = {}

    async def get_config_map(self, namespace: str, name: str) -> dict[str, str] | None:
        return dict(self.data) or None

    async def put_config_map(self, namespace: str, name: str, data: Mapping[str, str]) -> None:
        self.data = dict(data)

    async def delete_pod(self, namespace: str, name: str, uid: str | None = None) -> bool:
        self.fleet.delete(self.fleet.workers[name])
        return True


class SimDrains:
    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet

    def submit(self, node: str, action: str, reason: str) -> None:
        w = self.fleet.workers[node]
        if action == "drain" and not w.drained:
            w.drained, w.reason = True, reason
        elif action == "undrain" and w.reason == reason:
            w.drained = False


def pods(fleet: Fleet) -> list[Pod]:
    return [
        fleet_pod(w.name, uid=f"{w.name}-{w.uid}", hostname=w.name, revision=w.revision)
        for w in fleet.workers.values()
        if w.gone_until is None
    ]


async def ours(count: int, seed: int, budget: str, limit: int) -> tuple[int, float, int, int]:
    fleet = Fleet(count, seed)
    kube = SimKube(fleet)

    def views() -> dict[str, FleetNode]:
        return {n: fleet.view(w) for n, w in fleet.workers.items()}

    up = Upgrade(
        cast(KubeClient, kube),
        "slurm",
        cast(Any, SimDrains(fleet)),
        views,
        lambda: ranking.scale_in_order(views().values()),
        lambda: pods(fleet),
        lambda p: p.hostname,
    )
    await kube.put_config_map("slurm", "x", UpgradePlan("new", budget).data())
    most = 0
    while not fleet.done() and fleet.minute < limit:
        await up.step()
        out = sum(1 for w in fleet.workers.values() if w.drained or w.gone_until is not None)
        most = max(most, out)
        fleet.tick()
    return fleet.minute, fleet.idle_slot_minutes / SLOTS / 60, fleet.killed, most


def baseline(count: int, seed: int, max_unavailable: int, limit: int) -> tuple[int, float, int, int]:
    fleet = Fleet(count, seed)
    order = list(fleet.workers)
    random.Random(seed).shuffle(order)  # Kubernetes' own pick: blind to the jobs
    terminating: list[Worker] = []
    most = 0
    while not fleet.done() and fleet.minute < limit:
        for w in list(terminating):
            if w.gone_until is None and w.revision == "new":
                terminating.remove(w)  # back and ready: frees a slot of maxUnavailable
            elif w.drained and not w.jobs:
                w.drained = False  # preStop returned: the pod goes, its replacement starts
                fleet.delete(w)
        while len(terminating) < max_unavailable and order:
            w = fleet.workers[order.pop(0)]
            w.drained = True  # preStop: drain, wait for the jobs
            terminating.append(w)
        most = max(most, len(terminating))
        fleet.tick()
    return fleet.minute, fleet.idle_slot_minutes / SLOTS / 60, fleet.killed, most


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workers", type=int, default=64)
    p.add_argument("--seeds", type=int, default=5, help="job mixes to average over")
    args = p.parse_args()
    logs.configure(
        json=False, level="warning"
    )  # the upgrade's own info lines, 64 x 2 per mix, are noise here
    budget = max(1, -(-args.workers * 25 // 100))
    limit = 60 * 24 * 30
    rows = []
    for seed in range(args.seeds):
        o = asyncio.run(ours(args.workers, seed, "25%", limit))
        b = baseline(args.workers, seed, budget, limit)
        rows.append((o, b))
        print(
            f"seed {seed}: ours {o[0] / 60:.1f} h, {o[1]:.1f} idle node-h, {o[2]} killed,"
            f" at most {o[3]} out; baseline {b[0] / 60:.1f} h, {b[1]:.1f} idle node-h,"
            f" {b[2]} killed, at most {b[3]} out"
        )
    n = len(rows)
    o_idle, b_idle = sum(r[0][1] for r in rows) / n, sum(r[1][1] for r in rows) / n
    o_time, b_time = sum(r[0][0] for r in rows) / n / 60, sum(r[1][0] for r in rows) / n / 60
    killed = sum(r[0][2] for r in rows)
    over = max(r[0][3] for r in rows)
    saved = 1 - o_idle / b_idle if b_idle else 0.0
    result(
        "P7",
        f"upgrade of {args.workers} workers, budget 25 % (simulated, {n} job mixes): idle node-hours",
        f"{o_idle:.1f} node-h ({saved:.0%} fewer), {o_time:.1f} h total, {killed} jobs killed, "
        f"at most {over} out",
        f"{b_idle:.1f} node-h, {b_time:.1f} h total (Kubernetes rolling update + preStop drains)",
        ">= 30 % fewer idle node-hours, no job killed, budget kept",
        saved >= 0.30 and killed == 0 and over <= budget,
    )


if __name__ == "__main__":
    main()
