"""The demo's live status table: `slurm-sidecars status` redrawn every two seconds."""

from __future__ import annotations

import asyncio

from sidecars.demo.stack import DemoStack
from sidecars.runtime.waits import until_set


async def live_table(stack: DemoStack, stop: asyncio.Event, interval: float = 2.0) -> None:
    from sidecars.operator.status import StatusSettings, collect, render

    settings = StatusSettings(
        control_plane=stack.control_plane_url,
        token=stack.token,
        config_sync=stack.config_sync_url,
        timeout_seconds=5.0,
    )
    while not stop.is_set():
        snap = await collect(settings)
        print("\033[2J\033[H" + render(snap), flush=True)
        await until_set(stop, interval)
