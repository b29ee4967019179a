"""What the manifests promise docs/security.md: every Slurm command a sidecar runs reads a file we
wrote (config-sync's verified set, or the client file `client-conf` rendered), never a ConfigMap or
Secret volume a config author fills."""

from __future__ import annotations

from typing import Any

import pytest

from tests.shipping.kube import TARGETS, containers, find, flag_value, pod_specs, render

# volumes whose files come from the API server's objects: their authors, not we, choose the bytes
AUTHORED = ("configMap", "secret", "projected", "downwardAPI")


def _volume_at(path: str, container: dict[str, Any], pod: dict[str, Any]) -> dict[str, Any] | None:
    mounts = [
        m for m in container.get("volumeMounts", []) if path.startswith(m["mountPath"].rstrip("/") + "/")
    ]
    if not mounts:
        return None
    mount = max(mounts, key=lambda m: len(m["mountPath"]))
    return next(v for v in pod.get("volumes", []) if v["name"] == mount["name"])


@pytest.mark.parametrize("target", TARGETS)
def test_every_slurm_conf_a_sidecar_reads_is_one_we_wrote(target: str) -> None:
    seen = 0
    for c in containers(target):
        conf = next((e.get("value") for e in c.spec.get("env", []) if e["name"] == "SLURM_CONF"), None)
        if conf is None:
            continue
        seen += 1
        volume = _volume_at(conf, c.spec, c.pod)
        assert volume is not None, f"{c.where}: SLURM_CONF {conf} is on no volume"
        authored = [k for k in AUTHORED if k in volume]
        assert not authored, f"{c.where}: SLURM_CONF {conf} lies in a {authored[0]} volume"
    assert seen, target


def test_the_control_plane_and_slurmdbd_config_sync_read_a_rendered_client_file() -> None:
    readers = {
        "overlays/upgrades Deployment/slurm-sidecars-control-plane containers[control-plane]",
        "overlays/upgrades StatefulSet/slurmdbd initContainers[config-sync]",
    }
    found = {c.where: c for c in containers("overlays/upgrades") if c.where in readers}
    assert set(found) == readers
    for c in found.values():
        renderers = [
            init
            for init in c.pod.get("initContainers", [])
            if "client-conf" in " ".join([*init.get("command", []), *init.get("args", [])])
        ]
        assert len(renderers) == 1, c.where
        mounts_config = [m for m in c.spec.get("volumeMounts", []) if m["name"] == "slurm-config"]
        assert mounts_config == [], f"{c.where} mounts the raw ConfigMap"


def _rules_of(objs: tuple[dict[str, Any], ...], account: str) -> list[dict[str, Any]]:
    bound = [
        b["roleRef"]["name"]
        for b in objs
        if b["kind"] in {"RoleBinding", "ClusterRoleBinding"}
        and any(s.get("name") == account for s in b.get("subjects", []))
    ]
    return [
        r
        for o in objs
        if o["kind"] in {"Role", "ClusterRole"} and o["metadata"]["name"] in bound
        for r in o["rules"]
    ]


@pytest.mark.parametrize("target", TARGETS)
def test_config_sync_without_the_control_plane_beside_it_may_only_create_events(target: str) -> None:
    objs = render(target)
    seen = 0
    for where, pod in pod_specs(target):
        argvs = [" ".join([*c.get("command", []), *c.get("args", [])]) for c in _all(pod)]
        if not any("config-sync" in a for a in argvs) or any("control-plane" in a for a in argvs):
            continue
        seen += 1
        rules = _rules_of(objs, pod.get("serviceAccountName", "default"))
        events = {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}
        # slurmrestd's: and its turn's Lease, by name, read and replaced (never created: shipped)
        flag = "--restd-turn-lease"
        turn = next((flag_value(a.split(), flag) for a in argvs if flag in a), None)
        lease = {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [turn],
            "verbs": ["get", "update"],
        }
        assert rules == ([events, lease] if turn else [events]), (where, rules)
        if turn:
            assert find(objs, "Lease", turn)["spec"] == {}, where
    if target == "overlays/upgrades":
        assert seen == 2  # slurmctld's pod and slurmdbd's


def _all(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod.get("initContainers", []), *pod.get("containers", [])]


@pytest.mark.parametrize("target", ["base", "overlays/upgrades"])
def test_the_control_plane_api_is_reachable_only_from_workers_and_prometheus(target: str) -> None:
    objs = render(target)
    serving = [
        o
        for o in objs
        if o["kind"] in {"StatefulSet", "Deployment"}
        and any(
            p.get("containerPort") == 9200
            for c in [
                *o["spec"]["template"]["spec"].get("initContainers", []),
                *o["spec"]["template"]["spec"]["containers"],
            ]
            for p in c.get("ports", [])
        )
    ]
    assert len(serving) == 1, [o["metadata"]["name"] for o in serving]
    labels = serving[0]["spec"]["template"]["metadata"]["labels"]
    policies = [
        o
        for o in objs
        if o["kind"] == "NetworkPolicy"
        and all(labels.get(k) == v for k, v in o["spec"]["podSelector"]["matchLabels"].items())
    ]
    assert policies, f"{target}: no NetworkPolicy selects the control plane's pods"
    for policy in policies:
        for rule in policy["spec"]["ingress"]:
            if not any(p["port"] == 9200 for p in rule.get("ports", [])):
                continue
            for peer in rule["from"]:
                name = peer["podSelector"]["matchLabels"]["app.kubernetes.io/name"]
                assert name == "slurmd" or (name == "prometheus" and "namespaceSelector" in peer), peer
