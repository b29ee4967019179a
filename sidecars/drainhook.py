"""`slurm-sidecars drain-hook --socket PATH [--timeout-seconds N] [--reason TEXT]`: the preStop hook.

Asks the local worker agent to drain its node and waits until it is drained. Exit 0 when drained
(or Slurm has no record of the node), 1 when it gave up (time-out, agent never reachable). An agent
that restarts meanwhile keeps the drain; the hook reconnects and asks again with the time it has left.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

import aiohttp
import structlog

from sidecars.runtime.settings import ConfigError, flag, positive

log = structlog.get_logger("sidecars.drain_hook")

RECONNECT_SECONDS = 0.2
POLICY_GRACE = 20.0  # the agent may need this long past the deadline to apply its time-out policy


def configure(p: argparse.ArgumentParser) -> None:
    flag(p, "--socket", required=True, help="the worker agent's unix socket")
    flag(
        p,
        "--timeout-seconds",
        default="3600",
        help="give up after this long (terminationGracePeriodSeconds minus a margin)",
    )
    flag(p, "--reason", default="", help="added to the drain reason")


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
                async with session.post(
                    "http://agent/v1/drain",
                    json=body,
                    timeout=aiohttp.ClientTimeout(total=left + POLICY_GRACE),
                ) as r:
                    answer = await r.json(content_type=None)
                    if r.status != 200 or not isinstance(answer, dict):
                        return 1, f"agent refused: HTTP {r.status}: {answer}"
                    return (0 if answer.get("result") in {"drained", "no_record"} else 1), answer
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
