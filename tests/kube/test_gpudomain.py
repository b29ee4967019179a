"""GPU domain features, the rules alone (no Slurm): which features, what is refused, what is kept."""

from __future__ import annotations

import pytest

from sidecars.kube.gpudomain import (
    CLIQUE_LABEL,
    ComputeDomain,
    is_ours,
    merged,
    registration_features,
    wanted,
)


def cd(name: str, *nodes: str) -> ComputeDomain:
    return ComputeDomain("default", name, "1", nodes)


def test_the_clique_label_and_joined_compute_domains_name_features() -> None:
    w = wanted("k1", {CLIQUE_LABEL: "uuid-1.7"}, [cd("train-a", "k1", "k2"), cd("other", "k9")])
    assert w.features == ("nvlink-clique-uuid-1.7", "nvlink-domain-train-a") and w.problems == ()
    assert wanted("k1", {}).features == ()


@pytest.mark.parametrize("value", ["", "  ", "a b", "x|y", "x,y", "x&y", "(x)", "x*2", "[x]", "k=v", "é"])
def test_a_malformed_clique_value_is_refused_with_the_reason(value: str) -> None:
    w = wanted("k1", {CLIQUE_LABEL: value})
    assert w.features == ()
    assert CLIQUE_LABEL in w.problems[0] and "k1" in w.problems[0]
    assert registration_features("k1", {CLIQUE_LABEL: value}) == ""  # no `Features=` at all


def test_only_our_features_are_replaced_and_everyone_elses_kept_in_order() -> None:
    current = ("slinky", "nvlink-clique-old.1", "admin-ib", "nvlink-domain-gone")
    assert merged(current, ["nvlink-clique-new.2"]) == ("slinky", "admin-ib", "nvlink-clique-new.2")
    assert merged(current, []) == ("slinky", "admin-ib")
    assert not is_ours("nvlink") and not is_ours("admin-nvlink-clique-x") and is_ours("nvlink-domain-a")


def test_compute_domain_json_of_odd_shape_gives_no_nodes() -> None:
    good = {
        "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "5"},
        "status": {"nodes": [{"name": "k1"}]},
    }
    assert ComputeDomain.from_json(good) == ComputeDomain("ns", "a", "5", ("k1",))
    for status in (None, "x", {"nodes": "k1"}, {"nodes": [{"name": ""}, "k2", {"ip": "1"}]}):
        assert ComputeDomain.from_json({"metadata": {"name": "a"}, "status": status}).nodes == ()
