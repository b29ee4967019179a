"""Test machinery every concern (and the benchmarks) uses: polling until a condition holds, a root
task that dies on cue, an event sink that records, the control plane's node documents computed from
a real Slurm, its value types built in one line, the agent's command line and the control plane's
process."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from sidecars.controlplane.fleet.snapshot import FleetNode, FleetSnapshot
from sidecars.kube import Pod
from sidecars.runtime.events import EventType
from sidecars.runtime.waits import within
from sidecars.slurm import SlurmClient

T = TypeVar("T")


async def eventually(
    read: Callable[[], T | Awaitable[T]],
    ok: Callable[[T], Any] = bool,
    *,
    within: float = 30.0,
    what: str = "condition",
    every: float = 0.05,
) -> T:
    """Call `read` (plain or async) until `ok(value)` holds and return that value; fail after
    `within` seconds naming `what` and the last value. Generous defaults: the machine is shared."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        value = read()
        if inspect.isawaitable(value):
            value = await value
        if ok(value):  # type: ignore[arg-type]
            return value  # type: ignore[return-value]
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {within:g}s waiting for {what}; last: {value!r}")
        await asyncio.sleep(every)


@contextlib.asynccontextmanager
async def in_background(work: Coroutine[Any, Any, Any], name: str) -> AsyncIterator[asyncio.Task[Any]]:
    """`work` running as a task named `name` while the block runs; cancelled, and waited for, at its end."""
    task = asyncio.create_task(work, name=name)
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def dies_when_armed(
    real: Callable[..., Coroutine[Any, Any, Any]], armed: asyncio.Event, what: str
) -> Callable[..., Coroutine[Any, Any, None]]:
    """A root task that dies of a bug: it runs `real` (with the same arguments) until `armed` is set,
    so the daemon works as usual until then, and then raises RuntimeError("injected into <what>")."""

    async def dies(*args: Any) -> None:
        work = asyncio.ensure_future(real(*args))
        try:
            await armed.wait()
        finally:
            work.cancel()
            await asyncio.gather(work, return_exceptions=True)
        raise RuntimeError(f"injected into {what}")

    return dies


class RecordingEvents:
    """An EventSink that keeps what it was told, for assertions (the Kubernetes one is tested in kube/)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    async def emit(self, reason: str, message: str, type: EventType = "Normal") -> None:
        self.events.append((reason, message, type))

    def reasons(self) -> list[str]:
        return [r for r, _, _ in self.events]


async def nodes_from_slurm(client: SlurmClient) -> list[dict[str, Any]]:
    """Every node as the control plane's `GET /v1/nodes` gives it, computed straight from a real
    Slurm: what the stand-ins for the control plane (the agent's, `status`'s) serve."""
    nodes, jobs = await client.nodes(), [j for j in await client.jobs() if j.running]
    out = []
    for n in nodes:
        mine = [j for j in jobs if n.name in j.nodes]
        ends = [j.end_time for j in mine if j.end_time is not None]
        out.append(
            {
                "name": n.name,
                "state": n.state.base,
                "flags": sorted(n.state.flags),
                "reason": n.reason.text if n.reason else None,
                "jobs": sorted(j.job_id for j in mine),
                "busy_until": max(ends) if ends else None,
            }
        )
    return out


def fleet_node(
    name: str,
    *,
    drained: bool = False,
    reason: str | None = None,
    busy: bool = False,
    busy_until: int | None = None,
    jobs: tuple[int, ...] | None = None,
    state: str | None = None,
    partitions: tuple[str, ...] = ("debug",),
    cpus: int = 1,
    gpus: int = 0,
    registered: bool = True,
    topology: str = "",
) -> FleetNode:
    """A node of the control plane's snapshot, for the rules (and the benchmarks' simulated fleets)
    that need no Slurm: idle, or busy with one job, unless `jobs` and `state` say otherwise."""
    return FleetNode(
        name=name,
        state=state or ("ALLOCATED" if busy else "IDLE"),
        flags=("DRAIN",) if drained else (),
        reason=reason,
        jobs=jobs if jobs is not None else (1,) if busy else (),
        busy_until=busy_until,
        partitions=partitions,
        cpus=cpus,
        gpus=gpus,
        registered=registered,
        topology=topology,
    )


def fleet_snapshot(nodes: Iterable[FleetNode], *, taken_at: float = 1.0, version: int = 1) -> FleetSnapshot:
    """A loaded snapshot of these nodes (no jobs, no scale-in order)."""
    return FleetSnapshot(
        version=version,
        nodes={n.name: n for n in nodes},
        jobs=(),
        order=(),
        taken_at=taken_at,
        reachable=True,
        error=None,
    )


def fleet_pod(
    name: str,
    *,
    hostname: str = "",
    node_name: str = "",
    revision: str = "",
    conditions: tuple[tuple[str, str, str], ...] = (),
    uid: str | None = None,
    labels: Mapping[str, str] | None = None,
    owner_kind: str = "StatefulSet",
) -> Pod:
    """A worker pod as the control plane's caches hold it."""
    return Pod(
        namespace="slurm",
        name=name,
        uid=uid or f"uid-{name}-{revision}",
        hostname=hostname,
        labels={**(labels or {}), **({"controller-revision-hash": revision} if revision else {})},
        annotations={},
        ready=True,
        phase="Running",
        owner_kind=owner_kind,
        deleting=False,
        resource_version="1",
        node_name=node_name,
        conditions=conditions,
    )


def worker_args(node: str, port: int, socket: Path, *extra: str) -> list[str]:
    """`slurm-sidecars worker` for one node of a dev cluster, serving HTTP on 127.0.0.1:`port`."""
    return ["worker", "--node-name", node, "--http", f"127.0.0.1:{port}", "--socket", str(socket), *extra]


async def control_plane_process(
    env: Mapping[str, str], port: int, *, stderr: int = asyncio.subprocess.DEVNULL
) -> asyncio.subprocess.Process:
    """`slurm-sidecars control-plane` as a process, configured by `env`, serving on 127.0.0.1:`port`
    and logging JSON to `stderr` (the caller stops it)."""
    return await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "slurm-sidecars"),
        "--log-format",
        "json",
        "control-plane",
        "--http",
        f"127.0.0.1:{port}",
        env=dict(env),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=stderr,
    )


async def refused_invocation(*argv: str) -> str:
    """Run a command that must refuse its invocation: exit 2 with one line on stderr (returned)."""
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await within(proc.communicate(), 60)
    assert proc.returncode == 2, (out + err).decode()
    lines = err.decode().strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]
