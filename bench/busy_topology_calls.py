"""P8: busy labels and topology sync at 1,000 workers: Kubernetes and Slurm calls per minute.

The control plane's real BusyLabeler and TopologySync run pass after pass (one per 4 s refresh,
15 a minute, on a simulated clock) against an in-process Kubernetes and Slurm that count the calls
made to them. 1,000 worker pods on 125 Kubernetes Nodes (8 each; 5 zones x 5 racks), measured:

1. steady state: jobs keep running, no label changes (the goal: under 10 Kubernetes calls a minute);
2. job churn: 30 jobs end and 30 start a minute on other workers, and 30 more workers run one short
   job after another (idle for one pass between them), for ten minutes;
3. a rack relabelled (8 Nodes, 64 workers move) and a rack label emptied (64 refused).

Baseline, measured the same way: a writer with no change detection, which patches every worker's
label every pass (what a per-interval reconcile of the whole fleet costs).

Usage: .venv/bin/python bench/busy_topology_calls.py [--workers 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

from _report import result

from sidecars.controlplane.fleet.kube_nodes import NodeCache
from sidecars.controlplane.fleet.snapshot import FleetSnapshot
from sidecars.controlplane.reconcile import View
from sidecars.controlplane.reconcile.busy_label import LABEL, BusyLabeler
from sidecars.controlplane.reconcile.topology_sync import TopologySync
from sidecars.controlplane.settings import TopologySettings
from sidecars.kube import KubeClient, KubeNode, Pod
from sidecars.kube.topology import TopologySpec
from sidecars.runtime import logs
from sidecars.slurm import SlurmClient, Version

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the simulated fleet is built as the tests build theirs
from tests.controlplane.conftest import writer_deps  # noqa: E402
from tests.helpers import fleet_node, fleet_pod, fleet_snapshot  # noqa: E402

ZONE, RACK = "topology.kubernetes.io/zone", "example.com/rack"
PASSES_PER_MINUTE = 15  # --interval-seconds 4


@dataclass
class Clock:
    now: float = 1_000.0

    def __call__(self) -> float:
        return self.now


class SimKube:
    """The pods as the watch would show them, updated by each label patch; every call counted."""

    def __init__(self, pods: dict[str, Pod]) -> None:
        self.pods = pods
        self.calls: Counter[str] = Counter()
        self.removed: Counter[str] = Counter()  # label removals per pod
        self.rv = 0
        self.watch_silence_seconds = 90.0  # what a cache's staleness is measured against

    async def label_pod(self, namespace: str, name: str, labels: Mapping[str, str | None]) -> Pod:
        self.calls["label_pod"] += 1
        self.removed[name] += sum(1 for v in labels.values() if v is None)
        pod = self.pods[name]
        new = {k: v for k, v in pod.labels.items() if k not in labels}
        new.update({k: v for k, v in labels.items() if v is not None})
        self.rv += 1
        self.pods[name] = replace(pod, labels=new, resource_version=str(self.rv))
        return self.pods[name]

    async def create_event(self, *args: Any, **kwargs: Any) -> None:
        self.calls["create_event"] += 1

    async def put_config_map(self, namespace: str, name: str, data: Mapping[str, str]) -> None:
        self.calls["put_config_map"] += 1


class SimSlurm:
    """26.05: moves land in the node records the next snapshot shows."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.topology: dict[str, str] = {}

    async def version(self) -> Version:
        return Version.parse("slurm 26.05.5")

    async def set_topology(self, names: list[str], topology: str) -> None:
        self.calls["set_topology"] += 1
        for n in names:
            self.topology[n] = topology


class Sim:
    def __init__(self, workers: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.clock = Clock()
        self.hosts = [f"k{i:03d}" for i in range(-(-workers // 8))]
        self.pods = {
            f"w{i:04d}": fleet_pod(
                f"w{i:04d}",
                uid=f"uid-{i}",
                hostname=f"n{i:04d}",
                labels={"app": "slurmd"},
                owner_kind="ReplicaSet",
                node_name=self.hosts[i // 8],
            )
            for i in range(workers)
        }
        self.busy = {p.hostname: self.rng.random() < 0.8 for p in self.pods.values()}
        self.kube = SimKube(self.pods)
        self.slurm = SimSlurm()
        self.nodes = NodeCache(cast(KubeClient, self.kube))
        for i, host in enumerate(self.hosts):
            labels = {ZONE: f"z{i % 5}", RACK: f"r{(i // 5) % 5}"}
            self.nodes.nodes[host] = KubeNode(host, {}, False, (), "1", labels)
        self.nodes.synced.set()
        deps = writer_deps(
            kube=cast(KubeClient, self.kube),
            slurm=cast(SlurmClient, self.slurm),
            nodes=self.nodes,
            clock=self.clock,
        )
        self.labeler = BusyLabeler(deps)
        self.topology = TopologySync(
            deps, TopologySpec((ZONE, RACK)), settings=TopologySettings(configmap="slurm-topology")
        )
        self.version = 0

    def snapshot(self) -> FleetSnapshot:
        self.version += 1
        nodes = [
            fleet_node(n, busy=b, partitions=(), topology=self.slurm.topology.get(n, ""))
            for n, b in self.busy.items()
        ]
        # taken after every write: the sim's records are current
        return fleet_snapshot(nodes, taken_at=float(10**10 + self.version), version=self.version)

    async def passes(self, count: int, churn: bool = False, back_to_back: list[str] | None = None) -> None:
        for i in range(count):
            if churn:  # 2 a pass: 30 ends and 30 starts a minute...
                for _ in range(2):
                    self.busy[self.rng.choice([n for n, b in self.busy.items() if b])] = False
                    self.busy[self.rng.choice([n for n, b in self.busy.items() if not b])] = True
            for n in back_to_back or []:  # ... and these run one short job after another
                self.busy[n] = i % 2 == 1
            self.clock.now += 60 / PASSES_PER_MINUTE
            snap = self.snapshot()
            pods = list(self.pods.values())
            view = View(pods, snap)
            await self.labeler.reconcile(view)
            await self.topology.reconcile(view)

    def relabel(self, hosts: list[str], rack: str) -> None:
        for h in hosts:
            node = self.nodes.nodes[h]
            self.nodes.nodes[h] = replace(node, labels={**node.labels, RACK: rack})


async def baseline(workers: int, minutes: int) -> int:
    """Every worker's label written every pass, busy or not: Kubernetes calls a minute."""
    sim = Sim(workers, 1)
    for _ in range(minutes * PASSES_PER_MINUTE):
        for pod in list(sim.pods.values()):
            busy = sim.busy[pod.hostname]
            await sim.kube.label_pod("slurm", pod.name, {LABEL: "true" if busy else None})
    return sim.kube.calls["label_pod"] // minutes


async def ours(workers: int) -> dict[str, float]:
    sim = Sim(workers, 1)
    out: dict[str, float] = {}
    # start-up: every busy pod labelled (at --busy-label-qps), every node placed
    passes = 0
    while passes == 0 or sim.labeler.writes < sum(sim.busy.values()):
        await sim.passes(1)
        passes += 1
    out["startup_seconds"] = passes * 60 / PASSES_PER_MINUTE
    out["startup_kube"] = sum(sim.kube.calls.values())
    out["startup_slurm"] = sum(sim.slurm.calls.values())

    def reset() -> None:
        sim.kube.calls.clear()
        sim.slurm.calls.clear()

    reset()
    await sim.passes(10 * PASSES_PER_MINUTE)
    out["steady_kube"] = sum(sim.kube.calls.values()) / 10
    out["steady_slurm"] = sum(sim.slurm.calls.values()) / 10

    reset()
    sim.kube.removed.clear()
    back = sorted(sim.busy)[-30:]
    await sim.passes(10 * PASSES_PER_MINUTE, churn=True, back_to_back=back)
    out["churn_kube"] = sum(sim.kube.calls.values()) / 10
    out["back_to_back_removals"] = sum(sim.kube.removed[f"w{n[1:]}"] for n in back)  # flapping

    reset()
    rack = [h for h in sim.hosts if sim.nodes.nodes[h].labels[RACK] == "r0"][:8]
    sim.relabel(rack, "r9")
    await sim.passes(PASSES_PER_MINUTE)
    out["relabel_slurm"] = sim.slurm.calls["set_topology"]
    out["relabel_moves"] = sim.topology.moves
    out["relabel_kube"] = sum(sim.kube.calls.values())

    reset()
    sim.relabel(rack, "")
    await sim.passes(PASSES_PER_MINUTE)
    out["empty_slurm"] = sim.slurm.calls["set_topology"]
    out["empty_events"] = sim.kube.calls["create_event"]
    out["refused"] = len(sim.topology.refused)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workers", type=int, default=1000)
    args = p.parse_args()
    logs.configure(json=False, level="error")
    o = asyncio.run(ours(args.workers))
    b = asyncio.run(baseline(args.workers, 1))
    for key, value in o.items():
        print(f"{key}: {value:g}")
    print(f"baseline (every label every pass): {b} Kubernetes calls a minute")
    result(
        "P8",
        f"busy labels + topology sync, {args.workers} workers: Kubernetes calls a minute at steady state",
        f"{o['steady_kube']:g} (Slurm topology calls {o['steady_slurm']:g}); with 30 job ends + starts "
        f"a minute {o['churn_kube']:g}; a rack of 64 relabelled: {o['relabel_slurm']:g} scontrol call(s); "
        f"all busy pods labelled {o['startup_seconds']:g} s after start",
        f"{b} (every worker's label every pass)",
        "< 10 a minute at steady state; no label flaps; an empty label sends nothing to Slurm",
        o["steady_kube"] < 10 and o["back_to_back_removals"] == 0 and o["empty_slurm"] == 0,
    )


if __name__ == "__main__":
    main()
