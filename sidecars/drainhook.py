"""`slurm-sidecars drain-hook --socket PATH [--timeout-seconds N] [--reason TEXT]`: the preStop hook.

Asks the local worker agent to drain its node and waits until it is drained. Exit 0 when drained
(or Slurm has no record of the node), 1 when it gave up (time-out, agent never reachable). An agent
that restarts meanwhile keeps the drain; the hook reconnects and asks again with the time it has left.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import stat
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import structlog

from sidecars.runtime.settings import ConfigError, flag, positive
from sidecars.runtime.trustedpath import Trust, UntrustedPath

log = structlog.get_logger("sidecars.drain_hook")

RECONNECT_SECONDS = 0.2
UNTRUSTED_RETRY_SECONDS = 5.0
POLICY_GRACE = 20.0  # the agent may need this long past the deadline to apply its time-out policy
SOCKET = frozenset({stat.S_IFSOCK})


def configure(p: argparse.ArgumentParser) -> None:
    flag(p, "--socket", required=True, help="the worker agent's unix socket")
    flag(
        p,
        "--timeout-seconds",
        default="3600",
        help="give up after this long (terminationGracePeriodSeconds minus a margin)",
    )
    flag(p, "--reason", default="", help="added to the drain reason")


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


async def drain(socket: str, seconds: float, reason: str | None) -> tuple[int, dict[str, Any] | str]:
    """(exit code, the agent's answer or why there is none)."""
    deadline = time.monotonic() + seconds
    last_error = "agent never answered"
    connector = aiohttp.UnixConnector(path=socket)
    async with aiohttp.ClientSession(connector=connector) as session:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return 1, f"gave up after {seconds:g}s: {last_error}"
            body = {"timeout_seconds": round(left, 3), "reason": reason or None}
            try:
                # every attempt: a restarted agent makes its socket anew
                check_socket(socket)
                async with session.post(
                    "http://agent/v1/drain",
                    json=body,
                    timeout=aiohttp.ClientTimeout(total=left + POLICY_GRACE),
                ) as r:
                    answer = await r.json(content_type=None)
                    if r.status != 200 or not isinstance(answer, dict):
                        return 1, f"agent refused: HTTP {r.status}: {answer}"
                    return (0 if answer.get("result") in {"drained", "no_record"} else 1), answer
            except UntrustedPath as exc:
                # never believed, never given up on at once: the pod stays (and its jobs run) while
                # the hook's time lasts; the warning says what to fix
                last_error = f"untrusted socket: {exc}"
                log.warning("agent_socket_untrusted", problem=str(exc))
                await asyncio.sleep(min(UNTRUSTED_RETRY_SECONDS, max(deadline - time.monotonic(), 0)))
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                # the agent restarting, or not up yet: it keeps the drain, ask again
                last_error = f"{type(exc).__name__}: {exc}"
                log.info("agent_unreachable_retrying", error=last_error)
                await asyncio.sleep(min(RECONNECT_SECONDS, max(deadline - time.monotonic(), 0)))


def main(args: argparse.Namespace) -> int:
    timeout = positive(args.timeout_seconds, "--timeout-seconds")
    reason = str(args.reason or "").strip()
    if "\n" in reason or len(reason) > 200:
        raise ConfigError("--reason: a single line of at most 200 characters")
    code, answer = asyncio.run(drain(str(args.socket), timeout, reason or None))
    if isinstance(answer, dict):
        log.info(
            "drain_hook_done",
            result=answer.get("result"),
            detail=answer.get("detail"),
            seconds=answer.get("seconds"),
        )
        print(f"{answer.get('result')}: {answer.get('detail')}", file=sys.stdout if code == 0 else sys.stderr)
    else:
        log.warning("drain_hook_gave_up", detail=answer)
        print(answer, file=sys.stderr)
    return code
