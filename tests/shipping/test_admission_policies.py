"""The ValidatingAdmissionPolicies the upgrades overlay ships, evaluated with a CEL evaluator
(cel-python, tests/shipping/cel.py) on good objects (what our code writes) and bad ones (what a
compromised control plane would): a workload patch changes only the named container's image, the
replicas and the paced roll's fields; a Job has our state-Job or backup shape."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from sidecars.controlplane.changes.cluster_roles.kube_jobs import (
    StateVolume,
    backup_job,
    state_job,
)
from tests.shipping.cel import evaluate
from tests.shipping.kube import find, render
from tests.shipping.shipped import ROOT

OVERLAY = "overlays/upgrades"
CONTROL_PLANE = "system:serviceaccount:slurm:slurm-sidecars-control-plane"
BASE_CONTROL_PLANE = "system:serviceaccount:slurm:slurm-sidecars"
Obj = dict[str, Any]


def policy(name: str) -> Obj:
    return find(render(OVERLAY), "ValidatingAdmissionPolicy", name)


def test_each_policy_is_bound_in_our_namespace() -> None:
    objs = render(OVERLAY)
    for p in (o for o in objs if o["kind"] == "ValidatingAdmissionPolicy"):
        binding = find(objs, "ValidatingAdmissionPolicyBinding", p["metadata"]["name"])
        assert binding["spec"]["policyName"] == p["metadata"]["name"]
        assert binding["spec"]["validationActions"] == ["Deny"]
        assert p["spec"]["failurePolicy"] == "Fail"


# ------------------------------------------------------------------ workloads
def _containers(o: Obj) -> list[Obj]:
    return o["spec"]["template"]["spec"]["containers"]  # type: ignore[no-any-return]


def _image(name: str, image: str) -> Callable[[Obj], None]:
    def change(o: Obj) -> None:
        next(c for c in _containers(o) if c["name"] == name)["image"] = image

    return change


def _pod(key: str, value: Any) -> Callable[[Obj], None]:
    def change(o: Obj) -> None:
        o["spec"]["template"]["spec"][key] = value

    return change


def _main(key: str, value: Any) -> Callable[[Obj], None]:
    def change(o: Obj) -> None:
        next(c for c in _containers(o) if c["name"] == o["metadata"]["name"])[key] = value

    return change


def _set(*path: str, value: Any) -> Callable[[Obj], None]:
    def change(o: Obj) -> None:
        node = o
        for k in path[:-1]:
            node = node.setdefault(k, {})
        node[path[-1]] = value

    return change


GOOD_WORKLOAD = {
    "slurmctld's image": ("StatefulSet", "slurmctld", _image("slurmctld", "slurm-sidecars/slurmctld:0.2.0")),
    "slurmdbd's image": (
        "StatefulSet",
        "slurmdbd",
        _image("slurmdbd", "ghcr.io/slinkyproject/slurmdbd:26.11"),
    ),
    "slurmctld scaled to 0": ("StatefulSet", "slurmctld", _set("spec", "replicas", value=0)),
    "the worker roll's pause": (
        "Deployment",
        "slurmd",
        lambda o: (
            _set("spec", "paused", value=True)(o),
            _set("spec", "strategy", value={"rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}})(o),
            _set("metadata", "annotations", "slurm-sidecars.io/upgrade-from", value="abc")(o),
        ),
    ),
}
BAD_WORKLOAD = {
    "a sidecar's image (config-sync, holding the tokens)": (
        "StatefulSet",
        "slurmctld",
        lambda o: next(
            c for c in o["spec"]["template"]["spec"]["initContainers"] if c["name"] == "config-sync"
        ).__setitem__("image", "evil:1"),
        "may not change a pod template",
    ),
    "a second container": (
        "StatefulSet",
        "slurmctld",
        lambda o: (
            _containers(o).append({"name": "x", "image": "evil:1"})
            or o["spec"]["template"]["spec"].__setitem__("containers", [*_containers(o)])
        ),
        "only the image of the container named as its workload",
    ),
    "the main container's command": (
        "StatefulSet",
        "slurmctld",
        _main("command", ["sh", "-c", "cat /etc/munge/munge.key"]),
        "only the image of the container named as its workload",
    ),
    "a service account": (
        "StatefulSet",
        "slurmctld",
        _pod("serviceAccountName", "slurm-sidecars-control-plane"),
        "may not change a pod template",
    ),
    "a Secret volume": (
        "StatefulSet",
        "slurmdbd",
        lambda o: o["spec"]["template"]["spec"]["volumes"].append(
            {"name": "k", "secret": {"secretName": "slurm-auth"}}
        ),
        "may not change a pod template",
    ),
    "host network": ("Deployment", "slurmd", _pod("hostNetwork", True), "may not change a pod template"),
    "a template label": (
        "StatefulSet",
        "slurmctld",
        _set("spec", "template", "metadata", "labels", "x", value="y"),
        "labels or annotations",
    ),
    "the selector": (
        "StatefulSet",
        "slurmctld",
        _set("spec", "selector", value={"matchLabels": {"a": "b"}}),
        "replicas, paused, strategy and one image",
    ),
    "another annotation": (
        "StatefulSet",
        "slurmctld",
        _set("metadata", "annotations", "other.io/x", value="1"),
        "its own slurm-sidecars.io/ annotations",
    ),
}


@pytest.mark.parametrize("case", sorted(GOOD_WORKLOAD))
@pytest.mark.parametrize("user", [CONTROL_PLANE, BASE_CONTROL_PLANE])
def test_the_workload_writes_the_code_makes_pass(case: str, user: str) -> None:
    kind, name, change = GOOD_WORKLOAD[case]
    old = find(render(OVERLAY), kind, name)
    new = copy.deepcopy(old)
    change(new)
    assert new != old
    verdict = evaluate(policy("slurm-sidecars-workload-writes"), new, old, username=user, operation="UPDATE")
    assert verdict.matched and verdict.denied == (), verdict


@pytest.mark.parametrize("case", sorted(BAD_WORKLOAD))
def test_every_other_workload_write_is_denied_to_our_accounts_only(case: str) -> None:
    kind, name, change, said = BAD_WORKLOAD[case]
    old = find(render(OVERLAY), kind, name)
    new = copy.deepcopy(old)
    change(new)
    verdict = evaluate(
        policy("slurm-sidecars-workload-writes"), new, old, username=CONTROL_PLANE, operation="UPDATE"
    )
    assert verdict.matched and any(said in m for m in verdict.denied), verdict
    # an operator's own account is not held by it
    other = evaluate(
        policy("slurm-sidecars-workload-writes"), new, old, username="kubernetes-admin", operation="UPDATE"
    )
    assert not other.matched


# ------------------------------------------------------------------ jobs
def _backup() -> Obj:
    cm = find(render(OVERLAY), "ConfigMap", "slurmdbd-backup")
    return backup_job(cm["data"]["job.yaml"], "slurmdbd-backup", "20260101T000000")


def _state(action: str) -> Obj:
    sts = find(render(OVERLAY), "StatefulSet", "slurmctld")
    where = StateVolume({"name": "x", "persistentVolumeClaim": {"claimName": "statesave"}}, "state", "pvc")
    return state_job(
        action, "slurmctld", sts["spec"], where, ".copies/x", "slurm-sidecars/slurmctld:0.1.0", "slurmctld"
    )


BAD_JOB: dict[str, tuple[Callable[[Obj], None], str]] = {
    "a service account": (
        lambda o: o["spec"]["template"]["spec"].__setitem__("serviceAccountName", "slurm-sidecars"),
        "no service account",
    ),
    "host PID": (lambda o: o["spec"]["template"]["spec"].__setitem__("hostPID", True), "no service account"),
    "a token": (
        lambda o: o["spec"]["template"]["spec"].__setitem__("automountServiceAccountToken", True),
        "mounts no API token",
    ),
    "the munge key's Secret": (
        lambda o: o["spec"]["template"]["spec"].__setitem__(
            "volumes", [{"name": "k", "secret": {"secretName": "slurm-auth"}}]
        ),
        "never a Secret",
    ),
    "a host path": (
        lambda o: o["spec"]["template"]["spec"].__setitem__(
            "volumes", [{"name": "h", "hostPath": {"path": "/"}}]
        ),
        "never a Secret",
    ),
    "two volumes": (
        lambda o: o["spec"]["template"]["spec"]["volumes"].append({"name": "e", "emptyDir": {}}),
        "has one volume",
    ),
    "privileged": (
        lambda o: o["spec"]["template"]["spec"]["containers"][0]["securityContext"].__setitem__(
            "privileged", True
        ),
        "one container, unprivileged",
    ),
    "SYS_ADMIN": (
        lambda o: o["spec"]["template"]["spec"]["containers"][0]["securityContext"].__setitem__(
            "capabilities", {"add": ["SYS_ADMIN"]}
        ),
        "one container, unprivileged",
    ),
    "escalation": (
        lambda o: o["spec"]["template"]["spec"]["containers"][0]["securityContext"].__setitem__(
            "allowPrivilegeEscalation", True
        ),
        "one container, unprivileged",
    ),
    "a whole Secret as env": (
        lambda o: o["spec"]["template"]["spec"]["containers"][0].__setitem__(
            "envFrom", [{"secretRef": {"name": "slurm-auth"}}]
        ),
        "one container, unprivileged",
    ),
    "a second container": (
        lambda o: o["spec"]["template"]["spec"]["containers"].append({"name": "b", "image": "x"}),
        "one container, unprivileged",
    ),
    "unconfined": (
        lambda o: o["spec"]["template"]["spec"]["securityContext"].__setitem__(
            "seccompProfile", {"type": "Unconfined"}
        ),
        "never runs unconfined",
    ),
}


@pytest.mark.parametrize("made", ["backup", "state copy", "state restore"])
def test_the_jobs_the_code_makes_pass(made: str) -> None:
    job = _backup() if made == "backup" else _state(made.split()[1])
    verdict = evaluate(
        policy("slurm-sidecars-job-shape"), job, None, username=CONTROL_PLANE, operation="CREATE"
    )
    assert verdict.matched and verdict.denied == (), verdict


@pytest.mark.parametrize("case", sorted(BAD_JOB))
def test_every_other_job_shape_is_denied(case: str) -> None:
    change, said = BAD_JOB[case]
    job = copy.deepcopy(_backup())
    job["spec"]["template"]["spec"].setdefault("securityContext", {})
    change(job)
    verdict = evaluate(
        policy("slurm-sidecars-job-shape"), job, None, username=CONTROL_PLANE, operation="CREATE"
    )
    assert verdict.matched and any(said in m for m in verdict.denied), verdict


def test_the_evaluator_reads_the_shipped_file() -> None:
    shipped = list(yaml.safe_load_all((ROOT / "manifests" / OVERLAY / "admission.yaml").read_text()))
    assert {d["metadata"]["name"] for d in shipped if d["kind"] == "ValidatingAdmissionPolicy"} == {
        "slurm-sidecars-workload-writes",
        "slurm-sidecars-job-shape",
        "slurm-sidecars-pod-writes",
    }
    # the example the base points at is the same pod policy
    example = find(render("examples/admission-policy"), "ValidatingAdmissionPolicy")
    assert example["spec"] == policy("slurm-sidecars-pod-writes")["spec"]


# ------------------------------------------------------------------ Nodes (Slinky)
NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}, "annotations": {"a": "1"}},
    "spec": {"podCIDR": "10.0.0.0/24"},
}


def _node(change: Callable[[Obj], None]) -> tuple[Obj, Obj]:
    new = copy.deepcopy(NODE)
    change(new)
    return new, NODE


NODE_CASES: dict[str, tuple[Callable[[Obj], None], str | None]] = {
    "the topology spec": (
        _set("metadata", "annotations", "topology.slinky.slurm.net/spec", value="s:1"),
        None,
    ),
    "the features spec": (
        _set("metadata", "annotations", "features.slinky.slurm.net/spec", value="gpu"),
        None,
    ),
    "a taint": (_set("spec", "taints", value=[{"key": "x", "effect": "NoSchedule"}]), "spec"),
    "a cordon": (_set("spec", "unschedulable", value=True), "spec"),
    "a label": (_set("metadata", "labels", "node-role.kubernetes.io/control-plane", value=""), "labels"),
    "another annotation": (_set("metadata", "annotations", "a", value="2"), "only the topology and features"),
}


@pytest.mark.parametrize("case", sorted(NODE_CASES))
def test_the_slinky_node_patch_is_held_to_the_two_annotations(case: str) -> None:
    change, said = NODE_CASES[case]
    new, old = _node(change)
    node_policy = find(render("slinky"), "ValidatingAdmissionPolicy", "slurm-sidecars-node-specs")
    verdict = evaluate(node_policy, new, old, username=BASE_CONTROL_PLANE, operation="UPDATE")
    assert verdict.matched
    if said is None:
        assert verdict.denied == (), verdict
    else:
        assert any(said in m for m in verdict.denied), verdict


# ------------------------------------------------------------------ pods
WORKER_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "slurmd-abc",
        "labels": {"app.kubernetes.io/name": "slurmd", "pod-template-hash": "h"},
        "annotations": {"other.io/x": "1"},
    },
    "spec": {"containers": [{"name": "slurmd", "image": "slurmd:1"}]},
    "status": {"conditions": [{"type": "Ready", "status": "True"}]},
}


def _pod_change(change: Callable[[Obj], None], base: Obj = WORKER_POD) -> tuple[Obj, Obj]:
    new = copy.deepcopy(base)
    change(new)
    return new, base


POD_CASES: dict[str, tuple[Callable[[Obj], None], str, str | None]] = {
    "the deletion cost": (
        _set("metadata", "annotations", "controller.kubernetes.io/pod-deletion-cost", value="-5"),
        "",
        None,
    ),
    "the busy label": (_set("metadata", "labels", "slurm-sidecars.io/busy", value="true"), "", None),
    "a SlurmNode condition": (
        lambda o: o["status"]["conditions"].append({"type": "SlurmNodeRegistered", "status": "True"}),
        "status",
        None,
    ),
    "the image": (
        lambda o: o["spec"]["containers"][0].__setitem__("image", "evil:1"),
        "",
        "may not change a pod's spec",
    ),
    "another annotation": (
        _set("metadata", "annotations", "other.io/x", value="2"),
        "",
        "only the pod-deletion-cost annotation",
    ),
    "another label": (
        _set("metadata", "labels", "app.kubernetes.io/name", value="x"),
        "",
        "only the slurm-sidecars.io/busy label",
    ),
    "the Ready condition": (
        lambda o: o["status"]["conditions"][0].__setitem__("status", "False"),
        "status",
        "only its own SlurmNode* pod conditions",
    ),
}


@pytest.mark.parametrize("case", sorted(POD_CASES))
def test_the_pod_writes_are_held_to_what_the_code_writes(case: str) -> None:
    change, sub, said = POD_CASES[case]
    new, old = _pod_change(change)
    verdict = evaluate(
        policy("slurm-sidecars-pod-writes"),
        new,
        old,
        username=CONTROL_PLANE,
        operation="UPDATE",
        sub_resource=sub,
    )
    assert verdict.matched
    if said is None:
        assert verdict.denied == (), verdict
    else:
        assert any(said in m for m in verdict.denied), verdict


def test_only_worker_pods_may_be_deleted() -> None:
    pod_policy = policy("slurm-sidecars-pod-writes")
    worker = evaluate(pod_policy, None, WORKER_POD, username=BASE_CONTROL_PLANE, operation="DELETE")
    assert worker.matched and worker.denied == (), worker
    other = copy.deepcopy(WORKER_POD)
    other["metadata"]["labels"] = {"app.kubernetes.io/name": "slurmctld"}
    refused = evaluate(pod_policy, None, other, username=BASE_CONTROL_PLANE, operation="DELETE")
    assert "slurm-sidecars may write and delete worker pods only" in refused.denied
