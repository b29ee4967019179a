"""manifests/overlays/restapi: slurmrestd with config-sync (`--daemon slurmrestd`) beside it. The
overlay renders, validates and passes the shipping checks with the other targets (tests/shipping/
kube.py's TARGETS: no Secret value, least privilege, non-root sidecars, the API token only where the
API is called); here, what config-sync's drained restart relies on in that pod."""

from __future__ import annotations

from pathlib import Path

from sidecars.configsync.restd import words
from sidecars.configsync.restd.drain import STOP_REQUEST
from sidecars.configsync.settings import DrainSettings
from tests.shipping.kube import Obj, find, flag_value, render
from tests.shipping.shipped import cli_parsers

OVERLAY = "overlays/restapi"


def _pod() -> tuple[Obj, dict[str, Obj]]:
    deployment = find(render(OVERLAY), "Deployment", "slurmrestd")
    spec = deployment["spec"]["template"]["spec"]
    return deployment, {c["name"]: c for c in [*spec["initContainers"], *spec["containers"]]}


def _mounts(c: Obj) -> dict[str, Obj]:
    return {m["name"]: m for m in c.get("volumeMounts", [])}


def test_config_sync_stages_what_slurmrestd_reads_as_slurmrestd_s_user() -> None:
    deployment, by_name = _pod()
    sync, restd = by_name["config-sync"], by_name["slurmrestd"]
    argv = list(sync["command"])
    cli_parsers()["config-sync"].parse_args(argv[2:])  # its own parser takes every word
    assert flag_value(argv, "--daemon") == "slurmrestd"
    assert flag_value(argv, "--restart-policy") == "restart"
    target = Path(str(flag_value(argv, "--target")))
    env = {e["name"]: e.get("value") for e in restd["env"]}
    assert Path(env["SLURM_CONF"]).parent == target
    assert env["SLURM_JWT"] == "daemon"
    # one user: config-sync owns what it stages 0400, and slurmrestd alone may read it
    uid = {c["securityContext"]["runAsUser"] for c in (sync, restd)}
    assert uid == {65534}
    # slurmrestd's container cannot write its files; the key's Secret reaches config-sync only
    assert _mounts(restd)["slurm-etc"]["readOnly"] is True
    assert "jwt-key" in _mounts(sync) and "jwt-key" not in _mounts(restd)
    assert flag_value(argv, "--secret-source") == _mounts(sync)["jwt-key"]["mountPath"]
    # the port whose connections are waited out is slurmrestd's
    assert int(str(flag_value(argv, "--restd-port"))) == restd["ports"][0]["containerPort"] == 6820
    # the stop request: where config-sync leaves it and where slurmrestd's command looks
    for c in (sync, restd):
        assert _mounts(c)["slurmrestd-control"]["mountPath"] == str(STOP_REQUEST.parent)
    assert f"request={STOP_REQUEST}" in restd["command"][2]
    # slurmrestd's output: where its command appends it, after the line that says it starts
    log_file = Path(str(flag_value(argv, "--restd-log-file")))
    assert log_file.parent == STOP_REQUEST.parent
    assert f"words={log_file}" in restd["command"][2]
    assert f'echo "{words.STARTING}" >>"$words"' in restd["command"][2]
    assert "SLURM_JWT" not in str(sync.get("env", []))
    assert deployment["spec"]["template"]["spec"]["automountServiceAccountToken"] is False


def test_the_service_keeps_an_endpoint_while_a_replica_drains() -> None:
    deployment, by_name = _pod()
    assert deployment["spec"]["replicas"] >= 2
    pdb = find(render(OVERLAY), "PodDisruptionBudget", "slurmrestd")
    assert pdb["spec"]["minAvailable"] == 1
    service = find(render(OVERLAY), "Service", "slurmrestd")
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert not service["spec"].get("publishNotReadyAddresses")  # not ready means out of the endpoints
    # and the replicas drain one at a time: the turn is a Lease the overlay ships, so that config-sync
    # needs no right to create one (its rights: test_security_manifests)
    turn = flag_value(list(by_name["config-sync"]["command"]), "--restd-turn-lease")
    lease = find(render(OVERLAY), "Lease", str(turn))
    assert lease["metadata"]["namespace"] == "slurm" and lease["spec"] == {}
    # the turn is handed on --restd-unready-seconds after config-sync says ready: both probes must
    # have passed by then, or the next replica drains before the Service has this one back
    argv = list(by_name["config-sync"]["command"])
    hold = float(flag_value(argv, "--restd-unready-seconds") or DrainSettings().settle_seconds)
    periods = sum(by_name[c]["readinessProbe"]["periodSeconds"] for c in ("config-sync", "slurmrestd"))
    assert periods < hold, (periods, hold)
    probe = by_name["config-sync"]["readinessProbe"]["exec"]["command"]
    assert probe[:3] == ["slurm-sidecars", "probe", "readyz"]
    assert flag_value(probe, "--url") == "http://127.0.0.1:9102"
