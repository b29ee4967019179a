"""How long the control plane's event loop stalls while its fleet view is refreshed at size: the
real SlurmClient reads a synthetic fleet through `scontrol`/`squeue` shims (tests/controlplane/fleet/
bigfleet.py), FleetView.refresh() parses and builds the snapshot, and a probe on the loop measures
its latest wake. Then the rest of the control plane's refresh loop that stays on the loop (the
gauges, the drain clock), timed on its own.

Usage: .venv/bin/python scripts/fleet_refresh_stall.py [--nodes 10000 --jobs 50000 --runs 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.* when run as a file

from prometheus_client import CollectorRegistry

from sidecars.controlplane.fleet.drain_clock import DrainClock
from sidecars.controlplane.fleet.metrics import ControlPlaneMetrics
from sidecars.controlplane.fleet.snapshot import FleetView
from sidecars.slurm import SlurmClient
from tests.controlplane.fleet import bigfleet


async def main(nodes: int, jobs: int, runs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        env = bigfleet.write(Path(tmp), nodes, jobs)
        fleet = FleetView(SlurmClient(env=env, timeout=300.0))
        metrics, clock = ControlPlaneMetrics(CollectorRegistry()), DrainClock()
        stalls, tooks, rest = [], [], []
        for run in range(runs + 1):
            snap, stall = await bigfleet.stall_during(fleet.refresh())
            started = time.process_time()
            metrics.observe(snap)
            clock.observe(snap)
            if run == 0:  # the first read also detects the release: not counted
                continue
            rest.append(time.process_time() - started)
            stalls.append(stall.worst_seconds)
            tooks.append(stall.took_seconds)
            print(
                f"run {run}: refresh {stall.took_seconds:.3f} s, "
                f"worst stall {stall.worst_seconds * 1000:.1f} ms ({stall.ticks} wakes), "
                f"gauges+drain clock on the loop {rest[-1] * 1000:.1f} ms CPU"
            )
        print(
            f"{nodes} nodes, {jobs} jobs, {runs} refreshes: median refresh {statistics.median(tooks):.3f} s, "
            f"worst stall median {statistics.median(stalls) * 1000:.1f} ms, max {max(stalls) * 1000:.1f} ms; "
            f"gauges+drain clock median {statistics.median(rest) * 1000:.1f} ms"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.nodes, args.jobs, args.runs))
