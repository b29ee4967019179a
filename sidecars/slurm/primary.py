"""Following the controller in control when slurm.conf names several (`SlurmctldHost` more than once).

Slurm's clients try the controllers in `SlurmctldHost` order, every command. Measured here (24.11 and
26.05, two controllers, `docs/ha.md`): once the first one is gone with its address (a pod lost with
its node: nothing answers, not even a refusal), every command waits out `TCPTimeout` (2 s by
default) on it before it reaches the one in control, for as long as it stays gone; a refusal costs
nothing. So commands are sent through a copy of slurm.conf that names the controller in control
first and the others after it, in their order: nothing else in the copy changes, and a client still
falls through to the others as Slurm's own failover does.

Who is in control: `scontrol ping` names the controllers that answer, and a standby answers pings
too, so the first one up is only a candidate (a restarted primary answers pings as a standby for
half a minute before it takes control back, measured on 24.11 and 26.05). A candidate that is not
the one known is asked alone (`standby.ask_alone`: a request only a controller in control serves),
the one known first; control has moved only when another one serves. `scontrol ping` always reads
the real file: its labels and the first-up rule rest on the configured order.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import structlog

from sidecars.slurm import standby
from sidecars.slurm.models import Ping

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Takeover:
    """Control moved from `previous` to `primary` (the hosts' `SlurmctldHost` names) at `at` (epoch)."""

    previous: str
    primary: str
    at: float

    def as_json(self) -> dict[str, object]:
        return {"from": self.previous, "to": self.primary, "at": _rfc3339(self.at)}


def _rfc3339(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def first(conf_text: str, host: str) -> str:
    """slurm.conf with `host`'s `SlurmctldHost` line first among them, the others after it in their
    order, every other line as written. Unchanged when `host` is not named."""
    lines = conf_text.splitlines()
    at = [i for i, ln in enumerate(lines) if standby.host_names(ln)]
    named = [lines[i] for i in at]
    mine = [ln for ln in named if standby.host_names(ln) == [host]]
    if not mine:
        return conf_text
    ordered = mine[:1] + [ln for ln in named if ln is not mine[0]]
    for i, ln in zip(at, ordered, strict=True):
        lines[i] = ln
    return "\n".join(lines) + "\n"


class Controllers:
    """Which controller is in control, learnt from pings, and the environment that sends commands
    there first. With one controller (or no readable slurm.conf) it changes nothing.

    `since` is when this process first saw the current state (a primary, or none in control);
    `takeovers` counts the moves of control it saw, `last` is the latest."""

    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        *,
        relearn_seconds: float = 30.0,
        slow_command_seconds: float = 1.5,
        ask_timeout_seconds: float = 5.0,
    ) -> None:
        self._env = dict(os.environ if env is None else env)
        self.relearn_seconds = relearn_seconds  # a slow or failed command re-learns at most this often
        self.slow_command_seconds = slow_command_seconds  # under TCPTimeout's 2 s default
        self.ask_timeout_seconds = ask_timeout_seconds
        self.primary: str | None = None
        self.since: float | None = None
        self.roles: dict[str, standby.Role] = {}
        self.takeovers = 0
        self.taken_by: dict[str, int] = {}  # host -> the moves of control to it (takeovers, by host)
        self.last: Takeover | None = None
        self._known: str | None = None  # the last one seen in control, kept through a gap with none
        self._learnt_at: float | None = None  # monotonic
        self._dir: Path | None = None
        self._copy: tuple[tuple[int, int, int, str], Path] | None = None  # (source's key, copy)

    @property
    def conf(self) -> Path:
        return standby.conf_path(self._env)

    def hosts(self) -> list[str]:
        """The `SlurmctldHost` names of the real slurm.conf, in order ([] when it cannot be read)."""
        try:
            return standby.host_names(self.conf.read_text())
        except OSError:
            return []

    def due(self) -> bool:
        """Whether a slow or failed command should re-learn who is in control now."""
        if self._learnt_at is None:
            return len(self.hosts()) > 1
        return time.monotonic() - self._learnt_at >= self.relearn_seconds

    def env(self, base: Mapping[str, str] | None) -> Mapping[str, str] | None:
        """`base` (None: this process's environment) for a command: with SLURM_CONF pointing at a
        copy naming the controller in control first, when it is not first in the real file."""
        primary = self.primary
        if primary is None:
            return base
        try:
            copy = self._copy_for(primary)
        except OSError as exc:  # the real file as it is: slower, never wrong
            log.warning("slurmctld_order_copy_failed", error=str(exc))
            return base
        if copy is None:
            return base
        return {**(os.environ if base is None else base), "SLURM_CONF": str(copy)}

    def _copy_for(self, primary: str) -> Path | None:
        conf = self.conf
        st = conf.stat()
        key = (st.st_ino, st.st_mtime_ns, st.st_size, primary)
        if self._copy is not None and self._copy[0] == key:
            return self._copy[1]
        text = conf.read_text()
        hosts = standby.host_names(text)
        if len(hosts) < 2 or hosts[0] == primary or primary not in hosts:
            self._copy = None
            return None
        if self._dir is None:  # private (0700), under the commands' TMPDIR: a chroot's Slurm sees it
            self._dir = Path(tempfile.mkdtemp(prefix="slurm-sidecars-order-", dir=self._env.get("TMPDIR")))
        fresh = Path(tempfile.mkdtemp(prefix="conf-", dir=self._dir))
        path = standby.shadow(conf, first(text, primary), fresh)
        if self._copy is not None:
            shutil.rmtree(self._copy[1].parent, ignore_errors=True)
        self._copy = (key, path)
        log.info("slurmctld_order", first=primary, conf=str(path))
        return path

    def close(self) -> None:
        """Remove the copies (the process's end)."""
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
        self._dir, self._copy = None, None

    async def learn(self, ping: Ping) -> Takeover | None:
        """Who is in control, from a ping of the real file; the takeover when control moved."""
        self._learnt_at = time.monotonic()
        up = [h for h in ping.hosts() if ping.role(h) != standby.Role.DOWN]
        if len(ping.hosts()) < 2:
            self.roles = {h: ping.role(h) for h in ping.hosts()}
            return self._settle(ping.in_control)
        candidate = ping.in_control
        if candidate is not None and candidate == self.primary:
            found: str | None = candidate  # the first up is the one known: nothing moved
        else:
            # the one known first: a restarted primary answers pings before it serves
            asked = sorted(up, key=lambda h: h != self.primary)
            found = None
            for host in asked:
                with contextlib.suppress(standby.NotAController, OSError):
                    answer = await standby.ask_alone(host, self.ask_timeout_seconds, self._env)
                    if answer.role == standby.Role.IN_CONTROL:
                        found = host
                        break
        role = standby.Role
        self.roles = {
            h: role.IN_CONTROL if h == found else role.STANDBY if h in up else role.DOWN for h in ping.hosts()
        }
        return self._settle(found)

    def _settle(self, found: str | None) -> Takeover | None:
        now = time.time()
        if found != self.primary or self.since is None:
            self.since = now
            log.info("slurmctld_in_control", primary=found, previous=self.primary)
        self.primary = found
        if found is None:
            return None
        moved = None
        if self._known is not None and found != self._known:
            moved = Takeover(self._known, found, now)
            self.takeovers += 1
            self.taken_by[found] = self.taken_by.get(found, 0) + 1
            self.last = moved
            log.warning("slurmctld_takeover", previous=moved.previous, primary=found)
        self._known = found
        return moved

    def as_json(self) -> dict[str, object]:
        return {
            "primary": self.primary,
            "since": None if self.since is None else _rfc3339(self.since),
            "controllers": [{"host": h, "role": r} for h, r in self.roles.items()],
            "takeovers": self.takeovers,
            "last_takeover": None if self.last is None else self.last.as_json(),
        }
