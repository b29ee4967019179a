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
for the writer is the ordinary case (ha/coordination.py). With no peer's controller in control
(both pods lost, or the takeover window) there is nothing newer to wait for and it opens on this
pod's own set.

A primary that comes back while a backup is in control is not left to Slurm's own handback, which
can lose every job on 26.05 (slurm/standdown.py, docs/ha.md): once it holds the set, the gate asks
that backup alone to shut down and opens only when nothing listens at its address (its state saved,
its process gone). This pod's slurmctld then starts on a StateSaveLocation no one writes, with no
handback; the backup's pod restarts its slurmctld, which comes back in standby. A backup that does
not go within STAND_DOWN_SECONDS, or refuses to be asked, is left to Slurm's handback, and the gate
says so.

And the other side: a writer whose controller stopped answering during a verification asks whether
a handover explains it (`handover`) before it calls the set bad.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import structlog

from sidecars.configsync.ha.coordination import ASK_SECONDS, Coordination, Peer
from sidecars.protocol.configsync import HaRole
from sidecars.slurm.standby import ASKED, NotAController, ask_alone, conf_path, host_names
from sidecars.slurm.standdown import ask_shutdown, listening

log = structlog.get_logger(__name__)

__all__ = ["ReturnGate", "handover"]


STAND_DOWN_SECONDS = 60.0  # a shutdown saves and ends in seconds; past this, Slurm's handback is left to run


def _short(sha: str | None) -> str:
    return sha[:12] if sha else "no set"


@dataclass(slots=True)
class ReturnGate:
    """Whether this pod's slurmctld may start yet, and why not."""

    open: bool = False
    why: str = "its peers not asked yet"
    waits_for: str | None = None  # the set this pod waits to hold (the writer's), when known
    since: float = field(default_factory=time.monotonic)  # this pod's return
    stands_down: str | None = None  # the controller in control asked to shut down before this one starts
    asked_at: float | None = None  # when it was asked (None: not yet)

    def judge(self, ha: Coordination, held: str | None, sources: str | None, takeover_seconds: float) -> bool:
        """Open the gate once this pod holds what the controller in control runs (as last asked)."""
        if self.open:
            return True
        if self.stands_down is not None:
            return False  # `stand_down` opens it
        if held is None:
            return self._wait(None, "no set synced yet")
        if ha.writes:
            return self._open(f"holds {_short(held)}; its own controller is in control")
        if not ha.peers:
            return self._wait(None, "its peers not asked yet")
        writer, none_why = ha.writer()
        if writer is None:
            if any(p.role == HaRole.IN_CONTROL for p in ha.peers):  # several claim control: wait for one
                return self._wait(None, none_why)
            up = [p for p in ha.peers if p.error is None and p.role == HaRole.STANDBY]
            standby = [p.controller or p.url for p in up]
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
        return self._against(ha, writer, held, sources)

    def _against(self, ha: Coordination, writer: Peer, held: str, sources: str | None) -> bool:
        name = writer.controller or writer.url
        runs = writer.applied_sha256
        if writer.pending:
            why = f"{name}, in control, runs {_short(runs)} and has a change in flight: waits for its outcome"
            return self._wait(runs, why)
        if runs == held:
            if writer.controller is not None and _listed_before(ha, writer.controller):
                # Slurm would hand control back to this one at its start: the backup first goes
                self.stands_down, self.waits_for = writer.controller, None
                self.why = f"holds {_short(held)}, the set {name} (in control) runs; {name} shuts down first"
                log.info("ha_return_stands_down", controller=writer.controller, why=self.why)
                return False
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

    async def stand_down(self, ha: Coordination) -> bool:
        """One step of having the controller in control shut down before this one starts: ask it
        (alone) once, then open once nothing listens at its address. True when the gate opened."""
        name = self.stands_down
        if self.open or name is None:
            return self.open
        if self.asked_at is None:
            # Slurm's view, not a peer's word: only a controller Slurm says is in control is shut down
            # (a standby saves nothing, and a peer's answer could name any controller)
            seen = await ask_alone(name, ASK_SECONDS, ha.env)
            if seen.role != HaRole.IN_CONTROL:
                return self._open(f"{name} is {seen.role}, as Slurm says ({seen.detail}): no handback")
            argv, result = await ask_shutdown(name, ASK_SECONDS, ha.env)
            self.asked_at = time.monotonic()
            log.warning("ha_return_asked_shutdown", controller=name, argv=argv, result=result)
            if result != ASKED:
                return self._open(
                    f"asked {name} to shut down (`{' '.join(argv)}`): {result}; Slurm's own handback follows "
                    "(it can lose jobs on 26.05: docs/ha.md)"
                )
            self.why = f"asked {name}, in control, to shut down: waits until nothing listens at its address"
        gone = await listening(name, ASK_SECONDS, ha.env)
        waited = time.monotonic() - self.asked_at
        if gone == "refused":
            return self._open(
                f"{name} shut down {waited:.1f}s after asked (its state saved, nothing listens at its "
                "address): this controller starts with no handback"
            )
        if waited > STAND_DOWN_SECONDS:
            return self._open(
                f"{name} asked to shut down {waited:.0f}s ago and its address still {gone}: Slurm's own "
                "handback follows (it can lose jobs on 26.05: docs/ha.md)"
            )
        return False

    def status(self) -> dict[str, object]:
        """/status `ha.return` (the times are this process's clock: not shown)."""
        return {name: getattr(self, name) for name in ("open", "why", "waits_for", "stands_down")}


def _listed_before(ha: Coordination, other: str) -> bool:
    """Whether this pod's controller is listed before `other` in `SlurmctldHost`: Slurm hands control
    back to it when it starts while `other` is in control."""
    try:
        order = host_names(conf_path(ha.env).read_text())
    except (OSError, NotAController):
        return False
    return ha.controller in order and other in order and order.index(ha.controller) < order.index(other)


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
        if p.stands_down == ha.controller:
            return f"{p.controller} came back and asked {ha.controller} to shut down (no handback)"
        if p.role == HaRole.IN_CONTROL and role != HaRole.IN_CONTROL:
            return f"control moved to {p.controller} during the verification"
        earlier = p.controller in order and order.index(p.controller) < mine
        if earlier and p.role in (HaRole.IN_CONTROL, HaRole.STANDBY):
            return (
                f"{p.controller}, listed before {ha.controller}, came back ({p.role}): Slurm hands control "
                f"back to it, and {ha.controller} answers nothing meanwhile"
            )
    return None
