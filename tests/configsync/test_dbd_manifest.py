"""manifests/overlays/accounting: slurmdbd's pod with config-sync `--daemon slurmdbd`, valid for the
Kubernetes releases the other manifests target, and wired as config-sync for slurmdbd needs (the
Secret read as SlurmUser, the target the directory slurmdbd reads, the pid file and processes
visible for a stop, the first sync before slurmdbd starts)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from tests.shipping.kube import K8S_VERSIONS, find, flag_value, render
from tests.shipping.shipped import parser_flags

OVERLAY = "overlays/accounting"


def _pod() -> dict[str, Any]:
    spec: dict[str, Any] = find(render(OVERLAY), "StatefulSet", "slurmdbd")["spec"]["template"]["spec"]
    return spec


def _container(name: str) -> dict[str, Any]:
    pod = _pod()
    (c,) = [c for c in pod["initContainers"] + pod["containers"] if c["name"] == name]
    return dict(c)


def _mounts(c: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["name"]: m for m in c.get("volumeMounts", [])}


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_every_object_validates(version: str) -> None:
    v = kubernetes_validate.latest_version() if version == "latest" else version
    objs = render(OVERLAY)
    assert {o["metadata"]["name"] for o in objs if o["kind"] == "StatefulSet"} == {"slurmctld", "slurmdbd"}
    for obj in objs:
        kubernetes_validate.validate(obj, v, strict=True)


def test_config_sync_is_wired_for_slurmdbd() -> None:
    pod, sync, dbd = _pod(), _container("config-sync"), _container("slurmdbd")
    argv = sync["command"]
    assert argv[:2] == ["slurm-sidecars", "config-sync"]
    flags = {w for w in argv if w.startswith("--")}
    assert flags <= parser_flags("config-sync"), flags - parser_flags("config-sync")
    assert flag_value(argv, "--daemon") == "slurmdbd"
    # slurmdbd reads its file from the directory SLURM_CONF names: config-sync's target
    (conf,) = [e["value"] for e in dbd["env"] if e["name"] == "SLURM_CONF"]
    assert str(Path(conf).parent) == flag_value(argv, "--target")
    # the file staged is owned by config-sync's user, who must be slurmdbd's SlurmUser (401)
    assert sync["securityContext"]["runAsUser"] == dbd["securityContext"]["runAsUser"] == 401
    assert pod["securityContext"]["fsGroup"] == 401  # the Secret readable by that user's group
    secret = next(v for v in pod["volumes"] if v["name"] == _source_volume(sync, argv))
    assert secret["secret"]["secretName"] == "slurmdbd-conf" and secret["secret"]["defaultMode"] == 0o400
    # a slurmdbd that waits on its database answers nothing: config-sync signals the pid it wrote
    assert pod["shareProcessNamespace"] is True
    assert "slurmdbd-run" in _mounts(sync) and "slurmdbd-run" in _mounts(dbd)
    # slurmdbd cannot change what it reads; config-sync (and only it) writes the target
    assert _mounts(dbd)["slurm-etc"].get("readOnly") is True
    assert not _mounts(sync)["slurm-etc"].get("readOnly")
    # slurmdbd starts once the first set is staged: config-sync is a native sidecar, ready after it
    assert sync["restartPolicy"] == "Always"
    port = flag_value(argv, "--http").rsplit(":", 1)[1]  # type: ignore[union-attr]
    assert sync["startupProbe"]["exec"]["command"][-1] == f"http://127.0.0.1:{port}"
    assert "readyz" in sync["startupProbe"]["exec"]["command"]


def _source_volume(sync: dict[str, Any], argv: list[str]) -> str:
    path = flag_value(argv, "--secret-source")
    (name,) = [m["name"] for m in sync["volumeMounts"] if m["mountPath"] == path]
    return str(name)
