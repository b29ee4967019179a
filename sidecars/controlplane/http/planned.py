"""The operator page's "Maintenance windows" and "Upgrades" sections: rows a table shows as they are.

A section that cannot work here says what is missing and how to get it, never only that it is not."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sidecars.controlplane.changes.cluster_upgrade.run import ClusterUpgrades
from sidecars.controlplane.changes.maintenance import Maintenance
from sidecars.controlplane.changes.upgrade import Upgrade
from sidecars.slurm.hostlist import compress


def maintenance_rows(maintenance: Maintenance, now: Callable[[], float] = time.time) -> list[dict[str, Any]]:
    """One row per window read from Slurm: when, why, and where each of its nodes is."""
    rows = []
    for window in maintenance.windows:
        described = maintenance.describe(window)
        rows.append(
            {
                "window": window.name,
                "nodes": compress(window.nodes),
                "start": described["start"],
                "end": described["end"],
                "state": "active" if window.active(now()) else "scheduled",
                "reason": window.reason,
                "now": "; ".join(f"{n}: {r['detail']}" for n, r in described["node_states"].items()),
            }
        )
    return rows


def upgrade_rows(upgrade: Upgrade | None, why_unavailable: str) -> list[dict[str, Any]]:
    """The upgrade under way (none: no row), or the one row saying why there can be none here."""
    if upgrade is None:
        return [{"upgrades": "need the Kubernetes API", "why and how": why_unavailable}]
    up = upgrade.report()["upgrade"]
    if up is None:
        return []
    state = "complete" if up["complete"] else ("paused" if up["paused"] else "rolling")
    return [
        {
            "revision": up["revision"],
            "state": state,
            "upgraded": f"{up['upgraded']}/{up['workers']}",
            "budget": f"{up['budget']} ({up['out_of_service']} out of service)",
            "nodes": "; ".join(f"{n}: {what}" for n, what in up["nodes"].items()),
        }
    ]


def cluster_upgrade_rows(upgrades: ClusterUpgrades) -> list[dict[str, Any]]:
    """The whole-cluster upgrade under way or the last: one row per stage, in Slurm's order."""
    up = upgrades.report()
    if up is None:
        return []
    whole = f"to {up['target']}: {up['state']}"
    return [
        {
            "cluster upgrade": whole,
            "stage": stage["name"],
            "state": stage["state"],
            "seconds": stage["seconds"],
            "detail": stage["detail"],
        }
        for stage in up["stages"]
    ]
