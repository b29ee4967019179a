"""What the manifests promise docs/security.md: every Slurm command a sidecar runs reads a file we
wrote (config-sync's verified set, or the client file `client-conf` rendered), never a ConfigMap or
Secret volume a config author fills."""

from __future__ import annotations

from typing import Any

import pytest

from tests.shipping.kube import TARGETS, containers

# volumes whose files come from the API server's objects: their authors, not we, choose the bytes
AUTHORED = ("configMap", "secret", "projected", "downwardAPI")


def _volume_at(path: str, container: dict[str, Any], pod: dict[str, Any]) -> dict[str, Any] | None:
    mounts = [
        m for m in container.get("volumeMounts", []) if path.startswith(m["mountPath"].rstrip("/") + "/")
    ]
    if not mounts:
        return None
    mount = max(mounts, key=lambda m: len(m["mountPath"]))
    return next(v for v in pod.get("volumes", []) if v["name"] == mount["name"])


@pytest.mark.parametrize("target", TARGETS)
def test_every_slurm_conf_a_sidecar_reads_is_one_we_wrote(target: str) -> None:
    seen = 0
    for c in containers(target):
        conf = next((e.get("value") for e in c.spec.get("env", []) if e["name"] == "SLURM_CONF"), None)
        if conf is None:
            continue
        seen += 1
        volume = _volume_at(conf, c.spec, c.pod)
        assert volume is not None, f"{c.where}: SLURM_CONF {conf} is on no volume"
        authored = [k for k in AUTHORED if k in volume]
        assert not authored, f"{c.where}: SLURM_CONF {conf} lies in a {authored[0]} volume"
    assert seen, target


def test_the_control_plane_and_slurmdbd_config_sync_read_a_rendered_client_file() -> None:
    readers = {
        "overlays/upgrades Deployment/slurm-sidecars-control-plane containers[control-plane]",
        "overlays/upgrades StatefulSet/slurmdbd initContainers[config-sync]",
    }
    found = {c.where: c for c in containers("overlays/upgrades") if c.where in readers}
    assert set(found) == readers
    for c in found.values():
        renderers = [
            init
            for init in c.pod.get("initContainers", [])
            if "client-conf" in " ".join([*init.get("command", []), *init.get("args", [])])
        ]
        assert len(renderers) == 1, c.where
        mounts_config = [m for m in c.spec.get("volumeMounts", []) if m["name"] == "slurm-config"]
        assert mounts_config == [], f"{c.where} mounts the raw ConfigMap"
