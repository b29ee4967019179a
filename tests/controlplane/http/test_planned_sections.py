"""Without Kubernetes, a control plane still runs maintenance windows, and every place that shows
upgrades (the API, `status`, the operator's page) says what is missing for them and how to get it."""

from __future__ import annotations

import asyncio
import datetime as dt
import sys
from pathlib import Path

import pytest

from sidecars.devcluster import DevCluster
from sidecars.runtime.waits import within
from tests.controlplane.conftest import TOKEN, VIEWER, control_plane

CLI = str(Path(sys.executable).parent / "slurm-sidecars")


@pytest.mark.cluster(nodes=2)
@pytest.mark.parametrize("kubernetes", [True, False], ids=["no-config", "off"])
async def test_no_kubernetes_keeps_windows_and_says_what_upgrades_need(
    cluster: DevCluster, tmp_path: Path, kubernetes: bool
) -> None:
    start = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    async with control_plane(cluster, kubernetes=kubernetes) as cp:
        window = {"name": "fw", "nodes": "n2", "start": start, "duration": "1h", "reason": "BIOS update"}
        status, text = await cp.post("/v1/maintenance", window)
        assert status == 201, text
        why = "--kubernetes=off" if not kubernetes else "no in-cluster service account"

        status, body = await cp.get("/v1/upgrade")
        assert status == 200 and body["upgrade"] is None, body
        assert "through the Kubernetes API" in body["unavailable"] and why in body["unavailable"], body
        assert "--kubeconfig FILE" in body["unavailable"]
        status, text = await cp.post("/v1/upgrade", {"revision": "r2", "budget": "1"})
        assert status == 409 and why in text, text

        # the page's document: the window as a row, the upgrade section saying what it needs
        status, doc = await cp.get("/ui/api/state", headers={"Authorization": f"Bearer {VIEWER}"})
        assert status == 200, doc
        (row,) = doc["maintenance"]
        assert row["window"] == "fw" and row["nodes"] == "n2" and row["state"] == "scheduled", row
        assert row["reason"] == "BIOS update" and row["now"].startswith("n2: scheduled (starts "), row
        (upgrade,) = doc["upgrade"]
        assert upgrade["upgrades"] == "need the Kubernetes API" and why in upgrade["why and how"], upgrade

        # `status`, as an operator runs it
        token = tmp_path / "token"
        token.write_text(TOKEN)
        proc = await asyncio.create_subprocess_exec(
            CLI, "status", "--control-plane", cp.url, "--token-file", str(token),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await within(proc.communicate(), 30)
        text = out.decode()
        assert "MAINTENANCE AND UPGRADES" in text, text + err.decode()
        planned = text[text.index("MAINTENANCE AND UPGRADES") :]
        assert "fw " in planned and "BIOS update" in planned, text
        assert "upgrades unavailable: paced upgrades replace worker pods" in planned and why in planned, text
        assert "not available" not in planned
