"""`slurm-sidecars drain-hook --socket PATH [--timeout-seconds N] [--reason TEXT]`: the preStop hook.

Asks the local worker agent to drain its node and waits until it is drained. Exit 0 when drained
(or Slurm has no record of the node), 1 when it gave up: at the time-out, or at once on a permanent
failure (an answer asking again cannot change). An agent that restarts meanwhile keeps the drain;
the hook reconnects and asks again with the time it has left (a transient failure).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import stat
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import structlog

from sidecars.kube import pod_events
from sidecars.protocol import drains
from sidecars.protocol.events import EventReason
from sidecars.runtime import answers
from sidecars.runtime.events import EventSink, LogEventSink
from sidecars.runtime.settings import PATH, ConfigError, add_flags, declared, seconds, setting, settings_from
from sidecars.runtime.trustedpath import Trust, UntrustedPath

log = structlog.get_logger("sidecars.drain_hook")

RECONNECT_SECONDS = 0.2
UNTRUSTED_RETRY_SECONDS = 5.0
REPORT_EVERY = 60.0  # seconds between reports of transient failures that go on
POLICY_GRACE = 20.0  # the agent may need this long past the deadline to apply its time-out policy
SOCKET = frozenset({stat.S_IFSOCK})


@declared(kw_only=True)
class DrainHookSettings:
    socket: Path = setting(help="the worker agent's unix socket", conv=PATH, required=True)
    timeout_seconds: float = setting(
        default=3600.0,
        conv=seconds(),
        help="give up after this long (terminationGracePeriodSeconds minus a margin)",
    )
    reason: str = setting(default="", help="added to the drain reason")


def configure(p: argparse.ArgumentParser) -> None:
    add_flags(p, DrainHookSettings)


def check_socket(socket: str) -> None:
    """Raise UntrustedPath unless the socket is the agent's: in a directory only root or the
    directory's owner (the agent's uid, given it by an init step) can write, and owned by one of
    them. A socket a job's user planted would answer "drained" at once and the pod would go with
    their neighbours' jobs on it."""
    directory = Path(socket).parent
    try:
        owner = os.stat(directory).st_uid
    except OSError as exc:
        raise UntrustedPath(f"{directory}: {exc.strerror}") from None
    trust = Trust.ours(extra_uids={owner})
    trust.check_dir(directory)
    if os.path.lexists(socket):  # none yet (the agent starting): the connection fails, we ask again
        trust.check_file(socket, kinds=SOCKET)


class Permanent(Exception):
    """An answer that asking again cannot change: give up now, not at the end of the grace period."""


class Transient(Exception):
    """No answer yet (the agent restarting, not up, busy): ask again."""


def _read(status: int, answer: Any) -> dict[str, Any]:
    """The agent's answer, or why it is none: transient or permanent."""
    if not isinstance(answer, dict):
        raise Permanent(f"HTTP {status}: not the agent's JSON: {str(answer)[:200]!r}")
    if status == 200 and answer.get("result") in drains.DRAIN_RESULTS:
        return answer
    if status == 200:
        raise Permanent(f"HTTP 200 with no known result: {str(answer)[:200]}")
    what = f"HTTP {status}: {answer.get('error', answer)}"
    if answer.get("retry") is True or (status in {429, 503} and "retry" not in answer):
        raise Transient(what)
    raise Permanent(what)


async def _ask(session: aiohttp.ClientSession, body: dict[str, Any], seconds: float) -> dict[str, Any]:
    try:
        async with session.post(
            "http://agent/v1/drain", json=body, timeout=aiohttp.ClientTimeout(total=seconds)
        ) as r:
            try:
                text = await answers.text(r)
            except answers.AnswerTooLarge as exc:
                raise Permanent(str(exc)) from None
            try:
                answer: Any = json.loads(text)
            except ValueError:
                answer = text
            return _read(r.status, answer)
    except (aiohttp.ClientError, TimeoutError) as exc:
        # the agent restarting, or not up yet: it keeps the drain, ask again
        raise Transient(f"{type(exc).__name__}: {exc}") from None


async def drain(
    socket: str, seconds: float, reason: str | None, events: EventSink | None = None
) -> tuple[int, dict[str, Any] | str]:
    """(exit code, the agent's answer or why there is none). Each kind of failure is said once in
    the output and as a Warning Event on the pod, where an operator looks first, and again every
    REPORT_EVERY seconds while transient failures go on."""
    events = events or LogEventSink()
    deadline = time.monotonic() + seconds
    last_error, failures, reported_at = "agent never answered", 0, -math.inf
    connector = aiohttp.UnixConnector(path=socket)
    async with aiohttp.ClientSession(connector=connector) as session:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                why = f"gave up after {seconds:g}s: {failures} transient failures, last: {last_error}"
                await _say(events, EventReason.DRAIN_HOOK_GAVE_UP, why)
                return 1, why
            body = {"timeout_seconds": round(left, 3), "reason": reason or None}
            try:
                # every attempt: a restarted agent makes its socket anew
                check_socket(socket)
                return _exit_code(await _ask(session, body, left + POLICY_GRACE))
            except UntrustedPath as exc:
                # never believed, never given up on at once: the pod stays (and its jobs run) while
                # the hook's time lasts; the warning says what to fix
                last_error = f"untrusted socket: {exc}"
                log.warning("agent_socket_untrusted", problem=str(exc))
                if time.monotonic() - reported_at >= REPORT_EVERY:
                    reported_at = time.monotonic()
                    await _say(
                        events, EventReason.DRAIN_HOOK_RETRYING, f"untrusted agent socket, retrying: {exc}"
                    )
                await asyncio.sleep(min(UNTRUSTED_RETRY_SECONDS, max(deadline - time.monotonic(), 0)))
                continue
            except Permanent as exc:
                why = f"gave up: permanent failure: {exc}"
                await _say(events, EventReason.DRAIN_HOOK_GAVE_UP, why)
                return 1, why
            except Transient as exc:
                failures += 1
                last_error = str(exc)
                log.info("agent_unreachable_retrying", error=last_error, failures=failures)
                if time.monotonic() - reported_at >= REPORT_EVERY:
                    reported_at = time.monotonic()
                    await _say(
                        events,
                        EventReason.DRAIN_HOOK_RETRYING,
                        f"transient failure {failures}, retrying: {exc}",
                    )
            await asyncio.sleep(min(RECONNECT_SECONDS, max(deadline - time.monotonic(), 0)))


def _exit_code(answer: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    return (0 if answer["result"] in drains.DRAIN_DONE else 1), answer


async def _say(events: EventSink, reason: EventReason, message: str) -> None:
    print(f"{reason}: {message}", file=sys.stderr, flush=True)
    await events.emit(reason, message, "Warning")


def main(args: argparse.Namespace) -> int:
    settings = settings_from(DrainHookSettings, args)
    socket, timeout, reason = settings.socket, settings.timeout_seconds, settings.reason.strip()
    if (problem := drains.reason_problem(reason)) is not None:
        raise ConfigError(f"--reason: {problem}")

    async def run() -> tuple[int, dict[str, Any] | str]:
        async with pod_events("slurm-sidecars-drain-hook") as events:
            return await drain(str(socket), timeout, reason or None, events)

    code, answer = asyncio.run(run())
    if isinstance(answer, dict):
        log.info(
            "drain_hook_done",
            result=answer.get("result"),
            detail=answer.get("detail"),
            seconds=answer.get("seconds"),
        )
        print(f"{answer.get('result')}: {answer.get('detail')}", file=sys.stdout if code == 0 else sys.stderr)
    else:
        log.warning("drain_hook_gave_up", detail=answer)  # printed, and an Event, already
    return code
