"""The backup Job's pod is ours: its template gives the image, command, args, env (values or named
Secrets' keys), one claim and a uid; anything else is refused in one line, and what we make runs
with no token, no escalation, no capability, not as root."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from sidecars.controlplane.changes.cluster_roles.kube_jobs import (
    LABELS,
    LOCATION_ANNOTATION,
    STAMP_ENV,
    TemplateError,
    backup_job,
)
from tests.shipping.shipped import ROOT

SHIPPED = yaml.safe_load((ROOT / "manifests" / "overlays" / "upgrades" / "backup-job.yaml").read_text())[
    "data"
]["job.yaml"]


def _set(path: str, value: Any) -> Any:
    """A change of the shipped template at a dotted path (`pod.` is the pod spec, `c.` its container)."""

    def change(job: dict[str, Any]) -> None:
        short = {"pod": ["spec", "template", "spec"], "c": ["spec", "template", "spec", "containers", 0]}
        keys: list[Any] = []
        for part in path.split("."):
            keys += short.get(part, [part])
        node: Any = job
        for k in keys[:-1]:
            node = node.setdefault(k, {}) if isinstance(node, dict) else node[k]
        node[keys[-1]] = value

    return change


BAD = {
    "service account": (_set("pod.serviceAccountName", "slurm-sidecars-control-plane"), "serviceAccountName"),
    "token": (_set("pod.automountServiceAccountToken", True), "automountServiceAccountToken"),
    "host network": (_set("pod.hostNetwork", True), "hostNetwork"),
    "host pid": (_set("pod.hostPID", True), "hostPID"),
    "host ipc": (_set("pod.hostIPC", True), "hostIPC"),
    "node name": (_set("pod.nodeName", "n1"), "nodeName"),
    "init container": (_set("pod.initContainers", [{"name": "i", "image": "x"}]), "initContainers"),
    "second container": (
        _set("pod.containers", [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]),
        "exactly one container",
    ),
    "secret volume": (
        _set("pod.volumes", [{"name": "backups", "secret": {"secretName": "slurm-auth"}}]),
        "only be a PersistentVolumeClaim",
    ),
    "host path": (
        _set("pod.volumes", [{"name": "backups", "hostPath": {"path": "/"}}]),
        "only be a PersistentVolumeClaim",
    ),
    "two claims": (
        _set(
            "pod.volumes",
            [
                {"name": "backups", "persistentVolumeClaim": {"claimName": "a"}},
                {"name": "other", "persistentVolumeClaim": {"claimName": "b"}},
            ],
        ),
        "at most one volume",
    ),
    "privileged": (_set("c.securityContext", {"privileged": True}), "privileged"),
    "capability": (_set("c.securityContext", {"capabilities": {"add": ["SYS_ADMIN"]}}), "may only drop"),
    "escalation": (_set("c.securityContext", {"allowPrivilegeEscalation": True}), "may only be false"),
    "root": (_set("pod.securityContext", {"runAsUser": 0}), "other than root's"),
    "unconfined": (_set("pod.securityContext", {"seccompProfile": {"type": "Unconfined"}}), "RuntimeDefault"),
    "env from a whole secret": (_set("c.envFrom", [{"secretRef": {"name": "slurm-auth"}}]), "envFrom"),
    "env from a field": (
        _set("c.env", [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]),
        "only a value or a named Secret's key",
    ),
    "pod labels": (_set("spec.template.metadata", {"labels": {"app": "prometheus"}}), "labels"),
    "other mount": (_set("c.volumeMounts", [{"name": "other", "mountPath": "/x"}]), "not the claim"),
    "mount outside the claim": (
        _set("c.volumeMounts", [{"name": "backups", "mountPath": "/b", "subPath": "../x"}]),
        "leaves the claim",
    ),
    "ports": (_set("c.ports", [{"containerPort": 1}]), "ports"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_anything_but_what_the_template_may_give_is_refused_in_one_line(case: str) -> None:
    change, said = BAD[case]
    job = yaml.safe_load(SHIPPED)
    change(job)
    with pytest.raises(TemplateError) as refused:
        backup_job(yaml.safe_dump(job), "slurmdbd-backup", "1")
    assert said in str(refused.value) and "\n" not in str(refused.value), refused.value


def test_the_pod_we_make_from_the_shipped_template() -> None:
    given = yaml.safe_load(SHIPPED)
    job = backup_job(SHIPPED, "slurmdbd-backup", "20260101T000000")
    pod = job["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    want = given["spec"]["template"]["spec"]["containers"][0]
    assert (c["image"], c["command"], c["args"]) == (want["image"], want["command"], want["args"])
    assert c["env"] == [*want["env"], {"name": STAMP_ENV, "value": "20260101T000000"}]
    assert pod["volumes"] == given["spec"]["template"]["spec"]["volumes"]
    assert c["volumeMounts"] == want["volumeMounts"]
    assert pod["automountServiceAccountToken"] is False and "serviceAccountName" not in pod
    assert pod["securityContext"] == {
        "runAsUser": 999,
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert c["securityContext"] == {
        "runAsNonRoot": True,
        "privileged": False,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    assert set(pod) == {
        "automountServiceAccountToken",
        "enableServiceLinks",
        "restartPolicy",
        "securityContext",
        "containers",
        "volumes",
    }
    assert job["metadata"]["labels"] == dict(LABELS) and job["metadata"]["generateName"] == "slurmdbd-backup-"
    assert LOCATION_ANNOTATION in job["metadata"]["annotations"]
    # the template itself is not changed by building from it
    assert yaml.safe_load(SHIPPED) == copy.deepcopy(given)
    assert Path(ROOT / "manifests").is_dir()


def test_the_template_docs_upgrades_md_shows_is_taken() -> None:
    text = (ROOT / "docs" / "upgrades.md").read_text()
    block = text.split("A backup template, for a MariaDB", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    cm = yaml.safe_load(block)
    job = backup_job(cm["data"]["job.yaml"], cm["metadata"]["name"], "1")
    assert job["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == 999
