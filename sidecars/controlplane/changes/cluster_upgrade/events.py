"""A whole-cluster upgrade's stages as Events: one per stage start, end, rollback begun and pause,
written by the Lease holder only, on the control plane's own object (where its other Events go)."""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType

from sidecars.controlplane.changes.cluster_upgrade.status import PAUSED, ROLLING_BACK
from sidecars.protocol.events import UpgradeStageReason, upgrade_stage_reason
from sidecars.runtime.events import EventSink, EventType

# what is said -> the reason's last word(s) (a reason is CamelCase: ClusterUpgradeSlurmctldRolledBack)
SAID = MappingProxyType(
    {
        "running": "Started",
        "done": "Done",
        "skipped": "Skipped",
        "refused": "Refused",
        "failed": "Failed",
        "rolled_back": "RolledBack",
        "interrupted": "Interrupted",
        ROLLING_BACK: "RollingBack",
        PAUSED: "Paused",
    }
)
WARNINGS = {"refused", "failed", "rolled_back", "interrupted", ROLLING_BACK}


def reason(stage: str, said: str) -> UpgradeStageReason:
    """ClusterUpgrade<Stage><State>, e.g. ClusterUpgradePreflightDone."""
    return upgrade_stage_reason(stage, SAID[said])


class StageEvents:
    """(stage, state, message) of `cluster_upgrade.Emit` as one Event each, when `may_write()`."""

    def __init__(self, sink: EventSink, may_write: Callable[[], bool]) -> None:
        self._sink = sink
        self._may_write = may_write

    async def emit(self, target: str, stage: str, said: str, message: str) -> None:
        if not self._may_write():  # a replica that lost the Lease says nothing on its behalf
            return
        kind: EventType = "Warning" if said in WARNINGS else "Normal"
        await self._sink.emit(reason(stage, said), f"upgrade to {target}: {message}", kind)
