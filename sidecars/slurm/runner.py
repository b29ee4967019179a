"""Run one Slurm command as an async subprocess: bounded in time, killed when abandoned, counted;
and, for a dry run, one Slurm daemon for the duration of a block (`spawn`)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog
from prometheus_client import CollectorRegistry, Counter, Histogram

from sidecars.runtime import limits, process
from sidecars.slurm import naming, plugindir
from sidecars.slurm.errors import SlurmCommandError, SlurmTimeout, SlurmUnreachable, classify

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float


class SlurmMetrics:
    """Every Slurm command this process ran, by command (its Slurm name: `naming.label`) and result.
    A command line that runs no Slurm program is counted nowhere."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.commands = Counter(
            "slurm_sidecars_slurm_commands",
            "Slurm commands run by this process",
            ["command", "result"],
            registry=registry,
        )
        self.seconds = Histogram(
            "slurm_sidecars_slurm_command_seconds",
            "Time taken by Slurm commands",
            ["command"],
            registry=registry,
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )

    def observe(self, argv: Sequence[str], result: str, seconds: float) -> None:
        command = naming.label(argv)
        if command is None:
            return
        self.commands.labels(command=command, result=result).inc()
        self.seconds.labels(command=command).observe(seconds)


async def _refuse_untrusted_plugins(
    argv: Sequence[str], env: Mapping[str, str] | None, metrics: SlurmMetrics | None
) -> None:
    """Raise SlurmCommandError (one line, no Slurm program started) when a Slurm program in argv
    would load plugins from a directory the config's author or another user could fill. Off the
    event loop: slurm.conf is read each time (~0.75 MB at 10,000 nodes, a few ms)."""
    if naming.label(argv) is None:
        return
    why = await asyncio.to_thread(plugindir.refusal, argv, env)
    if why is None:
        return
    log.warning("slurm_command_refused", command=naming.label(argv), reason=why)
    if metrics:
        metrics.observe(argv, "refused", 0.0)
    raise SlurmCommandError(argv, why)


async def run(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 10.0,
    metrics: SlurmMetrics | None = None,
    check: bool = True,
    stdin: bytes | None = None,
    max_output_bytes: int = limits.CHILD_OUTPUT_BYTES,
) -> CommandResult:
    """Run argv; raise a classified SlurmError on failure when `check`. The child never outlives us.
    A Slurm command whose configuration names an untrusted PluginDir is refused before it runs
    (plugindir), whatever `check`; one whose output passes `max_output_bytes` is killed and raises
    SlurmCommandError naming the cap, whatever `check`."""
    await _refuse_untrusted_plugins(argv, env, metrics)
    started = time.monotonic()
    try:  # a timed-out or cancelled command's whole process group is killed (runtime.process)
        done = await process.run(
            argv, timeout=timeout, env=env, stdin=stdin, max_output_bytes=max_output_bytes
        )
    except process.ProcessTimeout:
        if metrics:
            metrics.observe(argv, "timeout", time.monotonic() - started)
        raise SlurmTimeout(argv, f"no answer within {timeout:g}s", None) from None
    except process.OutputTooLarge as e:  # killed and reaped: a runaway answer is not buffered whole
        if metrics:
            metrics.observe(argv, "too_large", time.monotonic() - started)
        log.warning("slurm_command_output_too_large", command=naming.label(argv), cap_bytes=e.cap)
        raise SlurmCommandError(argv, f"its output passed {e.cap} bytes; killed, not read further") from None
    seconds = done.seconds
    result = CommandResult(
        tuple(argv),
        done.returncode,
        done.stdout.decode("utf-8", "replace"),
        done.stderr.decode("utf-8", "replace"),
        seconds,
    )
    if result.returncode != 0:
        error = classify(argv, result.returncode, result.stderr, result.stdout)
        if metrics:
            metrics.observe(argv, "unreachable" if isinstance(error, SlurmUnreachable) else "error", seconds)
        if check:
            raise error
        return result
    if metrics:
        metrics.observe(argv, "ok", seconds)
    log.debug("slurm_command", command=naming.label(argv) or argv[0], seconds=round(seconds, 4))
    return result


@contextlib.asynccontextmanager
async def spawn(
    argv: Sequence[str],
    *,
    stdout: Path,
    env: Mapping[str, str] | None = None,
    metrics: SlurmMetrics | None = None,
) -> AsyncIterator[process.Child]:
    """A long-running Slurm daemon for the duration of the block (its output appended to `stdout`).
    However the block ends (cancellation included), its whole process group is killed and reaped."""
    await _refuse_untrusted_plugins(argv, env, metrics)
    started = time.monotonic()
    with open(stdout, "ab") as out:
        child = await process.start(argv, env=env, stdout=out, stderr=out)
    try:
        yield child
    finally:
        exited = child.returncode is not None
        await child.kill()  # the group may outlive its leader (slurmscriptd): killed either way
        if metrics:
            metrics.observe(argv, "exited" if exited else "ok", time.monotonic() - started)
