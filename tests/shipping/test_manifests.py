"""manifests/: rendered by kustomize, valid for Kubernetes releases with native sidecars, and wired
the way the sidecars need (startup order, probes, hooks, flags, least privilege)."""

from __future__ import annotations

import copy
import re
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from sidecars.kube.gpudomain import GROUP, PLURAL
from tests.shipping.kube import (
    CUSTOM_KINDS,
    K8S_VERSIONS,
    TARGETS,
    Container,
    commands,
    containers,
    find,
    flag_value,
    pod_specs,
    render,
)
from tests.shipping.shipped import all_commands, env_flag, known_flags, parser_flags

Obj = dict[str, Any]


# admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy is GA from Kubernetes 1.30: the upgrades
# overlay's policies (docs/security.md) need it; every other object still validates on 1.29
SINCE_1_30 = frozenset({"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"})


def _version(v: str) -> str:
    return kubernetes_validate.latest_version() if v == "latest" else v


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("target", TARGETS)
def test_every_object_validates_against_the_kubernetes_schema(target: str, version: str) -> None:
    builtin = [o for o in render(target) if o["kind"] not in CUSTOM_KINDS]
    assert builtin
    for obj in builtin:
        if version == "1.29.0" and obj["kind"] in SINCE_1_30:
            continue  # checked against the newest schema; docs/security.md says 1.30+
        kubernetes_validate.validate(obj, _version(version), strict=True)


@pytest.mark.parametrize("target", TARGETS)
def test_the_pods_the_slinky_operator_would_build_validate_too(target: str) -> None:
    """A custom resource's pod pieces, assembled into a Pod, pass the same schema."""
    for where, spec in pod_specs(target):
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": copy.deepcopy(spec)}
        for c in pod["spec"]["containers"] + pod["spec"].get("initContainers", []):
            c.setdefault("image", "image:tag")
        try:
            kubernetes_validate.validate(pod, _version("1.29.0"), strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{where}: {exc.message}")


def test_schema_check_is_not_a_no_op() -> None:
    sts = copy.deepcopy(find(render("base"), "StatefulSet", "slurmctld"))
    # the same object is invalid for a release without native sidecars...
    with pytest.raises(kubernetes_validate.ValidationError, match="restartPolicy"):
        kubernetes_validate.validate(sts, "1.27.0", strict=True)
    # ...and with a misspelt field
    sts["spec"]["template"]["spec"]["initContainers"][1]["startupprobe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(sts, "1.29.0", strict=True)


def test_custom_resources_are_only_the_expected_ones() -> None:
    kinds = {(t, o["kind"]) for t in TARGETS for o in render(t) if o["kind"] in CUSTOM_KINDS}
    assert kinds == {
        ("overlays/hpa", "ServiceMonitor"),
        ("overlays/keda", "ServiceMonitor"),
        ("overlays/keda", "ScaledObject"),
        ("slinky", "Controller"),
        ("slinky", "NodeSet"),
    }
    for t in TARGETS:
        for o in render(t):
            assert o["metadata"].get("namespace", "slurm") == "slurm" or o["kind"] == "Namespace"


# ------------------------------------------------------------------ commands and flags


def _sidecar_argvs() -> list[tuple[Container, str, list[str]]]:
    out = []
    for t in TARGETS:
        for c in containers(t):
            for what, argv in commands(c.spec):
                if argv and argv[0] == "slurm-sidecars":
                    out.append((c, what, argv))
    return out


# an overlay's own feature needs flags beyond the stable ones: only these, and only where the role has them
OVERLAY_FLAGS = {
    "overlays/daemonset": {
        "worker": {"--node-name-from", "--worker-selector", "--kube-node-name"},
        "control-plane": {"--node-name-from", "--worker-selector"},
    },
    "overlays/gpu": {"control-plane": {"--compute-domains"}},
    "overlays/restapi": {
        "config-sync": {
            "--daemon",
            "--secret-source",
            "--restart-policy",
            "--restd-port",
            "--restd-turn-lease",
            "--restd-log-file",
        }
    },
    "ha": {"control-plane": {"--leader-label"}, "config-sync": {"--peer", "--pod-name"}},
    "overlays/upgrades": {
        "control-plane": {
            "--leader-label",
            "--upgrade-slurmdbd-workload",
            "--upgrade-slurmctld-statefulset",
            "--upgrade-state-image",
            "--upgrade-backup-job-configmap",
        },
        # slurmdbd's, from manifests/overlays/accounting
        "config-sync": {"--daemon", "--secret-source", "--restart-policy"},
    },
}


def test_manifests_run_only_existing_subcommands_with_stable_flags() -> None:
    seen = set()
    for c, what, argv in _sidecar_argvs():
        sub = argv[1]
        assert sub in all_commands(), f"{c.where} {what}: no subcommand {sub!r}"
        target = c.where.split(" ")[0]
        allowed = known_flags(sub) | (OVERLAY_FLAGS.get(target, {}).get(sub, set()) & parser_flags(sub))
        words = argv[2:]
        if sub == "probe":
            assert words[0] in {"livez", "readyz", "controller"}, f"{c.where} {what}: {words}"
            words = words[1:]
        for i, word in enumerate(words):
            if word.startswith("--"):
                assert word.split("=")[0] in allowed, f"{c.where} {what}: {sub} has no flag {word}"
            else:
                assert i > 0 and words[i - 1].startswith("--"), f"{c.where} {what}: stray {word!r}"
        # the container's variables are its command's flags (a probe's parser reads only its own)
        for env in c.spec.get("env", []) if what == "command" else []:
            as_flag = env_flag(env["name"])
            assert as_flag is None or as_flag in allowed, f"{c.where}: {env['name']} is no flag of {sub}"
        seen.add(sub)
    assert {"config-sync", "control-plane", "worker", "drain-hook", "probe"} <= seen


def _argv(c: Container) -> list[str]:
    return [*c.spec.get("command", []), *c.spec.get("args", [])]


def _by_name(target: str) -> dict[str, dict[str, Container]]:
    pods: dict[str, dict[str, Container]] = {}
    for c in containers(target):
        pods.setdefault(c.where.rsplit(" ", 1)[0], {})[c.spec["name"]] = c
    return pods


def _port(addr: str) -> str:
    return addr.rsplit(":", 1)[1]


@pytest.mark.parametrize("target", ["base", "slinky"])
def test_probes_reach_the_port_their_daemon_serves(target: str) -> None:
    checked = 0
    for pod in _by_name(target).values():
        serving = {}
        for c in pod.values():
            argv = _argv(c)
            if argv[:1] == ["slurm-sidecars"] and flag_value(argv, "--http"):
                serving[_port(flag_value(argv, "--http") or "")] = c.spec["name"]
        for c in pod.values():
            for what, argv in commands(c.spec):
                if argv[:2] == ["slurm-sidecars", "probe"]:
                    url = flag_value(argv, "--url") or ""
                    port = re.fullmatch(r"http://127\.0\.0\.1:(\d+)", url)
                    assert port and port.group(1) in serving, f"{c.where} {what}: nothing serves {url}"
                    checked += 1
    assert checked >= 4


def _pod(target: str, kind_name: str) -> dict[str, Container]:
    return next(p for where, p in _by_name(target).items() if where.endswith(kind_name))


@pytest.mark.parametrize(
    ("target", "pod"), [("base", "StatefulSet/slurmctld"), ("slinky", "Controller/slurm")]
)
def test_slurmctld_starts_after_the_first_sync(target: str, pod: str) -> None:
    p = _pod(target, pod)
    sync = next(c for c in p.values() if _argv(c)[:2] == ["slurm-sidecars", "config-sync"])
    plane = next(c for c in p.values() if _argv(c)[:2] == ["slurm-sidecars", "control-plane"])
    for sidecar in (sync, plane):
        assert sidecar.init and sidecar.spec["restartPolicy"] == "Always", sidecar.where
        assert "startupProbe" in sidecar.spec, sidecar.where
    # config-sync's startup probe is its readiness: the first set is staged
    assert sync.spec["startupProbe"]["exec"]["command"][2] == "readyz"
    # slurmctld reads the directory config-sync writes, through a volume they share at the same
    # path, mounted above the directory so that config-sync may replace it whole
    target_dir = flag_value(_argv(sync), "--target") or ""
    ctld = p["slurmctld"].spec
    conf = next((e["value"] for e in ctld.get("env", []) if e["name"] == "SLURM_CONF"), None)
    conf = conf or flag_value(_argv(p["slurmctld"]), "-f")
    assert conf == f"{target_dir}/slurm.conf"
    sync_mount = _mount_above(sync.spec, target_dir)
    assert not sync_mount.get("readOnly")
    ctld_mount = _mount_above(ctld, target_dir)
    assert (ctld_mount["name"], ctld_mount["mountPath"]) == (sync_mount["name"], sync_mount["mountPath"])
    # and so does the control plane, whose Slurm commands read the same file
    assert next(e["value"] for e in plane.spec["env"] if e["name"] == "SLURM_CONF") == conf
    assert _mount_above(plane.spec, target_dir)["name"] == sync_mount["name"]
    # every (re)start of slurmctld goes through config-guard, on the same directory, which it may
    # point back at the last verified set (images/slurmctld-entrypoint.sh)
    assert _argv(p["slurmctld"])[:2] == ["slurmctld-entrypoint", "slurmctld"]
    assert flag_value(_argv(p["slurmctld"]), "-f") == f"{target_dir}/slurm.conf"
    assert not ctld_mount.get("readOnly")


def test_config_sync_target_exists_before_it_starts() -> None:
    """An emptyDir starts empty and config-sync refuses a --target that does not exist (seen in the
    real containers: exit 2, crash loop): a one-shot init container before it creates the directory
    in the same volume."""
    spec = find(render("base"), "StatefulSet", "slurmctld")["spec"]["template"]["spec"]
    inits = spec["initContainers"]
    sync_at = next(i for i, c in enumerate(inits) if c.get("command", [])[1:2] == ["config-sync"])
    target = flag_value(inits[sync_at]["command"], "--target") or ""
    volume = _mount_above(inits[sync_at], target)
    makers = [
        c
        for c in inits[:sync_at]
        if "restartPolicy" not in c
        and c["command"] == ["mkdir", "-p", target]
        and any(
            m["name"] == volume["name"] and m["mountPath"] == volume["mountPath"] for m in c["volumeMounts"]
        )
    ]
    assert makers, f"nothing creates {target} before config-sync starts"


def _mount_above(container: Obj, path: str) -> Obj:
    """The volume mount `path` lies in: strictly below its mount point."""
    mounts = [m for m in container.get("volumeMounts", []) if path.startswith(m["mountPath"] + "/")]
    assert mounts, f"{container['name']}: no volume holds {path}"
    return max(mounts, key=lambda m: len(m["mountPath"]))


@pytest.mark.parametrize(
    ("target", "pod"),
    [
        ("base", "Deployment/slurmd"),
        ("slinky", "NodeSet/slurm-worker-gpu"),
        ("overlays/daemonset", "DaemonSet/slurmd"),
    ],
)
def test_worker_pod_hook_probe_and_grace(target: str, pod: str) -> None:
    p = _pod(target, pod)
    agent = next(c for c in p.values() if _argv(c)[:2] == ["slurm-sidecars", "worker"])
    assert agent.init and agent.spec["restartPolicy"] == "Always" and "startupProbe" in agent.spec
    slurmd = p["slurmd"].spec
    hook = slurmd["lifecycle"]["preStop"]["exec"]["command"]
    assert hook[:2] == ["slurm-sidecars", "drain-hook"]
    socket = flag_value(hook, "--socket")
    assert socket == flag_value(_argv(agent), "--socket") == "/run/slurm-sidecars/agent.sock"
    shared = {m["name"] for m in slurmd["volumeMounts"] if socket.startswith(m["mountPath"] + "/")}
    assert shared & {m["name"] for m in agent.spec["volumeMounts"] if socket.startswith(m["mountPath"] + "/")}
    # readiness through the agent
    readiness = slurmd["readinessProbe"]["exec"]["command"]
    assert readiness[:3] == ["slurm-sidecars", "probe", "readyz"]
    assert _port(flag_value(readiness, "--url") or "") == _port(flag_value(_argv(agent), "--http") or "")
    # the grace period covers the longest job the partition allows; the hook gives up just before
    grace = agent.pod["terminationGracePeriodSeconds"]
    assert grace >= _max_time_seconds()
    assert grace - 900 <= int(flag_value(hook, "--timeout-seconds") or 0) < grace
    if target == "overlays/daemonset":  # named after the Kubernetes Node: checked below
        return
    # the agent names the node after the pod, as slurmd does
    assert flag_value(_argv(agent), "--node-name") == "$(POD_NAME)"


def test_the_daemonset_slurmd_registers_with_the_agents_features_and_topology_only_when_given(
    tmp_path: Path,
) -> None:
    """The overlay's slurmd script, run with a stand-in slurmd that prints its arguments: one
    `--conf` holding what the agent's files say, none when both are empty (never `Topology=`
    with nothing after it: the #261 failure)."""
    script = _pod("overlays/daemonset", "DaemonSet/slurmd")["slurmd"].spec["command"]
    assert script[:2] == ["sh", "-c"]
    state, bin_dir = tmp_path / "state", tmp_path / "bin"
    state.mkdir()
    bin_dir.mkdir()
    (bin_dir / "slurmd").write_text("#!/bin/sh\nprintf '%s\\n' \"$@\"\n")
    (bin_dir / "slurmd").chmod(0o755)
    (state / "slurm-node-name").write_text("gpu-a\n")
    text = script[2].replace("/run/slurm-sidecars/", f"{state}/")

    def conf(features: str, topology: str) -> list[str]:
        (state / "slurm-node-features").write_text(features)
        (state / "slurm-node-topology").write_text(topology)
        env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
        done = subprocess.run(
            ["sh", "-c", text], env=env, capture_output=True, text=True, timeout=30, check=True
        )
        argv = done.stdout.splitlines()
        assert argv[:4] == ["-D", "-Z", "-N", "gpu-a"], argv
        return argv[argv.index("--conf") + 1 :] if "--conf" in argv else []

    assert conf("", "") == []
    assert conf("nvlink-clique-u.7\n", "") == ["Features=nvlink-clique-u.7"]
    assert conf("", "kubernetes:kubernetes:a:a/r1\n") == ["Topology=kubernetes:kubernetes:a:a/r1"]
    assert conf("nvlink-clique-u.7\n", "kubernetes:kubernetes:a:a/r1\n") == [
        "Features=nvlink-clique-u.7 Topology=kubernetes:kubernetes:a:a/r1"
    ]
    (state / "slurm-node-topology").unlink()  # an agent from before this file: as empty
    (state / "slurm-node-features").write_text("")
    done = subprocess.run(
        ["sh", "-c", text],
        env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert "--conf" not in done.stdout.splitlines()


def test_daemonset_workers_are_named_after_their_node_by_the_agent_and_the_control_plane() -> None:
    objs = render("overlays/daemonset")
    assert not [o for o in objs if o["kind"] == "Deployment"]  # the DaemonSet replaces the workers
    ds = find(objs, "DaemonSet", "slurmd")
    labels = ds["spec"]["template"]["metadata"]["labels"]
    p = _pod("overlays/daemonset", "DaemonSet/slurmd")
    agent = next(c for c in p.values() if _argv(c)[:2] == ["slurm-sidecars", "worker"])
    argv = _argv(agent)
    assert flag_value(argv, "--node-name-from") == "kube-node" and flag_value(argv, "--node-name") is None
    env = {e["name"]: e for e in agent.spec["env"]}
    assert env["SIDECARS_KUBE_NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    selector = dict(t.split("=") for t in (flag_value(argv, "--worker-selector") or "").split(","))
    assert _labels_match(selector, labels)
    # the control plane maps pods to Slurm nodes by the same rule, and selects the same pods
    cp = next(c for c in containers("overlays/daemonset") if _argv(c)[1:2] == ["control-plane"])
    cp_env = {e["name"]: e.get("value") for e in cp.spec["env"]}
    assert cp_env["SIDECARS_NODE_NAME_FROM"] == "kube-node"
    assert _labels_match(dict([cp_env["SIDECARS_WORKER_SELECTOR"].split("=")]), labels)
    # slurmd waits for the name the agent writes beside its socket (the agent's state dir), on a
    # volume both mount
    script = " ".join(p["slurmd"].spec["command"])
    name_file = "/run/slurm-sidecars/slurm-node-name"
    assert name_file in script and '-N "$(cat "$f")"' in script
    # the domain feature and the topology at registration, from the agent's files: shown below by
    # running the script
    assert "/run/slurm-sidecars/slurm-node-features" in script
    assert "/run/slurm-sidecars/slurm-node-topology" in script
    socket_dir = (flag_value(argv, "--socket") or "").rpartition("/")[0]
    assert flag_value(argv, "--state-dir") is None and name_file.startswith(socket_dir + "/")
    assert _mount_above(p["slurmd"].spec, name_file)["name"] == _mount_above(agent.spec, name_file)["name"]
    # the agent reads its Node and lists the pods on it; nothing more
    spec = ds["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is False  # projected into the agent alone
    account = spec["serviceAccountName"]
    role = find(objs, "Role", account)
    assert [(r["resources"], r["verbs"]) for r in role["rules"]] == [
        (["pods"], ["list"]),
        (["events"], ["create"]),
    ]
    assert find(objs, "ClusterRole", account)["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}
    ]
    for kind in ("RoleBinding", "ClusterRoleBinding"):
        binding = find(objs, kind, account)
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": "slurm"}]


def _max_time_seconds() -> int:
    conf = find(render("base"), "ConfigMap", "slurm-config")["data"]["slurm.conf"]
    days, hms = re.search(r"MaxTime=(\d+)-(\d+:\d+:\d+)", conf).groups()  # type: ignore[union-attr]
    h, m, s = (int(x) for x in hms.split(":"))
    return int(days) * 86400 + h * 3600 + m * 60 + s


def test_sidecars_run_as_a_non_root_user() -> None:
    for t in TARGETS:
        for c in containers(t):
            if _argv(c)[:1] == ["slurm-sidecars"]:
                sc = c.spec.get("securityContext", {})
                assert sc.get("runAsNonRoot") is True and sc.get("runAsUser", 0) != 0, c.where
                assert sc.get("allowPrivilegeEscalation") is False, c.where


# ------------------------------------------------------------------ RBAC, Services, examples


def test_role_is_least_privilege() -> None:
    role = find(render("base"), "Role", "slurm-sidecars")
    rules = {(tuple(r["apiGroups"]), tuple(r["resources"]), tuple(sorted(r["verbs"]))) for r in role["rules"]}
    assert rules == {
        (("",), ("pods",), ("delete", "get", "list", "patch", "watch")),
        (("",), ("pods/status",), ("patch",)),  # the SlurmNode* pod conditions
        (("",), ("events",), ("create",)),
        (("coordination.k8s.io",), ("leases",), ("create",)),
        (("coordination.k8s.io",), ("leases",), ("get", "update")),  # by name: ours
        (("",), ("configmaps",), ("create",)),  # cannot be limited by name; never overwrites
        (("",), ("configmaps",), ("get", "update")),  # by name: the upgrade plan, the topology file
        (("apps",), ("deployments",), ("get", "patch")),  # by name: a Deployment's paced roll
        (("apps",), ("replicasets",), ("list",)),
    }
    names = {(r["resources"][0], tuple(r["verbs"])): r.get("resourceNames") for r in role["rules"]}
    assert names[("configmaps", ("get", "update"))] == [
        "slurm-sidecars-upgrade",
        "slurm-sidecars-cluster-upgrade",
        "slurm-sidecars-topology",
    ]
    assert names[("deployments", ("get", "patch"))] == ["slurmd"]
    assert names[("leases", ("get", "update"))] == ["slurm-sidecars-control-plane"]
    binding = find(render("base"), "RoleBinding", "slurm-sidecars")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "slurm-sidecars", "namespace": "slurm"}]
    # cluster-wide, only reading Nodes (their cordons, for the cordon sync), and asking who an
    # agent's token is (TokenReview)
    nodes = find(render("base"), "ClusterRole", "slurm-sidecars-nodes")
    assert nodes["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
    ]
    cluster_binding = find(render("base"), "ClusterRoleBinding", "slurm-sidecars-nodes")
    assert cluster_binding["subjects"] == binding["subjects"]
    assert (
        find(render("base"), "StatefulSet")["spec"]["template"]["spec"]["serviceAccountName"]
        == "slurm-sidecars"
    )
    worker = find(render("base"), "Deployment")["spec"]["template"]["spec"]
    assert worker["automountServiceAccountToken"] is False


def test_compute_domains_are_read_only_where_the_gpu_overlay_asks_for_them() -> None:
    def told(target: str) -> bool:
        sts = find(render(target), "StatefulSet")["spec"]["template"]["spec"]
        cp = next(c for c in sts["initContainers"] if c["name"] == "control-plane")
        return {"name": "SIDECARS_COMPUTE_DOMAINS", "value": "true"} in cp.get("env", [])

    objs = render("overlays/gpu")
    role = find(objs, "ClusterRole", "slurm-sidecars-compute-domains")
    # what KubeClient.list_compute_domains / watch_compute_domains call, and nothing more
    assert role["rules"] == [{"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["list", "watch"]}]
    binding = find(objs, "ClusterRoleBinding", "slurm-sidecars-compute-domains")
    assert binding["subjects"] == find(objs, "RoleBinding", "slurm-sidecars")["subjects"]
    assert told("overlays/gpu") and not told("base")
    assert not [o for o in render("base") if "compute" in o["metadata"]["name"]]


def _labels_match(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


BUSY = "slurm-sidecars.io/busy"


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A LabelSelector's matchLabels and the matchExpressions the manifests use (Exists, DoesNotExist, In)."""
    if not _labels_match(selector.get("matchLabels") or {}, labels):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op = expr["key"], expr["operator"]
        ok = {
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
            "In": labels.get(key) in expr.get("values", []),
        }[op]
        if not ok:
            return False
    return True


def test_base_keeps_busy_workers_from_eviction() -> None:
    """The control plane labels busy workers (`--busy-label`, true by default); the base's budget
    allows none of them to be evicted, and selects only worker pods so labelled."""
    objs = render("base")
    pdb = find(objs, "PodDisruptionBudget", "slurmd-busy")
    assert pdb["spec"]["maxUnavailable"] == 0
    worker_labels = find(objs, "Deployment", "slurmd")["spec"]["template"]["metadata"]["labels"]
    assert _selects(pdb["spec"]["selector"], {**worker_labels, BUSY: "true"})
    assert not _selects(pdb["spec"]["selector"], worker_labels)  # an idle worker stays evictable
    ctld = find(objs, "StatefulSet")["spec"]["template"]["metadata"]["labels"]
    assert not _selects(pdb["spec"]["selector"], {**ctld, BUSY: "true"})
    plane = next(c for c in containers("base") if c.spec["name"] == "control-plane")
    assert flag_value(_argv(plane), "--busy-label") in {None, "true"}


def test_services_select_pods_and_name_their_ports() -> None:
    objs = render("base")
    workloads = [o for o in objs if o["kind"] in {"StatefulSet", "Deployment"}]
    for svc in (o for o in objs if o["kind"] == "Service"):
        pods = [
            w
            for w in workloads
            if _labels_match(svc["spec"]["selector"], w["spec"]["template"]["metadata"]["labels"])
        ]
        assert len(pods) == 1, svc["metadata"]["name"]
        spec = pods[0]["spec"]["template"]["spec"]
        names = {
            p["name"] for c in spec["containers"] + spec.get("initContainers", []) for p in c.get("ports", [])
        }
        for port in svc["spec"]["ports"]:
            assert port["targetPort"] in names, f"{svc['metadata']['name']}: {port['targetPort']}"
    # the agents reach the control plane by the Service's name and port
    agent = next(c for c in containers("base") if c.spec["name"] == "worker")
    url = flag_value(_argv(agent), "--control-plane")
    svc = find(objs, "Service", "slurm-sidecars-control-plane")
    assert url == f"http://{svc['metadata']['name']}:{svc['spec']['ports'][0]['port']}"


@pytest.mark.parametrize("overlay", ["overlays/hpa", "overlays/keda"])
def test_monitoring_pdb_and_network_policy(overlay: str) -> None:
    objs = render(overlay)
    monitor = find(objs, "ServiceMonitor")
    services = [
        o
        for o in objs
        if o["kind"] == "Service"
        and _labels_match(monitor["spec"]["selector"]["matchLabels"], o["metadata"]["labels"])
    ]
    ports = {p["name"] for s in services for p in s["spec"]["ports"]}
    assert {e["port"] for e in monitor["spec"]["endpoints"]} == {"config-sync", "control-plane", "agent"}
    assert {e["port"] for e in monitor["spec"]["endpoints"]} <= ports
    assert all(e["path"] == "/metrics" for e in monitor["spec"]["endpoints"])

    pdb = find(objs, "PodDisruptionBudget", "slurmd")
    worker_labels = find(objs, "Deployment", "slurmd")["spec"]["template"]["metadata"]["labels"]
    assert _selects(pdb["spec"]["selector"], worker_labels)
    # one budget per pod: the idle workers' here, the busy ones' from the base (two would make the
    # Eviction API refuse every eviction of a busy pod with a 500, not the budget's 429)
    busy_labels = {**worker_labels, BUSY: "true"}
    budgets = [o for o in objs if o["kind"] == "PodDisruptionBudget"]
    assert [b["metadata"]["name"] for b in budgets if _selects(b["spec"]["selector"], busy_labels)] == [
        "slurmd-busy"
    ]
    assert [b["metadata"]["name"] for b in budgets if _selects(b["spec"]["selector"], worker_labels)] == [
        "slurmd"
    ]

    policy = find(objs, "NetworkPolicy")
    ctld_labels = find(objs, "StatefulSet")["spec"]["template"]["metadata"]["labels"]
    assert _labels_match(policy["spec"]["podSelector"]["matchLabels"], ctld_labels)
    reach_api = [r for r in policy["spec"]["ingress"] if any(p["port"] == 9200 for p in r["ports"])]
    for rule in reach_api:
        for peer in rule["from"]:
            sel = peer["podSelector"]["matchLabels"]
            # only workers, or Prometheus in the monitoring namespace (for /metrics; /v1 needs the token)
            assert sel == {"app.kubernetes.io/name": "slurmd"} or (
                sel == {"app.kubernetes.io/name": "prometheus"} and "namespaceSelector" in peer
            ), rule
    assert any(
        peer["podSelector"].get("matchLabels") == worker_labels
        or _labels_match(peer["podSelector"]["matchLabels"], worker_labels)
        for r in reach_api
        for peer in r["from"]
    )


def test_autoscalers_target_the_workers_on_our_metrics() -> None:
    hpa = find(render("overlays/hpa"), "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "slurmd"}
    assert all(m["external"]["metric"]["name"].startswith("slurm_sidecars_") for m in hpa["spec"]["metrics"])
    keda = find(render("overlays/keda"), "ScaledObject")
    assert keda["apiVersion"] == "keda.sh/v1alpha1"
    assert keda["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "slurmd"}
    for trigger in keda["spec"]["triggers"]:
        assert trigger["type"] == "prometheus"
        assert re.search(r"\bslurm_sidecars_\w+\{", trigger["metadata"]["query"])
        float(trigger["metadata"]["threshold"])
    # KEDA owns its own HPA: the two examples are never rendered together
    assert not [o for o in render("overlays/keda") if o["kind"] == "HorizontalPodAutoscaler"]
