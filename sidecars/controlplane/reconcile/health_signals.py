"""Health signals -> drains: a configured Node condition (node-problem-detector's KernelDeadlock,
NVSentinel's GpuXidError...) or taint on the Kubernetes Node of a worker drains its Slurm node with a
reason naming the signal; once the signal is gone, the drain is lifted, and only a drain of ours.

The rule against a fleet-wide flap: a signal must hold `settle_seconds` before its drain and be gone
as long before the undrain, and at most max(1, `max_fraction` x workers) Slurm nodes are held out by
health signals at once; the others wait (status `capped`, one Warning Event each) until one returns.

Beside Slinky's operator the drain is the same, by a split of reasons each side leaves alone: the
operator never touches a reason without its `slurm-operator: ` prefix (IsNodeReasonOurs, v1.3), and we
never one without ours. Its `pod-cordon` annotation is not used to ask: the operator lifts a pod-cordon
it did not set whenever it scales (doPodScale -> syncPodUncordon, every pass in DaemonSet mode), so a
health drain asked that way would be undone and asked again in turn (docs/slinky.md). A pod the
operator has cordoned itself (a scale-in) is its own: no health drain is added on it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import structlog

from sidecars.controlplane.fleet.slinky import POD_CORDON, slinky_pod
from sidecars.controlplane.fleet.snapshot import FleetNode
from sidecars.controlplane.reconcile.deps import WriterDeps
from sidecars.controlplane.reconcile.round import Outcome, View, unready
from sidecars.controlplane.settings import HealthSettings
from sidecars.kube import KubeNode, Pod
from sidecars.protocol import drains
from sidecars.protocol.events import EventReason
from sidecars.runtime.events import EventType

log = structlog.get_logger(__name__)

PREFIX = drains.HEALTH
STATES = ("drained", "waiting", "capped", "other_drain")
DETAIL_CHARS = 300  # of a condition's reason and message, in /status, Events and logs
ASKED_SECONDS = 30.0  # a drain asked but never seen (refused, node gone) is asked again after this


def health_reason(signal: str, kube_node: str) -> str:
    return f"{PREFIX}{signal} on kubernetes node {kube_node}"


def is_health_reason(reason: str | None) -> bool:
    return reason is not None and reason.startswith(PREFIX)


@dataclass(frozen=True, slots=True)
class Signals:
    """What counts as unhealthy: (condition type, faulty status) and (taint key, value or "" for any)."""

    conditions: tuple[tuple[str, str], ...] = ()
    taints: tuple[tuple[str, str], ...] = ()

    @property
    def names(self) -> list[str]:
        return [n for n, _ in self.conditions] + [k for k, _ in self.taints]

    def of(self, node: KubeNode) -> list[tuple[str, str]]:
        """The signals this Node shows now, each (name, what it says), in the configured order."""
        found: list[tuple[str, str]] = []
        for kind, status in self.conditions:
            for ctype, cstatus, reason, message in node.conditions:
                if ctype == kind and cstatus == (status or "True"):
                    said = ": ".join(filter(None, [reason, message])) or f"{kind}={cstatus}"
                    found.append((kind, said[:DETAIL_CHARS]))  # the monitor's words, bounded
        hard = {k for k, effect in node.taints if effect in {"NoSchedule", "NoExecute"}}
        for key, value in self.taints:
            have = node.taint_values.get(key)
            if key in hard and have is not None and (not value or have == value):
                found.append((key, (f"taint {key}={have}" if have else f"taint {key}")[:DETAIL_CHARS]))
        return found


@dataclass(slots=True)
class Seen:
    """One worker's health as last decided (the /status entry)."""

    pod: str
    kube_node: str
    signals: list[tuple[str, str]]
    since: float  # monotonic: when these signals began (a change of them starts the clock again)
    state: str = "waiting"

    def as_json(self, now: float) -> dict[str, object]:
        return {
            "pod": self.pod,
            "kube_node": self.kube_node,
            "signals": [{"name": n, "detail": d} for n, d in self.signals],
            "for_seconds": round(now - self.since, 1),
            "state": self.state,
        }


@dataclass(eq=False)
class HealthSync:
    name = "health"

    deps: WriterDeps
    settings: HealthSettings
    signals: Signals = field(init=False)
    seen: dict[str, Seen] = field(default_factory=dict, init=False)  # Slurm node -> its signals now
    # Slurm node held by us, no signal since then
    _clear_since: dict[str, float] = field(default_factory=dict, init=False)
    _capped_told: set[str] = field(default_factory=set, init=False)  # one Event per capped episode
    # drains asked and not yet seen in a snapshot (queued, being written, or written after the
    # read this pass rests on): counted against the cap, not asked twice
    _asked: dict[str, float] = field(default_factory=dict, init=False)
    # the same for undrains: asked once, not each pass
    _lifted: dict[str, float] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.signals = Signals(self.settings.conditions, self.settings.taints)

    @property
    def ready(self) -> bool:
        return self.deps.nodes.synced.is_set()

    def cap(self, workers: int) -> int:
        return max(1, int(self.settings.max_fraction * workers))

    def status(self) -> dict[str, object]:
        now = self.deps.clock()
        return {
            "signals": self.signals.names,
            "settle_seconds": self.settings.settle_seconds,
            "nodes": {name: seen.as_json(now) for name, seen in sorted(self.seen.items())},
        }

    def _look(self, pods: Sequence[Pod], now: float) -> dict[str, tuple[Pod, list[tuple[str, str]]]]:
        """Every worker with a signal now; `seen` kept (a node whose signals change starts again)."""
        found: dict[str, tuple[Pod, list[tuple[str, str]]]] = {}
        for pod in pods:
            host = self.deps.nodes.nodes.get(pod.node_name) if pod.node_name else None
            if host is None or pod.deleting:
                continue
            if sigs := self.signals.of(host):
                name = self.deps.node_of(pod)
                found[name] = (pod, sigs)
                old = self.seen.get(name)
                if old is None or [n for n, _ in old.signals] != [n for n, _ in sigs]:
                    self.seen[name] = Seen(pod.name, host.name, sigs, now)
                else:
                    old.signals = sigs  # the detail may change; the clock does not
        self.seen = {n: s for n, s in self.seen.items() if n in found}
        return found

    async def reconcile(self, view: View) -> Outcome:
        if (skip := unready(view, self.ready)) is not None:
            return skip
        pods, snap = view.pods, view.snapshot
        now = self.deps.clock()
        found = self._look(pods, now)
        by_name = {self.deps.node_of(p): p for p in pods}
        pending = self.deps.drains.pending
        ours_drained = {n for n, node in snap.nodes.items() if node.drain and is_health_reason(node.reason)}
        self._asked = {
            n: t for n, t in self._asked.items() if n not in ours_drained and now - t < ASKED_SECONDS
        }
        held = len(ours_drained | self._asked.keys())
        cap = self.cap(len(pods))
        made = 0
        for name, (pod, sigs) in sorted(found.items()):
            seen = self.seen[name]
            self._clear_since.pop(name, None)
            node = snap.nodes.get(name)
            if name in ours_drained or name in self._asked:
                seen.state = "drained"
                continue
            if node is None or name in pending:
                continue
            operators = (
                slinky_pod(pod, self.deps.slinky_mode) is True and pod.annotations.get(POD_CORDON) == "true"
            )
            if node.drain or operators:
                seen.state = "other_drain"  # someone's drain (or the operator's, coming): theirs to lift
                continue
            if now - seen.since < self.settings.settle_seconds:
                seen.state = "waiting"
                continue
            if held >= cap:
                seen.state = "capped"
                if name not in self._capped_told:
                    self._capped_told.add(name)
                    self.deps.metrics.health_actions.labels("capped").inc()
                    log.warning("health_drain_capped", node=name, signal=sigs[0][0], held=held, cap=cap)
                    await self._event(
                        pod,
                        EventReason.SLURM_HEALTH_DRAIN_CAPPED,
                        f"Slurm node {name} not drained for {sigs[0][0]} ({sigs[0][1]}): {held} of at "
                        f"most {cap} workers are held out by health signals already",
                        "Warning",
                    )
                continue
            made += await self._drain(name, pod, seen, sigs)
            held += 1
        self._capped_told &= {n for n, s in self.seen.items() if s.state == "capped"}
        made += await self._lift(found, by_name, ours_drained, snap.nodes, now)
        self._observe()
        return Outcome(made)

    async def _drain(self, name: str, pod: Pod, seen: Seen, sigs: list[tuple[str, str]]) -> int:
        signal, detail = sigs[0]
        self.deps.drains.submit(name, "drain", health_reason(signal, seen.kube_node))
        self._asked[name] = self.deps.clock()
        seen.state = "drained"
        self.deps.metrics.health_actions.labels("drain").inc()
        log.warning("health_drain", node=name, signal=signal, detail=detail, kube_node=seen.kube_node)
        await self._event(
            pod,
            EventReason.SLURM_HEALTH_DRAIN,
            f"Slurm node {name} drained: {signal} on Kubernetes node {seen.kube_node} ({detail})",
            "Warning",
        )
        return 1

    async def _lift(
        self,
        found: dict[str, tuple[Pod, list[tuple[str, str]]]],
        by_name: dict[str, Pod],
        drained: set[str],
        nodes: Mapping[str, FleetNode],
        now: float,
    ) -> int:
        """Undrain ours (by the exact reason) where no signal has shown for `settle_seconds`."""
        made = 0
        pending = self.deps.drains.pending
        self._lifted = {n: t for n, t in self._lifted.items() if n in drained and now - t < ASKED_SECONDS}
        for name in sorted(drained - found.keys() - self._lifted.keys()):
            pod = by_name.get(name)
            if pod is not None and pod.deleting:
                continue  # going away: its drain hook owns the node now, and ours keeps jobs off it
            since = self._clear_since.setdefault(name, now)
            if now - since < self.settings.settle_seconds or name in pending:
                continue
            reason = nodes[name].reason
            assert reason is not None
            self.deps.drains.submit(name, "undrain", reason)  # only an exact match is undone
            self.deps.metrics.health_actions.labels("undrain").inc()
            made += 1
            self._lifted[name] = now
            self._clear_since.pop(name, None)
            log.info("health_undrain", node=name, reason=reason)
            if pod is not None:
                message = f"Slurm node {name} undrained: its health signals are gone"
                await self._event(pod, EventReason.SLURM_HEALTH_UNDRAIN, message, "Normal")
        self._clear_since = {n: t for n, t in self._clear_since.items() if n in drained}
        return made

    def _observe(self) -> None:
        counts = dict.fromkeys(STATES, 0)
        per_signal = dict.fromkeys(self.signals.names, 0)
        for seen in self.seen.values():
            counts[seen.state] = counts.get(seen.state, 0) + 1
            for name, _ in seen.signals:
                per_signal[name] = per_signal.get(name, 0) + 1
        for state, count in counts.items():
            self.deps.metrics.health_nodes.labels(state).set(count)
        for signal, count in per_signal.items():
            self.deps.metrics.health_signals.labels(signal).set(count)

    async def _event(self, pod: Pod, reason: EventReason, message: str, type: EventType) -> None:
        try:
            await self.deps.emit(pod, reason, message, type)
        except Exception as exc:  # reporting must never stop the sync
            log.warning("kube_event_failed", reason=reason, error=str(exc))
