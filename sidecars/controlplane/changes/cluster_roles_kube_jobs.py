"""The Jobs a whole-cluster upgrade runs in Kubernetes, as JSON bodies: the operator's database
backup (from a template in a ConfigMap: each platform backs up RDS, MariaDB or MySQL its own way)
and our own `slurm-sidecars state copy|restore` on the StateSaveLocation's volume, read from the
slurmctld StatefulSet's spec.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from types import MappingProxyType
from typing import Any

import yaml

Json = dict[str, Any]

TEMPLATE_KEY = "job.yaml"  # the ConfigMap's key holding the backup Job (YAML or JSON)
LOCATION_ANNOTATION = "slurm-sidecars.io/backup-location"  # where the template's Job writes its dump
STAMP_ENV = "SLURM_SIDECARS_UPGRADE_STAMP"  # handed to the backup's containers, to name their dump
LABELS = MappingProxyType(
    {"app.kubernetes.io/managed-by": "slurm-sidecars", "slurm-sidecars.io/upgrade": "cluster"}
)
VOLUME_ROOT = "/volume"  # where the state Job mounts the StateSaveLocation's volume
COPIES = ".slurm-sidecars-upgrade"  # the copies' directory at the volume's root
# an environment variable whose value would be a credential: it must come from a Secret
_SECRET_NAME = re.compile(r"PASS|PWD|SECRET|TOKEN|KEY", re.IGNORECASE)
# a password on a command line (ps, the pod's spec, our logs would show it)
# (mysql's `-pSECRET`, also inside a shell script; `-P3306` is its port)
_SECRET_ARG = re.compile(r"(?i:--password=)\S|(?:^|[\s'\"])-p[^\s'\"]")


class TemplateError(ValueError):
    """The backup template cannot be run as it is; the message says what to change."""


def backup_job(text: str, configmap: str, stamp: str) -> Json:
    """The backup Job from its template, checked: a Job with containers, no credential written
    literally in it (a password belongs in a Secret, read through `valueFrom`)."""
    where = f"ConfigMap {configmap} key {TEMPLATE_KEY}"
    try:
        job = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise TemplateError(f"{where}: not YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(job, dict) or job.get("kind", "Job") != "Job":
        raise TemplateError(f"{where}: not a Job")
    pod = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
    containers = [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]
    if not containers or not all(isinstance(c, dict) for c in containers):
        raise TemplateError(f"{where}: the Job has no containers")
    for c in containers:
        for var in c.get("env") or []:
            if _SECRET_NAME.search(str(var.get("name", ""))) and "value" in var:
                raise TemplateError(
                    f"{where}: container {c.get('name')} env {var.get('name')} holds its value in the "
                    "template: read it from a Secret (valueFrom.secretKeyRef)"
                )
        if any(_SECRET_ARG.search(str(w)) for w in [*(c.get("command") or []), *(c.get("args") or [])]):
            raise TemplateError(
                f"{where}: container {c.get('name')} has a password on its command line: pass it "
                "from a Secret (an env var, or an option file)"
            )
    job = copy.deepcopy(job)
    meta = job.setdefault("metadata", {})
    meta.pop("namespace", None)  # ours: a template cannot send the Job elsewhere
    meta.pop("name", None)
    meta["generateName"] = "slurmdbd-backup-"
    meta["labels"] = {**(meta.get("labels") or {}), **LABELS}
    job["apiVersion"], job["kind"] = "batch/v1", "Job"
    spec = job["spec"]["template"]["spec"]
    for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        c.setdefault("env", []).append({"name": STAMP_ENV, "value": stamp})
    return job


def backup_location(job: Json, stamp: str) -> str:
    where = ((job.get("metadata") or {}).get("annotations") or {}).get(LOCATION_ANNOTATION, "")
    return where.replace("$(" + STAMP_ENV + ")", stamp) if where else ""


@dataclass(frozen=True)
class StateVolume:
    """The volume that holds the StateSaveLocation, as a Job can mount it."""

    volume: Json  # a pod volume (its name is replaced)
    state_path: str  # the StateSaveLocation's path inside the volume ("" for its root)
    describe: str  # for the status: "PersistentVolumeClaim state-slurmctld-0"


def state_volume(sts_name: str, sts_spec: Json, container: str, state_location: str) -> StateVolume:
    """Where the StateSaveLocation lives in the StatefulSet's pod: the mount of `container` whose
    path holds it (the longest), its subPath, and its volume (a claim template's is pod 0's claim)."""
    pod = (sts_spec.get("template") or {}).get("spec") or {}
    c = next((c for c in pod.get("containers") or [] if c.get("name") == container), None)
    if c is None:
        raise ValueError(f"StatefulSet {sts_name} has no container {container}")
    location = PurePosixPath(state_location)
    mounts = [
        m
        for m in c.get("volumeMounts") or []
        if location.is_relative_to(PurePosixPath(m.get("mountPath", "")))
    ]
    if not mounts:
        raise ValueError(
            f"StatefulSet {sts_name}: no volume of container {container} holds StateSaveLocation "
            f"{state_location}: the state would not outlive the pod"
        )
    mount = max(mounts, key=lambda m: len(m["mountPath"]))
    if mount.get("subPathExpr"):
        # expanded per pod by the kubelet: the Job's pod would reach another directory (or the root)
        raise ValueError(
            f"StatefulSet {sts_name}: StateSaveLocation {state_location} is under a subPathExpr mount: "
            "its directory on the volume cannot be known from here"
        )
    inside = PurePosixPath(mount.get("subPath") or "") / location.relative_to(
        PurePosixPath(mount["mountPath"])
    )
    name = mount["name"]
    volume = next((v for v in pod.get("volumes") or [] if v.get("name") == name), None)
    if volume is not None:
        if "emptyDir" in volume:
            raise ValueError(
                f"StatefulSet {sts_name}: StateSaveLocation {state_location} is on an emptyDir: "
                "it is lost with the pod, there is no state to carry over"
            )
        kinds = [k for k in volume if k != "name"]
        return StateVolume(dict(volume), _relative(inside), f"{', '.join(kinds)} volume {name}")
    if any(t.get("metadata", {}).get("name") == name for t in sts_spec.get("volumeClaimTemplates") or []):
        claim = f"{name}-{sts_name}-0"
        return StateVolume(
            {"name": name, "persistentVolumeClaim": {"claimName": claim}},
            _relative(inside),
            f"PersistentVolumeClaim {claim}",
        )
    raise ValueError(f"StatefulSet {sts_name}: volume {name} (StateSaveLocation's) is not in its spec")


def _relative(path: PurePosixPath) -> str:
    return "" if str(path) == "." else str(path)


def state_job(
    action: str, sts_name: str, sts_spec: Json, where: StateVolume, copy_path: str, image: str, container: str
) -> Json:
    """`slurm-sidecars state <action>` on the volume, in a pod placed and run as slurmctld's is
    (its node selection, tolerations and securityContext: the files keep their owner)."""
    pod = (sts_spec.get("template") or {}).get("spec") or {}
    state_dir = str(PurePosixPath(VOLUME_ROOT) / where.state_path)
    copy_dir = str(PurePosixPath(VOLUME_ROOT) / copy_path)
    kept = {k: pod[k] for k in ("nodeSelector", "affinity", "tolerations", "securityContext") if k in pod}
    # as slurmctld's own container runs (its user: the files keep their owner), never more: no
    # escalation, no capability but what copying another's files takes, no API token
    ctld: Json = next((c for c in pod.get("containers") or [] if c.get("name") == container), {})
    context = {
        **copy.deepcopy(ctld.get("securityContext") or {}),
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"], "add": ["CHOWN", "DAC_OVERRIDE", "FOWNER"]},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"generateName": f"{sts_name}-state-{action}-", "labels": dict(LABELS)},
        "spec": {
            "backoffLimit": 0,  # a failed copy is said, not retried over a half-written one
            "template": {
                "metadata": {"labels": dict(LABELS)},
                "spec": {
                    **copy.deepcopy(kept),
                    "automountServiceAccountToken": False,
                    "restartPolicy": "Never",
                    "volumes": [{**where.volume, "name": "state"}],
                    "containers": [
                        {
                            "name": "state",
                            "image": image,
                            "command": ["slurm-sidecars", "state", action],
                            "args": ["--state-dir", state_dir, "--copy-dir", copy_dir],
                            "volumeMounts": [{"name": "state", "mountPath": VOLUME_ROOT}],
                            "securityContext": context,
                        }
                    ],
                },
            },
        },
    }
