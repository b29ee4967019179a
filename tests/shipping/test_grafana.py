"""manifests/grafana/: the dashboard's every query names metrics we export, with labels they have,
and it covers what an operator looks for (config outcomes, drains, fleet, demand, Slurm load)."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from typing import Any

from tests.shipping.kube import MANIFESTS, find, render
from tests.shipping.shipped import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import metrics_table  # the exported names, from the metric objects themselves

DASHBOARD = MANIFESTS / "grafana" / "slurm-sidecars.json"
METRIC = re.compile(r"\bslurm_sidecars_[a-z0-9_]+")
SELECTOR = re.compile(r"\b(slurm_sidecars_[a-z0-9_]+)\{([^}]*)\}")
MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")
GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")


def exported() -> dict[str, set[str]]:
    """Every series name a scrape can show, with its labels (histograms: _bucket with le, _sum, _count)."""
    out: dict[str, set[str]] = {}
    for name, kind, _doc, labels, _who in metrics_table.metric_rows():
        if kind == "histogram":
            out[name + "_bucket"] = {*labels, "le"}
            out[name + "_sum"] = set(labels)
            out[name + "_count"] = set(labels)
        else:
            out[name] = set(labels)
    return out


def problems(expr: str, known: dict[str, set[str]]) -> list[str]:
    """What in one PromQL expression does not resolve to an exported metric and its labels."""
    names = METRIC.findall(expr)
    if not names:
        return [f"{expr!r} names no slurm_sidecars_ metric"]
    out = [f"{expr!r}: {n} is not exported" for n in names if n not in known]
    for name, body in SELECTOR.findall(expr):
        for label in MATCHER.findall(body):
            if name in known and label not in known[name]:
                out.append(f"{expr!r}: {name} has no label {label!r}")
    labels = set().union(*(known.get(n, set()) for n in names))
    for group in GROUPING.findall(expr):
        for label in (g.strip() for g in group.split(",") if g.strip()):
            if label not in labels:
                out.append(f"{expr!r}: grouping by {label!r}, which none of its metrics has")
    return out


def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for p in items:
        yield p
        yield from panels(p.get("panels", []))


def queries(dash: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for p in panels(dash["panels"]):
        for t in p.get("targets", []):
            yield p["title"], t["expr"]
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            q = var["query"]
            yield f"variable {var['name']}", q["query"] if isinstance(q, dict) else q


def test_every_query_names_exported_metrics_with_their_labels() -> None:
    dash = json.loads(DASHBOARD.read_text())
    known = exported()
    found = list(queries(dash))
    assert len(found) >= 20
    bad = [f"{title}: {p}" for title, expr in found for p in problems(expr, known)]
    assert not bad, "\n".join(bad)


def test_the_check_itself_catches_a_wrong_name_or_label() -> None:
    known = exported()
    assert problems("sum(rate(slurm_sidecars_config_applies_total[5m]))", known) == []
    assert problems("rate(slurm_sidecars_config_apply_total[5m])", known)  # a typo
    assert problems("slurm_sidecars_drain_seconds", known)  # a histogram has no plain series
    assert problems('slurm_sidecars_nodes{partition="a"}', known)  # nodes are by state only
    assert problems("sum by (node) (slurm_sidecars_pending_jobs)", known)
    assert problems("up", known)


def test_the_dashboard_covers_what_an_operator_looks_for() -> None:
    dash = json.loads(DASHBOARD.read_text())
    by_panel: dict[str, str] = {}
    for title, expr in queries(dash):
        by_panel[title] = by_panel.get(title, "") + " " + expr
    everything = " ".join(by_panel.values())
    for metric in (
        "slurm_sidecars_config_applies_total",
        "slurm_sidecars_drain_seconds_bucket",
        "slurm_sidecars_nodes",
        "slurm_sidecars_slurm_commands_total",
    ):
        assert metric in everything, metric
    assert any("rate(slurm_sidecars_slurm_commands_total" in e for e in by_panel.values())
    # pending work per partition and desired workers, on one panel
    assert any("slurm_sidecars_desired_workers" in e and "partition" in e for e in by_panel.values()) and any(
        "slurm_sidecars_pending_jobs" in e for e in by_panel.values()
    )
    ids = [p["id"] for p in panels(dash["panels"])]
    assert len(ids) == len(set(ids))
    for p in panels(dash["panels"]):
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24, p["title"]
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "${datasource}", p["title"]  # any Prometheus, chosen by the user


def test_kustomize_ships_the_same_dashboard_for_grafanas_sidecar() -> None:
    cm = find(render("grafana"), "ConfigMap", "slurm-sidecars-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["slurm-sidecars.json"]) == json.loads(DASHBOARD.read_text())
