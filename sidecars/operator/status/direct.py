"""The fleet straight from Slurm, when no control plane is named."""

from __future__ import annotations

from sidecars.operator.status.report import JobRow, NodeRow, SourceError
from sidecars.operator.status.settings import StatusSettings
from sidecars.slurm import RetryPolicy, SlurmClient, SlurmError


async def read_slurm(
    settings: StatusSettings, client: SlurmClient | None = None
) -> tuple[list[NodeRow], list[JobRow]]:
    """Nodes and jobs straight from Slurm, with the jobs on each node worked out here."""
    # a person is waiting: retry a little, within the same time budget as the HTTP sources
    client = client or SlurmClient(
        timeout=settings.timeout_seconds,
        retry=RetryPolicy(attempts=2, max_seconds=settings.timeout_seconds, max_wait=0.5),
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
    rows = [
        NodeRow(
            name=n.name,
            state=n.state.base,
            flags=tuple(sorted(n.state.flags)),
            reason=n.reason.text if n.reason else None,
            reason_since=n.reason.time if n.reason else None,
            jobs=tuple(sorted(on_node.get(n.name, []))),
            busy_until=until.get(n.name),
        )
        for n in nodes
    ]
    job_rows = [
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
    return rows, job_rows
