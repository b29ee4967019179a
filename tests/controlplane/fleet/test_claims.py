"""One pod per Slurm node, the rule alone (no Slurm, no API): who holds, who is refused, and that
each refusal is reported once and again only when what it says changes."""

from __future__ import annotations

from sidecars.controlplane.fleet.claims import Claims
from sidecars.kube import Pod
from sidecars.kube.nodename import Named


def pod(name: str, node: str | None, created: str, kube_node: str = "k1") -> Pod:
    return Pod(
        "slurm",
        name,
        f"uid-{name}",
        "",
        {"slurm": node or ""},
        {},
        True,
        "Running",
        "DaemonSet",
        False,
        "1",
        node_name=kube_node,
        created=created,
    )


def named(p: Pod) -> Named:
    node = p.labels["slurm"]
    return Named(node or None, "bad annotation" if not node else "test")


def test_the_oldest_holds_later_ones_are_refused_and_reported_once() -> None:
    claims = Claims(named)
    a, b, c = (
        pod("a", "n1", "2026-01-01T00:00:02Z"),
        pod("b", "n1", "2026-01-01T00:00:01Z"),
        pod("c", None, ""),
    )
    held = claims.resolve([a, b, c])
    assert [p.name for p in held] == ["b"]
    assert {r.pod.name: r.holder for r in claims.refused.values()} == {"a": "slurm/b", "c": None}
    assert sorted(r.pod.name for r in claims.to_report()) == ["a", "c"]
    claims.resolve([a, b, c])
    assert claims.to_report() == []  # said once
    # b goes: a takes n1 over; c is still refused, and not reported again
    assert [p.name for p in claims.resolve([a, c])] == ["a"]
    assert list(claims.refused) == ["uid-c"] and claims.to_report() == []


def test_a_pending_pod_with_no_node_yet_is_no_fault_and_pod_naming_refuses_nothing() -> None:
    pending = Pod("slurm", "p", "uid-p", "", {"slurm": ""}, {}, False, "Pending", "DaemonSet", False, "1")
    claims = Claims(named)
    assert claims.resolve([pending]) == [] and claims.refused == {}
    lenient = Claims(named, enforce=False)
    both = [pod("a", "n1", ""), pod("b", "n1", "")]
    assert [p.name for p in lenient.resolve(both)] == ["a", "b"] and lenient.refused == {}
