"""The Kubernetes calls the code makes, derived from sidecars/kube (the only module that calls the
API), against the rules the manifests grant: nothing called is missing, nothing granted is unused.
And where a credential goes: the API token only into the containers that call the API."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from sidecars.controlplane.reconcile.busy_label import LABEL
from sidecars.controlplane.reconcile.deletion_cost import ANNOTATION
from sidecars.controlplane.reconcile.pod_conditions import TYPES
from sidecars.kube.gpudomain import GROUP, PLURAL
from tests.shipping.kube import TARGETS, find, pod_specs, render

KUBE = Path(__file__).resolve().parents[2] / "sidecars" / "kube"
UNSUFFIXED_GROUPS = {"apps", "batch", "policy", "autoscaling"}  # the built-in groups with no .k8s.io


def _group_of(api_class: str) -> str:
    """kubernetes-asyncio's API class -> its API group: CoreV1Api "", AppsV1Api apps,
    CoordinationV1Api coordination.k8s.io, CustomObjectsApi the one custom group we read."""
    if api_class == "CustomObjectsApi":
        return GROUP
    m = re.fullmatch(r"([A-Za-z]+?)V\d+(?:(?:alpha|beta)\d+)?Api", api_class)
    assert m is not None, api_class
    name = m.group(1).lower()
    return "" if name == "core" else name if name in UNSUFFIXED_GROUPS else f"{name}.k8s.io"


def api_attributes() -> dict[str, str]:
    """The API objects KubeClient holds (`self.core = k.CoreV1Api(self.api)`): attribute -> group."""
    out = {}
    for path in sorted(KUBE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Attribute)
                and node.value.func.attr.endswith("Api")
                and node.value.func.attr != "ApiClient"
            ):
                for target in node.targets:
                    if isinstance(target, ast.Attribute):
                        out[target.attr] = _group_of(node.value.func.attr)
    return out


API_GROUPS = api_attributes()
VERBS = {
    "list": "list",
    "read": "get",
    "patch": "patch",
    "create": "create",
    "replace": "update",
    "delete": "delete",
}
METHOD = re.compile(
    r"^(list|read|patch|create|replace|delete)_(namespaced_|cluster_)?([a-z_]+?)(_status|_scale)?$"
)
SA_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
# the containers that call the API: the control plane, config-sync (its Events; Slinky's
# `reconfigure` container is config-sync), and a DaemonSet's agent (its Node, the pods on it)
API_CALLERS = {"control-plane", "config-sync", "reconfigure"}

Call = tuple[str, str, str]  # (apiGroup, resource, verb)


def _resource(api: str, name: str, sub: str) -> tuple[str, str]:
    group = API_GROUPS[api]
    plural = PLURAL if name == "custom_object" else name.replace("_", "") + "s"
    return group, plural + sub.replace("_", "/")


def _api_method(node: ast.AST) -> tuple[str, str] | None:
    """`<anything>.<api>.<method>` naming an API object's method, as (api, method)."""
    if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)):
        return None
    return (node.value.attr, node.attr) if node.value.attr in API_GROUPS and METHOD.match(node.attr) else None


def _call(api: str, method: str, verb: str | None = None) -> Call:
    m = METHOD.match(method)
    assert m is not None
    return (*_resource(api, m.group(3), m.group(4) or ""), verb or VERBS[m.group(1)])


def derived_calls() -> set[Call]:
    """Every API method the code names, called or handed on (`self._call("op", self.core.list_node)`);
    the list method a watch is given (`self._watch("op", self.core.list_node, ...)`) is a watch."""
    calls: set[Call] = set()
    for path in sorted(KUBE.glob("*.py")):
        tree = ast.parse(path.read_text())
        watched: set[int] = set()
        for node in ast.walk(tree):
            # KubeClient._watch("operation", list_fn, ...), not another class's own _watch(rv)
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "_watch"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                listed = _api_method(node.args[1]) if len(node.args) > 1 else None
                assert listed is not None, f"{path.name}: a watch of what? {ast.dump(node)}"
                calls.add(_call(*listed, verb="watch"))
                watched.add(id(node.args[1]))
        for node in ast.walk(tree):
            found = _api_method(node)
            if found is not None and id(node) not in watched:
                calls.add(_call(*found))
    return calls


def granted(objs: tuple[dict[str, Any], ...]) -> set[Call]:
    out: set[Call] = set()
    for o in objs:
        if o["kind"] in {"Role", "ClusterRole"}:
            for rule in o["rules"]:
                for g in rule["apiGroups"]:
                    for r in rule["resources"]:
                        out.update((g, r, v) for v in rule["verbs"])
    return out


def test_the_derivation_sees_every_kind_of_call() -> None:
    calls = derived_calls()
    # one of each shape: a namespaced read, a subresource, a cluster-scoped custom list, a watch
    assert ("", "pods", "get") in calls and ("", "pods/status", "patch") in calls
    assert (GROUP, PLURAL, "list") in calls and ("", "nodes", "watch") in calls
    assert ("coordination.k8s.io", "leases", "update") in calls


def test_the_roles_grant_exactly_the_calls_the_code_makes() -> None:
    every = (
        render("base")
        + render("overlays/daemonset")
        + render("overlays/gpu")
        + render("overlays/upgrades")
        + render("slinky")
    )
    calls, rules = derived_calls(), granted(every)
    assert calls - rules == set(), f"called but not granted: {sorted(calls - rules)}"
    assert rules - calls == set(), f"granted but never called: {sorted(rules - calls)}"


def test_writes_to_configmaps_leases_and_deployments_name_their_objects() -> None:
    """A create is authorized before its object has a name: the one write resourceNames cannot
    limit (and it cannot change what exists). Every other write is by name."""
    for target in TARGETS:
        for o in render(target):
            if o["kind"] not in {"Role", "ClusterRole"}:
                continue
            for rule in o["rules"]:
                writes = set(rule["verbs"]) & {"update", "patch", "delete", "get"}
                if set(rule["resources"]) & {"configmaps", "leases", "deployments"} and writes:
                    assert rule.get("resourceNames"), (target, o["metadata"]["name"], rule)


def _mounts_api_token(container: dict[str, Any], pod: dict[str, Any]) -> bool:
    projected = {
        v["name"]
        for v in pod.get("volumes", [])
        if any("serviceAccountToken" in s for s in v.get("projected", {}).get("sources", []))
    }
    return any(
        m["mountPath"] == SA_PATH and m["name"] in projected for m in container.get("volumeMounts", [])
    )


def _calls_api(container: dict[str, Any]) -> bool:
    argv = [*container.get("command", []), *container.get("args", [])]
    if container["name"] in API_CALLERS:
        return True
    # the agent of a DaemonSet reads its Node and the worker pods on it
    return argv[:2] == ["slurm-sidecars", "worker"] and "kube-node" in argv


@pytest.mark.parametrize("target", TARGETS)
def test_the_api_token_goes_only_into_the_containers_that_call_the_api(target: str) -> None:
    for where, pod in pod_specs(target):
        assert pod.get("automountServiceAccountToken") is False, where
        for c in pod.get("initContainers", []) + pod.get("containers", []):
            assert _mounts_api_token(c, pod) == _calls_api(c), f"{where} {c['name']}"


@pytest.mark.parametrize("target", TARGETS)
def test_no_secret_value_is_shipped(target: str) -> None:
    secrets = [o for o in render(target) if o["kind"] == "Secret"]
    assert secrets == [], [s["metadata"]["name"] for s in secrets]


# what starting jobs as their users takes with the shipped proctrack/linuxproc and task/none
SLURMD_CAPABILITIES = {
    "SETUID",
    "SETGID",
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "KILL",
    "SYS_RESOURCE",
}


@pytest.mark.parametrize("target", TARGETS)
def test_nothing_runs_privileged_and_slurmd_holds_only_the_capabilities_jobs_need(target: str) -> None:
    for where, pod in pod_specs(target):
        for c in pod.get("initContainers", []) + pod.get("containers", []):
            sc = c.get("securityContext", {})
            assert not sc.get("privileged"), f"{where} {c['name']}"
            if c["name"] == "slurmd" and "image" in c and "slurm-sidecars" in c["image"]:
                assert sc["capabilities"]["drop"] == ["ALL"], where
                assert set(sc["capabilities"]["add"]) <= SLURMD_CAPABILITIES, where
                assert sc.get("allowPrivilegeEscalation") is False, where


@pytest.mark.parametrize("target", TARGETS)
def test_every_volume_jobs_can_reach_and_a_sidecar_uses_gets_an_owner_and_mode_first(target: str) -> None:
    """Jobs run in the slurmd container. A volume it mounts read-write and a sidecar also mounts
    (the kubelet makes it 0777) is given its mode by an init step that runs before the sidecars."""
    for where, pod in pod_specs(target):
        slurmd = next((c for c in pod.get("containers", []) if c["name"] == "slurmd"), None)
        if slurmd is None:
            continue
        empty = {v["name"] for v in pod.get("volumes", []) if "emptyDir" in v}
        inits = pod.get("initContainers", [])
        writable = {
            m["name"]: m["mountPath"] for m in slurmd.get("volumeMounts", []) if not m.get("readOnly")
        }
        for c in inits:
            if c.get("command", [""])[0] == "sh" or "slurm-sidecars" not in " ".join(c.get("command", [])):
                continue
            for m in c.get("volumeMounts", []):
                if m["name"] in empty and m["name"] in writable:
                    script = " ".join(
                        " ".join(i.get("command", []))
                        for i in inits[: inits.index(c)]
                        if "chmod 0755" in " ".join(i.get("command", []))
                    )
                    assert writable[m["name"]] in script, (
                        f"{where}: {m['name']} has no mode before {c['name']}"
                    )
        # the sidecars' own volumes: read-only where jobs run
        for m in slurmd.get("volumeMounts", []):
            if m["mountPath"] in {"/run/slurm-sidecars", "/var/lib/dcgm-job-mapping"}:
                assert m.get("readOnly") is True, f"{where}: {m['mountPath']}"


def test_role_binding_subjects_are_the_accounts_the_pods_run_as() -> None:
    objs = render("base")
    assert find(objs, "RoleBinding", "slurm-sidecars")["subjects"][0]["name"] == "slurm-sidecars"


def test_the_admission_policy_allows_the_pod_writes_the_code_makes_and_validates() -> None:
    """RBAC cannot limit a pod patch to fields: the example policy does, and names exactly the
    annotation, label and conditions the control plane writes, for its own ServiceAccount."""
    objs = render("examples/admission-policy")
    for o in objs:
        kubernetes_validate.validate(o, kubernetes_validate.latest_version(), strict=True)
    policy = find(objs, "ValidatingAdmissionPolicy")
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert variables["ourAnnotations"] == f"['{ANNOTATION}']"
    assert variables["ourLabels"] == f"['{LABEL}']"
    assert all(t.startswith("SlurmNode") for t in TYPES)
    subject = find(render("base"), "RoleBinding", "slurm-sidecars")["subjects"][0]
    account = f"system:serviceaccount:{subject['namespace']}:{subject['name']}"
    assert account in policy["spec"]["matchConditions"][0]["expression"]
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rules[0]["resources"] == ["pods", "pods/status"] and set(rules[0]["operations"]) == {
        "UPDATE",
        "DELETE",
    }
    assert find(objs, "ValidatingAdmissionPolicyBinding")["spec"]["policyName"] == policy["metadata"]["name"]
