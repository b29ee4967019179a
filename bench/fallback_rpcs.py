"""F1: slurmctld's load while the control plane is away and 1,000 agents are draining.

Every agent falls back to Slurm at the same moment (the control plane died). Each simulated agent
runs the agent's own turn rule (`NodeSource.interval` and `observe`, with its backoff and a control
plane client pointed at a closed port), in one process. Baseline, in the same run: the old fixed
0.25 s poll of Slurm, from the same moment.

1. demand, 1,000 agents: looks at Slurm a second over `--seconds` from the outage (a stand-in
   counts them; 1,000 scontrol processes every 0.25 s do not fit on this machine), the mean over
   the window, over its last third (steady state) and the busiest second (the jitter's work);
2. cost, on a real slurmctld: `--sample` agents doing the same with real `scontrol` calls, RPCs
   read from `sdiag` (its own request left out) and divided by the looks they made: slurmctld's
   RPCs a second for 1,000 agents are their looks a second times what one look costs. (A sample's
   own rate, scaled, would measure this machine instead: 20 agents polling every 0.25 s already
   queue behind their scontrol processes here.)

Usage: .venv/bin/python bench/fallback_rpcs.py [--seconds 45] [--sample 20] [--release host|chroot|sid]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import cast

import aiohttp
import structlog
from _report import result

from sidecars.devcluster import ClusterSpec, DevCluster, free_port
from sidecars.devcluster.release import available_releases
from sidecars.runtime import logs
from sidecars.slurm import NodeState, SlurmClient
from sidecars.slurm.nodejson import NodeRecord
from sidecars.worker.backoff import Backoff
from sidecars.worker.cp_client import AgentClient
from sidecars.worker.observation import Observation
from sidecars.worker.settings import WorkerSettings
from sidecars.worker.slurm_source import SlurmSource
from sidecars.worker.source import NodeSource

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the settings builder lives with the tests
from tests.settings import build

AGENTS = 1000
OLD_POLL_SECONDS = 0.25  # the old fixed drain poll, with the control plane away


class CountingSlurm:
    """A stand-in for the agent's SlurmSource: each look counted in its one-second bucket."""

    def __init__(self, buckets: Counter[int], t0: float) -> None:
        self.buckets, self.t0 = buckets, t0

    async def observe(self) -> Observation:
        self.buckets[int(time.monotonic() - self.t0)] += 1
        view = NodeRecord(name="n1", state=NodeState.parse("MIXED+DRAIN"), reason="slurm-sidecars: x")
        return Observation("slurm", view=view)


async def ours(source: NodeSource, defaults: WorkerSettings) -> None:
    """The agent's loop, draining, reduced to its looks (service.Agent._loop)."""
    never = asyncio.Event()
    while True:
        wait = source.interval(True, defaults.poll_seconds, defaults.drain_poll_seconds)
        await source.observe(wait, never)


async def old(look: Callable[[], Awaitable[Observation]]) -> None:
    while True:
        await look()
        await asyncio.sleep(OLD_POLL_SECONDS)


def attach(
    slurm: SlurmSource, session: aiohttp.ClientSession, url: str, defaults: WorkerSettings
) -> NodeSource:
    source = NodeSource(slurm)
    cp = AgentClient(session, url, lambda: "t", "n1", timeout=2.0)
    source.attach(cp, backoff=Backoff(defaults.drain_poll_seconds, defaults.fallback_max_seconds))
    return source


async def running(tasks: list[asyncio.Task[None]], seconds: float) -> None:
    try:
        await asyncio.sleep(seconds)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def demand(kind: str, seconds: float, url: str, defaults: WorkerSettings) -> tuple[float, float, int]:
    """(looks/s over the window, over its last third, the busiest second) for AGENTS agents."""
    buckets: Counter[int] = Counter()
    t0 = time.monotonic()
    stand_in = CountingSlurm(buckets, t0)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        if kind == "ours":
            loops = [
                ours(attach(cast(SlurmSource, stand_in), session, url, defaults), defaults)
                for _ in range(AGENTS)
            ]
        else:
            loops = [old(stand_in.observe) for _ in range(AGENTS)]
        await running([asyncio.ensure_future(loop) for loop in loops], seconds)
    whole = [buckets[s] for s in range(int(seconds))]
    tail = whole[-max(1, len(whole) // 3) :]
    return sum(whole) / len(whole), sum(tail) / len(tail), max(whole)


async def rpcs(client: SlurmClient) -> int:
    counts = await client.sdiag_rpcs()
    return sum(v for k, v in counts.items() if k != "REQUEST_STATS_INFO")


class CountedSlurm(SlurmSource):
    """The agent's real SlurmSource, its looks counted (what one look costs slurmctld)."""

    looks = 0

    async def observe(self) -> Observation:
        CountedSlurm.looks += 1
        return await super().observe()


async def cost(
    cluster: DevCluster,
    kind: str,
    sample: int,
    seconds: float,
    url: str,
    defaults: WorkerSettings,
    background: float,
) -> tuple[float, float]:
    """(sdiag RPCs/s, RPCs a look) for `sample` agents with real scontrol calls, over `seconds`
    from the outage (a loaded machine runs fewer looks than asked: the cost of one is the figure
    that does not depend on it)."""
    client = cluster.client()
    CountedSlurm.looks = 0
    async with aiohttp.ClientSession() as session:
        before = await rpcs(client)
        t0 = time.monotonic()
        if kind == "ours":
            loops = [
                ours(attach(CountedSlurm(cluster.client(), "n1"), session, url, defaults), defaults)
                for _ in range(sample)
            ]
        else:
            loops = [old(CountedSlurm(cluster.client(), "n1").observe) for _ in range(sample)]
        await running([asyncio.ensure_future(loop) for loop in loops], seconds)
        elapsed = time.monotonic() - t0
        total = max(0.0, await rpcs(client) - before - background * elapsed)  # the idle cluster's own
        return total / elapsed, total / max(1, CountedSlurm.looks)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=45.0, help="window of each phase, from the outage")
    ap.add_argument("--sample", type=int, default=20, help="agents with real scontrol calls")
    ap.add_argument("--release", default="host", choices=["host", "chroot", "sid"])
    args = ap.parse_args()
    logs.configure(json=False, level="error")
    nowhere = Path("/nonexistent")  # the loop reads only the intervals
    defaults = build(WorkerSettings, quick=False, socket_path=nowhere, state_dir=nowhere)
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens: the control plane is down
    print(
        f"backoff: from {defaults.drain_poll_seconds:g} s doubling to {defaults.fallback_max_seconds:g} s, "
        f"half jittered; baseline: every {OLD_POLL_SECONDS:g} s"
    )
    looks = {kind: await demand(kind, args.seconds, url, defaults) for kind in ("ours", "old")}
    for kind, (mean, steady, peak) in looks.items():
        print(
            f"{kind:>4}: {AGENTS} agents, looks at Slurm over {args.seconds:g} s: {mean:.0f}/s mean, "
            f"{steady:.0f}/s in the last third, {peak} in the busiest second"
        )

    found, missing = await available_releases(build=False)
    release = next((r for r in found if r.name == args.release), None)
    if release is None:
        raise SystemExit(f"release {args.release} unavailable: {missing}")
    async with DevCluster(release, ClusterSpec(nodes=1)) as cluster:
        await cluster.wait_nodes(lambda ns: all(n.state.registered for n in ns), what="nodes up")
        client = cluster.client()
        before, t0 = await rpcs(client), time.monotonic()
        await asyncio.sleep(min(10.0, args.seconds))
        background = (await rpcs(client) - before) / (time.monotonic() - t0)
        rates: dict[str, float] = {}
        for kind in ("ours", "old"):
            rate, per_look = await cost(cluster, kind, args.sample, args.seconds, url, defaults, background)
            rates[kind] = looks[kind][0] * per_look  # the 1,000 agents' looks at what one costs
            print(
                f"{kind:>4}: {args.sample} agents with real scontrol over {args.seconds:g} s: "
                f"{rate:.1f} RPC/s (sdiag; the idle cluster's {background:.2f}/s left out), "
                f"{per_look:.2f} RPCs a look "
                f"-> {rates[kind]:.0f} RPC/s for {AGENTS} agents' {looks[kind][0]:.0f} looks/s"
            )
    ours_rate, old_rate = rates["ours"], rates["old"]
    result(
        "F1",
        f"slurmctld load, {AGENTS} draining agents, control plane down, first {args.seconds:g} s "
        f"({release.short})",
        f"{ours_rate:.0f} RPC/s mean (sdiag cost a look x looks); {looks['ours'][1]:.0f} looks/s "
        f"steady, busiest second {looks['ours'][2]}",
        f"{old_rate:.0f} RPC/s; {looks['old'][1]:.0f} looks/s steady, busiest second {looks['old'][2]}",
        "backoff with jitter: at least 10x fewer RPCs",
        ours_rate * 10 <= old_rate,
    )
    structlog.reset_defaults()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
