"""A warning before a token runs out: the JWTs that slurmrestd's callers present (Slinky's operator's,
a probe's, a user's), each read from its file (a mounted Secret) every `--token-check-seconds`.

slurmrestd passes a token on and slurmctld refuses it once expired, with no word to the caller's
operator (slurm-operator #240: a refresh that stopped, and every call failing hours later). Here the
time left is a metric per token file, and a token that has less than `--token-warn-seconds` left,
has expired, or cannot be read is logged and reported with one Warning Event per token seen (a new
token in the file is a new one). The token itself is never logged or shown: only its user and times.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog
from prometheus_client import CollectorRegistry, Gauge

from sidecars.protocol.events import EventReason
from sidecars.runtime import jwtclaims
from sidecars.runtime.events import EventSink
from sidecars.runtime.settings import PATH, declared, duration, setting

log = structlog.get_logger(__name__)

METRIC = "slurm_sidecars_token_expiry_seconds"
TASK = "token-watch"  # the root task's name
EXPIRING = EventReason.SLURM_TOKEN_EXPIRING
UNREADABLE = EventReason.SLURM_TOKEN_UNREADABLE
MAX_FILE_BYTES = jwtclaims.MAX_TOKEN_CHARS + 2


@declared()
class TokenWatchSettings:
    files: tuple[Path, ...] = setting(
        default=(),
        flag="--watch-token",
        conv=PATH,
        multiple=True,
        help="a file holding a JWT slurmrestd's callers present (repeat for several): its time left "
        "is a metric, and a Warning Event comes before it expires",
    )
    warn_seconds: float = duration(
        86400.0, "with --watch-token: warn when a token has less than this left", flag="--token-warn-seconds"
    )
    check_seconds: float = duration(
        60.0, "with --watch-token: read the token files this often", flag="--token-check-seconds"
    )


@dataclass(frozen=True, slots=True)
class Reading:
    file: Path
    expires_at: float | None  # the token's `exp`: which token this is, for saying things once
    left_seconds: float | None  # None: unreadable, or a token without `exp` (math.inf on the gauge)
    user: str
    problem: str  # "" when the token is well and has more than the warning time left


class TokenWatch:
    """`run()` is the root task (it ends never); `check_once()` one pass over every file."""

    def __init__(
        self,
        settings: TokenWatchSettings,
        registry: CollectorRegistry,
        events: EventSink,
        clock: Callable[[], float] = time.time,  # tokens carry wall-clock epochs
    ) -> None:
        self.settings = settings
        self.events = events
        self.clock = clock
        self.gauge = Gauge(
            METRIC,
            "Seconds until the JWT in a --watch-token file expires (negative: expired; +Inf: never; "
            "NaN: unreadable)",
            ["file"],
            registry=registry,
        )
        self._told: dict[Path, str] = {}  # file -> what was last reported for it (one Event each)

    def read(self, file: Path) -> Reading:
        try:
            with open(file, "rb") as f:
                data = f.read(MAX_FILE_BYTES)
            claims = jwtclaims.read(data.decode("utf-8"))
        except OSError as exc:
            return Reading(file, None, None, "", f"cannot be read: {exc.strerror or exc}")
        except (UnicodeDecodeError, ValueError) as exc:
            return Reading(file, None, None, "", f"holds no usable token: {exc}")
        if claims.expires_at is None:
            return Reading(file, None, None, claims.user, "")
        left = claims.expires_at - self.clock()
        if left <= 0:
            problem = f"expired {_span(-left)} ago"
        elif left < self.settings.warn_seconds:
            problem = f"expires in {_span(left)}"
        else:
            problem = ""
        return Reading(file, claims.expires_at, left, claims.user, problem)

    async def check_once(self) -> list[Reading]:
        readings = [await asyncio.to_thread(self.read, f) for f in self.settings.files]
        for r in readings:
            if r.left_seconds is not None:
                self.gauge.labels(str(r.file)).set(r.left_seconds)
            else:
                self.gauge.labels(str(r.file)).set(math.nan if r.problem else math.inf)
            await self._report(r)
        return readings

    async def _report(self, r: Reading) -> None:
        told = self._told.get(r.file)
        if not r.problem:
            self._told.pop(r.file, None)  # a fresh token: its own warning later, when due
            return
        kind = UNREADABLE if r.left_seconds is None else EXPIRING
        key = f"{kind}:{r.expires_at}:{'expired' if (r.left_seconds or 0) <= 0 else 'soon'}"
        whose = f" (user {r.user})" if r.user else ""
        message = f"the token in {r.file}{whose} {r.problem}"
        if told == key:
            return  # said once for this token and this state (the metric goes on saying it)
        self._told[r.file] = key
        log.warning("token_problem", file=str(r.file), user=r.user, problem=r.problem)
        await self.events.emit(kind, message, "Warning")

    async def run(self) -> None:
        while True:
            await self.check_once()
            await asyncio.sleep(self.settings.check_seconds)


def _span(seconds_: float) -> str:
    s = int(seconds_)
    if s >= 86400:
        return f"{s // 86400}d{s % 86400 // 3600}h"
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60}m"
    if s >= 60:
        return f"{s // 60}m{s % 60}s"
    return f"{s}s"
