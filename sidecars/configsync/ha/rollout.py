"""HA controllers: a generation counts as applied only when every controller pod holds it.

A standby runs what is on its pod's disk (it reads its directory when it takes control), and a
backup that is down reads it at its next start; so "every controller that is up runs it, and a
down one will read it" is "every peer config-sync reports this set as its own"
(ha/coordination.py's `in_step`).
Until then the generation is `staging`: on this pod, not yet on the peers named. A peer that has
not caught up within `--ha-catch-up-seconds` (it answers junk, nothing, or holds another set) makes
it `not everywhere`, a Warning; should it catch up later, the generation becomes applied then.

What a generation is shows in /status (`applied.outcome`, `ha.rollout`), in /history (its entry's
outcome settles from `staging` to `applied` or `not_everywhere`, or `superseded` when a newer
generation replaced it first), as an Event (ConfigStaging, then
ConfigApplied or ConfigNotEverywhere) and in metrics (`slurm_sidecars_config_applies_total` counts
a generation applied only once it is everywhere; `slurm_sidecars_config_ha_rollout{state}`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import structlog

from sidecars.configsync.fileset.stage import Applied
from sidecars.configsync.ha.coordination import Coordination
from sidecars.configsync.report.record import Recorder
from sidecars.protocol.configsync import ConfigOutcome, RolloutState
from sidecars.protocol.events import EventReason

log = structlog.get_logger(__name__)

State = RolloutState
STATES: tuple[State, ...] = tuple(RolloutState)
OUTCOMES: Mapping[State, ConfigOutcome] = MappingProxyType(
    {
        RolloutState.EVERYWHERE: ConfigOutcome.APPLIED,
        RolloutState.STAGING: ConfigOutcome.STAGING,
        RolloutState.NOT_EVERYWHERE: ConfigOutcome.NOT_EVERYWHERE,
    }
)


@dataclass(slots=True)
class Tracked:
    """The generation this pod holds, and where it stands among the controller pods."""

    generation: int
    short: str
    seen: float  # monotonic: when its change was seen (the apply histogram's start)
    since: float  # monotonic: when this pod took it
    state: State
    behind: list[str]  # each peer that does not hold it yet, with why
    until: float | None = None  # monotonic: when it became everywhere or was given up on


class Rollout:
    def __init__(self, ha: Coordination, record: Recorder, catch_up_seconds: float) -> None:
        self.ha = ha
        self.record = record
        self.catch_up_seconds = catch_up_seconds
        self.current: Tracked | None = None
        self.gauge = ha.metrics.rollout
        for s in STATES:
            self.gauge.labels(state=s).set(0)

    # ------------------------------------------------------------------ judging
    def _state(self, t: Tracked, sha: str) -> State:
        t.behind = self.ha.behind(sha)
        if not t.behind:
            return RolloutState.EVERYWHERE
        late = time.monotonic() - t.since > self.catch_up_seconds
        return RolloutState.NOT_EVERYWHERE if late else RolloutState.STAGING

    def words(self, t: Tracked) -> str:
        here = f"{self.ha.controller} ({self.ha.role})"
        if t.state == RolloutState.EVERYWHERE:
            peers = ", ".join(p.controller or p.url for p in self.ha.peers)
            return f"every controller holds it: {here}, {peers}"
        if t.state == RolloutState.STAGING:
            return f"on {here}; staging on {'; '.join(t.behind)}"
        return f"on {here}; not on {'; '.join(t.behind)} after {self.catch_up_seconds:g}s"

    def _show(self, state: State) -> None:
        for s in STATES:
            self.gauge.labels(state=s).set(1 if s == state else 0)

    # ------------------------------------------------------------------ recording
    async def applied(
        self, new: Applied, old: Applied | None, *, seen: float, message: str, **kw: Any
    ) -> None:
        """In place of `Recorder.applied` with peers: recorded as applied when every peer holds it
        already (a standby staging what the writer runs), else as staging until `step` says more."""
        now = time.monotonic()
        old_t = self.current
        if old_t is not None and old_t.state == RolloutState.STAGING:
            # replaced before every pod held it (a burst of changes): never everywhere, and no
            # failure either, so no Warning; the new generation's own outcome is what counts
            old_t.until = now
            why = f"replaced by generation {new.generation} before every controller held it"
            self.record.history.settle(old_t.generation, ConfigOutcome.SUPERSEDED, why)
            self.record.counted(ConfigOutcome.SUPERSEDED, now - old_t.seen)
            log.info("config_superseded_before_everywhere", generation=old_t.generation, by=new.generation)
        t = Tracked(new.generation, new.files.short, seen, now, RolloutState.STAGING, [])
        t.state = self._state(t, new.files.sha256)
        if t.state == RolloutState.EVERYWHERE:
            t.until = now
        self.current = t
        self._show(t.state)
        outcome, event = (
            (ConfigOutcome.APPLIED, EventReason.CONFIG_APPLIED)
            if t.state == RolloutState.EVERYWHERE
            else (ConfigOutcome.STAGING, EventReason.CONFIG_STAGING)
        )
        await self.record.applied(
            new, old, seen=seen, message=f"{message}; {self.words(t)}", outcome=outcome, event=event, **kw
        )

    async def step(self, applied: Applied | None) -> None:
        """Each pass, once the peers were asked: report a change of where the held set stands."""
        t = self.current
        if applied is None or t is None or t.generation != applied.generation:
            return  # nothing recorded by this pod yet (its start-up set): nothing to settle
        if t.state == RolloutState.EVERYWHERE:
            # its outcome stays applied; a peer that falls behind later (a restart) shows in
            # /status (`ha.in_step`, `ha.rollout.behind`) until it holds the set again
            t.behind = self.ha.behind(applied.files.sha256)
            return
        state = self._state(t, applied.files.sha256)
        if state != t.state:
            await self._settle(t, state)

    async def _settle(self, t: Tracked, state: State) -> None:
        """Its outcome known: every pod holds it, or one did not within the bound."""
        until = time.monotonic()
        t.state, t.until = state, until
        why = self.words(t)
        self._show(state)
        outcome = OUTCOMES[state]
        self.record.history.settle(t.generation, outcome, why)
        self.record.counted(outcome, until - t.seen)
        everywhere = state == RolloutState.EVERYWHERE
        message = f"generation {t.generation} ({t.short}){' applied' if everywhere else ''}: {why}"
        if everywhere:
            log.info("config_everywhere", generation=t.generation, seconds=round(until - t.since, 3))
            await self.record.events.emit(EventReason.CONFIG_APPLIED, message, "Normal")
        else:
            log.warning("config_not_everywhere", generation=t.generation, behind=t.behind)
            await self.record.events.emit(EventReason.CONFIG_NOT_EVERYWHERE, message, "Warning")

    def status(self, applied: Applied | None) -> dict[str, Any]:
        """`/status` `ha.rollout`: where the set this pod holds stands, and which peers lack it."""
        t = self.current
        if applied is None:
            return {"generation": None, "state": None, "behind": [], "seconds": None, "words": None}
        if t is None or t.generation != applied.generation:  # its start-up set: no bound runs on it
            behind = self.ha.behind(applied.files.sha256)
            state: State = RolloutState.STAGING if behind else RolloutState.EVERYWHERE
            return {
                "generation": applied.generation,
                "state": state,
                "behind": behind,
                "seconds": None,
                "words": None,
            }
        return {
            "generation": t.generation,
            "state": t.state,
            "behind": list(t.behind),
            "seconds": round((t.until or time.monotonic()) - t.since, 3),
            "words": self.words(t),
        }
