"""The Slurm edge: the only place the sidecars run Slurm commands.

Reads use JSON where the installed release prints per-record JSON and `scontrol -o` text where it
does not; both paths give the same models. Transient failures (controller unreachable, time-outs)
are retried, bounded (commands.py); permanent ones are raised at once with Slurm's own message.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import structlog

from sidecars.runtime import offloop
from sidecars.slurm import hostlist, jsonformat, squeueformat, textformat
from sidecars.slurm.commands import SlurmCommands
from sidecars.slurm.errors import (
    SlurmCommandError,
    SlurmParseError,
)
from sidecars.slurm.models import (
    BootTime,
    Job,
    JobNodes,
    JobPlacement,
    Node,
    Partition,
    Reservation,
    Version,
)
from sidecars.slurm.nodelines import NodeLines
from sidecars.slurm.runner import CommandResult, run

log = structlog.get_logger(__name__)


@dataclass
class SlurmClient(SlurmCommands):
    """Async access to one Slurm cluster through its commands on PATH (`SLURM_CONF` honoured): the
    reads and writes the sidecars use, each one command, parsed into the models."""

    # the fleet's listing, read before and after each change, parses only the lines that changed
    _node_lines: NodeLines = field(default_factory=NodeLines, init=False, repr=False)

    async def version(self) -> Version:
        """The installed client release, detected once."""
        if self._version is None:
            result = await self.run("scontrol", "--version")
            self._version = Version.parse(result.stdout)
            log.info("slurm_release_detected", version=str(self._version))
        return self._version

    async def parse_config(self, timeout: float | None = None) -> Version:
        """Have the Slurm client parse SLURM_CONF (and its includes), now; returns the client's release.
        `scontrol --version` parses the files before it prints and sends nothing to slurmctld, so it is
        the cheapest such parse; a refusal raises SlurmCommandError in the parser's words. Not retried
        (a parse error is no transient) and not cached (the files are what is asked about)."""
        result = await self.run("scontrol", "--version", retry=False, timeout=timeout)
        return Version.parse(result.stdout)

    async def slurmd_version(self, binary: str = "slurmd") -> Version:
        """The release of a slurmd binary (`slurmd -V`: it prints and exits, reading no config and
        asking no daemon). Not retried: a binary that cannot run is no transient."""
        result = await self.run(binary, "-V", retry=False)
        return Version.parse(result.stdout)

    async def _json(self, kind: Literal["nodes", "jobs", "partitions"]) -> bool:
        """Whether to read `kind` as JSON. `squeue --json` and 22.05's per-node `sinfo --json` exist
        in every supported release; partitions have JSON only through `scontrol --json` (23.02+)."""
        if self.output != "auto":
            return self.output == "json" and (kind != "partitions" or (await self.version()).at_least(23, 2))
        return kind != "partitions" or (await self.version()).at_least(23, 2)

    async def _json_listing(
        self, kind: Literal["nodes", "jobs", "partitions"], show: str, *, older: str
    ) -> tuple[list[str], str] | None:
        """(argv, output) of `scontrol show SHOW --json` (23.02+; `OLDER --json` before) when JSON is
        how to read `kind` here; None when the text listing is."""
        if not await self._json(kind):
            return None
        newer = (await self.version()).at_least(23, 2)
        argv = ["scontrol", "show", show, "--json"] if newer else [older, "--json"]
        return argv, (await self.run(*argv)).stdout

    # ------------------------------------------------------------------ reads
    async def nodes(self) -> list[Node]:
        """Every node of the cluster (FUTURE nodes included where the release can show them)."""
        listed = await self._json_listing("nodes", "nodes", older="sinfo")
        if listed is None:
            return await self.node_listing()
        argv, text = listed  # 10,000 nodes' JSON is ~28 MB: parsed off the loop (runtime.offloop)
        return await offloop.sized(len(text), jsonformat.nodes, argv, text)

    async def node_listing(self) -> list[Node]:
        """Every node, FUTURE ones included, in the one-line text format, whatever the release. For
        a reader of the whole fleet at each change: at 1,003 nodes it took 0.05 s to run and parse
        here, the JSON listing 0.2 s (24.11 and 26.05, measured), and FUTURE nodes are in it."""
        r = await self.run("scontrol", "--future", "-o", "-d", "show", "node")
        # a large listing is parsed in the lane (one sized work at a time); a small one on the loop
        # may run beside it: NodeLines keeps only a cache of line -> frozen Node, so the worst of
        # that overlap is a line parsed again next time
        return await offloop.sized(len(r.stdout), self._node_lines.parse, r.stdout)

    async def node(self, name: str) -> Node | None:
        """One node, or None when Slurm has no record of it."""
        try:
            r = await self.run("scontrol", "--future", "-o", "-d", "show", "node", name)
        except SlurmCommandError as exc:
            if "not found" in exc.message:
                return None
            raise
        found = [n for n in textformat.nodes(r.stdout) if n.name == name]
        if not found:
            # "no record" lets a drain hook exit 0 and the pod die: only Slurm's own "not found"
            # says it, never an answer that merely lacks the node
            raise SlurmParseError(r.argv, f"no node {name} in the output of a lookup that succeeded")
        return found[0]

    async def nodes_named(self, names: Iterable[str]) -> dict[str, Node]:
        """The named nodes as the controller has them now, in one command; a name Slurm has no
        record of is absent. What a write that must not trample someone else's change rests on."""
        wanted = set(names)
        expr = hostlist.compress(wanted)
        if not expr:
            return {}
        try:
            r = await self.run("scontrol", "--future", "-o", "-d", "show", "node", expr)
            found = textformat.nodes(r.stdout)
        except SlurmCommandError as exc:
            # one unknown name makes scontrol exit non-zero (it prints the rest): read them all instead
            if "not found" not in exc.message:
                raise
            found = await self.nodes()
        return {n.name: n for n in found if n.name in wanted}

    async def jobs(self) -> list[Job]:
        """Every job the controller still knows (pending, running and ended within MinJobAge)."""
        # 24.11's squeue hides ended jobs unless asked; `scontrol --json` (23.02+) shows them as text does
        listed = await self._json_listing("jobs", "job", older="squeue")
        if listed:
            argv, text = listed
            return await offloop.sized(len(text), jsonformat.jobs, argv, text)
        r = await self.run("scontrol", "-o", "-d", "show", "job")
        return await offloop.sized(len(r.stdout), textformat.jobs, r.stdout)

    async def job(self, job_id: int) -> Job | None:
        """One job, or None when the controller no longer (or never) knew it: one job's text, at any
        queue length (the whole queue as JSON takes seconds at 10,000 jobs)."""
        try:
            r = await self.run("scontrol", "-o", "-d", "show", "job", str(job_id))
        except SlurmCommandError as exc:
            if "invalid job id" in exc.message.lower():
                return None
            raise
        found = [j for j in textformat.jobs(r.stdout) if j.job_id == job_id]
        return found[0] if found else None

    async def job_summaries(self) -> list[Job]:
        """Pending and running jobs in brief (no names, users or GPU indices): one `squeue` call whose
        output stays small at any fleet size. For readers that poll the whole cluster often."""
        r = await self.run(
            "squeue", "--noheader", "--states=PD,R,S,CG,CF", "--format", squeueformat.SUMMARY_FORMAT
        )
        return await offloop.sized(len(r.stdout), squeueformat.job_summaries, r.stdout)

    async def job_placements(self, *, pending: bool = True) -> list[JobPlacement]:
        """Pending and running jobs with what they depend on (partitions, nodes, reservation, QOS);
        the running ones alone with `pending=False` (a cluster's queue is mostly pending jobs)."""
        states = "PD,R,S,CG,CF" if pending else "R,S,CG,CF"
        r = await self.run(
            "squeue", "--noheader", f"--states={states}", "--format", squeueformat.PLACEMENT_FORMAT
        )
        return squeueformat.job_placements(r.stdout)

    async def job_nodes(self) -> list[JobNodes]:
        """Pending and running jobs with the nodes they hold and those they asked for by name."""
        r = await self.run(
            "squeue", "--noheader", "--states=PD,R,S,CG,CF", "--format", squeueformat.JOB_NODES_FORMAT
        )
        return squeueformat.job_nodes(r.stdout)

    async def partitions(self) -> list[Partition]:
        listed = await self._json_listing("partitions", "partition", older="scontrol")  # 23.02+ only
        if listed:
            return [jsonformat.partition(o) for o in jsonformat.load(*listed, "partitions")]
        r = await self.run("scontrol", "-o", "show", "partition")
        return textformat.partitions(r.stdout)

    async def reservations(self) -> list[Reservation]:
        """Every reservation the controller holds (text in every release: one short line each)."""
        r = await self.run("scontrol", "-o", "show", "reservation")
        return textformat.reservations(r.stdout)

    async def show_config(self) -> dict[str, str]:
        r = await self.run("scontrol", "show", "config")
        return textformat.config(r.stdout)

    async def boot_time(self, timeout: float | None = None) -> BootTime:
        """When slurmctld started (`scontrol show config`'s BOOT_TIME), and when it was asked. Not
        retried: a caller waiting for a restart keeps its own deadline, not the client's retry budget."""
        r = await self.run("scontrol", "show", "config", retry=False, timeout=timeout)
        return textformat.boot_time(r.stdout)

    async def accounting_ping(self, timeout: float | None = None) -> bool:
        """Whether slurmdbd answers. `sacctmgr ping` where the release has it (it names slurmdbd
        and says UP or DOWN); 22.05 has none, so there a cluster list is asked for, a round trip
        to slurmdbd that needs no association. Never raises for a down slurmdbd: that is the answer."""
        if (await self.version()).at_least(23, 11):
            argv = ["sacctmgr", "ping"]
        else:
            argv = ["sacctmgr", "-n", "-P", "list", "cluster", "format=cluster"]
        if self.guard is not None:
            self.guard(argv)
        r = await run(argv, env=self.env, timeout=timeout or self.timeout, metrics=self.metrics, check=False)
        return textformat.accounting_ping(argv, r.returncode, r.stdout)

    async def shutdown_accounting(self, timeout: float | None = None) -> None:
        """`sacctmgr shutdown`: slurmdbd finishes what it was writing and exits (its container then
        starts it again). Not retried: a second request could stop the new one."""
        await self.run("sacctmgr", "-i", "shutdown", retry=False, timeout=timeout)

    async def reconfigure_accounting(self, timeout: float | None = None) -> None:
        """`sacctmgr reconfigure`: slurmdbd re-reads slurmdbd.conf in place (as on SIGHUP)."""
        await self.run("sacctmgr", "-i", "reconfigure", retry=False, timeout=timeout)

    async def sdiag_rpcs(self) -> dict[str, int]:
        r = await self.run("sdiag")
        return textformat.sdiag_rpcs(r.stdout)

    async def accounting_queue(self) -> int:
        """The records slurmctld holds for slurmdbd that slurmdbd has not taken yet (`sdiag`)."""
        r = await self.run("sdiag")
        return textformat.sdiag_dbd_queue(r.stdout)

    # ------------------------------------------------------------------ writes
    async def update_nodes(self, names: Iterable[str], **fields: str) -> None:
        """`scontrol update nodename=<hostlist> key=value ...`: one call for many nodes."""
        expr = hostlist.compress(names)
        if not expr:
            return
        args = [f"{k}={v}" for k, v in fields.items()]
        await self.run("scontrol", "update", f"nodename={expr}", *args)

    async def set_features(self, name: str, available: Sequence[str], active: Sequence[str]) -> None:
        """A node's AvailableFeatures and ActiveFeatures, replaced (empty: none), in place: static
        and dynamic nodes alike, 22.05 to 26.05. Callers merge: what is not given is removed."""
        await self.update_nodes(
            [name], AvailableFeatures=",".join(available), ActiveFeatures=",".join(active)
        )

    async def drain(self, names: Iterable[str], reason: str) -> None:
        await self.update_nodes(names, state="DRAIN", reason=reason)

    async def resume(self, names: Iterable[str]) -> None:
        await self.update_nodes(names, state="RESUME")

    async def undrain(self, names: Iterable[str]) -> None:
        """Clear DRAIN (UNDRAIN keeps a DOWN node down, unlike RESUME)."""
        await self.update_nodes(names, state="UNDRAIN")

    async def down(self, names: Iterable[str], reason: str) -> None:
        await self.update_nodes(names, state="DOWN", reason=reason)

    async def set_topology(self, names: Iterable[str], topology: str) -> None:
        """`scontrol update nodename=<hostlist> topology=<name>:<unit>[:...]` (25.05+): move nodes in
        the loaded topology in place. Tree: `name:root:...:leaf` makes the switches on the path as
        needed; block: `name:block` only into a block the loaded topology.yaml has. The caller
        validates the value: Slurm takes an empty unit (`name:`) and silently takes the node out of
        the topology. Older releases refuse the key ("Update of this parameter is not supported")."""
        name, sep, unit = topology.partition(":")
        if not (name and sep and unit) or any(not part for part in unit.split(":")):
            raise ValueError(f"not a topology placement: {topology!r}")
        await self.update_nodes(names, topology=topology)

    async def reconfigure(self, timeout: float | None = None) -> CommandResult:
        """Ask slurmctld to re-read its files. Not retried: the caller verifies and decides."""
        return await self.run("scontrol", "reconfigure", retry=False, timeout=timeout)

    async def shutdown_controller(self) -> None:
        """`scontrol shutdown slurmctld`: the controller saves its state and exits; its container restarts."""
        await self.run("scontrol", "shutdown", "slurmctld", retry=False)

    async def create_node(self, spec: Mapping[str, str]) -> None:
        """`scontrol create nodename=X state=FUTURE ...` (a dynamic node)."""
        await self.run("scontrol", "create", *[f"{k}={v}" for k, v in spec.items()])

    async def delete_node(self, name: str) -> None:
        await self.run("scontrol", "delete", f"nodename={name}")

    async def create_reservation(
        self,
        name: str,
        nodes: Sequence[str],
        start: str = "now",
        duration: str = "UNLIMITED",
        flags: str = "MAINT,IGNORE_JOBS",
        users: str = "root",
        comment: str | None = None,
    ) -> None:
        """`start` is `now` or the controller's local time `YYYY-MM-DDTHH:MM:SS`; `duration` in
        minutes (or UNLIMITED). The comment is kept by Slurm: callers store what they need there."""
        extra = [f"comment={comment}"] if comment else []
        await self.run(
            "scontrol",
            "create",
            "reservation",
            f"reservation={name}",
            f"starttime={start}",
            f"duration={duration}",
            f"nodes={hostlist.compress(nodes)}",
            f"flags={flags}",
            f"users={users}",
            *extra,
        )

    async def reservation_comments(self) -> bool:
        """Whether a reservation can carry a comment: 23.02 added it (22.05 answers `scontrol create
        reservation comment=...` with "Unknown parameter ... No reservation created")."""
        return (await self.version()).at_least(23, 2)

    async def delete_reservation(self, name: str) -> None:
        await self.run("scontrol", "delete", f"reservation={name}")
