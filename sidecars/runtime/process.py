"""Running a child process: the one place the sidecars and their dev tooling start one.

Every child runs in a process group of its own (a new session), so that giving up on it kills the
whole group: a wrapper (a shim entering a namespace, `sh -c`) may have forked the real program, which
would otherwise keep our pipes open until it gave up by itself. A child never outlives the task that
wanted it: a timeout or a cancellation kills its group and reaps it.

Signals go through `os.kill`/`os.killpg`, never `Process.kill()`/`terminate()`: Popen polls the child
(waitpid) before it signals, which can reap it behind asyncio's child watcher; the watcher then prints
"Unknown child process pid N, will report returncode 255" (seen in CI) and the real status is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO

from sidecars.runtime import limits
from sidecars.runtime.waits import all_of, within

DEVNULL = asyncio.subprocess.DEVNULL
PIPE = asyncio.subprocess.PIPE
STDOUT = asyncio.subprocess.STDOUT

Sink = int | IO[bytes]  # DEVNULL, PIPE, STDOUT (stderr only) or an open file


@dataclass(frozen=True, slots=True)
class Completed:
    argv: tuple[str, ...]
    returncode: int  # -N: killed by signal N
    stdout: bytes
    stderr: bytes  # b"" when it was merged into stdout
    seconds: float

    def text(self, limit: int | None = None) -> str:
        """stdout (and the merged stderr) decoded, its last `limit` characters when given."""
        out = self.stdout.decode("utf-8", "replace")
        return out if limit is None else out[-limit:]


class ProcessTimeout(Exception):
    """The child ran past its timeout; its whole process group was killed and it was reaped."""

    def __init__(self, argv: Sequence[str], timeout: float, returncode: int | None) -> None:
        self.argv = tuple(argv)
        self.timeout = timeout
        self.returncode = returncode
        super().__init__(f"{' '.join(self.argv[:4])}: no answer within {timeout:g}s")


class OutputTooLarge(Exception):
    """The child wrote more than its cap (stdout and stderr together); its whole process group was
    killed and it was reaped, and what it wrote is not kept."""

    def __init__(self, argv: Sequence[str], cap: int) -> None:
        self.argv = tuple(argv)
        self.cap = cap
        super().__init__(
            f"{' '.join(self.argv[:4])}: wrote more than {cap} bytes; killed, its output not read"
        )


class Child:
    """A started child process (its own process group) that the caller holds: a daemon in the
    foreground, a namespace's init, a role of the demo."""

    def __init__(self, proc: asyncio.subprocess.Process, argv: Sequence[str]) -> None:
        self.proc = proc
        self.argv = tuple(argv)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        """None while it runs (or until asyncio has reaped it); -N when killed by signal N."""
        return self.proc.returncode

    async def wait(self, timeout: float | None = None) -> int:
        """Its exit status; TimeoutError (it keeps running) when it has not ended within `timeout`."""
        return await within(self.proc.wait(), timeout)

    def signal(self, signum: int) -> None:
        """Send `signum` to the child alone, while it has not been reaped (its PID is still its own)."""
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signum)

    async def kill(self) -> int:
        """SIGKILL the whole process group, then reap the child. Safe to call when it has ended."""
        await _kill(self.proc)
        return self.proc.returncode if self.proc.returncode is not None else -signal.SIGKILL

    async def stop(self, grace: float) -> int:
        """SIGTERM, `grace` seconds to exit, then the whole group is killed; returns the exit status.
        Cancelled while it waits, it kills the group at once: the child never outlives its stop."""
        self.signal(signal.SIGTERM)
        try:
            return await self.wait(grace)
        except TimeoutError:
            return await self.kill()
        except BaseException:
            await self.kill()
            raise


async def _kill(proc: asyncio.subprocess.Process) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # its own group: started with start_new_session
    except (ProcessLookupError, PermissionError):
        # only then: Popen.kill() first polls the child, and that waitpid would reap it behind
        # asyncio's child watcher ("Unknown child process pid N" on stderr, seen in CI)
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
    # reap it so no zombie or transport is left behind; a killed child exits at once. What is left
    # in its pipes is read and dropped: asyncio ends wait() only once every pipe is closed, and a
    # pipe whose reader stopped with a full buffer (a child that wrote past its cap, or a lot before
    # its timeout) is paused and would never see its end
    with contextlib.suppress(Exception):
        await asyncio.shield(all_of(proc.wait(), _discard(proc.stdout), _discard(proc.stderr)))


async def _discard(stream: asyncio.StreamReader | None) -> None:
    if stream is not None:
        while await stream.read(_CHUNK):
            pass


async def start(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    stdin: int = DEVNULL,
    stdout: Sink = DEVNULL,
    stderr: Sink = DEVNULL,
    preexec_fn: Callable[[], None] | None = None,
) -> Child:
    """Start argv in a new session (its own process group) and hand it over. OSError when it cannot
    be started (no such program, not executable). `preexec_fn` runs in the child before exec (e.g.
    `pdeathsig.die_with_parent()`)."""
    creating = asyncio.ensure_future(
        asyncio.create_subprocess_exec(
            *argv,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,  # also: a terminal's ^C is for us, not for the child
            preexec_fn=preexec_fn,
        )
    )
    try:
        proc = await asyncio.shield(creating)
    except asyncio.CancelledError:
        # cancelled while asyncio connected the pipes: asyncio's own clean-up would kill the child
        # with Popen.kill() (the reap behind the watcher's back above), so the start is let finish
        # and the child is killed and reaped here
        with contextlib.suppress(Exception):
            await _kill(await creating)
        raise
    return Child(proc, argv)


async def run(
    argv: Sequence[str],
    *,
    timeout: float | None,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    stdin: bytes | None = None,
    merge_stderr: bool = False,
    preexec_fn: Callable[[], None] | None = None,
    max_output_bytes: int = limits.CHILD_OUTPUT_BYTES,
) -> Completed:
    """Run argv to its end and capture its output. A non-zero exit is returned, not raised.

    ProcessTimeout past `timeout` (None: no limit), OutputTooLarge past `max_output_bytes` (stdout
    and stderr together), and on cancellation: the whole process group is killed and the child reaped
    before this returns. OSError when it cannot be started."""
    started = time.monotonic()
    child = await start(
        argv,
        env=env,
        cwd=cwd,
        stdin=PIPE if stdin is not None else DEVNULL,
        stdout=PIPE,
        stderr=STDOUT if merge_stderr else PIPE,
        preexec_fn=preexec_fn,
    )
    try:
        out, err = await within(_communicate(child, stdin, max_output_bytes), timeout)
    except TimeoutError:
        await _kill(child.proc)
        raise ProcessTimeout(argv, timeout or 0.0, child.returncode) from None
    except BaseException:
        await _kill(child.proc)  # cancelled: the child must not outlive the task that wanted it
        raise
    returncode = child.returncode if child.returncode is not None else -1
    return Completed(tuple(argv), returncode, out or b"", err or b"", time.monotonic() - started)


async def _communicate(child: Child, stdin: bytes | None, cap: int) -> tuple[bytes, bytes]:
    """`Process.communicate`, counting what is read: OutputTooLarge as soon as stdout and stderr
    together pass `cap` bytes (the caller kills and reaps the child). communicate() would buffer
    whatever a child writes, a runaway one included."""
    proc = child.proc
    left = cap

    async def read(stream: asyncio.StreamReader | None) -> bytes:
        if stream is None:
            return b""
        nonlocal left
        chunks = []
        while chunk := await stream.read(_CHUNK):
            left -= len(chunk)
            if left < 0:
                raise OutputTooLarge(child.argv, cap)
            chunks.append(chunk)
        return b"".join(chunks)

    async def feed() -> None:
        if proc.stdin is None:
            return
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # it need not read it all
            if stdin:
                proc.stdin.write(stdin)
                await proc.stdin.drain()
            proc.stdin.close()

    out, err, _ = await all_of(read(proc.stdout), read(proc.stderr), feed())
    await proc.wait()
    return out, err


_CHUNK = 64 * 1024
