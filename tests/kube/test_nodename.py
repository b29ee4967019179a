"""The one rule naming a worker pod's Slurm node, and which of two claimants holds it (no Slurm needed)."""

from __future__ import annotations

import pytest

from sidecars.kube import Pod
from sidecars.kube.nodename import ANNOTATION, NodeNaming, first_claimant, is_node_name, slurm_node_name

POD = NodeNaming("pod")
NODE = NodeNaming("kube-node")


def pod(name: str, created: str = "", namespace: str = "slurm") -> Pod:
    return Pod(namespace, name, name, "", {}, {}, True, "Running", "DaemonSet", False, "1", created=created)


@pytest.mark.parametrize("name", ["n1", "gpu-a", "ip-10-0-1-5.ec2.internal", "node_7"])
def test_node_names_accepted(name: str) -> None:
    assert is_node_name(name)


@pytest.mark.parametrize("name", ["", "two words", "n[1-2]", "a,b", "k=v", "-N", "a\tb", "x" * 254, "a:b"])
def test_node_names_refused(name: str) -> None:
    assert not is_node_name(name)


def test_pod_source_is_label_then_hostname_then_pod_name() -> None:
    assert slurm_node_name(POD, pod_name="p", pod_hostname="h").name == "h"
    assert slurm_node_name(POD, pod_name="p").name == "p"
    labelled = NodeNaming("pod", label="slurm/node")
    by_label = slurm_node_name(labelled, pod_name="p", pod_hostname="h", pod_labels={"slurm/node": "n7"})
    assert by_label.name == "n7"
    # the Node and its annotation play no part in the pod source
    named = slurm_node_name(POD, pod_name="p", kube_node="k1", node_annotations={ANNOTATION: "n9"})
    assert named.name == "p"


def test_kube_node_source_is_the_annotation_then_the_node_name() -> None:
    assert slurm_node_name(NODE, pod_name="ds-x1", kube_node="k1").name == "k1"
    named = slurm_node_name(NODE, pod_name="ds-x1", kube_node="k1", node_annotations={ANNOTATION: " gpu-a "})
    assert (named.name, named.why) == ("gpu-a", f"annotation {ANNOTATION} on node k1")
    # a recreated pod (another name, another host name) on the same Node: the same Slurm node
    again = slurm_node_name(NODE, pod_name="ds-y2", pod_hostname="ds-y2", kube_node="k1")
    assert again.name == "k1"


@pytest.mark.parametrize("value", ["", "  ", "two words", "n[1-3]", "a,b"])
def test_a_malformed_override_is_refused_not_replaced_by_the_node_name(value: str) -> None:
    named = slurm_node_name(NODE, pod_name="ds-x1", kube_node="k1", node_annotations={ANNOTATION: value})
    assert named.name is None
    assert ANNOTATION in named.why and "k1" in named.why


def test_an_unscheduled_pod_has_no_kube_node_name() -> None:
    named = slurm_node_name(NODE, pod_name="ds-x1")
    assert named.name is None and "not scheduled" in named.why


def test_the_oldest_claimant_holds_the_node_then_the_name_decides() -> None:
    old, new = pod("ds-b", "2026-01-01T00:00:00Z"), pod("ds-a", "2026-01-01T00:05:00Z")
    assert first_claimant([new, old]) is old
    assert first_claimant([pod("ds-b"), pod("ds-a")]).name == "ds-a"  # type: ignore[union-attr]
    assert first_claimant([pod("ds-a"), old]) is old  # a known creation time before an unknown one
    assert first_claimant([]) is None
