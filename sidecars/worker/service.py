"""The worker agent: one loop that looks at its node and drives the drain, registration and GPU
mapping from what it saw; an HTTP face for probes and metrics; a unix socket for the drain hook."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Mapping
from typing import Any

import aiohttp
import structlog
from prometheus_client import CollectorRegistry

from sidecars.protocol.events import EventReason
from sidecars.runtime import looplag, tlsroots
from sidecars.runtime.checks import CheckResult, Checks
from sidecars.runtime.events import EventSink, LogEventSink
from sidecars.runtime.http import DaemonHTTP, bearer_or_loopback, serve, serve_unix
from sidecars.runtime.tasks import RootTasks, until_stopped
from sidecars.runtime.tokenfile import TokenFile
from sidecars.runtime.waits import until_set
from sidecars.slurm import Controllers, RetryPolicy, SlurmClient, SlurmError, SlurmMetrics
from sidecars.worker import api, naming, trusted
from sidecars.worker.backoff import Backoff
from sidecars.worker.claim import ClaimCheck
from sidecars.worker.cp_client import AgentClient
from sidecars.worker.drain import Drainer
from sidecars.worker.gpu.attribution import GpuAttribution
from sidecars.worker.gpu.check import GpuCheck
from sidecars.worker.gpu.drain import GpuDrain
from sidecars.worker.gpu.map_step import GpuMapStep
from sidecars.worker.imex import ImexCheck
from sidecars.worker.jobmap import JobMapping
from sidecars.worker.metrics import WorkerMetrics
from sidecars.worker.observation import Observation
from sidecars.worker.registration import Registration
from sidecars.worker.settings import WorkerSettings, is_our_reason
from sidecars.worker.slurm_source import SlurmSource
from sidecars.worker.slurmd import Slurmd
from sidecars.worker.slurmdhealth import SOURCES, SlurmdHealth
from sidecars.worker.slurmdversion import SlurmdVersion
from sidecars.worker.source import NodeSource

STATUS = frozenset({"/status"})  # what needs the viewer credential (or a loopback caller)
log = structlog.get_logger(__name__)

__all__ = ["Agent"]


class Agent:
    def __init__(
        self,
        settings: WorkerSettings,
        *,
        env: Mapping[str, str] | None = None,
        registry: CollectorRegistry | None = None,
        events: EventSink | None = None,
        claim: ClaimCheck | None = None,
    ) -> None:
        self.settings = settings
        self.claim = claim  # DaemonSet workers: does this pod hold its Slurm node?
        self.registry = registry or CollectorRegistry()
        self.slurm_metrics = SlurmMetrics(self.registry)
        # the loop retries; one bounded retry here keeps a look within a poll or two
        self.client = SlurmClient(
            env=env,
            timeout=settings.slurm_timeout_seconds,
            retry=RetryPolicy(attempts=2, max_seconds=3.0),
            metrics=self.slurm_metrics,
            guard=trusted.conf_guard(os.environ if env is None else env),
            # several SlurmctldHost: a slow or failed look learns who is in control, and the next
            # ones go there first (no pings of its own otherwise: a fleet of agents must not ping).
            # Its copies of slurm.conf lie in the state directory, which no job's uid can write
            # (trusted.check_dirs), not in a TMPDIR one might share
            controllers=Controllers(
                {**(os.environ if env is None else env), "TMPDIR": str(settings.state_dir)}
            ),
        )
        self.metrics = WorkerMetrics(self.registry)
        self.events: EventSink = events or LogEventSink()
        self.slurmd = Slurmd(settings.node_name, settings.slurmd_restart_command, env=env)
        self.slurm = SlurmSource(self.client, settings.node_name)
        self.source = NodeSource(self.slurm)
        self.drainer = Drainer(settings, self.source, self.metrics, self.events, self._dynamic)
        self.registration = Registration(settings, self.slurmd, self.events, self.metrics, self._report)
        self.mapping = JobMapping(settings.job_mapping_dir) if settings.job_mapping_dir else None
        # beside the files: the same GPU -> job map as a bounded metric, for joins on DCGM's series
        self.attribution = (
            GpuAttribution(settings.node_name).register(self.registry) if self.mapping else None
        )
        self.gpu_map = (
            None
            if self.mapping is None
            else GpuMapStep(settings, self.mapping, self.attribution, self.slurm, self.metrics)
        )
        self.slurmd_health = SlurmdHealth(
            self.client,
            settings.node_name,
            (settings.pod_namespace, settings.pod_name),
            lambda: self.slurmd.find(record=False),
            interval=settings.poll_seconds,
        )
        self.imex = ImexCheck(settings.imex_channel, os.environ if env is None else env)
        self.gpu = GpuCheck(
            settings.gpu_check, settings.gpu_check_timeout_seconds, os.environ if env is None else env
        )
        self.gpu_drain = GpuDrain(
            settings, self.gpu, self.source, self.drainer, self.metrics, self.events, lambda: self.known
        )
        self.slurmd_version = SlurmdVersion(self.client, self.slurmd)
        self.obs: Observation | None = None
        self.known: Observation | None = None  # the last look that succeeded (probes, status)
        self.started = time.monotonic()
        self.tasks = RootTasks()
        self.lag = looplag.LoopLag(self.registry, settings.loop_lag)
        self.last_tick: float | None = None
        self.http_port: int | None = None
        self._startup_done = False

    def _dynamic(self) -> bool:
        """A dynamic node (`slurmd -Z`): its record goes after the drain."""
        return self.slurmd.find() is not None and self.slurmd.dynamic

    # ------------------------------------------------------------------ probes
    def _loop_fresh(self) -> CheckResult:
        waiting = self.claim.last_look if self.claim is not None and self.claim.refused else None
        age = time.monotonic() - (self.last_tick or waiting or self.started)
        ok = age <= self.settings.stale_seconds
        return CheckResult(ok, f"last turn {age:.1f}s ago (limit {self.settings.stale_seconds:g}s)")

    def _slurmd_alive(self) -> CheckResult:
        pid = self.slurmd.find()
        if pid is not None:
            return CheckResult(True, f"slurmd pid {pid}")
        if self.drainer.pod_terminating:
            return CheckResult(True, "pod terminating: slurmd stops after the drain")
        if not self.slurmd.ever_seen:
            return CheckResult(True, "no slurmd visible from here (no shared process namespace?)")
        gone = self.slurmd.missing_for()
        # a 24.11 reconfigure re-execs slurmd: a short gap is not a death
        return CheckResult(
            gone <= self.settings.slurmd_missing_grace_seconds, f"slurmd not running for {gone:.1f}s"
        )

    def _refused(self) -> str | None:
        return self.claim.refused if self.claim is not None else None

    def _claimed(self) -> CheckResult:
        if self.claim is None:
            return CheckResult(True, "one pod per Slurm node (not checked)")
        if self.claim.refused is not None:
            return CheckResult(False, self.claim.refused)
        return CheckResult(True, f"this pod holds Slurm node {self.settings.node_name}")

    def _registered(self) -> CheckResult:
        st = self.registration.status
        if st.declared_unregistered:
            return CheckResult(False, f"unregistered: {st.detail}")
        obs = self.obs
        if obs is None:
            return CheckResult(False, "no look at the node yet")
        if st.state == "registered":
            return CheckResult(True, "registered")
        if st.state == "controller_unreachable":
            # a controller outage is not this worker's fault: not judged until it is back
            return CheckResult(True, f"not judged: {st.detail}")
        return CheckResult(False, st.detail)

    def _node_usable(self) -> CheckResult:
        known = self.known
        if known is None or known.view is None:
            return CheckResult(False, "no record of the node" if known else "no look at the node yet")
        st = known.view.state
        bad = st.base in {"DOWN", "ERROR"} or bool({"FAIL", "INVALID", "INVALID_REG"} & st.flags)
        suffix = "" if self.obs is known else " (last known)"
        return CheckResult(not bad, f"state {st}{suffix}")

    def status(self) -> dict[str, Any]:
        obs = self.obs
        view = self.known.view if self.known else None
        ctl = self.client.controllers
        return {
            "node": self.settings.node_name,
            "pod": self.settings.pod,
            "mode": self.source.mode,
            "node_state": str(view.state) if view else None,
            "reason": view.reason if view else None,
            "lookup_error": obs.error if obs else None,
            "registration": self.registration.status.as_json(),
            "drain": self.drainer.as_json(),
            "slurmd_pid": self.slurmd.find(),
            "gpu_jobs": self.mapping.current() if self.mapping else None,
            "slurmd_health": self.slurmd_health.as_json(),  # which readiness source was used
            "claim_refused": self.claim.refused if self.claim is not None else None,
            "imex_channel": self.imex.check().as_json(),
            "gpu_check": self.gpu.as_json(),
            # several controllers: the one its commands go to first, as last learnt
            "controllers": None if ctl is None or len(ctl.hosts()) < 2 else ctl.as_json(),
            "slurmd_version": None
            if (v := self.slurmd_version.learnt) is None
            else {"version": str(v.version), "pid": v.pid},
        }

    def http(self) -> DaemonHTTP:
        live, ready = Checks(), Checks()
        live.add("root_tasks", self.tasks.check)
        live.add(looplag.CHECK, self.lag.check)
        live.add("agent_loop", self._loop_fresh)
        live.add("slurmd_alive", self._slurmd_alive)
        ready.add("slurm_node_claim", self._claimed)
        ready.add("registered", self._registered)
        ready.add("node_usable", self._node_usable)
        ready.add("slurmd_ready", self.slurmd_health.check)
        ready.add("imex_channel", self.imex.check)
        ready.add("gpu_check", self.gpu.check)
        return DaemonHTTP(self.registry, liveness=live, readiness=ready, status=self.status)

    # ------------------------------------------------------------------ the loop
    async def _report(self, registered: bool, detail: str) -> None:
        await self.source.report(self.settings.pod_namespace, self.settings.pod_name, registered, detail)

    async def _confirm(self) -> Observation:
        """A direct look, controller first: what a remediation must rest on."""
        try:
            ping = await self.client.ping()
        except SlurmError as exc:
            return Observation("slurm", error=str(exc), controller_down=True)
        if not ping.up:
            return Observation("slurm", error="controller unreachable (scontrol ping)", controller_down=True)
        return await self.slurm.observe()

    async def run(self, stop: asyncio.Event) -> None:
        s = self.settings
        self.drainer.load()
        if self.mapping is not None:
            # files are right only when we can vouch for them: start empty, the first look refills
            self.mapping.reconcile({})
        async with contextlib.AsyncExitStack() as stack:
            self.slurmd_health.session = await stack.enter_async_context(aiohttp.ClientSession())
            if s.control_plane and s.token_file:
                # idle connections dropped before the server's keep-alive bound (--http-header-seconds,
                # 10 s) drops them: a request never goes out on one the server is closing
                tls = tlsroots.client_context(s.control_plane, s.control_plane_tls)  # roots only if used
                connector = aiohttp.TCPConnector(ssl=tls, keepalive_timeout=5)
                session = await stack.enter_async_context(aiohttp.ClientSession(connector=connector))
                cp = AgentClient(session, s.control_plane, TokenFile(s.token_file).value, s.node_name)
                backoff = Backoff(first_seconds=s.drain_poll_seconds, max_seconds=s.fallback_max_seconds)
                self.source.attach(cp, backoff=backoff, on_fallback=self.metrics.fallbacks.inc)
                self.slurmd_health.read_record = False  # coordinated: no Slurm query of its own
            face = self.http().app()
            # /status maps this node's GPUs to job ids: the viewer's to read (probes stay open)
            face.middlewares.append(bearer_or_loopback(STATUS, s.viewer_token))
            self.http_port = await stack.enter_async_context(serve(face, *s.http_address, s.http_limits))
            wake = asyncio.Event()
            # checked again right before the bind: the directory must still be ours
            trusted.check_dirs({"--socket": s.socket_path.parent})
            await stack.enter_async_context(
                serve_unix(
                    api.app(self.drainer, wake, self._refused),
                    str(s.socket_path),
                    s.http_limits,
                )
            )
            if self.claim is not None and not await self.claim.wait_held(stop, self.events):
                log.info("worker_stopped", claimed=False)
                return
            if s.node_name_from == "kube-node":
                naming.write_name(s)  # slurmd's container starts once it reads its name
            log.info(
                "worker_started",
                mode=self.source.mode,
                http_port=self.http_port,
                socket=str(s.socket_path),
                drain_resumed=self.drainer.active,
            )
            # the loop has its own stop, set only once the tasks know they are stopping: a loop
            # that ends after it is a daemon stopping, one that ends before it a failure
            loop_stop = asyncio.Event()
            self.tasks.start("agent_loop", self._loop(loop_stop, wake))
            self.tasks.start(looplag.TASK, self.lag.run())
            if s.gpu_check != "off":
                self.tasks.start("gpu_check", self.gpu_drain.run())
            try:
                await until_stopped(stop, self.tasks)
            finally:
                self.tasks.stopping()
                loop_stop.set()
                # the loop ends by itself once it sees its stop: a step in progress (a drain
                # written, a slurmd restarted) is finished, never cut in half
                await self.tasks.stop(grace=None, first=("agent_loop",))
                if self.client.controllers is not None:
                    self.client.controllers.close()
        log.info("worker_stopped")

    async def _loop(self, stop: asyncio.Event, wake: asyncio.Event) -> None:
        async def on_stop() -> None:
            await stop.wait()
            wake.set()

        watcher = asyncio.ensure_future(on_stop())
        never = asyncio.Event()
        try:
            first = True
            turned = 0.0
            while not stop.is_set():
                s = self.settings
                # a floor under the turns: a control plane (or an impostor) that answers the long
                # poll at once, every time, must not spin the agent (the hook's wake skips it)
                await until_set(wake, s.drain_poll_seconds - (time.monotonic() - turned))
                turned = time.monotonic()
                interval = self.source.interval(self.drainer.active, s.poll_seconds, s.drain_poll_seconds)
                obs = await self.source.observe(0 if first else interval, wake)
                first = False
                if obs is None:
                    if stop.is_set():
                        break
                    wake.clear()
                    obs = await self.source.observe(0, never)
                assert obs is not None
                self.obs = obs
                if obs.ok:
                    self.known = obs
                self.last_tick = time.monotonic()
                await self._handle(obs)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

    async def _handle(self, obs: Observation) -> None:
        if not self._startup_done and obs.ok:
            await self._startup(obs)
        await self.drainer.step(obs)
        if not self.drainer.pod_terminating:
            # once the pod is terminating slurmd is stopped on purpose after the hook: never heal it
            await self.registration.step(obs, self._confirm)
        if self.gpu_map is not None:
            await self.gpu_map.step(obs)
        if not self.drainer.pod_terminating:
            await self.slurmd_health.step()
            for source in SOURCES:
                self.metrics.slurmd_readiness.labels(source=source).set(source == self.slurmd_health.source)
            await self._report_version()

    async def _report_version(self) -> None:
        """The running slurmd's release, told to the control plane (its version skew guard)."""
        if self.source.cp is None or self.registration.status.state != "registered":
            return
        await self.slurmd_version.learn()
        due = self.slurmd_version.due()
        s = self.settings
        if due is not None and await self.source.report_version(s.pod_namespace, s.pod_name, str(due)):
            self.slurmd_version.delivered(due)

    async def _startup(self, obs: Observation) -> None:
        """A node left drained by us for a pod that is gone (a cancelled scale-in, a replaced pod)
        is given back; anyone else's drain, or this pod's own drain in progress, is kept."""
        view = obs.view
        if self.drainer.pod_terminating or view is None:
            self._startup_done = True
            return
        st = view.state
        if (st.drain or st.base == "DOWN") and view.reason is not None and is_our_reason(view.reason):
            try:
                # the reason seen is the condition: cleared only while it is still the node's reason
                undone = await self.source.undrain(view.reason)
            except SlurmError as exc:
                log.warning("undrain_failed_retrying", error=str(exc))
                return
            self._startup_done = True
            if not undone:
                log.info("own_drain_taken_over", previous_reason=view.reason)
                return
            log.info("own_drain_undone", previous_reason=view.reason, state=str(st))
            await self.events.emit(
                EventReason.UNDRAINED,
                f"node {view.name} was drained by us ({view.reason}); a new agent took it back",
            )
        self._startup_done = True
