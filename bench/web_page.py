"""W1: the operator's web page at 1,000 nodes: the time to serve its data in one response.

A synthetic cluster in Slurm 24.11's own JSON shape (as bench/control_plane_scale.py builds it) is
read into the fleet view; the real aiohttp app of the control plane then serves:

- ours, cold: `GET /ui/api/state` just after the fleet changed (the nodes are encoded anew), as a
  browser asks for it (gzip), measured from the request to the last byte decoded by the client;
- ours, warm: the same document asked again (a second viewer: the nodes part is shared);
- baseline in the same run: `GET /v1/nodes`, the agents' list of the same 1,000 nodes.

Client and server share this process and one core, so these are upper bounds.

Usage: .venv/bin/python bench/web_page.py [--nodes 1000 --jobs 5000 --requests 40]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import aiohttp
from _report import one_core, percentile, result
from control_plane_scale import TOKEN, api_app, synthetic

from sidecars.controlplane.fleet.drain_clock import DrainClock
from sidecars.controlplane.fleet.snapshot import FleetView
from sidecars.controlplane.http.config_feed import ConfigFeed
from sidecars.controlplane.http.page import PageState
from sidecars.controlplane.http.web import WebUI
from sidecars.runtime import http
from sidecars.slurm import SlurmClient, jsonformat, squeueformat

GOAL = 0.200


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1_000)
    ap.add_argument("--jobs", type=int, default=5_000)
    ap.add_argument("--requests", type=int, default=40)
    args = ap.parse_args()
    one_core()

    node_text, _, job_brief = synthetic(args.nodes, args.jobs, int(time.time()))
    nodes = [jsonformat.node(o) for o in jsonformat.load(["scontrol"], node_text, "nodes")]
    jobs = squeueformat.job_summaries(job_brief)
    fleet = FleetView(SlurmClient())
    drains = DrainClock()
    page = PageState(fleet, config=ConfigFeed(None), drains=drains)
    app, _ = api_app(fleet)
    WebUI(TOKEN, page).install(app)
    # two fleets that differ by one ended job: publishing them in turn makes every cold read a new version
    snaps = []
    for drop in (0, 1):
        cut = [j for i, j in enumerate(jobs) if i != drop]
        snaps.append(fleet.assemble(nodes, cut))
        fleet.publish(snaps[-1])
        drains.observe(snaps[-1])

    async with (
        http.serve(app, "127.0.0.1", 0) as port,
        aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {TOKEN}"}, timeout=aiohttp.ClientTimeout(total=30)
        ) as s,
    ):
        base = f"http://127.0.0.1:{port}"

        async def timed(path: str) -> tuple[float, int]:
            t0 = time.perf_counter()
            async with s.get(base + path) as r:
                body = await r.json()
                assert r.status == 200, body
            return time.perf_counter() - t0, len(body["nodes"] if isinstance(body, dict) else body)

        cold: list[float] = []
        warm: list[float] = []
        baseline: list[float] = []
        await timed("/ui/api/state")  # connection and first-use costs out of the figures
        for i in range(args.requests):
            fleet.publish(snaps[i % 2])  # a new version: the page's nodes part is encoded anew
            seconds, count = await timed("/ui/api/state")
            assert count == args.nodes
            cold.append(seconds)
            warm.append((await timed("/ui/api/state"))[0])
            baseline.append((await timed("/v1/nodes"))[0])
        async with s.get(base + "/ui/api/state", headers={"Accept-Encoding": "identity"}) as r:
            size = len(await r.read())
        async with s.get(base + "/ui/api/state", auto_decompress=False) as r:
            gz = len(await r.read())  # what crosses the wire to a browser

    print(
        f"{args.nodes} nodes, {args.jobs} jobs; the page's document is {size / 1024:.0f} KiB "
        f"({gz / 1024:.0f} KiB gzipped on the wire)"
    )
    print(
        f"GET /ui/api/state after a change: median {statistics.median(cold) * 1000:.1f} ms, "
        f"p95 {percentile(cold, 95) * 1000:.1f} ms, max {max(cold) * 1000:.1f} ms"
        f"   goal < {GOAL * 1000:.0f} ms"
    )
    print(f"  the same, asked again (a second viewer): median {statistics.median(warm) * 1000:.1f} ms")
    print(f"  baseline, GET /v1/nodes (the agents' list): median {statistics.median(baseline) * 1000:.1f} ms")
    p95 = percentile(cold, 95)
    result(
        "W1",
        f"web page data for {args.nodes:,} nodes in one response, after a change, p50/p95, one core",
        f"{statistics.median(cold) * 1000:.0f} ms / {p95 * 1000:.0f} ms",
        f"{statistics.median(baseline) * 1000:.0f} ms (GET /v1/nodes of the same nodes)",
        f"< {GOAL * 1000:.0f} ms",
        p95 < GOAL,
    )


if __name__ == "__main__":
    asyncio.run(main())
