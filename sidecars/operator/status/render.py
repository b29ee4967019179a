"""The report as plain tables: a summary line, nodes, drains in progress, jobs, scale-in order, config."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from sidecars.operator.status import controllers
from sidecars.operator.status.report import NodeRow, StatusReport
from sidecars.protocol.configsync import ConfigOutcome
from sidecars.protocol.drains import REASON_PREFIX
from sidecars.slurm import reasons


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


def age(epoch: int | None, now: float) -> str:
    """`3d04h` / `2h05m` / `4m10s`: how long ago, "-" when unknown."""
    if epoch is None:
        return "-"
    ago = max(0, int(now - epoch))
    days, rest = divmod(ago, 86400)
    hours, rest = divmod(rest, 3600)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{rest // 60:02d}m"
    return f"{rest // 60}m{rest % 60:02d}s"


def unowned(nodes: Sequence[NodeRow], now: float) -> list[str]:
    """Nodes held out of service by a reason nobody owns (Slurm's own, or an admin's or another
    tool's: `unknown`), the oldest first: nobody will lift these unless a person does."""
    found = [(n, why) for n in nodes if (why := reasons.unowned(n.state, n.flags, n.reason)) is not None]
    if not found:
        return ["none"]
    found.sort(key=lambda f: (f[0].reason_since is None, f[0].reason_since or 0, f[0].name))
    return table(
        ["NAME", "STATE", "CLASS", "AGE", "REASON"],
        [
            [n.name, "+".join([n.state, *n.flags]), why.value, age(n.reason_since, now), n.reason or "-"]
            for n, why in found
        ],
    )


def _ids(ids: Sequence[int], limit: int = 6) -> str:
    if not ids:
        return "-"
    shown = ",".join(str(i) for i in ids[:limit])
    return shown + (f",+{len(ids) - limit}" if len(ids) > limit else "")


def summary(snap: StatusReport) -> str:
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


def render(snap: StatusReport, now: float | None = None) -> str:
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
            whose = "" if (n.reason or "").startswith(REASON_PREFIX) else ", not set by slurm-sidecars"
            out.append(
                f"{n.name}: waiting for job(s) {_ids(n.jobs)}, expected done {when(n.busy_until, now)}"
                f" (reason: {n.reason or 'none given'}{whose})"
            )
        out.append("")
        out += ["DRAINS NOBODY OWNS (drained or down, not by slurm-sidecars or Slinky's operator)"]
        out += [*unowned(snap.nodes, now), ""]
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
    if snap.slurmctld is not None:
        out += ["SLURMCTLD", *controllers.render(snap.slurmctld), ""]
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
    outcome = str(applied.get("outcome") or ConfigOutcome.APPLIED)
    if applied and outcome != ConfigOutcome.APPLIED:  # HA: not yet (or never) on every controller pod
        rollout = (body.get("ha") or {}).get("rollout") or {}
        where = rollout.get("words") or "; ".join(map(str, rollout.get("behind") or [])) or "?"
        lines[0] = lines[0].replace(" applied at ", f" {outcome.replace('_', ' ')} since ", 1) + f": {where}"
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
