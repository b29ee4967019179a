"""manifests/slinky/ against the CRDs of the Slinky release it targets (tests/data/slinky/): every
field known to the release's schema, unknown ones counted as errors (the API server would prune them
without a word, and the operator's Go decoder would drop them), and the images on that release's
Slurm."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator
from functools import cache
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import referencing
import yaml
from kubernetes_validate.utils import all_versions, major_minor, schema_contents

from tests.shipping.kube import K8S_VERSIONS, render
from tests.shipping.shipped import ROOT

Obj = dict[str, Any]
DATA = ROOT / "tests" / "data" / "slinky" / "slurm-operator-crds.yaml"
K8S = "io.k8s.api.core.v1."

# The CRDs leave some fields free-form (x-kubernetes-preserve-unknown-fields): the Go types
# (api/v1beta1) wrap a Kubernetes type there (ContainerWrapper, PodSpecWrapper, ServiceSpecWrapper,
# []PersistentVolumeClaim). Each is checked as that type, strictly; the operator fills a
# container's name and a pod's containers, so those are not required of us.
EMBEDDED: dict[str, dict[str, str]] = {
    "Controller": {
        "spec.slurmctld": "Container",
        "spec.reconfigure": "Container",
        "spec.logfile": "Container",
        "spec.template.spec": "PodSpec",
        "spec.service.spec": "ServiceSpec",
    },
    "NodeSet": {
        "spec.slurmd": "Container",
        "spec.logfile": "Container",
        "spec.template.spec": "PodSpec",
        "spec.volumeClaimTemplates": "[]PersistentVolumeClaim",
    },
}
RELAXED = {"Container": "name", "PodSpec": "containers"}


def _has(spec: Obj, path: str) -> bool:
    for key in path.split("."):
        if not isinstance(spec, dict) or key not in spec:
            return False
        spec = spec[key]
    return True


def _get(spec: Obj, path: str) -> Any:
    for key in path.split("."):
        spec = (spec or {}).get(key, {})
    return spec


# The CEL rules (x-kubernetes-validations) of the release, by rule text, as Python. A rule not here
# fails the test: a new release's rules are read and written here, never skipped.
CEL: dict[str, Callable[[Obj], bool]] = {
    "!self.external ? has(self.slurmKeyRef) : true": lambda s: s.get("external", False) or "slurmKeyRef" in s,
    "!self.external ? has(self.jwtKeyRef) || has(self.jwtHs256KeyRef) : true": lambda s: (
        s.get("external", False) or "jwtKeyRef" in s or "jwtHs256KeyRef" in s
    ),
    "self.external ? has(self.externalConfig) : true": lambda s: (
        not s.get("external", False) or "externalConfig" in s
    ),
    "has(self.ha) && self.ha.enabled ? has(self.persistence) && self.persistence.enabled"
    " && self.persistence.existingClaim.size() > 0 : true": lambda s: (
        not _get(s, "ha.enabled")
        or (_get(s, "persistence.enabled") is True and len(_get(s, "persistence.existingClaim") or "") > 0)
    ),
    "self.type != 'ScheduledUpdate' || (has(self.scheduledUpdate.startTime)"
    " && has(self.scheduledUpdate.duration))": lambda s: (
        s.get("type", "RollingUpdate") != "ScheduledUpdate"
        or (_has(s, "scheduledUpdate.startTime") and _has(s, "scheduledUpdate.duration"))
    ),
}


@cache
def release() -> Obj:
    data = yaml.safe_load(DATA.read_text())
    assert isinstance(data, dict)
    return data


def _schema_dir(k8s: str) -> str:
    wanted = major_minor(kubernetes_validate.latest_version() if k8s == "latest" else k8s)
    version = [v for v in all_versions() if major_minor(v) <= wanted][-1]
    return f"kubernetes-json-schema/v{version}-local-strict"


def _kube_defs(k8s: str) -> Obj:
    """The release's Kubernetes definitions, plus the embedded types as Slinky takes them."""
    defs = copy.deepcopy(schema_contents(f"{_schema_dir(k8s)}/_definitions.json", k8s))
    assert isinstance(defs, dict)
    for type_name, optional in RELAXED.items():
        schema = copy.deepcopy(defs["$defs"][K8S + type_name])
        schema["required"] = [r for r in schema.get("required", []) if r != optional]
        defs["$defs"][f"slinky.{type_name}"] = schema
    return defs


def _embedded(type_name: str, k8s_defs: Obj) -> Obj:
    if type_name.startswith("[]"):
        return {"type": "array", "items": _embedded(type_name[2:], k8s_defs)}
    name = f"slinky.{type_name}" if type_name in RELAXED else K8S + type_name
    assert name in k8s_defs["$defs"], type_name
    return {"$ref": f"{k8s_defs['$id']}#/$defs/{name}"}


def _convert(node: Obj, path: str, kind: str, k8s_defs: Obj, rules: list[tuple[str, str]]) -> Obj:
    """A structural openAPIV3Schema node as JSON Schema, as the API server reads it: unknown fields
    are errors wherever the schema does not say it keeps them."""
    if path == "metadata":  # the root's metadata is ObjectMeta, which the CRD does not spell out
        return {"$ref": f"{k8s_defs['$id']}#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}
    if node.get("x-kubernetes-preserve-unknown-fields"):
        type_name = EMBEDDED[kind].get(path)
        assert type_name, f"{kind} {path} is free-form in the CRD: name its Kubernetes type in EMBEDDED"
        return _embedded(type_name, k8s_defs)
    rules += [(path, r["rule"]) for r in node.get("x-kubernetes-validations", [])]
    out: Obj = {}
    if node.get("x-kubernetes-int-or-string"):
        out["type"] = ["integer", "string"]
    elif "type" in node:
        out["type"] = [node["type"], "null"] if node.get("nullable") else node["type"]
    for word in (
        "enum",
        "required",
        "minimum",
        "maximum",
        "minItems",
        "maxItems",
        "minLength",
        "maxLength",
        "pattern",
    ):
        if word in node:
            out[word] = node[word]
    if node.get("nullable") and "enum" in out:
        out["enum"] = [*out["enum"], None]
    child = f"{path}." if path else ""
    if "properties" in node:
        out["properties"] = {
            name: _convert(sub, child + name, kind, k8s_defs, rules)
            for name, sub in node["properties"].items()
        }
    if isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = _convert(
            node["additionalProperties"], child + "*", kind, k8s_defs, rules
        )
    elif node.get("type") == "object":
        out["additionalProperties"] = False
    if "items" in node:
        out["items"] = _convert(node["items"], child + "[]", kind, k8s_defs, rules)
    return out


@cache
def validator(kind: str, k8s: str) -> tuple[jsonschema.protocols.Validator, tuple[tuple[str, str], ...]]:
    spec = release()["kinds"][kind]
    k8s_defs = _kube_defs(k8s)
    rules: list[tuple[str, str]] = []
    schema = _convert(spec["openAPIV3Schema"], "", kind, k8s_defs, rules)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    registry: referencing.Registry[Any] = (
        referencing.Resource.from_contents(k8s_defs) @ referencing.Registry()
    )
    return jsonschema.Draft202012Validator(schema, registry=registry), tuple(rules)


def errors(obj: Obj, k8s: str = "1.29.0") -> list[str]:
    """Every way `obj` breaks its kind's CRD: schema errors, then CEL rules broken."""
    data = release()
    kind = obj.get("kind", "")
    assert kind in data["kinds"], f"{kind}: not a kind of the Slinky CRDs kept in {DATA.name}"
    want = f"{data['kinds'][kind]['group']}/{data['kinds'][kind]['version']}"
    found = [f"apiVersion {obj.get('apiVersion')}, not {want}"] if obj.get("apiVersion") != want else []
    check, rules = validator(kind, k8s)
    found += [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in check.iter_errors(obj)]
    for path, rule in rules:
        assert rule in CEL, f"{kind} {path}: CEL rule {rule!r} has no Python check here; add one"
        if path and not _has(obj, path):
            continue  # a rule holds on a value that is there
        if not CEL[rule](_get(obj, path) if path else obj):
            found.append(f"{path}: breaks {rule}")
    return found


def _slinky_objects() -> list[Obj]:
    groups = {k["group"] for k in release()["kinds"].values()}
    return [o for o in render("slinky") if o["apiVersion"].split("/")[0] in groups]


@pytest.mark.parametrize("k8s", K8S_VERSIONS)
def test_every_slinky_object_is_valid_against_the_targeted_release(k8s: str) -> None:
    objs = _slinky_objects()
    assert {o["kind"] for o in objs} == {"Controller", "NodeSet"}
    for obj in objs:
        assert errors(obj, k8s) == [], f"{obj['kind']}/{obj['metadata']['name']}"


def _plant(obj: Obj, path: str, value: Any) -> Obj:
    obj = copy.deepcopy(obj)
    *parents, last = path.split(".")
    here: Any = obj
    for key in parents:
        here = here[int(key)] if isinstance(here, list) else here[key]
    here[last] = value
    return obj


def _objects() -> dict[str, Obj]:
    return {o["kind"]: o for o in _slinky_objects()}


@pytest.mark.parametrize(
    ("kind", "path", "value"),
    [
        # a misspelt field at each level: the CRD's own fields, the embedded Kubernetes types, metadata
        ("Controller", "spec.inplaceReconfig", True),
        ("Controller", "spec.slurmKeyRef.nmae", "x"),
        ("Controller", "spec.template.metdata", {"labels": {"a": "b"}}),
        ("Controller", "spec.slurmctld.volumeMount", []),
        ("Controller", "spec.reconfigure.startupProbe.exec.cmd", ["true"]),
        ("Controller", "spec.template.spec.initContainers.0.restartpolicy", "Always"),
        ("Controller", "spec.template.spec.volumes.0.emptydir", {}),
        ("Controller", "metadata.lables", {"a": "b"}),
        ("Controller", "spec.kind", "Controller"),  # a root field, one level too deep
        ("NodeSet", "spec.controllerRef.namespace", "slurm"),
        ("NodeSet", "spec.slurmd.lifecycle.prestop", {}),
        ("NodeSet", "spec.template.spec.terminationGracePeriod", 1),
        ("NodeSet", "spec.volumeClaimTemplates", [{"metadata": {"name": "a"}, "spex": {}}]),
        # and wrong values
        ("NodeSet", "spec.replicas", "2"),
        ("NodeSet", "spec.scalingMode", "Deployment"),
        ("Controller", "spec.template.spec.automountServiceAccountToken", "no"),
    ],
)
def test_a_planted_unknown_field_or_bad_value_is_an_error(kind: str, path: str, value: Any) -> None:
    obj = _objects()[kind]
    assert errors(obj) == []
    found = errors(_plant(obj, path, value))
    named = path.rsplit(".", 1)[1]
    assert [e for e in found if named in e], f"{kind} {path} planted, yet: {found}"


def test_the_crds_rules_are_checked() -> None:
    ctld = _objects()["Controller"]
    no_key = copy.deepcopy(ctld)
    del no_key["spec"]["slurmKeyRef"]
    assert errors(no_key) == ["spec: breaks !self.external ? has(self.slurmKeyRef) : true"]
    ha = _plant(ctld, "spec.ha", {"enabled": True})
    assert [e for e in errors(ha) if "self.ha" in e]
    nodes = _objects()["NodeSet"]
    scheduled = _plant(nodes, "spec.updateStrategy", {"type": "ScheduledUpdate", "scheduledUpdate": {}})
    assert [e for e in errors(scheduled) if e.startswith("spec.updateStrategy: breaks")]
    when = {"startTime": "0 2 * * *", "duration": "1h"}
    assert errors(_plant(scheduled, "spec.updateStrategy.scheduledUpdate", when)) == []
    old = _plant(ctld, "apiVersion", "slinky.slurm.net/v1alpha1")
    assert errors(old) == ["apiVersion slinky.slurm.net/v1alpha1, not slinky.slurm.net/v1beta1"]


def _free_form(node: Obj, path: str) -> Iterator[str]:
    if node.get("x-kubernetes-preserve-unknown-fields"):
        yield path
        return
    child = f"{path}." if path else ""
    for name, sub in (node.get("properties") or {}).items():
        if path or name != "status":  # the operator's to write
            yield from _free_form(sub, child + name)
    if isinstance(node.get("additionalProperties"), dict):
        yield from _free_form(node["additionalProperties"], child + "*")
    if "items" in node:
        yield from _free_form(node["items"], child + "[]")


def test_every_free_form_field_is_checked_as_its_kubernetes_type() -> None:
    for kind, spec in release()["kinds"].items():
        assert set(_free_form(spec["openAPIV3Schema"], "")) == set(EMBEDDED[kind]), kind


def _images(obj: Obj) -> Iterator[tuple[str, str]]:
    for key, type_name in EMBEDDED[obj["kind"]].items():
        if type_name == "Container" and _has(obj, key):
            yield key, _get(obj, key).get("image", "")
    pod = _get(obj, "spec.template.spec") or {}
    for key in ("initContainers", "containers"):
        for c in pod.get(key, []):
            yield f"template {key}[{c['name']}]", c.get("image", "")


def _slurm_release(tag: str) -> tuple[int, int]:
    found = re.match(r"(\d+)\.(\d+)-", tag)
    assert found, f"tag {tag!r} names no Slurm release"
    return int(found.group(1)), int(found.group(2))


def test_images_run_the_slurm_of_the_targeted_chart() -> None:
    data = release()
    minimum = _slurm_release(data["minimumSlurm"] + "-")
    seen = 0
    for obj in _slinky_objects():
        for where, image in _images(obj):
            assert image, f"{obj['kind']} {where}: no image (the operator's default has no sidecars)"
            tag = image.rpartition(":")[2]
            assert _slurm_release(tag) >= minimum, (
                f"{obj['kind']} {where}: {image} is older than Slurm {data['minimumSlurm']}"
            )
            assert tag == data["chart"]["imageTag"], (
                f"{obj['kind']} {where}: {image}, not the chart's {data['chart']['imageTag']}"
            )
            seen += 1
    assert seen >= 5


def test_the_docs_name_the_release_the_schemas_come_from() -> None:
    source, chart = release()["source"], release()["chart"]
    assert source["release"].startswith("1.3.") and chart["appVersion"] == "26.05"
    deploy = (ROOT / "docs" / "deploy.md").read_text()
    assert f"`{source['commit'][:8]}`" in deploy and source["release"] in deploy
    assert chart["imageTag"] in deploy
