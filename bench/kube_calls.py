"""K1: the control plane's Kubernetes API calls at 1,000 workers: steady state and a cordon of 100.

The real control plane (`ControlPlaneService.running()`: every loop and root task as production runs them,
leader election included) against the fake API server (tests/fakekube: the real REST paths and JSON,
driven through kubernetes-asyncio) holding 1,000 worker pods on 1,000 Kubernetes Nodes. The Slurm
side is synthetic, 1,000 nodes in Slurm 24.11's own output (the node JSON cloned from the documents
captured in tests/data/slurm-24.11/, `squeue`'s brief job lines, `scontrol -o show node` text for the
drain batcher's read, `scontrol update` applied to that state), behind the production parsers: 1,000
real slurmd do not fit this machine, and what Kubernetes is asked does not depend on who answers.

Time is simulated: every period of the control plane (refresh interval, fast interval, batch window,
Lease renewal, condition settle time, the watches' timeoutSeconds) is divided by `--speed` (10) and
every rate (the patch QPS) multiplied by it; figures are per simulated minute. The Lease's duration
is production's: it calls nothing, and scaled it stepped the leader down at each stall of the loop.
The fake counts every request on arrival by verb and resource; a watch counts once when it is
opened, so its reopen rate (one per timeoutSeconds) is in the figures. A loaded machine runs the
loops late (a refresh of 1,000 nodes takes real time that the scaling does not shrink), so a steady
rate is normalised by what each loop did: the Lease's calls per renewal x 12 renewals a minute,
the rest per refresh x 15 refreshes a minute (production's pace at --interval-seconds 4,
--renew-seconds 5), watches per simulated minute (their timeouts are the server's, on time).

Meanwhile the rest of the cluster moves on (a pod in another namespace every simulated minute) and
the history is compacted every 5 simulated minutes, as kube-apiserver does.

Phases: the pods start as a previous leader left them (conditions, costs and busy labels written:
a failover;
`--fresh` starts them bare and shows the first settle's one write per pod); a steady window (nothing
changes: 90 % of the nodes run jobs without a time limit, so no deletion-cost bucket moves; a job
whose remaining time crosses a doubling is a change, one patch); a cordon of 100 Nodes whose workers
all run jobs, which end 30 simulated seconds after the drain (each cordoned pod then changes four
times: its conditions twice, its deletion cost, its busy label after --busy-release-seconds), then
held; then the uncordon.
Baseline in the same run, same fleet: a naive poll that lists the pods and the Nodes every refresh
interval (4 s), as the field's scripts do, counted as if it wrote only on a change (so only its
lists), run after the control plane has stopped.

Usage: .venv/bin/python bench/kube_calls.py [--workers 1000 --cordon 100 --speed 10] [--fresh]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import dataclasses
import json
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from _report import result
from prometheus_client import CollectorRegistry

from sidecars.controlplane.fleet import NodeCache, PodCache, ranking
from sidecars.controlplane.reconcile.busy_label import LABEL as BUSY
from sidecars.controlplane.reconcile.deletion_cost import ANNOTATION as COST
from sidecars.controlplane.service import ControlPlaneService
from sidecars.controlplane.settings import ControlPlaneSettings
from sidecars.kube import KubeClient
from sidecars.runtime import logs
from sidecars.slurm import SlurmClient, SlurmCommandError, hostlist
from sidecars.slurm.runner import CommandResult

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "slurm-24.11"
sys.path.insert(0, str(ROOT))  # the fake API server lives with the tests
from tests.fakekube import FakeKube, configuration  # noqa: E402
from tests.settings import build  # noqa: E402

NS = "slurm"
MINUTE = 60.0


@dataclass
class Synthetic:
    """The Slurm side: node state, one unlimited job per busy node, drains applied as scontrol does."""

    names: list[str]
    busy: set[str]
    speed: float
    job_end_after: float = 30.0  # simulated seconds from a drain to the end of the node's jobs
    reasons: dict[str, str] = field(default_factory=dict)  # drained node -> reason
    drained_at: dict[str, float] = field(default_factory=dict)
    drains: Counter[str] = field(default_factory=Counter)  # drain writes per node
    undrains: Counter[str] = field(default_factory=Counter)
    jobs: dict[str, int] = field(default_factory=dict)
    started: int = field(default_factory=lambda: int(time.time()) - 3600)

    def __post_init__(self) -> None:
        doc = json.loads((DATA / "scontrol-show-nodes--json.json").read_text())
        self._doc = {k: v for k, v in doc.items() if k != "nodes"}
        self._template = doc["nodes"][0]
        text = (DATA / "scontrol--o-show-node.txt").read_text().splitlines()[0]
        self._text = text.split(" Reason=")[0].rstrip()
        self.jobs = {n: i + 1 for i, n in enumerate(sorted(self.busy))}
        self._nodes = {n: self._node(n) for n in self.names}

    def _node(self, name: str) -> dict[str, object]:
        n: dict[str, object] = copy.deepcopy(self._template)
        n["name"] = n["hostname"] = name
        n["gres"] = "gpu:8"
        return n

    def _end_jobs(self) -> None:
        now = time.monotonic()
        for name, at in self.drained_at.items():
            if name in self.busy and (now - at) * self.speed >= self.job_end_after:
                self.busy.discard(name)  # the drain waited for its job, which has ended

    def state(self, name: str) -> list[str]:
        base = ["ALLOCATED"] if name in self.busy else ["IDLE"]
        return base + (["DRAIN"] if name in self.reasons else [])

    def nodes_json(self) -> str:
        self._end_jobs()
        out = []
        for name in self.names:
            n = self._nodes[name]
            n["state"] = self.state(name)
            n["reason"] = self.reasons.get(name, "")
            n["reason_set_by_user"] = "root" if name in self.reasons else ""
            out.append(n)
        return json.dumps({**self._doc, "nodes": out})

    def nodes_text(self, names: list[str]) -> str:
        self._end_jobs()
        lines = []
        for name in names:
            line = self._text.replace("NodeName=n1 ", f"NodeName={name} ", 1)
            line = line.replace("State=ALLOCATED ", f"State={'+'.join(self.state(name))} ", 1)
            if name in self.reasons:
                line += f" Reason={self.reasons[name]} [root@2026-12-01T00:00:00]"
            lines.append(line)
        return "\n".join(lines) + "\n"

    def squeue(self) -> str:
        self._end_jobs()
        start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(self.started))
        return "".join(
            f"{self.jobs[n]}|RUNNING|debug|8|1|UNLIMITED|{start}|gres/gpu:8|{n}|None\n"
            for n in sorted(self.busy)
        )

    def update(self, expr: str, fields: dict[str, str]) -> None:
        names = hostlist.expand(expr)
        state = fields.get("state", "").upper()
        for name in names:
            if state == "DRAIN":
                self.reasons[name] = fields["reason"]
                self.drained_at[name] = time.monotonic()
                self.drains[name] += 1
            elif state in {"UNDRAIN", "RESUME"}:
                self.reasons.pop(name, None)
                self.drained_at.pop(name, None)
                self.undrains[name] += 1


@dataclass
class SyntheticSlurm(SlurmClient):
    """The control plane's Slurm client, its commands answered by `cluster` instead of slurmctld:
    everything above `run` (the JSON and text parsers, the retries) is the production code."""

    cluster: Synthetic | None = None
    commands: Counter[str] = field(default_factory=Counter)

    async def run(self, *argv: str, retry: bool = True, timeout: float | None = None) -> CommandResult:
        c = self.cluster
        assert c is not None
        args = list(argv)
        self.commands[" ".join(args[:2])] += 1
        if args == ["scontrol", "--version"]:
            out = "slurm-wlm 24.11.5\n"
        elif args == ["scontrol", "show", "nodes", "--json"]:
            out = c.nodes_json()
        elif args[:1] == ["squeue"]:
            out = c.squeue()
        elif args == ["scontrol", "-o", "show", "reservation"]:
            out = "No reservations in the system\n"
        elif args[:5] == ["scontrol", "--future", "-o", "-d", "show"] and len(args) == 7:
            out = c.nodes_text([n for n in hostlist.expand(args[6]) if n in set(c.names)])
        elif args[:2] == ["scontrol", "update"]:
            fields = dict(a.split("=", 1) for a in args[2:])
            c.update(fields.pop("nodename"), fields)
            out = ""
        else:
            raise SlurmCommandError(tuple(args), f"not simulated: {' '.join(args)}", 1)
        await asyncio.sleep(0)  # a command is a subprocess: never answered without a turn of the loop
        return CommandResult(tuple(args), 0, out, "", 0.0)


def scaled(speed: float) -> ControlPlaneSettings:
    """Production's defaults with every period divided by `speed` and every rate multiplied by it."""
    d = build(ControlPlaneSettings, quick=False, token="bench")
    return dataclasses.replace(
        d,
        namespace=NS,
        worker_selector="app=slurmd",
        identity="cp-bench",
        reads=dataclasses.replace(
            d.reads,
            interval_seconds=d.reads.interval_seconds / speed,
            fast_interval_seconds=d.reads.fast_interval_seconds / speed,
        ),
        batch_window_seconds=d.batch_window_seconds / speed,
        # the renewals scaled (their calls are counted); the duration not: it only bounds how long a
        # stalled leader keeps writing, and scaled to 1.5 s (written as 1 s, 1 s to step down) one
        # stall of this loaded process's loop stepped the leader down again and again mid-cordon
        # (measured: 5 step-downs and 192 drains dropped in one run), which counted re-elections,
        # not the fleet's calls
        lease=dataclasses.replace(d.lease, renew_seconds=d.lease.renew_seconds / speed),
        conditions=dataclasses.replace(
            d.conditions, settle_seconds=d.conditions.settle_seconds / speed, qps=d.conditions.qps * speed
        ),
        busy=dataclasses.replace(
            d.busy, label_qps=d.busy.label_qps * speed, release_seconds=d.busy.release_seconds / speed
        ),
        deletion_cost_qps=d.deletion_cost_qps * speed,
        recycle=dataclasses.replace(
            d.recycle,
            grace_seconds=d.recycle.grace_seconds / speed,
            window_seconds=d.recycle.window_seconds / speed,
        ),
    )


def fleet(fake: FakeKube, workers: int, *, seeded: bool) -> tuple[list[str], set[str]]:
    """Worker w0042 (Slurm node gpu0042) on Kubernetes Node k0042; every tenth node idle. `seeded`:
    the pods carry the conditions and deletion costs a previous leader wrote (a failover)."""
    names = [f"gpu{i:04d}" for i in range(workers)]
    busy = {n for i, n in enumerate(names) if i % 10 != 0}
    for i, name in enumerate(names):
        fake.add_node(f"k{i:04d}")
        pod = fake.add_pod(f"w{i:04d}", namespace=NS, hostname=name, node_name=f"k{i:04d}")
        if seeded:
            cost = ranking.bucket(ranking.FAR_FUTURE if name in busy else None, time.time())
            pod["metadata"]["annotations"][COST] = str(cost)
            if name in busy:
                pod["metadata"]["labels"][BUSY] = "true"
            pod["status"]["conditions"] += [
                {"type": "SlurmNodeReady", "status": "True", "reason": "SlurmReady", "message": ""},
                {"type": "SlurmNodeDrained", "status": "False", "reason": "SlurmNoDrain", "message": ""},
                {"type": "SlurmNodeDown", "status": "False", "reason": "SlurmUp", "message": ""},
            ]
    return names, busy


async def until(check: Callable[[], bool], what: str, within: float) -> None:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {within:.0f}s: {what}")
        await asyncio.sleep(0.05)


def fmt(calls: Counter[tuple[str, str]], per: float = 1.0) -> str:
    if not calls:
        return "none"
    ordered = sorted(calls.items(), key=lambda x: -x[1])
    return ", ".join(f"{v}/{r} {round(n / per, 1):g}" for (v, r), n in ordered)


def conditions_of(fake: FakeKube, pod: str) -> dict[str, tuple[str, str]]:
    status = fake.pods[(NS, pod)]["status"]
    return {c["type"]: (c["status"], c.get("message", "")) for c in status.get("conditions") or []}


def settled_pod(fake: FakeKube, pod: str, busy: bool) -> bool:
    meta = fake.pods[(NS, pod)]["metadata"]
    labelled = meta["labels"].get(BUSY) == "true"
    return "SlurmNodeReady" in conditions_of(fake, pod) and COST in meta["annotations"] and labelled == busy


def kinds(calls: Counter[tuple[str, str]]) -> tuple[Counter[tuple[str, str]], ...]:
    """(the Lease's, the watches', the rest): each paced by its own loop, normalised apart."""
    lease = Counter({k: n for k, n in calls.items() if k[1] == "leases"})
    watches = Counter({k: n for k, n in calls.items() if k[0] == "watch"})
    return lease, watches, calls - lease - watches


async def naive_poll(kube: KubeClient, interval: float, seconds: float) -> tuple[int, int, float]:
    """List the pods and the Nodes every interval for `seconds`: (polls, objects read, real seconds
    the lists took)."""
    polls = read = 0
    busy = 0.0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        started = time.monotonic()
        pods, _ = await kube.list_pods(NS, "app=slurmd")
        nodes, _ = await kube.list_nodes()
        polls, read = polls + 1, read + len(pods) + len(nodes)
        busy += time.monotonic() - started
        await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))
    return polls, read, busy


async def elsewhere(fake: FakeKube, sim: float) -> None:
    """The rest of the cluster: a pod changes in another namespace every simulated minute, and the
    history is compacted every 5 (kube-apiserver's --etcd-compaction-interval): a watch resumed from
    the version of the last worker event would get 410 and list every worker again."""
    n = 0
    while True:
        await asyncio.sleep(sim)
        n += 1
        fake.add_pod(f"web-{n}", namespace="default", labels={"app": "web"})
        if n % 5 == 0:
            fake.compact()


def counter(plane: ControlPlaneService) -> float:
    return float(plane.metrics.refreshes.labels("ok")._value.get())


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=1000)
    ap.add_argument("--cordon", type=int, default=100)
    ap.add_argument("--speed", type=float, default=10.0, help="simulated seconds per real second")
    ap.add_argument("--steady-minutes", type=float, default=6.0, help="simulated minutes measured")
    ap.add_argument("--cordon-minutes", type=float, default=2.0, help="simulated minutes the cordon holds")
    ap.add_argument("--baseline-minutes", type=float, default=2.0, help="simulated minutes of the naive poll")
    ap.add_argument(
        "--fresh", action="store_true", help="pods without conditions or costs: time the first settle too"
    )
    args = ap.parse_args()
    logs.configure(json=False, level="warning")
    speed = args.speed
    sim = MINUTE / speed  # real seconds per simulated minute
    settings = scaled(speed)
    per_min = MINUTE / (settings.reads.interval_seconds * speed)  # production's refreshes a minute: 15
    renewals_per_min = MINUTE / (settings.lease.renew_seconds * speed)  # production's Lease renewals: 12
    watch_seconds = max(1, round(300 / speed))  # the caches' production timeoutSeconds, scaled

    fake = FakeKube()
    names, busy = fleet(fake, args.workers, seeded=not args.fresh)
    cluster = Synthetic(names, set(busy), speed)
    slurm = SyntheticSlurm(cluster=cluster)
    step = args.workers // args.cordon
    cordoned = [i * step + 3 for i in range(args.cordon)]  # all running jobs
    assert all(names[i] in busy for i in cordoned)
    pods = [f"w{i:04d}" for i in range(args.workers)]
    print(
        f"fleet: {args.workers} worker pods on {args.workers} Kubernetes Nodes, a synthetic Slurm of "
        f"{args.workers} nodes ({len(busy)} running jobs); time x{speed:g} (a simulated minute is "
        f"{sim:.1f} s); pods {'fresh' if args.fresh else 'as a previous leader left them (a failover)'}"
    )

    async with fake.serving() as url, KubeClient(configuration(url)) as kube:
        plane = ControlPlaneService(settings, slurm, kube, CollectorRegistry())
        assert plane.workers.pods is not None and plane.workers.nodes is not None
        # not a flag: the scaled clock needs the watches' timeoutSeconds shorter. A cache reads its
        # bound only in its watcher (made in its constructor), so each takes the watcher of a cache
        # made as production makes it with the scaled bound; its list, key and state stay the same
        plane.workers.pods.watcher = PodCache(
            kube, settings.namespace, settings.worker_selector, watch_seconds=watch_seconds
        ).watcher
        plane.workers.nodes.watcher = NodeCache(kube, watch_seconds=watch_seconds).watcher
        t0 = time.monotonic()
        churn = asyncio.create_task(elsewhere(fake, sim), name="elsewhere")
        async with plane.running():
            await until(lambda: plane.leader.is_leader and counter(plane) >= 1, "leader", 5 * sim)
            await until(
                lambda: all(settled_pod(fake, p, n in busy) for p, n in zip(pods, names, strict=True)),
                "first settle",
                60 * sim,
            )
            await until(lambda: counter(plane) >= 4, "a few refreshes", 5 * sim)
            first = fake.calls()
            took = (time.monotonic() - t0) / sim
            print(f"first settle, {took:.1f} simulated min: {fmt(first)}")

            # steady: nothing changes. Each kind of call is paced by its own loop, which a loaded
            # machine slows down: normalised by what each loop did, to production's pace
            r0, t1, mark = counter(plane), time.monotonic(), len(fake.requests)
            await asyncio.sleep(args.steady_minutes * sim)
            steady = fake.calls(mark)
            refreshes, real = counter(plane) - r0, time.monotonic() - t1
            lease, watches, rest = kinds(steady)
            renewals = steady[("update", "leases")]
            lease_rate = lease.total() / max(1, renewals) * renewals_per_min
            watch_rate = watches.total() / (real / sim)
            rest_rate = rest.total() / max(1.0, refreshes) * per_min
            steady_rate = lease_rate + watch_rate + rest_rate
            fleet_rate = watch_rate + rest_rate
            steady_writes = [r for r in fake.mutating(mark) if r.resource != "leases"]
            print(
                f"steady state, {real / sim:.1f} simulated min: {refreshes:.0f} refreshes, {renewals} Lease "
                f"renewals, calls {fmt(steady)}"
            )
            print(
                f"  per minute at production's pace ({per_min:g} refreshes, {renewals_per_min:g} renewals): "
                f"{steady_rate:.1f} = Lease {lease_rate:.1f} + watches opened {watch_rate:.1f} + "
                f"the rest {rest_rate:.1f} ({fmt(rest, max(1.0, refreshes) / per_min)})"
            )
            print(f"  writes other than the Lease's: {len(steady_writes)}")

            def drained(i: int) -> bool:
                have = conditions_of(fake, pods[i])
                return (
                    have.get("SlurmNodeDrained", ("",))[0] == "True"
                    and have.get("SlurmNodeReady", ("", ""))[1].endswith("IDLE+DRAIN")  # its job ended
                    and fake.pods[(NS, pods[i])]["metadata"]["annotations"].get(COST) == "0"
                    and BUSY not in fake.pods[(NS, pods[i])]["metadata"]["labels"]  # after its release time
                )

            # the cordon: 100 Nodes at once, as `kubectl cordon` of a rack does
            mark, t1 = len(fake.requests), time.monotonic()
            for i in cordoned:
                fake.set_node_spec(f"k{i:04d}", unschedulable=True)
            await until(lambda: all(drained(i) for i in cordoned), "cordoned workers drained", 10 * sim)
            await asyncio.sleep(3 * settings.reads.interval_seconds)  # whatever is still in flight
            during = fake.calls(mark)
            took = (time.monotonic() - t1) / sim
            print(
                f"cordon of {args.cordon} Nodes (workers running jobs, which end {cluster.job_end_after:g} s "
                f"after the drain): drained, jobs ended, pods written in {took:.1f} simulated min: "
                f"{fmt(during)}"
            )
            r0, t1, mark = counter(plane), time.monotonic(), len(fake.requests)
            await asyncio.sleep(args.cordon_minutes * sim)
            held = fake.calls(mark)
            held_min, held_refreshes = (time.monotonic() - t1) / sim, counter(plane) - r0
            held_rest = kinds(held)[2]
            print(
                f"  then held cordoned {held_min:.1f} simulated min ({held_refreshes:.0f} refreshes): "
                f"{fmt(held)}; all but the Lease and watches: {fmt(held_rest)}"
            )

            def ready_all() -> bool:
                return all(
                    conditions_of(fake, pods[i]).get("SlurmNodeReady", ("",))[0] == "True" for i in cordoned
                )

            mark, t1 = len(fake.requests), time.monotonic()
            for i in cordoned:
                fake.set_node_spec(f"k{i:04d}", unschedulable=False)
            await until(ready_all, "uncordoned workers ready again", 10 * sim)
            took = (time.monotonic() - t1) / sim
            await asyncio.sleep(max(0.0, sim - (time.monotonic() - t1)))
            after = fake.calls(mark)
            print(
                f"uncordon: undrained and conditions written in {took:.1f} simulated min; over "
                f"{(time.monotonic() - t1) / sim:.1f} min: {fmt(after)}"
            )
        churn.cancel()
        await asyncio.gather(churn, return_exceptions=True)
        drains, undrains = Counter(cluster.drains.values()), Counter(cluster.undrains.values())
        print(
            f"  Slurm: drains per node {dict(drains)}, undrains per node {dict(undrains)} "
            f"({{times: nodes}}), in {slurm.commands['scontrol update']} batched scontrol updates"
        )
        writes = Counter(
            (r.resource, r.path.split("/")[6]) for r in fake.mutating() if r.resource != "leases"
        )
        others = set(pods) - {pods[i] for i in cordoned}
        for resource in ("pods/status", "pods"):
            print(
                f"  {resource} patches per pod over the whole run: cordoned "
                f"{dict(Counter(writes[(resource, pods[i])] for i in cordoned))}, the others "
                f"{dict(Counter(writes[(resource, p)] for p in others))} ({{patches: pods}})"
            )
        print(f"  Events: {len(fake.events)}")

        mark = len(fake.requests)
        polls, objects, busy_s = await naive_poll(
            kube, settings.reads.interval_seconds, args.baseline_minutes * sim
        )
        naive = fake.calls(mark)
        naive_rate = naive.total() / max(1, polls) * per_min
        every = settings.reads.interval_seconds * speed
        print(
            f"baseline, a naive poll (list pods + list Nodes every {every:g} s): "
            f"{polls} polls, {fmt(naive)}; at production's pace {naive_rate:.0f} calls/min, "
            f"{objects / max(1, polls) * per_min:,.0f} objects read/min (one poll's lists: "
            f"{busy_s / max(1, polls):.2f} s real)"
        )

    n = args.workers
    result(
        "K1",
        f"Kubernetes calls/min at steady state, {n:,} workers (simulated, at production's pace), all",
        f"{steady_rate:.1f}/min (Lease {lease_rate:.1f})",
        f"{naive_rate:.0f}/min (naive: list pods + Nodes per interval)",
        "< 10/min",
        steady_rate < 10,
    )
    result(
        "K1",
        f"the same, all but the Lease (whose cost is fleet-independent), {n:,} workers",
        f"{fleet_rate:.1f}/min, {len(steady_writes)} writes",
        f"{naive_rate:.0f}/min",
        "< 10/min",
        fleet_rate < 10 and not steady_writes,
    )
    cordon_calls = kinds(during)[2].total()
    # what changes on each cordoned worker: its conditions twice (drained while its job runs, then
    # drained and idle), its deletion cost and its busy label once each (the job ended)
    changes = 2 + 1 + (1 if settings.busy.label else 0)
    result(
        "K1",
        f"calls for a cordon of {args.cordon} Nodes (drain + job end), then held {held_min:.0f} min",
        f"{cordon_calls} ({cordon_calls / args.cordon:.1f} per Node), then {held_rest.total()} while held",
        f"{naive_rate * (took + held_min):.0f} (naive: its lists alone)",
        f"one write per change: <= {changes} per Node, 0 while held",
        cordon_calls <= changes * args.cordon and not held_rest,
    )


if __name__ == "__main__":
    asyncio.run(main())
