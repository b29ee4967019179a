"""P4: the worker agent's idle footprint (RSS and CPU) against a real local Slurm.

Runs `slurm-sidecars worker` as its own process beside one idle node for `--seconds` (60 by
default) with its production defaults, and samples /proc. Beside it, in the same run and the same
way: a bare Python that imports the same libraries and sleeps (the floor any asyncio sidecar in
Python pays), so the agent's own share is visible. CPU counts the Slurm commands it ran (its reaped
children). Goal: RSS <= 35 MB, CPU <= 0.5 % of a core.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from _report import result

from sidecars.cli import self_argv
from sidecars.devcluster import ClusterSpec, DevCluster, free_port
from sidecars.devcluster.release import build_chroot, host_release
from sidecars.runtime import logs

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the agent is started as the tests start it
from tests.helpers import worker_args  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
GOAL_RSS_MB = 35.0
GOAL_CPU_PCT = 0.5
# the libraries the agent loads, as it loads them: its HTTP server (aiohttp.web), and no `rich` (which
# structlog would import from the dev tools' packages; the agent's entry keeps it out, see sidecars/entry.py)
FLOOR = (
    "import sys; sys.modules['rich'] = None; "
    "import asyncio, aiohttp.web, structlog, prometheus_client, tenacity; asyncio.run(asyncio.sleep(3600))"
)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def pss_mb(pid: int) -> float:
    """Proportional set size: shared library pages split among the processes that map them."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int) -> float:
    """utime + stime + reaped children's (the Slurm commands the agent ran)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / TICK


async def measure(proc: asyncio.subprocess.Process, warmup: float, seconds: float) -> dict[str, float]:
    await asyncio.sleep(warmup)
    cpu0, t0 = cpu_seconds(proc.pid), time.monotonic()
    peak = rss_mb(proc.pid)
    end = t0 + seconds
    while time.monotonic() < end:
        await asyncio.sleep(min(1.0, max(end - time.monotonic(), 0)))
        peak = max(peak, rss_mb(proc.pid))
    cpu1, t1 = cpu_seconds(proc.pid), time.monotonic()
    return {
        "rss_mb": rss_mb(proc.pid),
        "peak_rss_mb": peak,
        "pss_mb": pss_mb(proc.pid),
        "cpu_pct": 100 * (cpu1 - cpu0) / (t1 - t0),
    }


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--release", choices=["host", "chroot"], default="host")
    args = ap.parse_args()
    logs.configure(json=False, level="warning")
    release = await (host_release() if args.release == "host" else build_chroot())
    async with DevCluster(release, ClusterSpec(nodes=1)) as cluster:
        sockdir = Path(tempfile.mkdtemp(prefix="wkb-", dir="/tmp"))
        port = free_port()
        agent = await asyncio.create_subprocess_exec(
            *self_argv("--log-format", "json", *worker_args("n1", port, sockdir / "agent.sock")),
            env=cluster.env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        floor = await asyncio.create_subprocess_exec(sys.executable, "-c", FLOOR)
        try:
            a, f = await asyncio.gather(
                measure(agent, args.warmup, args.seconds), measure(floor, args.warmup, args.seconds)
            )
        finally:
            for p in (agent, floor):
                p.terminate()
                await p.wait()
            shutil.rmtree(sockdir, ignore_errors=True)
    print(f"P4 agent idle over {args.seconds:g}s (Slurm {release.version}, default --poll-seconds 15)")
    print(f"  {'':28} {'RSS MB':>8} {'peak MB':>8} {'PSS MB':>8} {'CPU % core':>11}")
    for label, m in (("worker agent", a), ("baseline: bare python+libs", f)):
        print(
            f"  {label:28} {m['rss_mb']:8.1f} {m['peak_rss_mb']:8.1f} {m['pss_mb']:8.1f} {m['cpu_pct']:11.3f}"
        )
    print("  goal: RSS <= 35 MB, CPU <= 0.5 % of a core")
    rss_ok = a["peak_rss_mb"] <= GOAL_RSS_MB
    cpu_ok = a["cpu_pct"] <= GOAL_CPU_PCT
    if not rss_ok:
        print(
            f"  RSS misses the goal by {a['peak_rss_mb'] - GOAL_RSS_MB:.1f} MB: the bare interpreter "
            f"with the same libraries already holds {f['peak_rss_mb']:.1f} MB; the agent's own share is "
            f"{a['peak_rss_mb'] - f['peak_rss_mb']:.1f} MB (its PSS, shared pages split: "
            f"{a['pss_mb']:.1f} MB)"
        )
    if not cpu_ok:
        print(f"  CPU misses the goal: {a['cpu_pct']:.3f} % of a core, Slurm commands included")
    result(
        "P4",
        f"worker agent idle, peak RSS / CPU over {args.seconds:g} s ({release.short})",
        f"{a['peak_rss_mb']:.1f} MB / {a['cpu_pct']:.2f} %",
        f"{f['peak_rss_mb']:.1f} MB / {f['cpu_pct']:.2f} % (bare python + the same libs, sleeping)",
        f"RSS <= {GOAL_RSS_MB:g} MB, CPU <= {GOAL_CPU_PCT:g} % of a core",
        rss_ok and cpu_ok,
    )


if __name__ == "__main__":
    asyncio.run(main())
