"""The release each Slurm daemon of a cluster runs, as the controller and slurmdbd tell it: what a
whole-cluster upgrade's preflight judges, and what it reads back after each stage."""

from __future__ import annotations

from sidecars.slurm import daemons
from sidecars.slurm.client import SlurmClient
from sidecars.slurm.dbd_version import slurmdbd_version
from sidecars.slurm.models import Version


async def running_releases(
    client: SlurmClient, controller: str, *, accounting: bool = True
) -> dict[str, Version]:
    """ "slurmdbd" (where there is accounting), "slurmctld:<controller>" (the one answering),
    "slurmd:<node>" for each node that registered a release; SlurmError when slurmdbd or slurmctld
    does not answer."""
    found = {daemons.SLURMDBD: await slurmdbd_version(client)} if accounting else {}
    config = await client.show_config()
    found[f"{daemons.SLURMCTLD}:{controller}"] = Version.parse(config.get("SLURM_VERSION", ""))
    for node in await client.nodes():
        if node.version:
            found[f"{daemons.SLURMD}:{node.name}"] = Version.parse(node.version)
    return found
