"""slurmrestd restarted on new files with clients busy on it, counting every request that did not get
its whole 200 reply. The Service is played by the clients (a new connection only while the pod is an
endpoint, that is while config-sync's readiness says it serves); the kubelet's restart of slurmrestd's
container, by a new slurmrestd on the same port once the old one was stopped (SIGTERM, as the
container's command does). A restart that waits out the open connections drops none on either release;
the plain restart it replaces dropped every request in flight (docs/slurmrestd.md).

One more client holds a request in flight across the change on purpose: it sends half of it, and the
rest only once the drain waits on its connection. SIGTERM (and SIGINT) to slurmrestd drops such a request on
both releases (24.11: reset; 26.05: closed with no reply); the drained restart waits for it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import pytest

from sidecars.configsync.restd import inflight
from sidecars.configsync.restd.drain import DrainedRestart
from sidecars.configsync.settings import DrainSettings
from sidecars.devcluster import DevCluster
from sidecars.devcluster import restd as devrestd
from tests.configsync.restd import load
from tests.helpers import eventually

pytestmark = [
    pytest.mark.releases("slurm24", "slurm26"),
    pytest.mark.per_release("each release's slurmrestd ends its connections its own way on SIGTERM"),
    pytest.mark.cluster(nodes=1, jwt=True),
]

BUSY_REQUESTS = 40  # answered before the change: the clients are under way
# generous for a loaded machine: a request takes ~0.1 s quiet, a slurmrestd start ~1 s
DRAIN_SECONDS = 120.0
RESTART_TIMEOUT_SECONDS = 120.0


async def _until(what: str, cond: Callable[[], bool], seconds: float) -> None:
    await eventually(cond, within=seconds, what=what)


async def test_a_drained_restart_drops_no_request(cluster: DevCluster) -> None:
    token = await devrestd.token(cluster)
    restd = await devrestd.start(cluster)
    running = [restd]

    async def kubelet_restart() -> None:
        # the container's command SIGTERMs slurmrestd; the kubelet starts it again on the same port
        await devrestd.stop(running[-1])
        running.append(await devrestd.start(cluster, port=restd.port))

    drainer = DrainedRestart(
        DrainSettings(
            port=restd.port,
            settle_seconds=0.0,  # the clients' routing drops a pod that is not ready at once
            drain_seconds=DRAIN_SECONDS,
            restart_timeout_seconds=RESTART_TIMEOUT_SECONDS,
        ),
        stop=kubelet_restart,
    )
    slow: asyncio.Task[bytes] | None = None
    try:
        async with load.clients(restd.port, token, routed=lambda: drainer.serving) as tally:
            await _until("busy", lambda: tally.ok >= BUSY_REQUESTS, DRAIN_SECONDS)
            slow = asyncio.create_task(
                load.slow_request(restd.port, token, lambda: drainer.waiting_on > 0, DRAIN_SECONDS)
            )
            outcome = await drainer.restart()
            assert slow.done(), "slurmrestd was restarted while a request was in flight"
            status = await slow
            answered = tally.ok
            # the new slurmrestd serves the clients again
            await _until("served again", lambda: tally.ok >= answered + BUSY_REQUESTS, DRAIN_SECONDS)
        print(
            f"\n{cluster.release.name}: {tally.ok} answered, {tally.dropped} dropped, "
            f"{tally.refused} refused, "
            f"drained in {outcome.drained_seconds:.2f}s"
        )
        assert outcome.ok, outcome.reason
        assert status.startswith(b"HTTP/1.1 200"), status
        assert outcome.cut == 0, outcome
        assert (tally.dropped, tally.refused) == (0, 0), tally.words
        assert len(running) == 2
    finally:
        if slow is not None and not slow.done():
            slow.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await slow
        for r in running:
            await devrestd.stop(r)


async def test_the_port_state_is_read_from_the_kernel(cluster: DevCluster) -> None:
    """The count the drain waits on: an open connection on slurmrestd's port, and its listener."""
    async with devrestd.serving(cluster) as restd:
        assert inflight.read(restd.port).listener is not None
        # other connections may be on the port (the readiness check's, which slurmrestd closes when it
        # likes), and can only end: ours counts while open, and the count falls once it is answered
        reader, writer = await asyncio.open_connection("127.0.0.1", restd.port)
        writer.write(b"GET /openapi/v3 HTTP/1.1\r\nHost: x\r\n")  # half a request: in flight
        await writer.drain()
        await _until("counted", lambda: inflight.read(restd.port).serving >= 1, 30.0)
        held = inflight.read(restd.port).serving
        writer.write(b"Connection: close\r\n\r\n")  # slurmrestd answers, then closes its side
        await writer.drain()
        await reader.read()
        writer.close()
        await writer.wait_closed()
        await _until("gone", lambda: inflight.read(restd.port).serving < held, 60.0)
    await _until("no listener", lambda: inflight.read(restd.port).listener is None, 60.0)
