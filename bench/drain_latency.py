"""P2: from the moment the last job on a draining node ends to the moment `drain-hook` returns.

Real local Slurm, real agents (one per node, production code, `--drain-poll-seconds` 0.25) and the
real hook client. Each round: a job runs on every node (random 1.5-3.5 s), the hook is called on
every node while the job runs, and the job's last act writes its end time (`date +%s.%N`) into a
file: that instant is "the last job ended". Latency = hook return - that instant.

Baseline, from the same run: today's field practice drains and re-checks every 30 s. On the same
drains (same drain start, same observed job end) such a checker notices at the first 30 s tick
after the job ended, so its latency is ceil((end - start) / 30) * 30 - (end - start). Computing it
from the observed times is exact for that loop, and avoids sleeping 30 s per drain.
Goal: p99 <= 1 s. By default both releases are measured (24.11 when its chroot is already built).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _report import percentile, releases, result

from sidecars.devcluster import ClusterSpec, DevCluster, Release
from sidecars.drainhook import drain
from sidecars.runtime import logs
from sidecars.worker.service import Agent
from sidecars.worker.settings import WorkerSettings

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the settings builder lives with the tests
from tests.settings import build

BASELINE_PERIOD = 30.0


async def one_drain(cluster: DevCluster, s: WorkerSettings, rng: random.Random) -> tuple[float, float]:
    """(latency, baseline latency) of one drain of node `s.node_name`."""
    marker = cluster.out_dir / f"end-{s.node_name}-{time.monotonic_ns()}"
    run = rng.uniform(1.5, 3.5)
    job = await cluster.sbatch("-t", "1", "-w", s.node_name, wrap=f"sleep {run:.2f}; date +%s.%N > {marker}")
    await cluster.wait_job(job, "RUNNING", timeout=60)
    started = time.time()
    code, answer = await drain(str(s.socket_path), 60, None)
    returned = time.time()
    if code != 0:
        raise RuntimeError(f"drain of {s.node_name} failed: {answer}")
    ended = float(marker.read_text().strip())
    since_start = ended - started
    baseline = math.ceil(max(since_start, 1e-9) / BASELINE_PERIOD) * BASELINE_PERIOD - since_start
    await cluster.client().undrain([s.node_name])
    await cluster.wait_node(s.node_name, lambda n: not n.state.drain and n.state.base == "IDLE")
    return returned - ended, baseline


async def measure(release: Release, drains: int, nodes: int) -> tuple[list[float], list[float]]:
    """(latencies, baseline latencies) of `drains` drains on a fresh cluster of `nodes` nodes."""
    rng = random.Random(4)
    rounds = math.ceil(drains / nodes)
    lat: list[float] = []
    base: list[float] = []
    async with DevCluster(release, ClusterSpec(nodes=nodes)) as cluster:
        sockdir = Path(tempfile.mkdtemp(prefix="wkb-", dir="/tmp"))
        stop = asyncio.Event()
        agents, tasks, settings = [], [], []
        try:
            for name in cluster.node_names:
                d = sockdir / name
                d.mkdir()
                s = build(
                    WorkerSettings,
                    quick=False,
                    node_name=name,
                    socket_path=d / "a.sock",
                    state_dir=d,
                    pod_namespace="bench",
                )
                agent = Agent(s, env=cluster.env)
                agents.append(agent)
                settings.append(s)
                tasks.append(asyncio.ensure_future(agent.run(stop)))
            while any(a.last_tick is None for a in agents):
                await asyncio.sleep(0.05)
            for _ in range(rounds):
                for latency, baseline in await asyncio.gather(
                    *(one_drain(cluster, s, rng) for s in settings)
                ):
                    lat.append(latency)
                    base.append(baseline)
        finally:
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            shutil.rmtree(sockdir, ignore_errors=True)
    return lat, base


def report(release: Release, nodes: int, lat: list[float], base: list[float]) -> None:
    print(
        f"P2 last job end -> drain-hook return, {len(lat)} drains on {nodes} nodes (Slurm {release.version})"
    )
    print(f"  {'':34} {'p50 s':>8} {'p99 s':>8} {'max s':>8}")
    print(
        f"  {'worker agent (poll 0.25 s draining)':34} {statistics.median(lat):8.3f} "
        f"{percentile(lat, 99):8.3f} {max(lat):8.3f}"
    )
    print(
        f"  {'baseline: re-check every 30 s':34} {statistics.median(base):8.3f} {percentile(base, 99):8.3f} "
        f"{max(base):8.3f}"
    )
    print("  baseline = first 30 s tick after the observed job end, counted from the same drain start")
    print("  goal: p99 <= 1 s")
    p99 = percentile(lat, 99)
    result(
        "P2",
        f"last job end -> drain-hook return, p50/p99 over {len(lat)} drains ({release.short})",
        f"{statistics.median(lat):.2f} s / {p99:.2f} s",
        f"{statistics.median(base):.2f} s / {percentile(base, 99):.2f} s (re-check every 30 s, same drains)",
        "p99 <= 1 s",
        p99 <= 1.0,
    )


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--drains", type=int, default=24, help="at least 20")
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument(
        "--release",
        choices=["host", "chroot", "both"],
        default="both",
        help="both: 22.05 (host) and, when already built, 24.11 (chroot)",
    )
    args = ap.parse_args()
    logs.configure(json=False, level="warning")
    for release in await releases(args.release):
        lat, base = await measure(release, args.drains, args.nodes)
        report(release, args.nodes, lat, base)


if __name__ == "__main__":
    asyncio.run(main())
