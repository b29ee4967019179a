"""HAF1: what each Slurm command costs once the primary controller is lost with its address (its pod
gone with its node: nothing answers, not even a refusal), with and without following the primary.

Two controllers (`SlurmctldTimeout=5`), the primary killed and its address made silent (packets to
it go to a hardware address no one has), the backup in control. Baseline, in the same run: a client
reading slurm.conf as written, whose commands try the silent one first and wait out `TCPTimeout`
(2 s by default). Ours: the same client with `Controllers` (sidecars/slurm/primary.py), after one
learning turn, as the control plane's watch does each interval. Figures: the median of `--commands`
node reads (`scontrol show node`, what the control plane's refresh and every drain start with) and
of as many fleet refreshes (node read + job summaries).

Usage: .venv/bin/python bench/follow_primary.py [--commands 5] [--release chroot|sid]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable

from _report import result

from sidecars.devcluster import ClusterSpec, DevCluster
from sidecars.devcluster.release import available_releases
from sidecars.runtime import logs, process
from sidecars.slurm import Controllers, SlurmClient

NOWHERE = "02:00:00:5e:00:53"  # a documentation hardware address (RFC 7042): no interface has it


async def median_seconds(n: int, call: Callable[[], Awaitable[object]]) -> float:
    times = []
    for _ in range(n):
        started = time.monotonic()
        await call()
        times.append(time.monotonic() - started)
    return statistics.median(times)


async def lose_primary(c: DevCluster) -> None:
    """ctld-a killed and silent; returns once ctld-b is in control."""
    primary = c.controllers[0]
    await c.kill_controller(primary.name)
    argv = [
        "ip",
        "neigh",
        "replace",
        primary.address,
        "lladdr",
        NOWHERE,
        "dev",
        c.links[0],
        "nud",
        "permanent",
    ]
    done = await process.run(argv, timeout=10, merge_stderr=True)
    if done.returncode != 0:
        raise SystemExit(f"could not silence {primary.address}: {done.text()}")
    await c.wait_primary(c.controllers[1].name, timeout=60)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--commands", type=int, default=5, help="commands timed in each mode")
    ap.add_argument("--release", default="chroot", choices=["chroot", "sid"])
    args = ap.parse_args()
    logs.configure(json=False, level="error")
    found, missing = await available_releases(build=False)
    release = next((r for r in found if r.name == args.release), None)
    if release is None:
        raise SystemExit(f"release {args.release} unavailable: {'; '.join(missing)}")
    spec = ClusterSpec(nodes=2, controllers=2, slurmctld_timeout_seconds=5)
    async with DevCluster(release, spec) as c:
        await lose_primary(c)
        plain = c.client(timeout=30.0)
        # the copies where the release's commands see them (a chroot sees only the cluster's dir)
        following = c.client(timeout=30.0, controllers=Controllers({**c.env, "TMPDIR": str(c.dir)}))
        learn_started = time.monotonic()
        await following.follow()
        learnt = time.monotonic() - learn_started
        n = args.commands
        base_node = await median_seconds(n, plain.node_listing)
        ours_node = await median_seconds(n, following.node_listing)

        async def refresh(client: SlurmClient) -> None:
            await client.nodes()
            await client.job_summaries()

        base_refresh = await median_seconds(n, lambda: refresh(plain))
        ours_refresh = await median_seconds(n, lambda: refresh(following))
        assert following.controllers is not None
        following.controllers.close()
    print(f"slurm {release.version}; one learning turn (ping, then ctld-b asked alone): {learnt:.2f} s")
    result(
        "HAF1",
        f"node read, old primary silent ({release.version})",
        f"{ours_node:.3f} s",
        f"{base_node:.3f} s",
        "no TCPTimeout (2 s) per command",
        ours_node < 1.0 <= base_node,
    )
    result(
        "HAF1",
        f"fleet refresh, old primary silent ({release.version})",
        f"{ours_refresh:.3f} s",
        f"{base_refresh:.3f} s",
        "no TCPTimeout (2 s) per command",
        ours_refresh < 1.0 <= base_refresh,
    )


if __name__ == "__main__":
    asyncio.run(main())
