"""The one builder of every role's settings for tests and benchmarks.

`build(cls, **values)`: the role's settings with production's defaults (from their declarations),
placeholders for what a role must be given but a test may not care about (loopback HTTP on a free
port, the test credentials), every period shortened for a test unless `quick=False` (benchmarks
measure production's), and last the caller's `values`.

A group of settings (`ControlPlaneSettings.recycle`) is given either whole, as its object, or as a
mapping of the fields the test cares about, laid over the group's quick values and defaults:
`build(ControlPlaneSettings, recycle={"grace_seconds": 0.5})`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from sidecars.configsync.settings import Settings as ConfigSyncSettings
from sidecars.controlplane.settings import ControlPlaneSettings
from sidecars.operator.status.settings import StatusSettings
from sidecars.runtime.settings import GROUP
from sidecars.worker.settings import WorkerSettings

TOKEN = "s3cret-token-for-tests-5d1e8a0c93b7f"  # the operator's
VIEWER = "viewer-token-for-tests-8c2e4a6f1b3d5079"
NOWHERE = Path("/nonexistent")  # for a path the test never opens
S = TypeVar("S")


def build(cls: type[S], *, quick: bool = True, **values: Any) -> S:
    """`cls` (a role's settings dataclass) with `values` over the test's quick periods over
    placeholders over production's defaults."""
    base = _placeholders(cls, values)
    if quick:
        base.update(_quick(cls))
    groups = {f.name: f.default_factory for f in dataclasses.fields(cls) if GROUP in f.metadata}
    for name, value in values.items():
        merge = name in groups and isinstance(value, Mapping)
        base[name] = {**base.get(name, {}), **value} if merge else value
    return cls(
        **{k: groups[k](**v) if k in groups and isinstance(v, Mapping) else v for k, v in base.items()}
    )


def _placeholders(cls: type, values: dict[str, Any]) -> dict[str, Any]:
    if cls is WorkerSettings:
        node = values.get("node_name") or "n1"
        return {
            "node_name": node,
            "http_address": ("127.0.0.1", 0),
            "socket_path": NOWHERE / "agent.sock",
            "state_dir": NOWHERE,
            "pod_namespace": "slurm",
            "pod_name": f"worker-{node}",
        }
    if cls is ControlPlaneSettings:
        return {"http_address": ("127.0.0.1", 0), "token": TOKEN, "viewer_token": VIEWER}
    if cls is ConfigSyncSettings:
        return {"sources": (), "target": NOWHERE, "state_dir": NOWHERE, "http_address": ("127.0.0.1", 0)}
    if cls is StatusSettings:
        return {}
    raise TypeError(f"no settings builder for {cls.__name__}")


def _quick(cls: type) -> dict[str, Any]:
    if cls is WorkerSettings:
        return {
            "registration_timeout_seconds": 30.0,
            "heal_attempts": 2,
            "heal_backoff_seconds": 1.0,
            "poll_seconds": 0.5,
            "drain_poll_seconds": 0.2,
            "slurmd_missing_grace_seconds": 0.5,
        }
    if cls is ControlPlaneSettings:
        return {
            "reads": {"interval_seconds": 0.3, "fast_interval_seconds": 0.1},
            "batch_window_seconds": 0.2,
            "namespace": "slurm",
            "worker_selector": "app=slurmd",  # what the fake API server's worker pods carry
            "identity": "cp-a",
            # a write lapses 4 s after a renewal starts: room for a loaded machine
            "lease": {"duration_seconds": 6.0, "renew_seconds": 0.5},
            "recycle": {"grace_seconds": 0.5, "window_seconds": 60.0, "backoff_seconds": 30.0},
            "deletion_cost_qps": 50.0,
        }
    if cls is ConfigSyncSettings:
        return {
            "debounce_seconds": 0.05,
            "settle_seconds": 0.5,
            "restart_timeout_seconds": 30.0,
            "retry_max_seconds": 1.0,
        }
    return {}
