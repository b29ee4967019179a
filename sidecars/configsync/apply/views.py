"""What slurmctld reports, read before and after a change to compare them."""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from sidecars.runtime.waits import all_of
from sidecars.slurm import SlurmClient, SlurmError
from sidecars.slurm.models import Node, Partition

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class SlurmView:
    """What slurmctld reports: the basis for comparing before and after."""

    config: dict[str, str]
    partitions: dict[str, Partition]
    nodes: dict[str, Node]


async def view(client: SlurmClient) -> SlurmView:
    """Everything compared before and after a change: the settings, the partitions and the fleet."""
    config, parts, nodes = await all_of(client.show_config(), client.partitions(), client.node_listing())
    return SlurmView(
        {k.lower(): v for k, v in config.items()}, {p.name: p for p in parts}, {n.name: n for n in nodes}
    )


async def view_if_up(client: SlurmClient) -> SlurmView | None:
    """slurmctld's current view, or None when it does not answer (a change then waits)."""
    if not (await client.ping()).up:
        return None
    try:
        return await view(client)
    except SlurmError as exc:
        log.warning("slurmctld_unreadable", error=exc.message)
        return None


async def settings_view(client: SlurmClient) -> SlurmView:
    """The settings and partitions only: cheap at any fleet size, so these are what is polled."""
    config, parts = await all_of(client.show_config(), client.partitions())
    return SlurmView({k.lower(): v for k, v in config.items()}, {p.name: p for p in parts}, {})
