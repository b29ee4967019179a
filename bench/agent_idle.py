"""P4: the worker agent's idle footprint (RSS and CPU) against a real local Slurm.

Runs `slurm-sidecars worker` as its own process beside one idle node for `--seconds` (60 by
default) with its production defaults, and samples /proc. Beside it, in the same run and the same
way: a bare Python that imports the same libraries and sleeps (the floor any asyncio sidecar in
Python pays), so the agent's own share is visible, and the steps up to it (asyncio, aiohttp.web with
and without its CA roots, the other libraries, the agent's modules), so each part's cost is too.
CPU counts the Slurm commands it ran (its reaped children). Goal: RSS <= 35 MB, CPU <= 0.5 % of a
core.
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
# the baselines, each a bare Python sleeping after loading a little more of what the agent loads, as
# it loads it: no `rich` (structlog would import it from the dev tools' packages; sidecars/entry.py
# keeps it out) and aiohttp imported with the system's CA roots deferred (sidecars/runtime/tlsroots.py);
# the difference between two lines is what that part costs
_SLEEP = "asyncio.run(asyncio.sleep(3600))"
_NO_RICH = "import sys; sys.modules['rich'] = None; import asyncio; "
_DEFERRED = "from sidecars.runtime.tlsroots import roots_deferred\nwith roots_deferred():\n    "
BASELINES = (
    ("python + asyncio", "import asyncio; " + _SLEEP),
    ("+ aiohttp.web (CA roots loaded)", _NO_RICH + "import aiohttp.web; " + _SLEEP),
    ("+ aiohttp.web", _NO_RICH + "\n" + _DEFERRED + "import aiohttp.web\n" + _SLEEP),
    (
        "+ structlog, prometheus, tenacity",
        _NO_RICH + "\n" + _DEFERRED + "import aiohttp.web, structlog, prometheus_client, tenacity\n" + _SLEEP,
    ),
    (
        "+ the agent's modules",
        _NO_RICH + "from sidecars.cli import build_parser; build_parser(only='worker'); " + _SLEEP,
    ),
)
FLOOR = 3  # the line the goal is read against: bare Python with the same libraries


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    """VmRSS now, or VmHWM: the highest RSS since the process started (its imports included)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
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
        "hwm_mb": rss_mb(proc.pid, "VmHWM"),
        "pss_mb": pss_mb(proc.pid),
        "cpu_pct": 100 * (cpu1 - cpu0) / (t1 - t0),
    }


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=60.0)
    # past the imports even on a busy machine: idle CPU is what is measured, not the start
    ap.add_argument("--warmup", type=float, default=10.0)
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
        floors = [
            await asyncio.create_subprocess_exec(sys.executable, "-c", code, cwd=ROOT)
            for _, code in BASELINES
        ]
        try:
            a, *bases = await asyncio.gather(
                measure(agent, args.warmup, args.seconds),
                *(measure(p, args.warmup, args.seconds) for p in floors),
            )
        finally:
            for p in (agent, *floors):
                p.terminate()
                await p.wait()
            shutil.rmtree(sockdir, ignore_errors=True)
    f = bases[FLOOR]
    print(f"P4 agent idle over {args.seconds:g}s (Slurm {release.version}, default --poll-seconds 15)")
    print(f"  {'':34} {'RSS MB':>8} {'peak MB':>8} {'VmHWM MB':>9} {'PSS MB':>8} {'CPU % core':>11}")
    rows = [*zip((label for label, _ in BASELINES), bases, strict=True), ("worker agent, running", a)]
    for label, m in rows:
        print(
            f"  {label:34} {m['rss_mb']:8.1f} {m['peak_rss_mb']:8.1f} {m['hwm_mb']:9.1f} {m['pss_mb']:8.1f}"
            f" {m['cpu_pct']:11.3f}"
        )
    print("  goal: RSS <= 35 MB, CPU <= 0.5 % of a core")
    rss_ok = a["peak_rss_mb"] <= GOAL_RSS_MB
    cpu_ok = a["cpu_pct"] <= GOAL_CPU_PCT
    if not rss_ok:
        print(
            f"  RSS misses the goal by {a['peak_rss_mb'] - GOAL_RSS_MB:.1f} MB: the bare interpreter "
            f"with the same libraries already holds {f['peak_rss_mb']:.1f} MB; the agent's own share is "
            f"{a['peak_rss_mb'] - f['peak_rss_mb']:.1f} MB (its modules "
            f"{bases[FLOOR + 1]['peak_rss_mb'] - f['peak_rss_mb']:.1f} MB, running "
            f"{a['peak_rss_mb'] - bases[FLOOR + 1]['peak_rss_mb']:.1f} MB; its PSS, shared pages split: "
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
