"""config-sync for slurmrestd beside a dev cluster, as in slurmrestd's pod: slurm.conf in a
ConfigMap-style volume and the JWT key in a Secret-style one (kubelet's atomic swaps), the target the
directory slurmrestd reads, and slurmrestd's container played here: started on the staged set once
config-sync is ready, and started again (on the same port) whenever config-sync stops it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client import CollectorRegistry

from sidecars.configsync.main import Running, running
from sidecars.configsync.restd import words as restd_words
from sidecars.configsync.restd.drain import DrainedRestart
from sidecars.configsync.restd.sync import RestdStrategy
from sidecars.configsync.restd.turns import Turns
from sidecars.configsync.settings import DrainSettings, Settings
from sidecars.devcluster import DevCluster
from sidecars.devcluster import restd as devrestd
from sidecars.devcluster.ports import lease_ports
from sidecars.devcluster.slurmconf import JWT_KEY
from sidecars.devcluster.volume import AtomicVolume
from sidecars.slurm import SlurmClient
from sidecars.slurm.runner import SlurmMetrics
from tests.helpers import RecordingEvents, eventually
from tests.settings import build

DRAIN_SECONDS = 120.0  # generous for a loaded machine: a request takes ~0.1 s quiet
RESTART_TIMEOUT_SECONDS = 120.0  # a slurmrestd start takes ~1 s quiet


@dataclass
class RestdPod:
    cluster: DevCluster
    conf: AtomicVolume
    key: AtomicVolume
    settings: Settings
    running: Running
    port: int
    started: list[devrestd.Restd] = field(default_factory=list)
    events: RecordingEvents = field(default_factory=RecordingEvents)

    @property
    def service(self) -> Any:
        return self.running.service

    @property
    def drainer(self) -> DrainedRestart:
        """The drained restart of slurmrestd's strategy (the service runs it: restd/sync.py)."""
        strategy = self.running.service.strategy
        assert isinstance(strategy, RestdStrategy)
        return strategy.drainer

    @property
    def target(self) -> Path:
        return self.settings.target

    async def status(self) -> dict[str, Any]:
        async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{self.running.port}/status") as r:
            return dict(await r.json())

    async def readyz(self) -> int:
        async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{self.running.port}/readyz") as r:
            return r.status


def slurm_conf_for(c: DevCluster, target: Path) -> str:
    """The cluster's slurm.conf, naming the key where config-sync stages it."""
    text = (c.dir / "etc" / "slurm.conf").read_text()
    return text.replace(f"{c.dir}/etc/{JWT_KEY}", f"{target}/{JWT_KEY}")


@contextlib.asynccontextmanager
async def restd_pod(
    c: DevCluster,
    name: str = "restd",
    turns: Turns | None = None,
    *,
    words: bool = True,
    restart_timeout_seconds: float = RESTART_TIMEOUT_SECONDS,
    start_late: Callable[[RestdPod], bool] | None = None,
) -> AsyncIterator[RestdPod]:
    """One slurmrestd pod (`name` tells several on one cluster apart; `turns`: the Lease they take
    turns with, else none; `words`: config-sync reads slurmrestd's output, as --restd-log-file;
    `start_late`: after the first stop, the container starts at once but its slurmrestd only
    once `start_late` holds: a slurmrestd slow to answer)."""
    target, state = c.dir / f"{name}-etc", c.dir / f"{name}-sync"
    conf = AtomicVolume(c.dir / "vol" / f"{name}-conf")
    key = AtomicVolume(c.dir / "vol" / f"{name}-key", mode=0o600)
    conf.write({"slurm.conf": slurm_conf_for(c, target)})
    key.write({JWT_KEY: (c.dir / "etc" / JWT_KEY).read_bytes()})
    # leased (outside the ephemeral range, promised to no other test) rather than free now: the
    # port stays unbound between a slurmrestd's stop and its restart, where an ephemeral one could
    # be taken meanwhile
    lease = lease_ports(1)
    port = lease.ports[0]
    log_file = devrestd.log_path(c, port)
    # the test's Service (load.clients' `routed`) drops a pod that is not ready at once: no settle
    settings = build(
        Settings,
        sources=(conf.path, key.path),
        secret_sources=(key.path,),
        target=target,
        state_dir=state,
        daemon="slurmrestd",
        dry_run=False,
        restart_policy="restart",
        restart_timeout_seconds=restart_timeout_seconds,
        restd=DrainSettings(
            port=port,
            settle_seconds=0.0,
            drain_seconds=DRAIN_SECONDS,
            uid=devrestd.RESTD_UID,
            # slurmrestd's output, as its container writes it to the control emptyDir
            log_file=log_file if words else None,
        ),
    )
    registry = CollectorRegistry()
    client = SlurmClient(env=dict(c.env), metrics=SlurmMetrics(registry))
    started: list[devrestd.Restd] = []
    events = RecordingEvents()
    pods: list[RestdPod] = []
    late: list[asyncio.Task[None]] = []

    def container_says_it_starts() -> None:
        # as the container's command does: a line that says it starts, then slurmrestd's output
        with open(log_file, "a") as f:
            f.write(f"{restd_words.STARTING}\n")

    async def slurmrestd_start() -> None:
        with contextlib.suppress(devrestd.RestdError):  # one that cannot start: nothing listens
            started.append(await devrestd.start(c, port=port, conf=target / "slurm.conf"))

    async def container_start() -> None:
        container_says_it_starts()
        await slurmrestd_start()

    async def slow_slurmrestd() -> None:
        # the container started, and its slurmrestd is slow to answer: it starts once the test says
        await eventually(
            lambda: start_late is not None and start_late(pods[0]), within=DRAIN_SECONDS, what="late"
        )
        await slurmrestd_start()

    async def container_restart() -> None:
        # the container's command SIGTERMs slurmrestd; the kubelet starts it again on the staged set
        if started:
            await devrestd.stop(started[-1])
        if start_late is not None and not late:
            container_says_it_starts()
            late.append(asyncio.create_task(slow_slurmrestd(), name="slow-slurmrestd"))
            return
        await container_start()

    try:
        async with running(
            settings,
            client=client,
            events=events,
            registry=registry,
            restd_stop=container_restart,
            restd_turns=turns,
        ) as r:
            # slurmrestd's container starts once config-sync is ready: on the set it staged
            await container_start()
            if not started:
                raise devrestd.RestdError(f"slurmrestd did not start: {log_file.read_text()[-1500:]}")
            pods.append(RestdPod(c, conf, key, settings, r, port, started, events))
            yield pods[0]
    finally:
        for t in late:
            t.cancel()
            with contextlib.suppress(asyncio.CancelledError, AssertionError):
                await t
        for s in started:
            await devrestd.stop(s)
        lease.release()
