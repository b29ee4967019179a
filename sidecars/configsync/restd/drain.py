"""slurmrestd restarted on new files without dropping a request in flight.

Measured on 24.11.5 and 26.05.5 (docs/slurmrestd.md): slurmrestd reads slurm.conf and its key at start
only; SIGTERM and SIGHUP end it at once, cutting every request in flight; it binds its port without
SO_REUSEPORT (a second slurmrestd on the port fails: "Address already in use") and takes no listening
socket from outside, so no new slurmrestd can take over the port while the old one finishes. What is
left is a replacement behind the Service: this pod stops being ready (the Service stops sending it new
connections once its endpoints drop the pod: `settle_seconds`), the connections still open on the
port are waited out (inflight.py, up to `drain_seconds`), and only then is slurmrestd stopped; the
kubelet starts its container again on the staged files. The restart counts once a new listening
socket is on the port and answers HTTP (answer.py); a slurmrestd that refuses to start is told at once
by its own words (words.py, with --restd-log-file), else after the restart timeout.

Where the pod is the Service's only ready endpoint, the Service has none meanwhile (new connections
are refused for the drain and the restart): run two replicas or more. A change reaches them all at
once; with --restd-turn-lease they drain one at a time (turns.py), else all at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from sidecars.configsync.restd import answer, inflight, words
from sidecars.configsync.settings import DrainSettings
from sidecars.configsync.slurmdbd.apply import request_stop
from sidecars.runtime import offloop

log = structlog.get_logger(__name__)

Stop = Callable[[], Awaitable[None]]
# the file whose appearance tells slurmrestd's container to stop it (manifests/overlays/restapi: its
# command removes it, SIGTERMs slurmrestd and exits; the kubelet starts the container again)
STOP_REQUEST = Path("/run/slurmrestd-control/stop")
SERVING = "slurmrestd serves on the staged set"
LATE = (
    "slurmrestd was started again on the new set and has not answered within the restart timeout, "
    "nor refused: waiting for its answer or its words"
)


@dataclass(frozen=True, slots=True)
class RestartOutcome:
    ok: bool
    reason: str
    cut: int  # connections still open when slurmrestd was stopped (0: none dropped)
    drained_seconds: float  # from not ready to the stop


async def request_restart() -> None:
    """The deployment's stop: a request its container's command acts on."""
    if not request_stop(STOP_REQUEST):
        log.warning("slurmrestd_cannot_be_stopped", request=str(STOP_REQUEST))


class DrainedRestart:
    """Readiness for slurmrestd's pod, and the drained restart."""

    def __init__(
        self,
        settings: DrainSettings,
        stop: Stop = request_restart,
        on_change: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.settings = settings
        self.stop = stop
        self.on_change = on_change
        self.serving = True
        self.why = SERVING
        self.waiting_on = 0  # connections a drain waits to end, as last read (0: no drain waits)

    def readiness(self) -> tuple[bool, str]:
        return self.serving, self.why

    async def _state(self) -> inflight.PortState:
        return await offloop.whole(inflight.read, self.settings.port, self.settings.tables)

    async def _say(self, serving: bool, why: str) -> None:
        self.serving, self.why = serving, why
        if self.on_change is not None:
            await self.on_change()

    async def restart(self) -> RestartOutcome:
        s = self.settings
        before = await self._state()
        started = time.monotonic()
        await self._say(False, "draining slurmrestd: it restarts on a new set once no connection is open")
        try:
            # the Service's endpoints drop a pod that is not ready after kube-proxy's next update: the
            # port may still take connections until then
            await asyncio.sleep(s.settle_seconds)
            cut = await self._drained(time.monotonic() + s.drain_seconds)
            drained = time.monotonic() - started
            log.info("restarting_slurmrestd", open_connections=cut, drained_seconds=round(drained, 3))
            mark = await offloop.whole(words.mark, s.log_file)
            await self.stop()
            failed = await self._serving_anew(
                before.listener, mark, time.monotonic() + s.restart_timeout_seconds
            )
            if failed is None:
                return RestartOutcome(True, "slurmrestd restarted on the new set", cut, drained)
            return RestartOutcome(False, failed, cut, drained)
        finally:
            await self._say(True, SERVING)

    async def _drained(self, deadline: float) -> int:
        """Wait until no connection is open on the port (or the deadline); the number left open."""
        while (state := await self._state()).serving and time.monotonic() < deadline:
            self.waiting_on = state.serving
            await asyncio.sleep(self.settings.poll_seconds)
        self.waiting_on = 0
        if state.serving:
            log.warning(
                "slurmrestd_restarts_with_connections_open",
                connections=state.serving,
                drain_seconds=self.settings.drain_seconds,
            )
        return state.serving

    async def _serving_anew(self, old: int | None, mark: int, deadline: float) -> str | None:
        """Until a new slurmrestd answers on the port (None), slurmrestd's own words end it, or the
        deadline: why not. A new listening socket (not the one before the stop) that answers HTTP is
        a new slurmrestd; a listener alone is not (slurmrestd binds before it checks its user).

        A late answer is no failure: past the deadline, where slurmrestd's output shows it was
        started again since the stop (on the staged set) and it has not refused, it is waited for,
        said in /status, until it answers or refuses. Rolling back then would be a guess, and its
        restart would stop a slurmrestd that may run the new set well."""
        s = self.settings
        late = False
        while True:
            state = await self._state()
            # a late slurmrestd may answer slowly too (a loaded node): each try is given its time
            wait = s.late_answer_seconds if late else max(s.poll_seconds, deadline - time.monotonic())
            if state.listener is not None and state.listener != old and await answer.answers(s.port, wait):
                if late:
                    log.info(
                        "slurmrestd_answered_late", seconds_past_timeout=round(time.monotonic() - deadline, 3)
                    )
                return None
            said = await offloop.whole(words.since, s.log_file, mark)
            if said.refused is not None:
                log.warning("slurmrestd_refused_to_start", words=said.refused)
                return f"slurmrestd refused to start: {said.refused}"
            if time.monotonic() > deadline and not late:
                if not said.started:  # no slurmrestd was started since: nothing to wait for
                    waited = f"{s.restart_timeout_seconds:g}s"
                    return f"no slurmrestd answers on port {s.port} {waited} after its stop"
                late = True
                log.warning("slurmrestd_answers_late", restart_timeout_seconds=s.restart_timeout_seconds)
                await self._say(False, LATE)
            await asyncio.sleep(s.poll_seconds)
