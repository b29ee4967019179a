"""`slurm-sidecars config-sync`: the daemon (HTTP face, watcher, sync loop) around ConfigSync."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from functools import partial

import structlog
from aiohttp import web
from prometheus_client import CollectorRegistry

from sidecars.configsync import settings as settings_mod
from sidecars.configsync import tokenwatch
from sidecars.configsync.fileset.secretvalues import SecretValues
from sidecars.configsync.fileset.watch import watch
from sidecars.configsync.holds import HoldRule
from sidecars.configsync.judge.validate import Judge
from sidecars.configsync.plans.api import PlanEndpoint, add_routes
from sidecars.configsync.restd.sync import RestdStrategy, staged_target
from sidecars.configsync.restd.turns import Turns
from sidecars.configsync.service.daemon import ConfigSync
from sidecars.configsync.service.strategy import Make
from sidecars.configsync.settings import Settings
from sidecars.configsync.slurmdbd.apply import Stop
from sidecars.configsync.slurmdbd.sync import DbdStrategy
from sidecars.kube import pod_events
from sidecars.runtime import daemon, logs, looplag
from sidecars.runtime.checks import CheckResult, Checks
from sidecars.runtime.events import EventSink, LogEventSink, RedactingEventSink
from sidecars.runtime.http import DaemonHTTP, bearer_required, serve
from sidecars.runtime.looplag import LoopLag
from sidecars.runtime.redact import BOUND, Redactor
from sidecars.runtime.settings import ConfigError
from sidecars.runtime.tasks import RootTasks, until_stopped
from sidecars.runtime.waits import until_set, within
from sidecars.slurm import SlurmClient, daemons
from sidecars.slurm.runner import SlurmMetrics

configure = settings_mod.configure
SHOWS_CONFIG = frozenset({"/status", "/history", "/v1/plans"})  # what needs the viewer credential
PLANS = frozenset({"/v1/plan"})  # what needs the operator's
PLAN_BODY_BYTES = 16 * 1024 * 1024  # a candidate set in base64, with room
NO_PLAN_BODY_BYTES = 64 * 1024  # what the daemon's HTTP face takes otherwise (runtime.http)


@dataclass
class Running:
    service: ConfigSync
    port: int
    registry: CollectorRegistry
    tasks: RootTasks


RELEASE_CHECK_SECONDS = 1.0  # the readiness probe's share for asking both releases (Checks allows 2 s)


@contextlib.asynccontextmanager
async def running(
    settings: Settings,
    *,
    client: SlurmClient | None = None,
    events: EventSink | None = None,
    registry: CollectorRegistry | None = None,
    validator: Judge | None = None,
    checkpoint: Callable[[str], None] | None = None,
    watch_files: bool = True,
    dbd_stop: Stop | None = None,
    restd_stop: Stop | None = None,
    restd_turns: Turns | None = None,
    hold_rules: Sequence[HoldRule] | None = None,
) -> AsyncIterator[Running]:
    """The whole daemon for the duration of the block: HTTP first (probes say "not ready" until the
    target holds a set), then the start-up sync, then watching and syncing until the block ends."""
    registry = registry or CollectorRegistry()
    if client is None:
        client = SlurmClient(metrics=SlurmMetrics(registry))
    # no password it read leaves the process: not in an Event, a log line, /status or /history
    secret_values = SecretValues(settings.secret_sources)
    redactor = Redactor(secret_values)
    bound = structlog.contextvars.bind_contextvars(**{BOUND: redactor})
    sink = RedactingEventSink(events or LogEventSink(), redactor)
    # slurmctld's read, judge and apply are the service's own; another daemon's is its strategy
    strategy: Make | None = None
    if settings.daemon == daemons.SLURMDBD:
        strategy = partial(DbdStrategy, settings=settings, client=client, stop=dbd_stop)
    elif settings.daemon == daemons.SLURMRESTD:
        strategy = partial(
            RestdStrategy, settings=settings, client=client, stop=restd_stop, turns=restd_turns
        )
    service = ConfigSync(
        settings,
        client,
        registry,
        sink,
        validator=validator,
        checkpoint=checkpoint,
        hold_rules=hold_rules,
        strategy=strategy,
        target=staged_target(settings, checkpoint) if settings.daemon == daemons.SLURMRESTD else None,
    )
    service.learn_secrets = secret_values.learn  # each set read, before anything about it is shown
    stop = asyncio.Event()
    tasks = RootTasks()
    liveness, readiness = Checks(), Checks()
    liveness.add("root_tasks", tasks.check)
    lag = LoopLag(registry, settings.loop_lag)
    liveness.add(looplag.CHECK, lag.check)
    readiness.add(
        "target_synced",
        lambda: CheckResult(
            service.ready, "the target holds a verified set" if service.ready else "no set synced yet"
        ),
    )
    if isinstance(restd := service.strategy, RestdStrategy):  # out of the Service's endpoints while it drains
        readiness.add("slurmrestd_serving", lambda: CheckResult(*restd.drainer.readiness()))
    if service.ha_parts is not None:  # a standby is ready too: the check says where this pod stands
        ha, gate = service.ha_parts.coordination, service.ha_parts.gate
        readiness.add("ha", lambda: CheckResult(*ha.readiness(service.state.applied_sha256)))
        # a pod back while a peer is in control: its slurmctld waits for that set
        readiness.add("ha_return", lambda: CheckResult(gate.open, gate.why))
    runner = service.validator.dry_runner
    if runner is not None:
        dry_runner = runner

        async def same_release() -> CheckResult:
            # a dry run of another release refuses every change: not ready, and why (not the config);
            # asked again while the live slurmctld has not answered (config-sync starts before it,
            # so a slurmctld not up yet is no failure of this check)
            try:
                why = await within(dry_runner.compare_releases(), RELEASE_CHECK_SECONDS)
            except TimeoutError:
                why = None
            return CheckResult(why is None, why or "the live release, or not known yet")

        readiness.add("dry_run_release", same_release)
    # what is served is redacted once more at the door, whatever put it there (runtime.redact)
    status = DaemonHTTP(registry, liveness, readiness, lambda: redactor.json(service.status()))
    # a plan's body is a whole candidate set (base64): room for it when plans are served
    body_bytes = PLAN_BODY_BYTES if settings.operator_token is not None else NO_PLAN_BODY_BYTES
    app = status.app(client_max_size=body_bytes)
    if settings.viewer_token is not None:  # else: on loopback only (settings)
        app.middlewares.append(bearer_required(SHOWS_CONFIG, settings.viewer_token))
    if settings.operator_token is not None:
        app.middlewares.append(bearer_required(PLANS, settings.operator_token, who="the operator's"))
    add_routes(app, PlanEndpoint(service, redactor) if settings.operator_token is not None else None)

    async def history(_: web.Request) -> web.Response:
        return web.json_response(redactor.json(service.history_view()))

    app.router.add_get("/history", history)
    async with serve(app, *settings.http_address, settings.http_limits, settings.tls) as port:
        tasks.start(looplag.TASK, lag.run())
        if settings.token_watch.files:
            tasks.start(tokenwatch.TASK, tokenwatch.TokenWatch(settings.token_watch, registry, sink).run())
        watching = asyncio.Event()
        if watch_files:  # off only in tests of the periodic re-hash
            tasks.start("watch", watch(settings.sources, service.wake, stop, watching))
        else:
            watching.set()
        try:
            # watches first, then the start-up read: a change in between is never missed
            await until_set(watching, 5.0)
            await service.start()
            tasks.start("sync_loop", service.run(stop))
            if runner is not None:
                # the dry run's shadow of the state: built now, beside the loop, and kept in step,
                # so that no change (the first included) pays for preparing it
                tasks.start(
                    "dry_run_state",
                    runner.keep_state(
                        lambda: service.applied.files if service.applied else None,
                        stop,
                        settings.dry_run_state_sync_seconds,
                    ),
                )
            yield Running(service, port, registry, tasks)
        finally:
            tasks.stopping()
            stop.set()
            await tasks.stop(grace=5.0, first=("watch", "sync_loop", "dry_run_state"))
            structlog.contextvars.reset_contextvars(**bound)


async def restd_turns(settings: Settings, stack: contextlib.AsyncExitStack) -> Turns | None:
    """With --restd-turn-lease: the turn among slurmrestd's replicas, held in this namespace's Lease
    under this pod's name. No Kubernetes to hold it in is a configuration error, not "no turns": the
    replicas would drain together, which is what the flag was given against."""
    name = settings.restd.turn_lease
    if settings.daemon != daemons.SLURMRESTD or not name:
        return None
    # loaded here, not at import: kubernetes-asyncio costs ~35 MB, and only this flag needs it at start
    from sidecars.kube import KubeClient, load_configuration

    conf = await load_configuration(strict=True)
    if conf is None:
        raise ConfigError(f"--restd-turn-lease {name}: no Kubernetes API (service account) to hold it in")
    kube = await stack.enter_async_context(KubeClient(conf))
    return Turns(
        kube,
        os.environ.get("POD_NAMESPACE") or "slurm",
        name,
        settings.pod_name or os.environ.get("POD_NAME") or socket.gethostname(),
        lease_seconds=settings.restd.turn_lease_seconds,
        poll_seconds=settings.restd.turn_poll_seconds,
    )


def main(args: argparse.Namespace) -> int:
    settings = settings_mod.from_args(args)  # a ConfigError here is exit 2, before anything starts

    async def run(stop: asyncio.Event) -> None:
        logs.bind("config-sync", env=os.environ, target=str(settings.target))
        async with contextlib.AsyncExitStack() as stack:
            turns = await restd_turns(settings, stack)
            events = await stack.enter_async_context(pod_events("slurm-sidecars-config-sync"))
            r = await stack.enter_async_context(running(settings, events=events, restd_turns=turns))
            sources = [str(s) for s in settings.sources]
            structlog.get_logger(__name__).info("config_sync_started", port=r.port, sources=sources)
            await until_stopped(stop, r.tasks)

    return daemon.run(run)
