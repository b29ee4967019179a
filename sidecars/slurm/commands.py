"""How the Slurm edge runs one command (client.py speaks Slurm's verbs on top of it): retries of
transient failures here, bounded; the guard against a planted SLURM_CONF; the fence of writes; and
commands sent to the controller in control first."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, Self

import structlog
from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_random_exponential,
)

from sidecars.slurm import textformat
from sidecars.slurm.errors import SlurmError, SlurmFenced, SlurmUnreachable
from sidecars.slurm.models import Ping, Version
from sidecars.slurm.primary import Controllers, Takeover
from sidecars.slurm.runner import CommandResult, SlurmMetrics, run

log = structlog.get_logger(__name__)

__all__ = ["WRITES", "Output", "RetryPolicy", "SlurmCommands"]

Output = Literal["auto", "json", "text"]
WRITES = frozenset({"update", "create", "delete", "reconfigure", "shutdown"})  # scontrol's writes


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    attempts: int = 5
    max_seconds: float = 15.0  # give up after this long, whatever the attempts left
    initial_wait: float = 0.1
    max_wait: float = 2.0


@dataclass
class SlurmCommands:
    """How a Slurm command is run: the environment, time-outs, bounded retries of transient
    failures, the guard and the fence, and following the controller in control."""

    env: Mapping[str, str] | None = None  # None: this process's environment
    timeout: float = 10.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    metrics: SlurmMetrics | None = None
    output: Output = "auto"
    # called with the argv before every command; raises (a SlurmCommandError) to refuse it, e.g.
    # when SLURM_CONF lies where a job's user could have planted it
    guard: Callable[[Sequence[str]], None] | None = None
    # asked before each write command is sent (each attempt): None, not fenced
    fence: Callable[[], bool] | None = None
    # several controllers: commands go to the one in control first (slurm.primary); None: as
    # slurm.conf orders them
    controllers: Controllers | None = None
    _version: Version | None = field(default=None, init=False, repr=False)

    def with_env(self, **overrides: str) -> Self:
        """The same client with some environment changed (e.g. `SLURM_CONF` of a staged candidate)."""
        env = dict(os.environ if self.env is None else self.env)
        env.update(overrides)
        # not the controllers: they follow the file this client reads, not another one
        clone = replace(self, env=env, controllers=None)
        clone._version = self._version  # not an argument: replace() leaves it out
        return clone

    # ------------------------------------------------------------------ plumbing
    async def run(self, *argv: str, retry: bool = True, timeout: float | None = None) -> CommandResult:
        """Run a Slurm command; retry transient failures when `retry`."""
        if self.guard is not None:
            self.guard(argv)
        if not retry:
            self._check_fence(argv)
            return await self._once(argv, timeout)
        policy = self.retry
        async for attempt in AsyncRetrying(
            retry=retry_if_exception_type(SlurmUnreachable),
            stop=stop_after_attempt(policy.attempts) | stop_after_delay(policy.max_seconds),
            wait=wait_random_exponential(multiplier=policy.initial_wait, max=policy.max_wait),
            reraise=True,
        ):
            with attempt:
                self._check_fence(argv)
                return await self._once(argv, timeout)
        raise AssertionError("unreachable")  # pragma: no cover - AsyncRetrying reraises

    async def _once(self, argv: Sequence[str], timeout: float | None) -> CommandResult:
        """One attempt, sent to the controller in control first. A slow or unreachable answer may
        mean that control moved (or its first controller is gone): who is in control is learnt
        again, at most once per `relearn_seconds`, so the next attempt goes the right way."""
        ctl = self.controllers
        env = self.env if ctl is None else ctl.env(self.env)
        started = time.monotonic()
        try:
            result = await run(argv, env=env, timeout=timeout or self.timeout, metrics=self.metrics)
        except SlurmUnreachable:
            if ctl is not None and ctl.due():
                await self._relearn()
            raise
        if ctl is not None and time.monotonic() - started >= ctl.slow_command_seconds and ctl.due():
            await self._relearn()
        return result

    async def _relearn(self) -> None:
        try:
            await self.follow()
        except SlurmError as exc:  # the command's own answer stands; the next one tries again
            log.warning("slurmctld_follow_failed", error=exc.message)

    async def follow(self) -> Takeover | None:
        """Learn who is in control now (a ping, and a controller asked alone when the ping's answer
        differs from the one known); the takeover when control moved. Nothing without controllers,
        nor with one (slurm.conf read each time): there is no one else to follow, and a ping per
        caller's poll was 2 of the control plane's 4 RPC/s on slurmctld (bench P3)."""
        if self.controllers is None or len(self.controllers.hosts()) < 2:
            return None
        return await self.controllers.learn(await self.ping())

    def _check_fence(self, argv: Sequence[str]) -> None:
        if self.fence is None or argv[:1] != ("scontrol",) or not WRITES & set(argv[1:3]):
            return
        if not self.fence():
            raise SlurmFenced(argv, "not sent: this process may not write now (the Lease is not held)")

    async def ping(self) -> Ping:
        """Which controllers answer. Never raises for a down controller: that is the answer."""
        if self.guard is not None:
            self.guard(("scontrol", "ping"))
        r = await run(
            ["scontrol", "ping"], env=self.env, timeout=self.timeout, metrics=self.metrics, check=False
        )
        return textformat.ping(r.stdout)
