"""The control plane's metrics: its own work, and the autoscaling figures an HPA or KEDA scales on."""

from __future__ import annotations

import math
from collections import Counter as Tally
from collections import defaultdict
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from sidecars.controlplane.fleet import unowned
from sidecars.controlplane.fleet.snapshot import FleetNode, FleetSnapshot
from sidecars.slurm import Job

# Pending for a reason no new worker can cure: not counted as demand.
NOT_DEMAND = frozenset(
    {
        "Dependency",
        "DependencyNeverSatisfied",
        "JobHeldUser",
        "JobHeldAdmin",
        "BeginTime",
        "PartitionDown",
        "PartitionInactive",
        "AssocGrpCpuLimit",
        "QOSMaxJobsPerUserLimit",
    }
)


@dataclass(frozen=True, slots=True)
class PartitionDemand:
    pending_jobs: int
    pending_cpus: int
    pending_gpus: int
    busy_nodes: int
    idle_nodes: int
    nodes: int
    desired_workers: int


def _node_size(nodes: list[FleetNode]) -> tuple[int, int]:
    cpus = max((n.cpus for n in nodes), default=0)
    gpus = max((n.gpus for n in nodes), default=0)
    return max(cpus, 1), gpus


def demand(snapshot: FleetSnapshot) -> dict[str, PartitionDemand]:
    """Per partition: pending work, and the workers it would take (busy nodes + nodes the pending jobs
    need, each job sized by its node count, CPUs and GPUs against the partition's largest node)."""
    members: dict[str, list[FleetNode]] = defaultdict(list)
    for node in snapshot.nodes.values():
        for part in node.partitions:
            members[part].append(node)
    pending: dict[str, list[Job]] = defaultdict(list)
    for job in snapshot.jobs:
        if job.state == "PENDING":
            for part in job.partition.split(","):
                pending[part].append(job)
    out: dict[str, PartitionDemand] = {}
    for part in sorted(set(members) | set(pending)):
        nodes = members.get(part, [])
        cpn, gpn = _node_size(nodes)
        jobs = [j for j in pending.get(part, []) if j.state_reason not in NOT_DEMAND]
        need = 0
        gpus_total = 0
        for j in jobs:
            count = max(1, j.node_count)
            gpus = j.gpus_per_node * count
            gpus_total += gpus
            need += max(count, math.ceil(j.cpus / cpn), math.ceil(gpus / gpn) if gpn else 0)
        busy = sum(1 for n in nodes if n.busy)
        idle = sum(1 for n in nodes if not n.busy and not n.drain and n.registered)
        out[part] = PartitionDemand(
            pending_jobs=len(jobs),
            pending_cpus=sum(j.cpus for j in jobs),
            pending_gpus=gpus_total,
            busy_nodes=busy,
            idle_nodes=idle,
            nodes=len(nodes),
            desired_workers=busy + need,
        )
    return out


def node_state_label(node: FleetNode) -> str:
    if node.drain:
        return "draining" if node.busy else "drained"
    if "NOT_RESPONDING" in node.flags:
        return "not_responding"
    return node.state.lower()


class Declare:
    """Declares metrics on one registry: the prefix and the registry stated once, each metric a name,
    its help and its labels (the control plane's and the whole-cluster upgrade's)."""

    def __init__(self, registry: CollectorRegistry, prefix: str) -> None:
        self.registry, self.prefix = registry, prefix

    def gauge(self, name: str, doc: str, *labels: str) -> Gauge:
        return Gauge(self.prefix + name, doc, labels, registry=self.registry)

    def counter(self, name: str, doc: str, *labels: str) -> Counter:
        return Counter(self.prefix + name, doc, labels, registry=self.registry)

    def histogram(self, name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
        return Histogram(self.prefix + name, doc, registry=self.registry, buckets=buckets)


class ControlPlaneMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        m = Declare(registry, "slurm_sidecars_")
        self.kube_cache_stale = m.gauge(
            "kube_cache_stale",
            "1 while a Kubernetes cache has heard nothing (not even a bookmark) within its bound",
            "cache",
        )
        self.kube_cache_relists = m.gauge(
            "kube_cache_relists",
            "Lists of a Kubernetes cache after its first (a 410, a failure, a silent watch)",
            "cache",
        )
        self.pending_jobs = m.gauge("pending_jobs", "Jobs pending for resources, per partition", "partition")
        self.pending_cpus = m.gauge("pending_cpus", "CPUs asked for by pending jobs", "partition")
        self.pending_gpus = m.gauge("pending_gpus", "GPUs asked for by pending jobs", "partition")
        self.idle_nodes = m.gauge("idle_nodes", "Registered nodes with no job and no drain", "partition")
        self.desired_workers = m.gauge(
            "desired_workers",
            "Workers the partition's running and pending work "
            "would take (busy nodes + nodes pending jobs need)",
            "partition",
        )
        self.nodes = m.gauge("nodes", "Slurm nodes by state (drain shown as draining/drained)", "state")
        self.unowned_drains = m.gauge(
            "unowned_drains",
            "Nodes drained, down or failed for a reason nobody owns, by class: what made Slurm set it"
            " (not_responding, prolog, kill_task, ...) or unknown (an admin's or another tool's)",
            "class",
        )
        self.snapshot_version = m.gauge("fleet_snapshot_version", "Version of the fleet view")
        self.snapshot_time = m.gauge("fleet_snapshot_timestamp_seconds", "When the fleet was last read")
        self.refreshes = m.counter("fleet_refreshes", "Fleet reads by result", "result")
        self.refresh_seconds = m.histogram(
            "fleet_refresh_seconds",
            "Time to read and rank the fleet",
            (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.drain_requests = m.counter(
            "drain_requests", "Drain/undrain requests received", "action", "result"
        )
        self.drain_batches = m.counter(
            "drain_batches", "scontrol update calls made for drain requests", "action", "result"
        )
        self.drain_batch_size = m.histogram(
            "drain_batch_nodes", "Nodes per drain/undrain call", (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
        )
        self.deletion_cost_patches = m.counter("deletion_cost_patches", "pod-deletion-cost patches", "result")
        self.slinky_mode = m.gauge(
            "slinky_mode",
            "1 when the scale-in rank is written as Slinky's NodeSet annotations (pods owned by a NodeSet)",
        )
        self.health_signals = m.gauge(
            "health_signals",
            "Worker Slurm nodes showing each configured health signal (a Node condition or taint)",
            "signal",
        )
        self.health_nodes = m.gauge(
            "health_nodes",
            "Worker Slurm nodes with a health signal, by state (drained, waiting, capped, other_drain)",
            "state",
        )
        self.health_actions = m.counter(
            "health_actions",
            "Health drains and undrains asked, and drains held back by the cap (drain, undrain, capped)",
            "action",
        )
        self.node_records = m.gauge(
            "node_records",
            "Slurm node records by what the record keeper sees: orphaned (no worker pod holds it) "
            "and gres_short (fewer GPUs registered than its pod asks for)",
            "state",
        )
        self.node_record_actions = m.counter(
            "node_record_actions",
            "What the record keeper did: deleted, kept (a job holds or names it), capped, held (too "
            "many at once), failed, gres_drain, gres_undrain",
            "action",
        )
        self.reconcile_passes = m.counter(
            "reconcile_passes",
            "Passes of each writer run after a refresh (ok, skipped, error)",
            "writer",
            "result",
        )
        self.recycles = m.counter("recycles", "Worker pods recycled (or held back, by reason)", "result")
        self.recycling_suspended = m.gauge(
            "recycling_suspended", "1 while recycling is suspended, by why", "reason"
        )
        self.unregistered_workers = m.gauge("unregistered_workers", "Worker pods that look unregistered")
        self.maintenance_nodes = m.gauge(
            "maintenance_nodes",
            "Nodes in maintenance windows, by state (scheduled, waiting, draining, ready, unknown)",
            "state",
        )
        self.leader = m.gauge("leader", "1 when this replica holds the Lease")
        self.long_polls = m.gauge("long_polls", "Long polls waiting")
        self.slurmctld_primary = m.gauge(
            "slurmctld_primary",
            "1 for the slurmctld in control, 0 for the others (several SlurmctldHost only)",
            "host",
        )
        self.slurmctld_takeovers = m.counter(
            "slurmctld_takeovers",
            "Moves of control from one slurmctld to another that this process saw, by the new one",
            "host",
        )
        self.api_refusals = m.counter(
            "api_refusals",
            "Requests under /v1/ refused by who called: identity (unknown, viewer, agent), status",
            "identity",
            "status",
        )

    def observe(self, snapshot: FleetSnapshot) -> None:
        self.snapshot_version.set(snapshot.version)
        self.snapshot_time.set(snapshot.taken_at)
        per_part = demand(snapshot)
        for gauge in (
            self.pending_jobs,
            self.pending_cpus,
            self.pending_gpus,
            self.idle_nodes,
            self.desired_workers,
            self.nodes,
        ):
            gauge.clear()  # a partition or state that went away must not linger
        for part, d in per_part.items():
            self.pending_jobs.labels(part).set(d.pending_jobs)
            self.pending_cpus.labels(part).set(d.pending_cpus)
            self.pending_gpus.labels(part).set(d.pending_gpus)
            self.idle_nodes.labels(part).set(d.idle_nodes)
            self.desired_workers.labels(part).set(d.desired_workers)
        for state, count in Tally(node_state_label(n) for n in snapshot.nodes.values()).items():
            self.nodes.labels(state).set(count)
        for cls, count in unowned.counts(unowned.scan(snapshot.nodes.values())).items():
            self.unowned_drains.labels(cls).set(count)
