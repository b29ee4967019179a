"""The watch on a daemon just started, read at each poll of its start: its process (a pid seen and
then gone, or the foreground process's exit) and its log since the start (a `fatal:` line with no
process left). A daemon that dies is told at the next poll (0.1-0.2 s), with its last words and
the time it died, not at the start's timeout."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from sidecars.devcluster.base import ClusterError
from sidecars.slurm.lastwords import DaemonExited, last_words

T = TypeVar("T")

WATCH_SECONDS = 0.1  # how often the process and the log are read while the daemon's answer is awaited
TAIL_BYTES = 64 * 1024  # the end of what a start wrote: its last words are there
# Slurm's stamp on its last line is the time of death when it is that close to what we saw (else the
# daemon's clock or time zone is not ours: the time we saw it is used)
STAMP_SLACK_SECONDS = 5.0


class DaemonDied(ClusterError, DaemonExited):
    """A daemon just started ended: `words` its last line, `died_at` when (epoch seconds)."""

    def __init__(self, daemon: str, words: str, died_at: float, how: str = "exited at start") -> None:
        DaemonExited.__init__(self, daemon, words, died_at, how)


def tail(path: Path, since: int) -> str:
    """What `path` holds past byte `since`, at most its last TAIL_BYTES."""
    with contextlib.suppress(OSError), path.open("rb") as f:
        size = f.seek(0, 2)
        f.seek(max(since, size - TAIL_BYTES))
        return f.read().decode(errors="replace")
    return ""


def size_of(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


class StartWatch:
    """One start of `daemon`: `pid()` its live host PID (None: none), `ended()` the exit status
    of the process we hold for it once it ended (a foreground daemon; None: it runs), `log` its
    log file (read past its size at the start), `more` any other text it wrote (a foreground
    daemon's stderr), `runs()` whether any process of it is left (a daemonizing one)."""

    def __init__(
        self,
        daemon: str,
        log: Path,
        pid: Callable[[], int | None],
        *,
        ended: Callable[[], int | None] = lambda: None,
        more: Callable[[], str] = str,
        runs: Callable[[], bool] | None = None,
    ) -> None:
        self.daemon, self.log = daemon, log
        self._pid, self._ended, self._more, self._runs = pid, ended, more, runs
        self.begin()

    def begin(self) -> None:
        """The start is now (the daemon it replaces stopped): its log is read from here."""
        self._since = size_of(self.log)
        self.started_at = time.time()
        self._seen, self._gone, self._launched = False, 0, False

    def launched(self) -> None:
        """Its start command returned: a daemonizing one's fork runs from here on, or it died."""
        self._launched = True

    def said(self) -> str:
        """What this start wrote: its log's new part, then its other text."""
        return "\n".join(t for t in (tail(self.log, self._since), self._more()) if t.strip())

    def check(self) -> None:
        """Raise DaemonDied when the daemon started is seen dead."""
        code = self._ended()
        if code is not None:
            self._died(f"exited with {code} at start")
        if self._pid() is not None:
            self._seen, self._gone = True, 0
            return
        if self._runs is not None and self._launched and not self._runs():
            # no process of it left after its start returned: a daemon that daemonized and died
            # before it wrote its pid file (slurmd: `error: slurmd initialization failed`)
            self._seen = True
        if self._seen:
            # gone at two polls in a row: a pid file rewritten under us (slurmdbd writes its own
            # in steps) is not a death
            self._gone += 1
            if self._gone >= 2:
                self._died()
        # the pid file may not be written yet (a daemon dies before it writes it): its log tells
        if "fatal:" in tail(self.log, self._since) and self._pid() is None:
            self._died()

    async def race(self, wait: Awaitable[T]) -> T:
        """`wait` (the daemon's answer polled), ended early by the daemon's death: checked every
        WATCH_SECONDS on its own, not between answers (a Slurm command may take seconds to fail)."""
        answer = asyncio.ensure_future(wait)
        answer.set_name(f"startwatch-answer-{self.daemon}")
        watching = asyncio.create_task(self._until_dead(), name=f"startwatch-{self.daemon}")
        try:
            await asyncio.wait({answer, watching}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (answer, watching):
                task.cancel()
            await asyncio.gather(answer, watching, return_exceptions=True)
        if watching.done() and not watching.cancelled() and watching.exception() is not None:
            raise watching.exception()  # type: ignore[misc]
        return answer.result()

    async def _until_dead(self) -> None:
        while True:
            self.check()
            await asyncio.sleep(WATCH_SECONDS)

    def _died(self, how: str = "exited at start") -> None:
        seen = time.time()
        words = last_words(self.said())
        stamped = words.logged_at
        near = stamped is not None and self.started_at - STAMP_SLACK_SECONDS <= stamped <= seen + 1.0
        died_at = stamped if near and stamped is not None else seen
        raise DaemonDied(self.daemon, words.line, died_at, how)
