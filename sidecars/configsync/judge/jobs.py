"""What a change would do to the jobs running or waiting now.

Two sources, joined: the dry run's log (what a slurmctld loading the current state under the
candidate did to each job) and a direct comparison of what each pending or running job uses
(partitions, nodes, the nodes of its reservation, its QOS in its partition) with what the candidate
removes, and of the nodes running jobs with what the candidate redefines (their resources, their
address). The state the dry run loads may lag the live controller by the few seconds slurmctld takes
to save it; the comparison reads the live controller and covers that gap.

A dynamic node (Slinky's `slurmd -Z` workers) is defined by its registration, not by the files, so
the live controller says what it is: its features. A change redefines a busy one when it gives it a
static NodeName line, or when the NodeSets and partitions no longer take it into a partition its job
runs in (a NodeSet's Feature changed, a NodeSet dropped from the partition).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sidecars.configsync.fileset.conffile import SlurmConf
from sidecars.configsync.fileset.sources import FileSet
from sidecars.protocol.configsync import FORCE_FILE
from sidecars.slurm import hostlist
from sidecars.slurm.models import JobPlacement

# the marker a ConfigMap carries to apply a change that would end or requeue jobs: its content names
# who forced it (and is reported); removing it is the next change


@dataclass(frozen=True, slots=True)
class JobRisk:
    jobs: dict[int, str]  # job id -> why it would end, be requeued or never run

    def __bool__(self) -> bool:
        return bool(self.jobs)

    def describe(self, limit: int = 20) -> str:
        items = sorted(self.jobs.items())
        text = "; ".join(f"job {j}: {why}" for j, why in items[:limit])
        more = f"; and {len(items) - limit} more" if len(items) > limit else ""
        return f"would end, requeue or strand {len(items)} job(s): {text}{more}"


def forced_by(files: FileSet, flag: bool) -> str | None:
    """Who forced this change past the job check: the marker's content, or the flag."""
    entry = files.files.get(FORCE_FILE)
    if entry is not None:
        who = entry.data.decode("utf-8", "replace").strip().splitlines()
        return f"{FORCE_FILE}: {who[0][:200]}" if who and who[0].strip() else f"{FORCE_FILE} (unsigned)"
    return "--allow-job-loss" if flag else None


# what a node is (its resources and where slurmctld reaches it): changed under a running job, the
# job's allocation no longer matches the node, or the node stops answering (measured on 26.05: a
# Sockets/CoresPerSocket/ThreadsPerCore line added to a busy node's definition requeued its job)
NODE_SHAPE = (
    "cpus",
    "boards",
    "socketsperboard",
    "sockets",
    "corespersocket",
    "threadspercore",
    "realmemory",
    "tmpdisk",
    "gres",
    "cpuspeclist",
    "corespeccount",
    "memspeclimit",
    "nodeaddr",
    "nodehostname",
    "port",
)


def _shape(fields: Mapping[str, str]) -> dict[str, str]:
    return {k: fields[k].strip().lower() for k in NODE_SHAPE if k in fields}


def reshaped(old: SlurmConf, new: SlurmConf) -> dict[str, list[str]]:
    """Nodes both sets define whose resources or address change: node -> the keys that differ."""
    before, after = old.node_definitions(), new.node_definitions()
    out: dict[str, list[str]] = {}
    for name, fields in after.items():
        if name in before:
            a, b = _shape(before[name]), _shape(fields)
            keys = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
            if keys:
                out[name] = keys
    return out


def _number(value: str | None) -> int | None:
    try:
        return int(value.strip()) if value is not None else None
    except ValueError:
        return None  # Slurm's own parse refuses it


def _qos_list(value: str | None) -> set[str] | None:
    if value is None or value.strip().upper() in ("", "ALL"):
        return None
    return {q.strip().lower() for q in value.split(",") if q.strip()}


def _words(expr: str) -> list[str]:
    try:
        return hostlist.expand(expr)
    except ValueError:
        return [w for w in expr.split(",") if w]  # Slurm's own parse judges a malformed one


def in_partition(conf: SlurmConf, partition: str, node: str, features: Iterable[str]) -> bool:
    """Whether `conf`'s partition takes this dynamic node: by name, ALL, or a NodeSet it matches (by
    its Feature, or by name in the NodeSet's Nodes)."""
    rec = conf.partitions().get(partition)
    if rec is None:
        return False
    have = {f.lower() for f in features}
    nodesets = {r.name: r.fields for r in conf.of("nodeset")}
    for word in _words(rec.fields.get("nodes", "")):
        if word.upper() == "ALL" or word == node:
            return True
        fields = nodesets.get(word)
        if fields is None:
            continue
        feature = fields.get("feature", "").lower()
        if feature and feature in have:
            return True
        members = fields.get("nodes", "")
        if members.upper() == "ALL" or node in _words(members):
            return True
    return False


def dynamic_redefined(
    old: SlurmConf, new: SlurmConf, node: str, features: Iterable[str], partitions: Iterable[str]
) -> str | None:
    """Why a change redefines a busy dynamic node under its job (None: it does not)."""
    if node in new.node_definitions():
        return f"dynamic node {node} it runs on would be redefined by a static NodeName line"
    for p in partitions:
        if in_partition(old, p, node, features) and not in_partition(new, p, node, features):
            return f"dynamic node {node} it runs on would leave partition {p} (no NodeSet of it takes it)"
    return None


def pending_at_risk(old: SlurmConf, new: SlurmConf) -> bool:
    """Whether `compare` could find a pending job at risk: only a change of what a pending job
    depends on (a partition removed, a node a reservation may hold removed, a partition's QOS lists,
    a MaxJobId) can. Otherwise the running jobs alone are read (at 10,000 queued jobs a read of all
    of them costs 0.3 s of CPU a change)."""
    old_parts, new_parts = old.partitions(), new.partitions()
    if new.options.get("maxjobid") is not None or set(old_parts) - set(new_parts):
        return True
    if set(old.node_names()) - set(new.node_names()):
        return True
    return any(
        old_parts[p].fields.get(key) != rec.fields.get(key)
        for p, rec in new_parts.items()
        if p in old_parts
        for key in ("allowqos", "denyqos")
    )


def compare(
    old: SlurmConf,
    new: SlurmConf,
    jobs: Iterable[JobPlacement],
    reservations: Mapping[str, tuple[str, ...]],
    dynamic: Mapping[str, tuple[str, ...]] | None = None,
) -> dict[int, str]:
    """Jobs that use what the candidate removes. Only what the old files defined counts as removed:
    dynamic nodes and partitions made by `scontrol create` are in neither. `dynamic`: the live
    dynamic nodes that run jobs, with their features (see the module)."""
    old_parts, new_parts = old.partitions(), new.partitions()
    gone_parts = set(old_parts) - set(new_parts)
    gone_nodes = set(old.node_names()) - set(new.node_names())
    changed = reshaped(old, new)
    dynamic = dynamic or {}
    max_id = _number(new.options.get("maxjobid"))
    out: dict[int, str] = {}
    for job in jobs:
        if max_id is not None and job.job_id >= max_id:
            # measured: MaxJobId=2 ended job 3 on 24.11 and jobs 2 and 3 on 26.05
            out[job.job_id] = f"its id is not below the new MaxJobId={max_id}"
            continue
        if job.running:
            lost = [p for p in job.partitions if p in gone_parts]
            if lost:
                out[job.job_id] = f"partition {lost[0]} it runs in is removed"
                continue
            nodes = sorted(set(job.nodes) & gone_nodes)
            if nodes:
                out[job.job_id] = f"node(s) {','.join(nodes)} it runs on are removed"
                continue
            busy = sorted(n for n in job.nodes if n in changed)
            if busy:
                keys = ", ".join(k for k in NODE_SHAPE if k in changed[busy[0]])
                out[job.job_id] = f"node {busy[0]} it runs on is redefined ({keys})"
                continue
            why = next(
                (
                    w
                    for n in sorted(set(job.nodes) & dynamic.keys())
                    if (w := dynamic_redefined(old, new, n, dynamic[n], job.partitions))
                ),
                None,
            )
            if why:
                out[job.job_id] = why
                continue
        elif job.partitions and all(p in gone_parts for p in job.partitions):
            out[job.job_id] = f"partition {','.join(job.partitions)} it waits for is removed"
            continue
        resv_nodes = sorted(set(reservations.get(job.reservation, ())) & gone_nodes)
        if job.reservation and resv_nodes:
            out[job.job_id] = f"reservation {job.reservation} it uses loses node(s) {','.join(resv_nodes)}"
            continue
        qos = job.qos.lower()
        for p in job.partitions:
            rec_new, rec_old = new_parts.get(p), old_parts.get(p)
            if rec_new is None or rec_old is None or not qos:
                continue
            allow_new, allow_old = (
                _qos_list(rec_new.fields.get("allowqos")),
                _qos_list(rec_old.fields.get("allowqos")),
            )
            deny_new = _qos_list(rec_new.fields.get("denyqos")) or set()
            deny_old = _qos_list(rec_old.fields.get("denyqos")) or set()
            was_ok = (allow_old is None or qos in allow_old) and qos not in deny_old
            now_ok = (allow_new is None or qos in allow_new) and qos not in deny_new
            if was_ok and not now_ok:
                out[job.job_id] = f"QOS {job.qos} is no longer allowed in partition {p}"
                break
    return out
