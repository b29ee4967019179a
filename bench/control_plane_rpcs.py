"""P3: Slurm RPCs the suite causes, read from `sdiag` on a real local cluster, in one run:

0. background: the cluster alone (slurmd registrations, the scheduler), to subtract;
1. via the control plane: first 3 agents' worth of long polls alone, then with `--agents` simulated
   agents besides them, all long-polling `GET /v1/nodes/{name}?version=V&wait=30` as the worker
   agent does, each over `--seconds` (a fresh control plane each time): "constant in the number of
   agents" is the second rate against the first;
2. directly: `--direct-agents` agents each asking Slurm for their node every `--interval` seconds
   (what a sidecar without the control plane does), over a shorter window, reported per agent and
   scaled to the same number of agents.

`sdiag`'s own request (REQUEST_STATS_INFO) is left out of every count. The goal (<= 1 query/s)
is judged on sdiag's RPCs; the Slurm commands the control plane ran are printed beside them.

Usage: .venv/bin/python bench/control_plane_rpcs.py [--seconds 60] [--release host|chroot]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import resource
import sys
import time
from pathlib import Path

import aiohttp
import structlog
from _report import result
from prometheus_client import CollectorRegistry

from sidecars.controlplane.service import ControlPlaneService
from sidecars.controlplane.settings import ControlPlaneSettings
from sidecars.devcluster import ClusterSpec, DevCluster
from sidecars.devcluster.release import available_releases
from sidecars.runtime import logs
from sidecars.slurm import SlurmClient

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the settings builder lives with the tests
from tests.settings import build

TOKEN = "bench"


async def rpc_counts(client: SlurmClient) -> dict[str, int]:
    counts = await client.sdiag_rpcs()
    return {k: v for k, v in counts.items() if k != "REQUEST_STATS_INFO"}


async def measure(client: SlurmClient, seconds: float, label: str) -> float:
    """RPCs per second over `seconds` (and the types seen, printed)."""
    before = await rpc_counts(client)
    t0 = time.monotonic()
    await asyncio.sleep(seconds)
    after = await rpc_counts(client)
    elapsed = time.monotonic() - t0
    delta = {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}
    print(f"  [{label}] RPCs by type over {elapsed:.0f}s: {delta or 'none'}")
    return sum(delta.values()) / elapsed


def commands(plane: ControlPlaneService) -> float:
    """Slurm commands the control plane ran (its own counter), whatever their result."""
    total = 0.0
    for metric in plane.registry.collect():
        if metric.name == "slurm_sidecars_slurm_commands":
            total += sum(s.value for s in metric.samples if s.name.endswith("_total"))
    return total


async def long_poll_agent(session: aiohttp.ClientSession, url: str, node: str, polls: list[int]) -> None:
    """polls[0] counts the answers, polls[1] the refusals (a bench whose agents are refused measures
    nothing: version -1, refused with a 400 since, made its agents ask once a second unnoticed)."""
    version = 0  # the first answer at once: the record's version is past it
    while True:
        try:
            async with session.get(
                f"{url}/v1/nodes/{node}", params={"version": str(version), "wait": "30"}
            ) as r:
                if r.status != 200:
                    polls[1] += 1
                    await asyncio.sleep(1.0)
                    continue
                body = await r.json()
                version = int(body["version"])
                polls[0] += 1
        except (aiohttp.ClientError, KeyError, ValueError):
            await asyncio.sleep(1.0)


async def direct_agent(client: SlurmClient, node: str, interval: float, offset: float) -> None:
    await asyncio.sleep(offset)
    while True:
        with contextlib.suppress(Exception):
            await client.node(node)
        await asyncio.sleep(interval)


async def via_plane(
    cluster: DevCluster, settings: ControlPlaneSettings, agents: int, seconds: float
) -> tuple[float, float, int]:
    """(sdiag RPCs/s, Slurm commands/s, polls answered) with `agents` long polls on a fresh control plane."""
    client = cluster.client()
    names = cluster.node_names
    plane = ControlPlaneService(settings, cluster.client(), None, CollectorRegistry())
    async with plane.running() as port:
        url = f"http://127.0.0.1:{port}"
        conn = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(
            connector=conn,
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=aiohttp.ClientTimeout(total=90),
        ) as session:
            polls = [0, 0]
            tasks = [
                asyncio.create_task(long_poll_agent(session, url, names[i % len(names)], polls))
                for i in range(agents)
            ]
            await asyncio.sleep(3.0)  # all agents connected and parked
            before_polls, before_refused, before_cmds = polls[0], polls[1], commands(plane)
            t0 = time.monotonic()
            rate = await measure(client, seconds, f"control plane, {agents} agents")
            cmd_rate = (commands(plane) - before_cmds) / (time.monotonic() - t0)
            answered, refused = polls[0] - before_polls, polls[1] - before_refused
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    if refused or not answered:  # refused before the window: the fleet not read yet, at start
        raise SystemExit(f"{refused} long polls refused, {answered} answered: the bench measured nothing")
    return rate, cmd_rate, answered


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--seconds", type=float, default=60.0, help="window of each control-plane phase (few, many agents)"
    )
    ap.add_argument(
        "--agents", type=int, default=1000, help="simulated agents (besides 3 real agents' worth)"
    )
    ap.add_argument("--direct-agents", type=int, default=20)
    ap.add_argument("--direct-seconds", type=float, default=15.0)
    production = build(ControlPlaneSettings, quick=False)
    ap.add_argument(
        "--interval",
        type=float,
        default=production.reads.interval_seconds,
        help="control-plane read interval, and the direct agents' poll interval (the same freshness)",
    )
    ap.add_argument("--release", default="host", choices=["host", "chroot"])
    ap.add_argument(
        "--job-read", default="brief", choices=["brief", "full"], help="the control plane's --job-read"
    )
    args = ap.parse_args()
    logs.configure(json=False, level="warning")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4 * args.agents + 512)), hard))
    found, missing = await available_releases(build=False)
    release = next((r for r in found if r.name == args.release), None)
    if release is None:
        raise SystemExit(f"release {args.release} unavailable: {missing}")
    async with DevCluster(release, ClusterSpec(nodes=3)) as cluster:
        client = cluster.client()
        await cluster.wait_nodes(lambda ns: all(n.state.registered for n in ns), what="nodes up")
        names = cluster.node_names
        background = await measure(client, min(10.0, args.seconds), "background")
        print(f"Slurm {release}: background RPC rate {background:.2f}/s (subtracted below)")

        settings = build(
            ControlPlaneSettings,
            quick=False,
            token=TOKEN,
            reads={"interval_seconds": args.interval, "brief_jobs": args.job_read == "brief"},
            kubernetes=False,
            identity="bench",
        )
        # the same control plane with the 3 real agents' worth of long polls, then with the crowd
        few, many = 3, args.agents + 3
        measured: dict[int, tuple[float, float, int]] = {}
        for agents in (few, many):
            via, cmd_rate, answered = await via_plane(cluster, settings, agents, args.seconds)
            via_net = max(0.0, via - background)
            measured[agents] = (via_net, cmd_rate, answered)
            print(
                f"via the control plane, {agents} agents long-polling for {args.seconds:.0f}s: "
                f"{via_net:.2f} RPC/s ({via_net / agents:.5f} per agent), {answered} polls answered   "
                f"goal <= 1/s, constant in agents"
            )
            print(
                f"  the control plane ran {cmd_rate:.2f} Slurm commands/s (one node read + one job read "
                f"per {args.interval:g}s, BOOT_TIME (a BUILD_INFO and a PING) every reconfigure poll, "
                "on 22.05 sdiag's reconfigure count; sdiag adds a PARTITION_INFO to the node read and "
                "to squeue's brief read)"
            )

        direct_client = cluster.client()
        tasks = [
            asyncio.create_task(
                direct_agent(
                    direct_client, names[i % 3], args.interval, args.interval * i / args.direct_agents
                )
            )
            for i in range(args.direct_agents)
        ]
        await asyncio.sleep(args.interval)
        direct = await measure(client, args.direct_seconds, "direct")
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        per_agent = max(0.0, direct - background) / args.direct_agents
        print(
            f"directly, {args.direct_agents} agents polling every {args.interval:g}s for "
            f"{args.direct_seconds:.0f}s: {per_agent:.3f} RPC/s per agent -> {per_agent * many:.0f} RPC/s "
            f"for {many} agents"
        )
        via_few, _, _ = measured[few]
        via_many, cmd_many, _ = measured[many]
        if via_many > 0:
            print(f"reduction at {many} agents: {per_agent * many / via_many:.0f}x")
    # "constant in agents": the crowd adds no more than sdiag's counting noise (a few RPCs per window)
    constant = via_many <= via_few * 1.1 + 0.1
    per_second = via_many <= 1.0
    if not per_second:
        print(
            f"P3 misses <= 1 query/s: {via_many:.2f} sdiag RPCs/s from {cmd_many:.2f} Slurm commands/s; "
            "each read costs Slurm more than one RPC (sdiag adds a PARTITION_INFO to the node read and to "
            "squeue's brief read)"
        )
    if not constant:
        print(f"P3 not constant in agents: {via_few:.2f} RPC/s at {few} agents, {via_many:.2f} at {many}")
    result(
        "P3",
        f"Slurm load via the control plane, {few} vs {many} agents long-polling, {args.seconds:g} s windows "
        f"({release.short})",
        f"{via_few:.2f} vs {via_many:.2f} RPC/s (sdiag); {cmd_many:.2f} Slurm commands/s",
        f"{per_agent * many:.0f} RPC/s ({many} agents querying Slurm every {args.interval:g} s; "
        f"{args.direct_agents} measured, scaled)",
        "constant in agents, <= 1 query/s (sdiag RPCs)",
        constant and per_second,
    )
    structlog.reset_defaults()


if __name__ == "__main__":
    asyncio.run(main())
