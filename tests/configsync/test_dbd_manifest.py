"""manifests/overlays/accounting: slurmdbd's pod with config-sync `--daemon slurmdbd`, valid for the
Kubernetes releases the other manifests target, and wired as config-sync for slurmdbd needs (the
Secret read as SlurmUser, the target the directory slurmdbd reads, the pid file visible and a stop
request honoured by slurmdbd's container without a shared process namespace, the first sync before
slurmdbd starts)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from sidecars.configsync.slurmdbd import apply as dbdapply
from sidecars.runtime import process
from tests.helpers import eventually
from tests.shipping.kube import K8S_VERSIONS, TARGETS, find, flag_value, pod_specs, render
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
    # a slurmdbd that waits on its database answers nothing: config-sync leaves a stop request that
    # slurmdbd's container honours (no shared process namespace); the PidFile tells a new start
    assert "shareProcessNamespace" not in pod
    assert "slurmdbd-run" in _mounts(sync) and "slurmdbd-run" in _mounts(dbd)
    control = str(dbdapply.STOP_REQUEST.parent)
    assert (
        _mounts(sync)["slurmdbd-control"]["mountPath"]
        == _mounts(dbd)["slurmdbd-control"]["mountPath"]
        == control
    )
    assert not _mounts(sync)["slurmdbd-control"].get("readOnly")
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


def _ours(image: str) -> bool:
    """An image we build: ours, or a site's build of our Dockerfile on Slinky's (`*-with-sidecars`)."""
    return image.startswith("slurm-sidecars/") or image.split(":", maxsplit=1)[0].endswith("-with-sidecars")


@pytest.mark.parametrize("target", [*TARGETS, OVERLAY])
def test_no_pod_shares_its_processes_with_an_image_not_ours(target: str) -> None:
    """A third-party image in a pod whose process namespace is shared (or the host's) could read our
    processes' memory, environment and open files through /proc (issue 35)."""
    for where, pod in pod_specs(target):
        shared = pod.get("shareProcessNamespace") or pod.get("hostPID")
        images = [c.get("image", "") for c in pod.get("initContainers", []) + pod.get("containers", [])]
        assert not (shared and [i for i in images if not _ours(i)]), (
            f"{where} shares its processes with {images}"
        )


STAND_IN = """#!/bin/sh
# slurmdbd -D's stand-in: its pid where the test reads it, a SIGTERM noted, exit 0 on it
trap 'echo TERM >> "$LOG"; exit 0' TERM
echo $$ > "$PIDS"
while :; do sleep 0.1; done
"""


async def _slurmdbd_container(
    tmp_path: Path, leftover: bool = False
) -> tuple[process.Child, Path, Path, Path]:
    """slurmdbd's container's own command as shipped, its request path moved into tmp_path, around a
    stand-in `slurmdbd` on PATH."""
    (script,) = [w for w in _container("slurmdbd")["command"] if "slurmdbd -D" in w]
    assert f"request={dbdapply.STOP_REQUEST}\n" in script  # the one path config-sync writes
    request = tmp_path / "control" / "stop"
    request.parent.mkdir()
    if leftover:
        request.write_text("from a previous life\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "slurmdbd").write_text(STAND_IN)
    (bin_dir / "slurmdbd").chmod(0o755)
    pids, log = tmp_path / "pids", tmp_path / "log"
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", PIDS=str(pids), LOG=str(log))
    script = script.replace(f"request={dbdapply.STOP_REQUEST}", f"request={request}")
    child = await process.start(["sh", "-c", script], env=env)
    await eventually(lambda: pids.exists() and pids.read_text().strip(), what="the stand-in slurmdbd started")
    return child, request, pids, log


async def test_a_stop_request_stops_slurmdbd_and_its_container(tmp_path: Path) -> None:
    """What config-sync's stop does in a pod: the request written by dbdapply.request_stop makes the
    container's command SIGTERM slurmdbd and end, for the kubelet to start it again; a request left
    from before the start is dropped, not taken for a new one."""
    child, request, _, log = await _slurmdbd_container(tmp_path, leftover=True)
    try:
        assert not request.exists() and not log.exists()  # the leftover dropped before slurmdbd ran
        assert dbdapply.request_stop(request)
        assert await child.wait(60) == 0
        assert log.read_text() == "TERM\n" and not request.exists()
    finally:
        await child.kill()


async def test_the_containers_sigterm_reaches_slurmdbd(tmp_path: Path) -> None:
    # the pod's end: the kubelet's SIGTERM goes to the shell (pid 1 in the container), which passes it on
    child, _, _, log = await _slurmdbd_container(tmp_path)
    try:
        child.signal(signal.SIGTERM)
        assert await child.wait(60) == 0
        assert log.read_text() == "TERM\n"
    finally:
        await child.kill()


def test_a_stop_request_needs_its_directory(tmp_path: Path) -> None:
    assert not dbdapply.request_stop(tmp_path / "missing" / "stop")  # no container watches: said so
    assert dbdapply.request_stop(tmp_path / "stop") and (tmp_path / "stop").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["stop"]  # written whole, renamed into place
