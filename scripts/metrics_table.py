"""Print the Markdown reference of every metric the sidecars export, from the metric objects
themselves (each role's metrics built on a fresh registry), so docs/metrics.md cannot drift from the code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from sidecars.configsync.ha.coordination import HaMetrics
from sidecars.configsync.report.metrics import ConfigSyncMetrics
from sidecars.configsync.tokenwatch import TokenWatch, TokenWatchSettings
from sidecars.controlplane.changes import ClusterUpgradeMetrics
from sidecars.controlplane.fleet.metrics import ControlPlaneMetrics
from sidecars.runtime.events import LogEventSink
from sidecars.runtime.looplag import LoopLag, LoopLagSettings
from sidecars.slurm.runner import SlurmMetrics
from sidecars.worker.gpu import attribution as gpu_attribution
from sidecars.worker.metrics import WorkerMetrics

BEGIN, END = "<!-- metrics:begin (scripts/metrics_table.py) -->", "<!-- metrics:end -->"
DOC = Path(__file__).parent.parent / "docs" / "metrics.md"
SUFFIX = {"counter": "_total", "histogram": " (histogram)"}
# the Kubernetes edge's one metric: building a client to list it would open a connection pool
KUBE = [
    (
        "slurm_sidecars_kube_requests_total",
        "counter",
        "Kubernetes API calls by outcome",
        ("operation", "result"),
        "control plane",
    )
]


def _rows(who: str, build: Any) -> list[tuple[str, str, str, tuple[str, ...], str]]:
    registry = CollectorRegistry()
    build(registry)
    rows = []
    for collector in list(registry._collector_to_names):
        for family in collector.describe():
            labels = tuple(getattr(collector, "_labelnames", ()))
            rows.append(
                (
                    family.name + ("_total" if family.type == "counter" else ""),
                    family.type,
                    family.documentation,
                    labels,
                    who,
                )
            )
    return rows


def metric_rows() -> list[tuple[str, str, str, tuple[str, ...], str]]:
    rows = [
        *_rows("every role", SlurmMetrics),
        *_rows("every role", lambda registry: LoopLag(registry, LoopLagSettings())),
        *_rows("config-sync", ConfigSyncMetrics),
        *_rows("config-sync", HaMetrics),
        *_rows("config-sync", lambda registry: TokenWatch(TokenWatchSettings(), registry, LogEventSink())),
        *_rows("worker", WorkerMetrics),
        *[(name, "gauge", doc, labels, "worker") for name, doc, labels in gpu_attribution.FAMILIES],
        *_rows("control plane", ControlPlaneMetrics),
        *_rows("control plane", ClusterUpgradeMetrics),
        *KUBE,
    ]
    return sorted(set(rows), key=lambda r: (r[4] != "every role", r[4], r[0]))


def metrics_markdown() -> str:
    out = ["| metric | type | labels | exported by | meaning |", "|---|---|---|---|---|"]
    for name, kind, doc, labels, who in metric_rows():
        out.append(f"| `{name}` | {kind} | {', '.join(labels)} | {who} | {doc} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(metrics_markdown(), end="")
