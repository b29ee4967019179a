"""What the container scripts (compose_tour.py, kube_play.py) share: a line said at once, a wait for
a condition, a command run and its failure named.

The scripts run as `python scripts/<name>.py`, which puts this folder first on sys.path: a plain
`from _steps import ...` finds this module.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


class StepFailed(RuntimeError):
    """A step of a script failed; the message says which and why."""


def say(text: str = "") -> None:
    # flushed: the test that runs a script shows its output as it goes when it is cut short
    print(text, flush=True)


def until(what: str, check: Callable[[], T | None], timeout: float = 60.0, every: float = 0.5) -> T:
    """`check()`'s first true value, asked every `every` seconds; StepFailed after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise StepFailed(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(every)


def run(
    *argv: str, check: bool = True, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `argv` to its end, its output captured as text; with `check`, a non-zero exit is
    StepFailed with the command and the end of its output."""
    r = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=cwd, env=env)
    if check and r.returncode != 0:
        raise StepFailed(f"{' '.join(argv)}: exit {r.returncode}: {(r.stdout + r.stderr)[-1500:]}")
    return r
