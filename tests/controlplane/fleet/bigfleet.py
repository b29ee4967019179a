"""A fleet of any size behind Slurm's own command names, and how long the event loop stalls while it
is refreshed.

`scontrol` and `squeue` shims on PATH print a 24.11 node document (the captured node, cloned per
name) and a brief job listing, so the real SlurmClient runs, reads and parses them as it would
Slurm's. No slurmctld holds 10,000 nodes on this machine; what is measured is our side of the read.
Used by tests/controlplane/fleet/test_refresh_off_loop.py and scripts/fleet_refresh_stall.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from tests.conftest import DATA

T = TypeVar("T")
RELEASE = "slurm 24.11.1"  # JSON node listing (`scontrol show nodes --json`) from 23.02 on
TICK_SECONDS = 0.002  # how often the stall probe asks to wake


def state(i: int) -> list[str]:
    """Node i's state: a tenth idle, a few drained while busy, the rest allocated."""
    return ["IDLE"] if i % 10 == 0 else (["MIXED", "DRAIN"] if i % 97 == 0 else ["ALLOCATED"])


def write(where: Path, nodes: int, jobs: int) -> dict[str, str]:
    """Writes the shims and their outputs under `where`; the environment a SlurmClient reads them with."""
    doc = json.loads((DATA / "slurm-24.11" / "scontrol-show-nodes--json.json").read_text())
    # the captured node as text with its name and state left open, filled in per node (a deep copy
    # of the object per node took seconds on a loaded machine)
    template = {**doc["nodes"][0], "name": "@NAME@", "hostname": "@NAME@", "state": "@STATE@"}
    template["gres"] = "gpu:8"
    node_text = json.dumps(template)
    names = [f"gpu{i:05d}" for i in range(nodes)]
    listed = [
        node_text.replace('"@NAME@"', json.dumps(name)).replace('"@STATE@"', json.dumps(state(i)))
        for i, name in enumerate(names)
    ]
    doc["nodes"] = []
    head, tail = json.dumps(doc).split('"nodes": []', 1)
    # the one-line text listing (`scontrol -o`, for a client told to read text), from a captured line
    line = (DATA / "slurm-24.11" / "scontrol--o-show-node.txt").read_text().splitlines()[0]
    line = line.replace("NodeName=n1 ", "NodeName=@NAME@ ").replace("State=ALLOCATED ", "State=@STATE@ ")
    assert "@NAME@" in line and "@STATE@" in line
    text_lines = [
        line.replace("@NAME@", name).replace("@STATE@", "+".join(state(i))) + "\n"
        for i, name in enumerate(names)
    ]
    now = int(time.time())
    lines = []
    for j in range(1, jobs + 1):
        if j % 5:  # four in five run, each on one node, busy nodes only
            name = names[(j * 7919) % nodes]
            if (j * 7919) % nodes % 10 == 0:
                name = names[((j * 7919) % nodes + 1) % nodes]
            started = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(now - j % 3600))
            limit = ["30:00", "2:00:00", "10:00:00", "1-00:00:00", "UNLIMITED"][j % 5]
            lines.append(f"{j}|RUNNING|debug|1|1|{limit}|{started}|gres/gpu:2|{name}|None\n")
        else:
            lines.append(f"{j}|PENDING|debug|1|{1 + j % 4}|1-00:00:00|N/A|gres/gpu:8||Resources\n")
    (where / "nodes.json").write_text(f'{head}"nodes": [{", ".join(listed)}]{tail}')
    (where / "jobs.txt").write_text("".join(lines))
    (where / "nodes.txt").write_text("".join(text_lines))
    bin_dir = where / "bin"
    bin_dir.mkdir()
    shims = {
        "scontrol": (
            f'case "$*" in\n  --version) echo "{RELEASE}";;\n'
            f'  "show nodes --json") exec cat "{where}/nodes.json";;\n'
            f'  "--future -o -d show node") exec cat "{where}/nodes.txt";;\n'
            '  *) echo "not in this fleet: scontrol $*" >&2; exit 1;;\nesac\n'
        ),
        "squeue": f'exec cat "{where}/jobs.txt"\n',
    }
    for name, body in shims.items():
        shim = bin_dir / name
        shim.write_text(f"#!/bin/sh\n{body}")
        shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


@dataclass(frozen=True)
class Stall:
    worst_seconds: float  # the latest the loop woke past when it was asked to
    took_seconds: float  # the work's own time, from start to end
    ticks: int  # wakes measured meanwhile


async def stall_during(work: Awaitable[T]) -> tuple[T, Stall]:
    """`work`'s result, and how late the loop ran while it ran: a task asks to wake every
    TICK_SECONDS and measures by how much it overslept, as runtime.looplag does every 0.25 s."""
    worst, ticks, due = 0.0, 0, time.monotonic()

    async def probe() -> None:
        nonlocal worst, ticks, due
        while True:
            due = time.monotonic() + TICK_SECONDS
            await asyncio.sleep(TICK_SECONDS)
            worst, ticks = max(worst, time.monotonic() - due), ticks + 1

    ticker = asyncio.create_task(probe(), name="stall-probe")
    await asyncio.sleep(0)  # the probe runs before the work begins
    started = time.monotonic()
    try:
        result = await work
    finally:
        ended = time.monotonic()
        took, worst = ended - started, max(worst, ended - due)  # a stall the work ended in counts too
        ticker.cancel()
        await asyncio.gather(ticker, return_exceptions=True)
    return result, Stall(worst, took, ticks)
