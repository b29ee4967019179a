"""Every source read at once into one report; a failing source is recorded, the others still count."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from sidecars.operator.status import controllers
from sidecars.operator.status.config_sync import read_config_sync
from sidecars.operator.status.control_plane import read_control_plane
from sidecars.operator.status.direct import read_slurm
from sidecars.operator.status.report import SourceError, StatusReport
from sidecars.operator.status.settings import StatusSettings
from sidecars.slurm import SlurmClient


async def collect(settings: StatusSettings, client: SlurmClient | None = None) -> StatusReport:
    """`client` reads Slurm in direct mode (default: Slurm's commands on PATH, with this process's
    environment)."""
    readers: list[Any] = [
        read_control_plane(settings) if settings.control_plane else read_slurm(settings, client)
    ]
    if settings.config_sync:
        readers.append(read_config_sync(settings))
    results = await asyncio.gather(*readers, return_exceptions=True)
    try:  # after the fleet: with one controller it is a file read, with several a ping
        if settings.control_plane:
            slurmctld = await controllers.from_control_plane(settings)
        else:
            slurmctld = await controllers.from_slurm(client or SlurmClient(timeout=settings.timeout_seconds))
    except SourceError:
        slurmctld = None  # the fleet's own error says what is wrong with the source
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, SourceError):
            raise result
    errors = [str(r) for r in results if isinstance(r, SourceError)]
    report = StatusReport(source=settings.control_plane or "slurm", config_asked=bool(settings.config_sync))
    fleet = results[0]
    if isinstance(fleet, tuple) and settings.control_plane:
        nodes, order, planned, order_error = fleet
        report = replace(report, nodes=nodes, scale_in=order, planned=tuple(planned))
        if order_error is not None:
            errors.insert(0, str(order_error))
    elif isinstance(fleet, tuple):
        nodes, jobs = fleet
        report = replace(report, nodes=nodes, jobs=jobs)
    if len(results) > 1 and isinstance(results[1], dict):
        report = replace(report, config=results[1])
    return replace(report, errors=tuple(errors), slurmctld=slurmctld)
