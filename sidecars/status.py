"""`slurm-sidecars status`: what a person wants to see at a glance, as plain tables.

Nodes and their states, jobs, drains in progress, the scale-in order (from the control plane, or
straight from Slurm when no control plane is named) and the config generation with the last
rejection (from config-sync's `/status`). A source that cannot be reached is named on stderr and
makes the exit status 1; whatever could be read is still printed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from sidecars import maintenance_cli, upgrade_cli
from sidecars.runtime import logs
from sidecars.runtime.daemon import EXIT_FAILURE, EXIT_OK
from sidecars.runtime.settings import ConfigError, flag, positive, read_token
from sidecars.slurm import RetryPolicy, SlurmClient, SlurmError

OUR_REASON = "slurm-sidecars:"


def configure(p: argparse.ArgumentParser) -> None:
    flag(
        p,
        "--control-plane",
        help="control-plane URL, e.g. http://slurm-sidecars-control-plane:9200; "
        "without it Slurm is read directly",
    )
    flag(p, "--token-file", help="bearer token for the control plane (a mounted Secret)")
    flag(p, "--config-sync", help="config-sync URL, e.g. http://127.0.0.1:9100, for the config generation")
    flag(p, "--timeout-seconds", default="5", help="give up on a source after this long")


@dataclass(frozen=True)
class StatusSettings:
    control_plane: str | None
    token: str | None
    config_sync: str | None
    timeout: float

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> StatusSettings:
        for name in ("control_plane", "config_sync"):
            url = getattr(args, name)
            if url is not None and not str(url).startswith(("http://", "https://")):
                raise ConfigError(f"--{name.replace('_', '-')} must be an http(s) URL, got {url!r}")
        if args.control_plane and not args.token_file:
            raise ConfigError("--control-plane needs --token-file")
        if args.token_file and not args.control_plane:
            raise ConfigError("--token-file is only used with --control-plane")
        token = read_token(args.token_file) if args.control_plane else None
        return cls(
            control_plane=str(args.control_plane).rstrip("/") if args.control_plane else None,
            token=token,
            config_sync=str(args.config_sync).rstrip("/") if args.config_sync else None,
            timeout=positive(args.timeout_seconds, "--timeout-seconds"),
        )


# ---------------------------------------------------------------------------- what is shown


@dataclass(frozen=True)
class NodeRow:
    name: str
    state: str  # base state, e.g. MIXED
    flags: tuple[str, ...]  # e.g. ("DRAIN",)
    reason: str | None
    jobs: tuple[int, ...]
    busy_until: int | None  # epoch seconds: when the last job on it is expected to end

    @property
    def draining(self) -> bool:
        """DRAIN set while jobs still run: a drain in progress."""
        return "DRAIN" in self.flags and (
            bool(self.jobs) or self.state in {"ALLOCATED", "MIXED"} or "COMPLETING" in self.flags
        )


@dataclass(frozen=True)
class JobRow:
    job_id: int
    state: str
    why: str  # Slurm's reason while pending (Resources, Priority, ...)
    partition: str
    user: str
    name: str
    nodes: tuple[str, ...]
    end_time: int | None


@dataclass
class Snapshot:
    source: str  # where nodes came from: "slurm" or the control-plane URL
    nodes: list[NodeRow] | None = None
    jobs: list[JobRow] | None = None
    scale_in: list[str] | None = None
    planned: list[str] | None = None  # maintenance windows and the upgrade, from the control plane
    config: dict[str, Any] | None = None
    config_asked: bool = False
    errors: list[str] = field(default_factory=list)


class SourceError(Exception):
    """A source could not be read; the message says which and why, in a line."""


# ---------------------------------------------------------------------------- reading


async def _get_json(
    session: aiohttp.ClientSession, url: str, what: str, headers: dict[str, str] | None = None
) -> Any:
    try:
        async with session.get(url, headers=headers) as r:
            if r.status in (401, 403):
                raise SourceError(f"{what}: {url}: HTTP {r.status}: the token was refused")
            if r.status != 200:
                raise SourceError(f"{what}: {url}: HTTP {r.status}: {(await r.text()).strip()[:200]}")
            try:
                return await r.json(content_type=None)
            except ValueError:
                raise SourceError(f"{what}: {url}: the answer is not JSON") from None
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise SourceError(f"{what}: {url}: unreachable: {exc or type(exc).__name__}") from None


def _node_from_api(item: Any) -> NodeRow:
    if not isinstance(item, dict) or not isinstance(item.get("name"), str):
        raise ValueError(f"not a node: {item!r:.100}")
    state_text = str(item.get("state") or "UNKNOWN").upper()
    base, *more = state_text.split("+")
    flags = {str(f).upper() for f in item.get("flags") or []} | set(more)
    busy = item.get("busy_until")
    return NodeRow(
        name=item["name"],
        state=base,
        flags=tuple(sorted(flags)),
        reason=item.get("reason") or None,
        jobs=tuple(int(j) for j in item.get("jobs") or []),
        busy_until=int(busy) if busy is not None else None,
    )


async def read_control_plane(settings: StatusSettings, snap: Snapshot) -> None:
    assert settings.control_plane is not None
    headers = {"Authorization": f"Bearer {settings.token}"}
    timeout = aiohttp.ClientTimeout(total=settings.timeout)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        base = settings.control_plane
        nodes = await _get_json(session, f"{base}/v1/nodes", "control plane", headers)
        try:
            snap.nodes = [_node_from_api(n) for n in nodes]
        except (TypeError, ValueError) as exc:
            raise SourceError(f"control plane: {base}/v1/nodes: unexpected answer: {exc}") from None
        order = await _get_json(session, f"{base}/v1/scale-in-order", "control plane", headers)
        if not isinstance(order, list) or not all(isinstance(n, str) for n in order):
            raise SourceError(f"control plane: {base}/v1/scale-in-order: expected a list of node names")
        snap.scale_in = order
        snap.planned = await _planned(session, base, headers)


async def _planned(session: aiohttp.ClientSession, base: str, headers: dict[str, str]) -> list[str]:
    """Maintenance windows and the upgrade, in the words of their own commands; a control plane
    without these endpoints (an older one) is not an error, only said so."""
    lines: list[str] = []
    try:
        windows = await _get_json(session, f"{base}/v1/maintenance", "control plane", headers)
        for window in windows["windows"]:
            lines += maintenance_cli.render(window)
        upgrade = await _get_json(session, f"{base}/v1/upgrade", "control plane", headers)
        if upgrade.get("upgrade"):
            lines += upgrade_cli.render(upgrade)
    except (SourceError, KeyError, TypeError, AttributeError) as exc:
        lines.append(f"(unavailable: {exc})")
    return lines or ["none"]


async def read_slurm(settings: StatusSettings, snap: Snapshot, client: SlurmClient | None = None) -> None:
    # a person is waiting: retry a little, within the same time budget as the HTTP sources
    client = client or SlurmClient(
        timeout=settings.timeout, retry=RetryPolicy(attempts=2, max_seconds=settings.timeout, max_wait=0.5)
    )
    try:
        nodes, jobs = await client.nodes(), await client.jobs()
    except SlurmError as exc:
        raise SourceError(f"slurm: {exc}") from None
    except FileNotFoundError as exc:
        raise SourceError(f"slurm: {exc.filename or 'scontrol'}: not found on PATH") from None
    live = [j for j in jobs if j.running]
    on_node: dict[str, list[int]] = {}
    until: dict[str, int] = {}
    for job in live:
        for name in job.nodes:
            on_node.setdefault(name, []).append(job.job_id)
            if job.end_time is not None:
                until[name] = max(until.get(name, 0), job.end_time)
    snap.nodes = [
        NodeRow(
            name=n.name,
            state=n.state.base,
            flags=tuple(sorted(n.state.flags)),
            reason=n.reason.text if n.reason else None,
            jobs=tuple(sorted(on_node.get(n.name, []))),
            busy_until=until.get(n.name),
        )
        for n in nodes
    ]
    snap.jobs = [
        JobRow(
            job_id=j.job_id,
            state=j.state,
            why=j.state_reason if j.state == "PENDING" else "",
            partition=j.partition,
            user=j.user,
            name=j.name,
            nodes=j.nodes,
            end_time=j.end_time,
        )
        for j in jobs
        if j.state in {"RUNNING", "PENDING", "COMPLETING", "SUSPENDED", "CONFIGURING"}
    ]


async def read_config_sync(settings: StatusSettings, snap: Snapshot) -> None:
    assert settings.config_sync is not None
    url = f"{settings.config_sync}/status"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=settings.timeout)) as session:
        body = await _get_json(session, url, "config-sync")
    if not isinstance(body, dict) or "applied" not in body:
        raise SourceError(f"config-sync: {url}: unexpected answer (no 'applied')")
    snap.config = body


async def collect(settings: StatusSettings, client: SlurmClient | None = None) -> Snapshot:
    """Read every source at once; a failing one is recorded, the others still count. `client` reads
    Slurm in direct mode (default: Slurm's commands on PATH, with this process's environment)."""
    snap = Snapshot(source=settings.control_plane or "slurm", config_asked=bool(settings.config_sync))
    readers = [
        read_control_plane(settings, snap) if settings.control_plane else read_slurm(settings, snap, client)
    ]
    if settings.config_sync:
        readers.append(read_config_sync(settings, snap))
    for result in await asyncio.gather(*readers, return_exceptions=True):
        if isinstance(result, SourceError):
            snap.errors.append(str(result))
        elif isinstance(result, BaseException):
            raise result
    return snap


# ---------------------------------------------------------------------------- rendering


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def fmt(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    return [fmt(headers), *(fmt(r) for r in rows)]


def when(epoch: int | None, now: float) -> str:
    """`14:05Z (in 1h05m)`: a wall time a person can compare with, and how far it is."""
    if epoch is None:
        return "-"
    left = int(epoch - now)
    stamp = time.strftime("%H:%M:%SZ", time.gmtime(epoch))
    if left < 0:
        return f"{stamp} (past)"
    hours, rest = divmod(left, 3600)
    return f"{stamp} (in {f'{hours}h' if hours else ''}{rest // 60:02d}m{rest % 60:02d}s)"


def _ids(ids: Sequence[int], limit: int = 6) -> str:
    if not ids:
        return "-"
    shown = ",".join(str(i) for i in ids[:limit])
    return shown + (f",+{len(ids) - limit}" if len(ids) > limit else "")


def summary(snap: Snapshot) -> str:
    """One line first: how many nodes in which state, and how much work there is."""
    nodes = snap.nodes or []
    states: dict[str, int] = {}
    for n in nodes:
        states[n.state.lower()] = states.get(n.state.lower(), 0) + 1
    parts = [", ".join(f"{count} {state}" for state, count in sorted(states.items()))]
    draining = sum(1 for n in nodes if n.draining)
    drained = sum(1 for n in nodes if "DRAIN" in n.flags and not n.draining)
    if draining or drained:
        parts.append(f"{draining} draining, {drained} drained")
    if snap.jobs is not None:
        running = sum(1 for j in snap.jobs if j.state != "PENDING")
        parts.append(f"jobs: {running} running, {len(snap.jobs) - running} pending")
    else:
        parts.append(f"jobs: {len({j for n in nodes for j in n.jobs})} running")
    noun = "node" if len(nodes) == 1 else "nodes"
    return f"{len(nodes)} {noun} ({parts[0] or 'none'}); " + "; ".join(parts[1:])


def render(snap: Snapshot, now: float | None = None) -> str:
    now = time.time() if now is None else now
    out: list[str] = []
    if snap.nodes is not None:
        out += [summary(snap), ""]
        out.append(f"NODES (from {snap.source})")
        out += table(
            ["NAME", "STATE", "FLAGS", "JOBS", "BUSY UNTIL", "REASON"],
            [
                [
                    n.name,
                    n.state,
                    ",".join(n.flags) or "-",
                    _ids(n.jobs),
                    when(n.busy_until, now),
                    n.reason or "-",
                ]
                for n in sorted(snap.nodes, key=lambda n: n.name)
            ],
        )
        out.append("")
        draining = [n for n in snap.nodes if n.draining]
        out.append("DRAINS IN PROGRESS")
        if not draining:
            out.append("none")
        for n in sorted(draining, key=lambda n: (n.busy_until or 0, n.name)):
            # a drain someone else set is theirs to lift: say so, since we never touch it
            whose = "" if (n.reason or "").startswith(OUR_REASON) else ", not set by slurm-sidecars"
            out.append(
                f"{n.name}: waiting for job(s) {_ids(n.jobs)}, expected done {when(n.busy_until, now)}"
                f" (reason: {n.reason or 'none given'}{whose})"
            )
        out.append("")
    if snap.jobs is not None:
        out.append("JOBS")
        out += (
            table(
                ["JOBID", "STATE", "PARTITION", "USER", "NAME", "NODES", "ENDS"],
                [
                    [
                        str(j.job_id),
                        f"{j.state} ({j.why})" if j.why and j.why != "None" else j.state,
                        j.partition,
                        j.user,
                        j.name[:24],
                        ",".join(j.nodes) or "-",
                        when(j.end_time, now),
                    ]
                    for j in sorted(snap.jobs, key=lambda j: j.job_id)
                ],
            )
            if snap.jobs
            else ["none"]
        )
        out.append("")
    elif snap.nodes is not None:
        by_job: dict[int, list[str]] = {}
        for n in snap.nodes:
            for j in n.jobs:
                by_job.setdefault(j, []).append(n.name)
        out.append("JOBS (running, as the control plane sees them)")
        out += (
            table(["JOBID", "NODES"], [[str(j), ",".join(sorted(ns))] for j, ns in sorted(by_job.items())])
            if by_job
            else ["none"]
        )
        out.append("")
    out.append("SCALE-IN ORDER (first to go first)")
    if snap.source != "slurm" and snap.scale_in is None:
        out.append("(unavailable: the control plane did not answer)")
    elif snap.scale_in is not None:
        out.append(" ".join(f"{i}.{name}" for i, name in enumerate(snap.scale_in, 1)) or "no node to remove")
    else:
        out.append("(ask the control plane: --control-plane URL --token-file FILE)")
    out.append("")
    if snap.planned is not None:
        out += ["MAINTENANCE AND UPGRADES", *snap.planned, ""]
    out.append("CONFIG")
    if snap.config is not None:
        out += _render_config(snap.config)
    elif snap.config_asked:
        out.append("(unavailable: config-sync did not answer)")
    else:
        out.append("(ask config-sync: --config-sync URL)")
    return "\n".join(out) + "\n"


def _render_config(body: dict[str, Any]) -> list[str]:
    applied = body.get("applied") or {}
    lines = [
        f"generation {applied.get('generation', '?')}, sha256 {str(applied.get('sha256') or '?')[:12]}, "
        f"applied at {applied.get('at') or '?'}"
        if applied
        else "nothing applied yet",
    ]
    rejected = body.get("rejected")
    if rejected:
        lines.append(
            f"last rejection: sha256 {str(rejected.get('sha256') or '?')[:12]} at "
            f"{rejected.get('at') or '?'}: {rejected.get('reason') or 'no reason given'}"
        )
    else:
        lines.append("last rejection: none")
    lines.append(
        f"pending change: {'yes' if body.get('pending') else 'no'}; "
        f"restart required: {'YES' if body.get('restart_required') else 'no'}"
    )
    return lines


# ---------------------------------------------------------------------------- entry


def main(args: argparse.Namespace) -> int:
    settings = StatusSettings.from_args(args)
    if getattr(args, "log_level", "info") == "info":
        # the table is the output; routine log lines (release detected, ...) would only clutter it
        logs.configure(level="warning")
    snap = asyncio.run(collect(settings))
    sys.stdout.write(render(snap))
    sys.stdout.flush()
    for error in snap.errors:
        print(f"slurm-sidecars status: {error}", file=sys.stderr)
    return EXIT_FAILURE if snap.errors else EXIT_OK
