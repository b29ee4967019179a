"""manifests/ha: two controller pods on one shared ReadWriteMany StateSaveLocation, named in
`SlurmctldHost` in pod order; every client given both; each slurmctld's probes pass for the one in
control and for a healthy standby alike (never slurmctld's own /readyz, which a standby fails)."""

from __future__ import annotations

from typing import Any

from sidecars.configsync.peers import others
from sidecars.controlplane.fleet.holder_label import LABEL, VALUE
from sidecars.slurm.standby import host_names
from tests.shipping.kube import commands, containers, find, flag_value, render
from tests.shipping.shipped import cli_parsers

Obj = dict[str, Any]
CONTROLLER_PROBE = ["slurm-sidecars", "probe", "controller", "--url", "http://127.0.0.1:6817"]


def _sts() -> Obj:
    return find(render("ha"), "StatefulSet", "slurmctld")


def test_two_controllers_named_in_pod_order_in_the_one_slurm_conf() -> None:
    sts = _sts()
    assert sts["spec"]["replicas"] == 2
    assert sts["spec"]["podManagementPolicy"] == "Parallel"  # the backup starts without the primary
    conf = find(render("ha"), "ConfigMap", "slurm-config")["data"]["slurm.conf"]
    assert host_names(conf) == ["slurmctld-0", "slurmctld-1"]
    hosts = [ln for ln in conf.splitlines() if ln.startswith("SlurmctldHost=")]
    # each pod by its address in the headless Service, which publishes not-ready pods too
    assert hosts == [f"SlurmctldHost=slurmctld-{i}(slurmctld-{i}.slurmctld)" for i in (0, 1)]
    svc = find(render("ha"), "Service", sts["spec"]["serviceName"])
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
    # the rest of the file is the base's
    base = find(render("base"), "ConfigMap", "slurm-config")["data"]["slurm.conf"]
    assert _unnamed(conf) == _unnamed(base)


def _unnamed(conf: str) -> list[str]:
    """slurm.conf's lines but comments and `SlurmctldHost`."""
    return [ln for ln in conf.splitlines() if not ln.lstrip().startswith(("#", "SlurmctldHost"))]


def test_the_state_is_one_shared_claim_mounted_where_slurm_conf_says() -> None:
    sts = _sts()
    assert "volumeClaimTemplates" not in sts["spec"]  # not one volume per pod
    claim = find(render("ha"), "PersistentVolumeClaim", "slurmctld-statesave")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    pod = sts["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "statesave")
    assert volume == {"name": "statesave", "persistentVolumeClaim": {"claimName": "slurmctld-statesave"}}
    conf = find(render("ha"), "ConfigMap", "slurm-config")["data"]["slurm.conf"]
    where = next(ln.split("=", 1)[1] for ln in conf.splitlines() if ln.startswith("StateSaveLocation="))
    mounts = {
        c["name"]: m
        for c in pod["containers"] + pod["initContainers"]
        for m in c.get("volumeMounts", [])
        if m["name"] == "statesave"
    }
    assert mounts["slurmctld"]["mountPath"] == where and not mounts["slurmctld"].get("readOnly")
    assert mounts["config-sync"]["mountPath"] == where and mounts["config-sync"]["readOnly"]  # the dry run
    # one node lost never takes both
    anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["topologyKey"] == "kubernetes.io/hostname"
    assert anti[0]["labelSelector"]["matchLabels"] == sts["spec"]["selector"]["matchLabels"]


def test_each_slurmctld_is_probed_alone_and_a_standby_passes() -> None:
    ctld = next(c for c in containers("ha") if c.spec["name"] == "slurmctld")
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        spec = ctld.spec[probe]
        assert set(spec) - {"periodSeconds", "timeoutSeconds", "failureThreshold"} == {"exec"}, spec
        assert spec["exec"]["command"] == CONTROLLER_PROBE, probe
    # room for a backup's silent first seconds, and a primary loading its state
    startup = ctld.spec["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 60
    env = {e["name"]: e.get("value") for e in ctld.spec["env"]}
    assert env["TMPDIR"] == "/tmp" and any(m["mountPath"] == "/tmp" for m in ctld.spec["volumeMounts"])
    # the file this pod's slurmctld reads: the probe finds its own SlurmctldHost entry in it
    assert env["SLURM_CONF"] == ctld.spec["command"][-1]
    # nothing anywhere asks slurmctld's own /readyz (a standby fails it for ever)
    for c in containers("ha"):
        for _, argv in commands(c.spec):
            assert not any("6817/readyz" in word for word in argv), c.where
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            assert c.spec.get(probe, {}).get("httpGet", {}).get("port") not in (6817, "slurmctld"), c.where


def test_every_client_is_given_both_controllers() -> None:
    slurmd = next(c for c in containers("ha") if c.spec["name"] == "slurmd")
    server = flag_value(slurmd.spec["command"], "--conf-server")
    assert server == "slurmctld-0.slurmctld:6817,slurmctld-1.slurmctld:6817"
    base = next(c for c in containers("base") if c.spec["name"] == "slurmd")
    assert flag_value(base.spec["command"], "--conf-server") == "slurmctld-0.slurmctld:6817"


def test_the_agents_service_reaches_the_control_plane_that_holds_the_lease() -> None:
    plane = next(c for c in containers("ha") if c.spec["name"] == "control-plane")
    assert flag_value(plane.spec["command"], "--leader-label") == "true"
    svc = find(render("ha"), "Service", "slurm-sidecars-control-plane")
    assert svc["spec"]["selector"] == {"app.kubernetes.io/name": "slurmctld", LABEL: VALUE}
    # the agents are pointed at that Service
    agent = next(c for c in containers("ha") if c.spec["name"] == "worker")
    assert flag_value(agent.spec["command"], "--control-plane") == "http://slurm-sidecars-control-plane:9200"


def test_each_config_sync_asks_every_other_controller_pod_and_not_itself() -> None:
    sts = _sts()
    sync = next(c for c in containers("ha") if c.spec["name"] == "config-sync")
    argv = sync.spec["command"]
    assert argv[:2] == ["slurm-sidecars", "config-sync"]
    parser = cli_parsers()["config-sync"]
    args = parser.parse_args(argv[2:])
    # its own name from the downward API, expanded by the kubelet in the command
    assert args.pod_name == "$(POD_NAME)"
    env = {e["name"]: e for e in sync.spec["env"]}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    # one peer per replica, each at its DNS name in the headless governing Service and config-sync's
    # port, fully qualified (the namespace from the downward API) so no search list is gone through
    port = args.http.rsplit(":", 1)[1]
    service = sts["spec"]["serviceName"]
    replicas = sts["spec"]["replicas"]
    pods = [f"{sts['metadata']['name']}-{i}" for i in range(replicas)]
    fqdn = f"{service}.$(POD_NAMESPACE).svc.cluster.local."
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert sorted(args.peer) == sorted(f"http://{p}.{fqdn}:{port}" for p in pods)
    assert find(render("ha"), "Service", service)["spec"]["publishNotReadyAddresses"] is True
    # each pod, as the kubelet starts it, asks exactly the others
    for pod in pods:
        assert others(tuple(args.peer), pod) == tuple(f"http://{p}.{fqdn}:{port}" for p in pods if p != pod)
    # the peers' answers need the viewer token, which it sends them
    assert flag_value(argv, "--viewer-token-file") is not None
    # asking its own slurmctld alone (who writes) goes through a copy of slurm.conf in a writable /tmp
    assert any(m["mountPath"] == "/tmp" and not m.get("readOnly") for m in sync.spec["volumeMounts"])
    # the pods are the controllers slurm.conf names, in the same order
    conf = find(render("ha"), "ConfigMap", "slurm-config")["data"]["slurm.conf"]
    assert host_names(conf) == pods
