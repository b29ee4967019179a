"""Recycling unregistered worker pods: capped, with backoff, and never during a systemic fault.

A pod is a candidate when its agent reported it unregistered (the agent has already tried to heal
slurmd), or when it is Ready but its node has been absent from Slurm for the grace period. Each
deletion gets a Warning Event on the pod. At most max(1, fraction x workers) per window; the same
pod name (StatefulSet pods come back under it) waits longer each time. Nothing is recycled while
slurmctld is unreachable, or while more than half the workers look unregistered: that is a fault
of the cluster, reported once as a Warning, not something deleting pods can cure.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

import structlog

from sidecars.controlplane.fleet.metrics import ControlPlaneMetrics
from sidecars.controlplane.reconcile.round import Outcome, View, unready
from sidecars.controlplane.settings import RecycleSettings
from sidecars.kube import KubeClient, Pod
from sidecars.protocol.events import EventReason
from sidecars.runtime.events import EventSink

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Report:
    registered: bool
    detail: str
    at: float


@dataclass
class PodHold:
    """A pod whose recycle failed is left alone until `not_before`; the next failure doubles `delay`."""

    not_before: float
    delay: float


@dataclass
class Recycler:
    name: ClassVar[str] = "recycle"
    kube: KubeClient
    metrics: ControlPlaneMetrics
    events: EventSink  # about the control plane itself (systemic faults)
    node_of: Callable[[Pod], str]
    policy: RecycleSettings = field(default_factory=RecycleSettings)
    clock: Callable[[], float] = time.monotonic
    reports: dict[tuple[str, str], Report] = field(default_factory=dict)
    absent_since: dict[str, float] = field(default_factory=dict)
    deleted_at: deque[float] = field(default_factory=deque)
    backoff: dict[str, PodHold] = field(default_factory=dict)
    suspended: str | None = None
    recent: deque[dict[str, object]] = field(default_factory=lambda: deque(maxlen=20))

    def report(self, namespace: str, pod: str, registered: bool, detail: str) -> None:
        key = (namespace, pod)
        if registered:
            self.reports.pop(key, None)
        else:
            self.reports[key] = Report(registered, detail, self.clock())

    def cap(self, workers: int) -> int:
        return max(1, math.floor(self.policy.fraction * workers))

    def _suspend(self, why: str, label: str) -> bool:
        """Enter (or stay in) suspension; True the first time, to report it once."""
        self.metrics.recycling_suspended.clear()
        self.metrics.recycling_suspended.labels(label).set(1)
        first = self.suspended != why
        if first:
            log.warning("recycling_suspended", reason=why)
        self.suspended = why
        return first

    async def reconcile(self, view: View) -> Outcome:
        """One pass: delete the worker pods long unregistered, within the cap and each one's backoff."""
        now = self.clock()
        snapshot = view.snapshot
        workers = [p for p in view.pods if not p.deleting]
        if (skip := unready(view)) is not None:
            return skip
        if not snapshot.reachable:
            self._suspend("slurmctld unreachable", "slurmctld_unreachable")
            return Outcome(skipped="suspended: slurmctld unreachable")
        due: list[Pod] = []
        unregistered = 0
        present = set()
        for pod in workers:
            present.add(pod.name)
            report = self.reports.get((pod.namespace, pod.name))
            absent = pod.ready and self.node_of(pod) not in snapshot.nodes
            if absent:
                self.absent_since.setdefault(pod.name, now)
            else:
                self.absent_since.pop(pod.name, None)
            if report is not None or absent:
                unregistered += 1
            if report is not None or (
                absent and now - self.absent_since[pod.name] >= self.policy.grace_seconds
            ):
                due.append(pod)
        self.absent_since = {k: v for k, v in self.absent_since.items() if k in present}
        self.metrics.unregistered_workers.set(unregistered)
        if workers and unregistered * 2 > len(workers):
            why = f"systemic: {unregistered} of {len(workers)} workers look unregistered"
            if self._suspend(why, "systemic"):
                await self.events.emit(
                    EventReason.WORKERS_UNREGISTERED,
                    f"recycling suspended, {why}; check slurmctld, "
                    "munge and the network rather than the pods",
                    "Warning",
                )
            return Outcome(skipped=f"suspended: {why}")
        if self.suspended is not None:
            log.info("recycling_resumed", was=self.suspended)
            self.suspended = None
            self.metrics.recycling_suspended.clear()
        while self.deleted_at and self.deleted_at[0] <= now - self.policy.window_seconds:
            self.deleted_at.popleft()
        cap = self.cap(len(workers))
        done = 0
        for pod in sorted(due, key=lambda p: p.name):
            back = self.backoff.get(pod.name)
            if back is not None and now < back.not_before:
                self.metrics.recycles.labels("backoff").inc()
                continue
            if len(self.deleted_at) >= cap:
                self.metrics.recycles.labels("capped").inc()
                log.info("recycling_capped", pod=pod.name, cap=cap, window=self.policy.window_seconds)
                break
            if await self._recycle(pod, now):
                done += 1
        return Outcome(done)

    async def _recycle(self, pod: Pod, now: float) -> bool:
        report = self.reports.get((pod.namespace, pod.name))
        why = (
            f"agent reported slurmd unregistered: {report.detail}"
            if report is not None
            else f"Ready but node {self.node_of(pod)} absent from Slurm for "
            f"{now - self.absent_since.get(pod.name, now):.0f}s"
        )
        try:
            await self.kube.create_event(
                pod.namespace,
                {"kind": "Pod", "name": pod.name, "uid": pod.uid},
                EventReason.WORKER_RECYCLED,
                f"deleting worker pod: {why}",
                type="Warning",
            )
        except Exception as exc:  # the deletion matters more than its report
            log.warning("recycle_event_failed", pod=pod.name, error=str(exc))
        try:
            await self.kube.delete_pod(pod.namespace, pod.name, uid=pod.uid)
        except Exception as exc:
            self.metrics.recycles.labels("error").inc()
            log.warning("recycle_failed", pod=pod.name, error=str(exc))
            return False
        self.deleted_at.append(now)
        prev = self.backoff.get(pod.name)
        delay = min(prev.delay * 2, self.policy.backoff_max_seconds) if prev else self.policy.backoff_seconds
        self.backoff[pod.name] = PodHold(now + delay, delay)
        self.reports.pop((pod.namespace, pod.name), None)
        self.absent_since.pop(pod.name, None)
        self.metrics.recycles.labels("deleted").inc()
        self.recent.append({"pod": pod.name, "why": why, "at": time.time()})
        log.warning("worker_recycled", pod=pod.name, why=why)
        return True
