"""Slurm state -> pod conditions: each worker pod carries `SlurmNodeReady`, `SlurmNodeDrained` and
`SlurmNodeDown` mirroring its Slurm node (Slurm's reason in the message), for remediation tools
that read pods, not Slurm.

Written through the status subresource only when they change, and only once a new state has held
for `settle_seconds`: a node flapping between two states faster than that is never written, so the
conditions (and whoever watches them) do not flap either. All changes found in one refresh are one
pass, and the writes are rate-limited (the rest wait for the next pass).

A pod Slinky's operator runs (`slinky_pod`, by --slinky-mode) gets none: the operator writes its own
`SlurmNodeState<State>` conditions there (what NVSentinel's slinky-drainer reads), and two sets of
conditions saying the same thing in two vocabularies would only invite readers to disagree.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

import structlog

from sidecars.controlplane.fleet.slinky import slinky_pod
from sidecars.controlplane.fleet.snapshot import FleetNode
from sidecars.controlplane.reconcile.deps import WriterDeps
from sidecars.controlplane.reconcile.pacing import TokenBucket
from sidecars.controlplane.reconcile.round import Outcome, View, unready
from sidecars.controlplane.settings import ConditionSettings
from sidecars.kube import Pod
from sidecars.kube.podstatus import patch_pod_conditions
from sidecars.protocol import kube_names

log = structlog.get_logger(__name__)

TYPES = tuple(c[0] for c in kube_names.CONDITIONS)
Conditions = tuple[tuple[str, str, str, str], ...]  # (type, status, reason, message), in TYPES order


def conditions(view: FleetNode) -> Conditions:
    """The three conditions for one Slurm node (status "True"/"False", a CamelCase reason, message)."""
    flags = set(view.flags)
    down = view.state == "DOWN" or "NOT_RESPONDING" in flags
    drained = view.drain
    ready = view.registered and not down and not drained
    why = view.reason or ""
    # not the busy state (IDLE/ALLOCATED) when ready: a job starting must not rewrite the pod
    state = "" if ready else "+".join([view.state, *view.flags])
    return (
        _condition(kube_names.NODE_READY, ready, f"Slurm node {view.name} is {state}" if state else ""),
        _condition(kube_names.NODE_DRAINED, drained, why * drained),
        _condition(kube_names.NODE_DOWN, down, why * down),
    )


def _condition(names: tuple[str, str, str], status: bool, message: str) -> tuple[str, str, str, str]:
    kind, when_true, when_false = names
    return (kind, str(status), when_true if status else when_false, message)


def _on_pod(pod: Pod) -> dict[str, tuple[str, str]]:
    return {t: (s, m) for t, s, m in pod.conditions if t in TYPES}


@dataclass(eq=False)
class ConditionWriter:
    name = "pod_conditions"

    deps: WriterDeps
    settings: ConditionSettings = field(default_factory=ConditionSettings)
    _bucket: TokenBucket = field(init=False)
    # pod uid -> (wanted, since when)
    _seen: dict[str, tuple[Conditions, float]] = field(default_factory=dict, init=False)
    _sent: dict[str, Conditions] = field(default_factory=dict, init=False)  # pod uid -> what we last wrote
    writes: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self._bucket = TokenBucket(self.settings.qps, self.deps.clock)

    async def reconcile(self, view: View) -> Outcome:
        """One pass after a refresh: write the pods whose settled conditions differ."""
        if (skip := unready(view)) is not None:
            return skip
        pods, snap = view.pods, view.snapshot
        now = self.deps.clock()
        due: list[tuple[Pod, Conditions]] = []
        live: set[str] = set()
        for pod in pods:
            node = snap.nodes.get(self.deps.node_of(pod))
            if node is None or pod.deleting or slinky_pod(pod, self.deps.slinky_mode) is True:
                continue
            live.add(pod.uid)
            want = conditions(node)
            seen = self._seen.get(pod.uid)
            if seen is None or seen[0] != want:
                self._seen[pod.uid] = (want, now)  # a new state: it must hold before it is written
                if seen is not None or self.settings.settle_seconds > 0:
                    continue
            elif now - seen[1] < self.settings.settle_seconds:
                continue
            if self._sent.get(pod.uid) == want:
                continue
            have = _on_pod(pod)
            if all(have.get(t) == (s, m) for t, s, _, m in want):
                self._sent[pod.uid] = want  # already on the pod (written before a restart)
                continue
            due.append((pod, want))
        self._seen = {u: v for u, v in self._seen.items() if u in live}
        self._sent = {u: v for u, v in self._sent.items() if u in live}
        made = 0
        stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        for pod, want in sorted(due, key=lambda pw: pw[0].name):
            if not self._bucket.take():
                break  # the rest on the next pass
            have = _on_pod(pod)
            body = [
                {
                    "type": t,
                    "status": s,
                    "reason": r,
                    "message": m[:1024],
                    "lastProbeTime": stamp,
                    **({} if have.get(t, ("", ""))[0] == s else {"lastTransitionTime": stamp}),
                }
                for t, s, r, m in want
            ]
            try:
                await patch_pod_conditions(self.deps.kube, pod.namespace, pod.name, body)
            except Exception as exc:  # one pod's failure (gone, forbidden) must not stop the rest
                log.warning("pod_conditions_failed", pod=pod.name, error=str(exc))
                continue
            self._sent[pod.uid] = want
            made += 1
        self.writes += made
        return Outcome(made)
