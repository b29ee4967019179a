"""The control plane's liveness and readiness (its root tasks, its refresh, its fleet view and
Kubernetes caches), and the caches' staleness as metrics."""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping
from typing import Any

from sidecars.controlplane.fleet import ControlPlaneMetrics, FleetView
from sidecars.kube.cache import WatchCache
from sidecars.runtime.checks import CheckResult, Checks
from sidecars.runtime.tasks import RootTasks


def checks(
    fleet: FleetView, tasks: RootTasks, caches: Mapping[str, WatchCache[Any]], *, interval_seconds: float
) -> tuple[Checks, Checks]:
    """(liveness, readiness)."""
    liveness, readiness = Checks(), Checks()
    stale_after = max(30.0, 10 * interval_seconds)

    def ticking() -> CheckResult:
        age = time.monotonic() - fleet.last_attempt
        return CheckResult(age < stale_after, f"last Slurm read attempt {age:.1f}s ago")

    def loaded() -> CheckResult:
        snap = fleet.snapshot
        return CheckResult(snap.loaded, f"version {snap.version}" if snap.loaded else f"{snap.error}")

    liveness.add("root_tasks", tasks.check)
    liveness.add("refresh_loop", ticking)
    readiness.add("fleet_view", loaded)
    for name, cache in caches.items():
        if name != "computedomains":  # an optional CRD, maybe not installed: its metric says it
            readiness.add(f"{name}_cache", functools.partial(_cache_check, cache))
    return liveness, readiness


def watch_metrics(metrics: ControlPlaneMetrics, caches: Mapping[str, WatchCache[Any]]) -> None:
    for name, cache in caches.items():
        metrics.kube_cache_stale.labels(name).set_function(functools.partial(_stale, cache))
        metrics.kube_cache_relists.labels(name).set_function(functools.partial(_relists, cache))


def _cache_check(cache: WatchCache[Any]) -> CheckResult:
    return CheckResult(*cache.staleness())


def _stale(cache: WatchCache[Any]) -> float:
    return float(cache.stale)


def _relists(cache: WatchCache[Any]) -> float:
    return float(cache.relists)
