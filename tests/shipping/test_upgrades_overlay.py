"""manifests/overlays/upgrades: the control plane apart from slurmctld's pod, so that a whole-cluster
upgrade (docs/upgrades.md) can stop slurmctld without stopping itself. The overlay renders and
validates with the other targets (tests/shipping/kube.py's TARGETS); here: where the control plane
runs, that its own parser takes the flags the overlay passes, and that the upgrade's preflight,
fed the overlay's objects through the fake API server, takes that layout and refuses the base's."""

from __future__ import annotations

import copy
import dataclasses
import secrets
from pathlib import Path

import pytest

from sidecars.controlplane.assembly import upgrade_role_names
from sidecars.controlplane.changes.cluster_roles.kube import KubeClusterRoles, KubeRoleNames, PreflightError
from sidecars.controlplane.changes.cluster_roles.kube_jobs import TEMPLATE_KEY, backup_job
from sidecars.controlplane.settings import ControlPlaneSettings, from_args
from sidecars.devcluster import DevCluster
from sidecars.kube import KubeClient
from sidecars.slurm import Version
from tests.fakekube import FakeKube, configuration
from tests.shipping.kube import Obj, find, flag_value, render
from tests.shipping.shipped import cli_parsers

OVERLAY = "overlays/upgrades"
LEADER = {"slurm-sidecars.io/control-plane": "leader"}  # what --leader-label puts on the holder's pod


def control_planes(target: str) -> list[tuple[Obj, Obj]]:
    """(workload, container) for every container that runs the control plane."""
    found = []
    for o in render(target):
        if o["kind"] not in {"StatefulSet", "Deployment"}:
            continue
        pod = o["spec"]["template"]["spec"]
        for c in [*pod.get("initContainers", []), *pod["containers"]]:
            if [*c.get("command", []), *c.get("args", [])][:2] == ["slurm-sidecars", "control-plane"]:
                found.append((o, c))
    return found


def pod_name(workload: Obj) -> str:
    """A name the workload's controller gives its pod: NAME-0 for a StatefulSet, NAME-HASH-SUFFIX
    for a Deployment's ReplicaSet."""
    name = workload["metadata"]["name"]
    return f"{name}-0" if workload["kind"] == "StatefulSet" else f"{name}-6c9f7b8d5-x2k4q"


def pod_volumes(workload: Obj) -> dict[str, Obj]:
    return {v["name"]: v for v in workload["spec"]["template"]["spec"].get("volumes", [])}


def test_the_control_plane_runs_in_a_pod_of_its_own_and_the_agents_reach_it() -> None:
    objs = render(OVERLAY)
    found = control_planes(OVERLAY)
    assert [(o["kind"], o["metadata"]["name"]) for o, _ in found] == [
        ("Deployment", "slurm-sidecars-control-plane")
    ]
    (deploy, container), [(base_home, _)] = found[0], control_planes("base")
    assert (base_home["kind"], base_home["metadata"]["name"]) == ("StatefulSet", "slurmctld")
    assert deploy["spec"]["replicas"] == 2  # one Lease: a follower stands by

    sts = find(objs, "StatefulSet", "slurmctld")
    pod = sts["spec"]["template"]["spec"]
    names = {c["name"] for c in [*pod["initContainers"], *pod["containers"]]}
    assert "control-plane" not in names
    assert {"munge", "config-sync", "slurmctld"} <= names
    # the operator's token went with the control plane: nothing left in slurmctld's pod reads it
    secrets = {v.get("secret", {}).get("secretName") for v in pod_volumes(sts).values()}
    assert "slurm-sidecars-token" not in secrets
    assert "slurm-sidecars-token" in {
        v.get("secret", {}).get("secretName") for v in pod_volumes(deploy).values()
    }

    # the agents' Service selects the Lease holder among the Deployment's pods, never slurmctld's
    labels = deploy["spec"]["template"]["metadata"]["labels"]
    svc = find(objs, "Service", "slurm-sidecars-control-plane")
    selector = svc["spec"]["selector"]
    assert LEADER.items() <= selector.items()
    rest = {k: v for k, v in selector.items() if k not in LEADER}
    assert rest and rest.items() <= labels.items()
    assert not rest.items() <= sts["spec"]["template"]["metadata"]["labels"].items()
    assert [p["targetPort"] for p in svc["spec"]["ports"]] == ["control-plane"]
    assert flag_value(container["command"], "--leader-label") == "true"
    # config-sync's port keeps a Service, on slurmctld's pod
    sync = [
        s
        for s in objs
        if s["kind"] == "Service" and any(p["targetPort"] == "config-sync" for p in s["spec"]["ports"])
    ]
    assert {"app.kubernetes.io/name": "slurmctld"} in [s["spec"]["selector"] for s in sync]


def test_it_speaks_to_slurm_as_the_base_pods_do() -> None:
    """munge with the key from the same Secret, its socket shared with the control plane; the client
    slurm.conf SLURM_CONF names rendered (client-conf) from the same ConfigMap's slurm.conf."""
    objs = render(OVERLAY)
    [(deploy, container)] = control_planes(OVERLAY)
    pod = deploy["spec"]["template"]["spec"]
    volumes = pod_volumes(deploy)
    [munge] = [c for c in pod["initContainers"] if c["name"] == "munge"]
    assert munge["restartPolicy"] == "Always"  # a native sidecar: up before, down after the control plane
    key = {m["name"] for m in munge["volumeMounts"]} - {"munge-socket"}
    assert [volumes[k]["secret"]["secretName"] for k in key] == ["slurm-auth"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["munge-socket"] == "/run/munge"
    assert {m["name"]: m["mountPath"] for m in munge["volumeMounts"]}["munge-socket"] == "/run/munge"

    env = {e["name"]: e for e in container["env"]}
    conf = Path(env["SLURM_CONF"]["value"])
    [mount] = [n for n, p in mounts.items() if conf.parent == Path(p)]
    assert "emptyDir" in volumes[mount]
    [render_step] = [c for c in pod["initContainers"] if c["name"] == "client-conf"]
    argv = render_step["command"]
    assert Path(argv[argv.index("--out") + 1]) == conf
    source = Path(argv[argv.index("--from") + 1])
    rendered = {m["name"] for m in render_step["volumeMounts"] if Path(m["mountPath"]) == conf.parent}
    assert rendered == {mount}
    [cm_mount] = [m["name"] for m in render_step["volumeMounts"] if Path(m["mountPath"]) == source.parent]
    cm = volumes[cm_mount]["configMap"]["name"]
    conf = source
    # the ConfigMap slurmctld's config-sync copies from, holding the file SLURM_CONF names
    assert cm == pod_volumes(find(objs, "StatefulSet", "slurmctld"))["slurm-config"]["configMap"]["name"]
    assert conf.name in find(objs, "ConfigMap", cm)["data"]
    # the pod's own name: the preflight's "own pod" check reads it
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"


def settings_of(
    argv: list[str], tmp: Path, pod: str, monkeypatch: pytest.MonkeyPatch
) -> ControlPlaneSettings:
    """The control plane's settings from `argv` (`slurm-sidecars control-plane ...`) as its own
    parser reads them. The token files are read at start: the same flags, on files of this test."""
    words = list(argv[2:])
    for flag in ("--token-file", "--viewer-token-file"):
        i = words.index(flag)
        path = tmp / flag.strip("-")
        path.write_text(secrets.token_hex(32) + "\n")
        words[i + 1] = str(path)
    monkeypatch.setenv("POD_NAME", pod)
    monkeypatch.setenv("POD_NAMESPACE", "slurm")
    return from_args(cli_parsers()["control-plane"].parse_args(words))


def upgrade_names(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> KubeRoleNames:
    [(deploy, container)] = control_planes(OVERLAY)
    settings = settings_of(container["command"], tmp, pod_name(deploy), monkeypatch)
    names, missing = upgrade_role_names(settings.upgrade, settings.namespace, settings.pod_name)
    assert missing == [] and names is not None
    return names


def test_its_upgrade_flags_are_the_control_planes_own_and_name_what_the_overlay_ships(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    objs = render(OVERLAY)
    names = upgrade_names(tmp_path, monkeypatch)
    dbd = find(objs, names.slurmdbd_kind, names.slurmdbd_name)
    ctld = find(objs, "StatefulSet", names.upgrade.slurmctld_statefulset)
    for workload, container in (
        (dbd, names.upgrade.slurmdbd_container),
        (ctld, names.upgrade.slurmctld_container),
    ):
        assert container in {c["name"] for c in workload["spec"]["template"]["spec"]["containers"]}
    # the state Jobs run the image the overlay pins for the control plane (the base's `images:`)
    [(_, control_plane)] = control_planes(OVERLAY)
    assert names.upgrade.state_image == control_plane["image"]
    assert (
        names.upgrade.state_image
        == find(objs, "StatefulSet", "slurmctld")["spec"]["template"]["spec"]["containers"][0]["image"]
    )
    # the example backup template passes the preflight's own reading (no literal credential)
    cm = find(objs, "ConfigMap", names.upgrade.backup_job_configmap)
    job = backup_job(cm["data"][TEMPLATE_KEY], names.upgrade.backup_job_configmap, "20260101T000000")
    assert job["kind"] == "Job"
    # and a Role bound to the control plane's ServiceAccount lets it act on those very names
    [(deploy, _)] = control_planes(OVERLAY)
    account = deploy["spec"]["template"]["spec"]["serviceAccountName"]
    granted = {
        (res, name, verb)
        for role in roles_of(objs, account)
        for r in role["rules"]
        for res in r["resources"]
        for name in r.get("resourceNames", [])
        for verb in r["verbs"]
    }
    assert {
        (f"{names.slurmdbd_kind.lower()}s", names.slurmdbd_name, "patch"),
        ("statefulsets", names.upgrade.slurmctld_statefulset, "patch"),
        ("statefulsets/scale", names.upgrade.slurmctld_statefulset, "patch"),
        ("configmaps", names.upgrade.backup_job_configmap, "get"),
    } <= granted


def roles_of(objs: tuple[Obj, ...], account: str) -> list[Obj]:
    """The Roles bound to ServiceAccount `account` in the rendering."""
    bound = {
        b["roleRef"]["name"]
        for b in objs
        if b["kind"] == "RoleBinding"
        and {"kind": "ServiceAccount", "name": account}
        in [{k: s[k] for k in ("kind", "name")} for s in b["subjects"]]
    }
    return [o for o in objs if o["kind"] == "Role" and o["metadata"]["name"] in bound]


def test_only_the_control_plane_may_run_jobs_or_move_the_workloads() -> None:
    """A Job may mount any Secret of the namespace: the upgrade's rights go to the control plane's
    ServiceAccount alone, not to the one config-sync uses in slurmctld's and slurmdbd's pods, and not
    to the base, whose layout cannot run the upgrade."""
    objs = render(OVERLAY)
    [(deploy, _)] = control_planes(OVERLAY)
    mine = deploy["spec"]["template"]["spec"]["serviceAccountName"]
    upgrade = {("batch", "jobs"), ("apps", "statefulsets"), ("apps", "statefulsets/scale")}

    def rights(roles: list[Obj]) -> set[tuple[str, str]]:
        return {
            (g, r)
            for role in roles
            for rule in role["rules"]
            for g in rule["apiGroups"]
            for r in rule["resources"]
        }

    assert upgrade <= rights(roles_of(objs, mine))
    others = {
        p["spec"]["template"]["spec"]["serviceAccountName"]
        for p in objs
        if p["kind"] in {"StatefulSet", "Deployment"} and p is not deploy
    }
    assert "slurm-sidecars-config-sync" in others and mine not in others
    for account in others:
        assert not upgrade & rights(roles_of(objs, account)), account
    base = render("base")
    assert not upgrade & rights([o for o in base if o["kind"] == "Role"])


def load(fake: FakeKube, state_location: str) -> None:
    """The overlay's workloads and backup template into the fake API server, as `kubectl apply`
    would leave them; slurmctld's state volume mounted where this dev cluster keeps its state."""
    for o in render(OVERLAY):
        key = (o["metadata"].get("namespace", ""), o["metadata"]["name"])
        if o["kind"] == "StatefulSet":
            obj = copy.deepcopy(o)
            obj["status"] = {"replicas": 1, "readyReplicas": 1}
            if key[1] == "slurmctld":
                [main] = obj["spec"]["template"]["spec"]["containers"]
                for m in main["volumeMounts"]:
                    if m["name"] == "statesave":
                        m["mountPath"] = state_location
            fake.stateful_sets[key] = obj
        elif o["kind"] == "ConfigMap":
            fake.config_maps[key] = copy.deepcopy(o)


@pytest.mark.timeout(120)
async def test_the_upgrades_preflight_takes_the_overlays_layout_and_refuses_the_bases(
    cluster: DevCluster, fake_kube: tuple[FakeKube, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake, url = fake_kube
    client = cluster.client(timeout=10.0)
    load(fake, (await client.show_config())["StateSaveLocation"])
    names = upgrade_names(tmp_path, monkeypatch)

    async def no_roll(revision: str, target: Version) -> None:
        raise AssertionError("the preflight rolls no worker")

    async with KubeClient(configuration(url)) as kube:
        roles = KubeClusterRoles(names, kube, lambda: client, no_roll)
        assert await roles.room() == []  # the overlay's own pod: a Deployment's
        # the same preflight, had the control plane stayed where the base runs it
        [(base_home, _)] = control_planes("base")
        in_slurmctld = dataclasses.replace(names, own_pod=pod_name(base_home))
        refused = KubeClusterRoles(in_slurmctld, kube, lambda: client, no_roll)
        with pytest.raises(PreflightError, match="runs in slurmctld-0, a pod of StatefulSet slurmctld"):
            await refused.room()
    assert not [r for r in fake.requests if r.method not in {"GET"}], "the preflight wrote"
