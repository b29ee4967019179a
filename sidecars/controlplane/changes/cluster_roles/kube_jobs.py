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

from sidecars.protocol import kube_names

Json = dict[str, Any]

TEMPLATE_KEY = "job.yaml"  # the ConfigMap's key holding the backup Job (YAML or JSON)
LOCATION_ANNOTATION = kube_names.BACKUP_LOCATION_ANNOTATION
STAMP_ENV = "SLURM_SIDECARS_UPGRADE_STAMP"  # handed to the backup's containers, to name their dump
LABELS = MappingProxyType(
    {kube_names.MANAGED_BY_LABEL: kube_names.MANAGED_BY, kube_names.UPGRADE_LABEL: "cluster"}
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


# What a backup template may say. The pod is ours: the template contributes the container's image,
# command, args, env (literal values, or keys of named Secrets), its resources and working directory,
# one PersistentVolumeClaim for the dump, and the uid the client runs as. Anything else (a service
# account, another volume, a host namespace, privilege, a capability, a label a NetworkPolicy selects)
# is refused with a one-line reason: whoever may edit the ConfigMap must not get a pod of their own
# shape made by the one account that may create Jobs.
_JOB_KEYS = frozenset({"apiVersion", "kind", "metadata", "spec"})
_JOB_META_KEYS = frozenset({"name", "namespace", "annotations"})
_JOB_SPEC_KEYS = frozenset({"template", "backoffLimit"})
_POD_KEYS = frozenset({"containers", "volumes", "restartPolicy", "securityContext"})
_POD_CONTEXT_KEYS = frozenset({"runAsUser", "runAsGroup", "fsGroup", "runAsNonRoot", "seccompProfile"})
_CONTAINER_KEYS = frozenset(
    {"name", "image", "command", "args", "env", "volumeMounts", "resources", "workingDir", "imagePullPolicy"}
    | {"securityContext"}
)
_CONTAINER_CONTEXT_KEYS = frozenset(
    {"runAsUser", "runAsGroup", "runAsNonRoot", "allowPrivilegeEscalation", "capabilities"}
    | {"readOnlyRootFilesystem", "seccompProfile"}
)
_MOUNT_KEYS = frozenset({"name", "mountPath", "readOnly", "subPath"})
_UID_KEYS = ("runAsUser", "runAsGroup", "fsGroup")


def _only(where: str, what: str, got: Any, allowed: frozenset[str]) -> dict[str, Any]:
    if got is None:
        return {}
    if not isinstance(got, dict):
        raise TemplateError(f"{where}: {what} is not a mapping")
    extra = sorted(set(got) - allowed)
    if extra:
        raise TemplateError(
            f"{where}: {what} may not set {', '.join(extra)} (the backup pod is built by slurm-sidecars: "
            f"only {', '.join(sorted(allowed))} come from the template)"
        )
    return got


def _context(where: str, what: str, got: Any, allowed: frozenset[str]) -> dict[str, Any]:
    """The uids of a securityContext (each > 0); every other key may only say what we set anyway."""
    ctx = _only(where, what, got, allowed)
    uids: dict[str, Any] = {}
    for key, value in ctx.items():
        if key in _UID_KEYS:
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise TemplateError(f"{where}: {what}.{key} must be a uid other than root's")
            uids[key] = value
        elif key == "runAsNonRoot" and value is not True:
            raise TemplateError(f"{where}: {what}.runAsNonRoot may only be true")
        elif key == "allowPrivilegeEscalation" and value is not False:
            raise TemplateError(f"{where}: {what}.allowPrivilegeEscalation may only be false")
        elif key == "seccompProfile" and value != {"type": "RuntimeDefault"}:
            raise TemplateError(f"{where}: {what}.seccompProfile may only be RuntimeDefault")
        elif key == "capabilities" and (not isinstance(value, dict) or set(value) - {"drop"}):
            raise TemplateError(f"{where}: {what}.capabilities may only drop (every one is dropped)")
        elif key == "readOnlyRootFilesystem":
            if not isinstance(value, bool):
                raise TemplateError(f"{where}: {what}.readOnlyRootFilesystem is not true or false")
            uids[key] = value
    return uids


def _env(where: str, name: str, env: Any) -> list[Json]:
    if not isinstance(env, list):
        raise TemplateError(f"{where}: container {name} env is not a list")
    out: list[Json] = []
    for var in env:
        if not isinstance(var, dict) or not isinstance(var.get("name"), str):
            raise TemplateError(f"{where}: container {name} has an env entry without a name")
        key = var["name"]
        if set(var) == {"name", "value"}:
            if _SECRET_NAME.search(key):
                raise TemplateError(
                    f"{where}: container {name} env {key} holds its value in the template: read it from "
                    "a Secret (valueFrom.secretKeyRef)"
                )
            out.append({"name": key, "value": str(var["value"])})
            continue
        ref = (var.get("valueFrom") or {}).get("secretKeyRef") if set(var) == {"name", "valueFrom"} else None
        if (
            not isinstance(ref, dict)
            or set(var["valueFrom"]) != {"secretKeyRef"}
            or not {"name", "key"} <= set(ref) <= {"name", "key", "optional"}
        ):
            raise TemplateError(
                f"{where}: container {name} env {key}: only a value or a named Secret's key "
                "(valueFrom.secretKeyRef with name and key)"
            )
        out.append(
            {"name": key, "valueFrom": {"secretKeyRef": {"name": str(ref["name"]), "key": str(ref["key"])}}}
        )
    return out


def backup_job(text: str, configmap: str, stamp: str) -> Json:
    """The backup Job, built by us from what its template may contribute (above), checked: one
    container, one claim, no credential written literally (a password belongs in a Secret, read
    through `valueFrom`), and nothing else; the pod runs with no token, no escalation, no
    capability, as a uid other than root."""
    where = f"ConfigMap {configmap} key {TEMPLATE_KEY}"
    try:
        job = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise TemplateError(f"{where}: not YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(job, dict) or job.get("kind", "Job") != "Job":
        raise TemplateError(f"{where}: not a Job")
    _only(where, "the Job", job, _JOB_KEYS)
    meta = _only(where, "metadata", job.get("metadata"), _JOB_META_KEYS)
    annotations = _only(
        where, "metadata.annotations", meta.get("annotations"), frozenset({LOCATION_ANNOTATION})
    )
    spec = _only(where, "spec", job.get("spec"), _JOB_SPEC_KEYS)
    template = _only(where, "spec.template", spec.get("template"), frozenset({"spec", "metadata"}))
    if template.get("metadata"):
        raise TemplateError(
            f"{where}: spec.template.metadata may not be set (labels and annotations are ours)"
        )
    pod = _only(where, "the pod spec", template.get("spec"), _POD_KEYS)
    if pod.get("restartPolicy", "Never") not in ("Never", "OnFailure"):
        raise TemplateError(f"{where}: restartPolicy may only be Never")
    pod_uids = _context(where, "the pod's securityContext", pod.get("securityContext"), _POD_CONTEXT_KEYS)
    containers = pod.get("containers") or []
    if not isinstance(containers, list) or len(containers) != 1 or not isinstance(containers[0], dict):
        raise TemplateError(f"{where}: the Job must have exactly one container (it has {len(containers)})")
    c = _only(where, "the container", containers[0], _CONTAINER_KEYS)
    name = str(c.get("name") or "backup")
    if not isinstance(c.get("image"), str) or not c["image"]:
        raise TemplateError(f"{where}: container {name} names no image")
    argv = [*(c.get("command") or []), *(c.get("args") or [])]
    if any(_SECRET_ARG.search(str(w)) for w in argv):
        raise TemplateError(
            f"{where}: container {name} has a password on its command line: pass it "
            "from a Secret (an env var, or an option file)"
        )
    volumes = pod.get("volumes") or []
    if not isinstance(volumes, list) or len(volumes) > 1:
        raise TemplateError(f"{where}: at most one volume, a PersistentVolumeClaim (it has {len(volumes)})")
    claims: list[Json] = []
    for v in volumes:
        claim = (v or {}).get("persistentVolumeClaim") if isinstance(v, dict) else None
        if (
            set(v or {}) != {"name", "persistentVolumeClaim"}
            or not isinstance(claim, dict)
            or not isinstance(claim.get("claimName"), str)
            or set(claim) - {"claimName", "readOnly"}
        ):
            raise TemplateError(f"{where}: the volume may only be a PersistentVolumeClaim (claimName)")
        claims.append({"name": str(v["name"]), "persistentVolumeClaim": dict(claim)})
    mounts: list[Json] = []
    for given in c.get("volumeMounts") or []:
        m = _only(where, f"container {name} volumeMounts", given, _MOUNT_KEYS)
        if not claims or m.get("name") != claims[0]["name"]:
            raise TemplateError(f"{where}: container {name} mounts {m.get('name')}, which is not the claim")
        if ".." in PurePosixPath(str(m.get("subPath", ""))).parts:
            raise TemplateError(f"{where}: container {name} subPath leaves the claim")
        mounts.append(dict(m))
    ctr_uids = _context(
        where, f"container {name} securityContext", c.get("securityContext"), _CONTAINER_CONTEXT_KEYS
    )
    container: Json = {
        "name": name,
        "image": c["image"],
        **{
            k: copy.deepcopy(c[k])
            for k in ("command", "args", "resources", "workingDir", "imagePullPolicy")
            if k in c
        },
        "env": [*_env(where, name, c.get("env") or []), {"name": STAMP_ENV, "value": stamp}],
        "volumeMounts": mounts,
        "securityContext": {
            **ctr_uids,
            "runAsNonRoot": True,
            "privileged": False,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    backoff = spec.get("backoffLimit", 0)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "generateName": "slurmdbd-backup-",
            "labels": dict(LABELS),
            **({"annotations": dict(annotations)} if annotations else {}),
        },
        "spec": {
            "backoffLimit": backoff if isinstance(backoff, int) and 0 <= backoff <= 6 else 0,
            "template": {
                "metadata": {"labels": dict(LABELS)},
                "spec": {
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "restartPolicy": "Never",
                    "securityContext": {
                        **pod_uids,
                        "runAsNonRoot": True,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [container],
                    "volumes": claims,
                },
            },
        },
    }


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
