"""What a whole-cluster upgrade needs from where the daemons run: the seam between the stage machine
(cluster_upgrade/stages.py) and Kubernetes (kube.py here) or the dev cluster (devcluster/swap_roles.py)."""

from __future__ import annotations

from typing import Protocol

from sidecars.slurm import Version


class StageFailed(Exception):
    """A stage's action did not reach its goal; the message says what was seen."""


class ClusterRoles(Protocol):
    """What a whole-cluster upgrade needs from where the daemons run (Kubernetes, or the dev cluster).

    `image` is what the role moves to: a container image or revision in Kubernetes, a release's
    name in the dev cluster. Every method raises (any Exception, with a message that says why)
    when it could not do what it says.

    Roles of a cluster that runs no slurmdbd (no accounting) say so with an attribute
    `accounting = False`: `versions()` then has no "slurmdbd", and its stage is skipped. Without
    that attribute a slurmdbd is expected, and a release of it not read refuses the upgrade."""

    async def versions(self) -> dict[str, Version]:
        """Daemon -> running release: "slurmdbd", "slurmctld:<host>" (each controller that runs),
        "slurmd:<node>"."""
        ...

    async def room(self) -> list[tuple[str, int, int]]:
        """(what, bytes needed, bytes free) for the database backup and the state copy."""
        ...

    def controllers(self) -> list[str]:
        """The controllers' hosts, backups first and the primary last (it moves last)."""
        ...

    async def backup_database(self) -> str:
        """Dump the accounting database; where the dump is."""
        ...

    async def replace_slurmdbd(self, image: str) -> None:
        """Stop slurmdbd and start `image`'s on the same database; return once it answers."""
        ...

    async def stop_slurmctld(self, controller: str) -> None:
        """Stop the controller as Slurm does (its state saved first)."""
        ...

    async def copy_state(self) -> str:
        """Copy the StateSaveLocation (every controller stopped, or this one); where the copy is."""
        ...

    async def start_slurmctld(self, controller: str, image: str) -> None:
        """Start `image`'s controller on the state as it is; return once it answers."""
        ...

    async def restore_slurmctld(self, controller: str, saved: str) -> None:
        """Stop whatever runs for `controller`, put the copy `saved` back as the StateSaveLocation
        (an empty `saved`: the state left as it is, for a backup put back beside its primary, or a
        controller whose copy was never made: no new one ran on its state), and start the release
        it ran before the upgrade; return once it runs (a backup: in standby) or answers."""
        ...

    async def jobs(self) -> dict[int, str]:
        """Job id -> state, as slurmctld lists them."""
        ...

    async def accounting_queue(self) -> int:
        """The records slurmctld holds for slurmdbd that slurmdbd has not taken yet."""
        ...

    async def nodes(self) -> set[str]:
        """The node names slurmctld lists."""
        ...

    async def roll_workers(self, image: str, version: Version) -> None:
        """Move every worker to `image` by the budgeted roll (drained first, no job killed)."""
        ...


def has_accounting(roles: ClusterRoles) -> bool:
    """Whether the cluster runs a slurmdbd (roles without one say `accounting = False`)."""
    return bool(getattr(roles, "accounting", True))


def memory_of(roles: ClusterRoles) -> dict[str, str]:
    """What the roles need to undo their changes after a control plane's restart (the image a
    workload ran before, where the state copy is), kept with the status; roles that need nothing
    (the dev cluster's, whose swap keeps its own) have no `memory`."""
    memory = getattr(roles, "memory", None)
    return dict(memory()) if callable(memory) else {}


def recall(roles: ClusterRoles, memory: dict[str, str]) -> None:
    """Hand the roles what `memory_of` kept, when an interrupted upgrade is started again."""
    take = getattr(roles, "recall", None)
    if callable(take) and memory:
        take(dict(memory))
