"""HA controllers: a controller pod that comes back waits for the set the controller in control runs.

A pod's slurmctld starts once its config-sync is ready (config-sync's startup probe gates it). A
pod lost mid-change and back while a peer's controller is in control must not start its slurmctld
on a set older than the one that peer runs or is judging: a restarted primary takes control back
(Slurm's handback, which freezes the backup for about 30 s on 24.11 and 26.05, measured in
docs/ha.md), and a primary on the old set would split the pair and have the backup's verification
of the good change fail. So at its return, config-sync asks its peers first and stays not ready
until its own directory holds the set the controller in control runs, with no change of that peer's
in flight; its own sources, checked by itself, are what it stages (no file ever comes from a peer).

The gate only ever opens: once this pod's slurmctld may start, a standby staying ready as it waits
for the writer is the ordinary case (ha.py). With no peer's controller in control (both pods lost,
or the takeover window) there is nothing newer to wait for and it opens on this pod's own set.

And the other side: a writer whose controller stopped answering during a verification asks whether
a handover explains it (`handover`) before it calls the set bad.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import structlog

from sidecars.configsync.ha import Coordination, Peer
from sidecars.slurm.standby import conf_path, host_names

log = structlog.get_logger(__name__)

__all__ = ["ReturnGate", "handover"]


def _short(sha: str | None) -> str:
    return sha[:12] if sha else "no set"


@dataclass(slots=True)
class ReturnGate:
    """Whether this pod's slurmctld may start yet, and why not."""

    open: bool = False
    why: str = "its peers not asked yet"
    waits_for: str | None = None  # the set this pod waits to hold (the writer's), when known
    since: float = field(default_factory=time.monotonic)  # this pod's return

    def judge(self, ha: Coordination, held: str | None, sources: str | None, takeover_seconds: float) -> bool:
        """Open the gate once this pod holds what the controller in control runs (as last asked)."""
        if self.open:
            return True
        if held is None:
            return self._wait(None, "no set synced yet")
        if ha.writes:
            return self._open(f"holds {_short(held)}; its own controller is in control")
        if not ha.peers:
            return self._wait(None, "its peers not asked yet")
        writer, none_why = ha.writer()
        if writer is None:
            if any(p.role == "in control" for p in ha.peers):  # several claim control: wait for one
                return self._wait(None, none_why)
            standby = [p.controller or p.url for p in ha.peers if p.error is None and p.role == "standby"]
            waited = time.monotonic() - self.since
            if standby and waited < takeover_seconds:
                # the takeover window: that backup takes control within SlurmctldTimeout, and may
                # apply a change meanwhile; starting now would start on a set it may replace
                return self._wait(
                    None,
                    f"{', '.join(standby)} in standby and no controller in control: waits up to "
                    f"{takeover_seconds:g}s (SlurmctldTimeout and a margin) for one to take control",
                )
            # nothing newer to wait for: both lost, or no backup took control within the bound
            return self._open(f"holds {_short(held)}; {none_why}")
        return self._against(writer, held, sources)

    def _against(self, writer: Peer, held: str, sources: str | None) -> bool:
        name = writer.controller or writer.url
        runs = writer.applied_sha256
        if writer.pending:
            why = f"{name}, in control, runs {_short(runs)} and has a change in flight: waits for its outcome"
            return self._wait(runs, why)
        if runs == held:
            return self._open(f"holds {_short(held)}, the set {name} (in control) runs")
        if runs is not None and runs == sources:
            why = (
                f"{name}, in control, runs {_short(runs)}; this pod holds {_short(held)} "
                "and stages it once checked"
            )
        else:
            why = (
                f"{name}, in control, runs {_short(runs)}; this pod holds {_short(held)} and its sources "
                f"hold {_short(sources)}: it cannot stage the set in control (its sources lag, or {name} "
                "refused them)"
            )
        return self._wait(runs, why)

    def _open(self, why: str) -> bool:
        self.open, self.why, self.waits_for = True, why, None
        log.info("ha_return_gate_open", why=why)
        return True

    def _wait(self, sha: str | None, why: str) -> bool:
        if why != self.why:
            log.info("ha_return_waits", why=why)
        self.why, self.waits_for = why, sha
        return False

    def status(self) -> dict[str, object]:
        return {"open": self.open, "why": self.why, "waits_for": self.waits_for}


async def handover(ha: Coordination) -> str | None:
    """Why this pod's controller stopped answering during a verification, when control is moving and
    the set is not to blame: a controller listed before this one in `SlurmctldHost` is up (it came
    back, and Slurm hands control back to it: the backup then answers nothing for about 30 s), or
    another controller is in control now. None: no handover explains it, the set is judged as it was."""
    role = await ha.refresh_role()
    await ha.refresh_peers()
    try:
        order = host_names(conf_path(ha.env).read_text())
    except OSError:
        order = []
    mine = order.index(ha.controller) if ha.controller in order else len(order)
    for p in ha.peers:
        if p.error is not None or p.controller is None:
            continue
        if p.role == "in control" and role != "in control":
            return f"control moved to {p.controller} during the verification"
        earlier = p.controller in order and order.index(p.controller) < mine
        if earlier and p.role in ("in control", "standby"):
            return (
                f"{p.controller}, listed before {ha.controller}, came back ({p.role}): Slurm hands control "
                f"back to it, and {ha.controller} answers nothing meanwhile"
            )
    return None
