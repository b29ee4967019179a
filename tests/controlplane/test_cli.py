"""`slurm-sidecars control-plane` as a process: serves, exits 0 on SIGTERM, 2 on a bad configuration."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import aiohttp
import pytest

from sidecars.devcluster import DevCluster, free_port
from sidecars.kube import load_configuration
from sidecars.runtime.waits import within
from tests.helpers import control_plane_process, eventually

pytestmark = pytest.mark.cluster(nodes=1)
CLI = str(Path(sys.executable).parent / "slurm-sidecars")
TOKEN = "tok-123-5e0b8c7d1a9f2e4b6c3d-0f9e8d7c"
VIEWER = "viewer-456-a1b2c3d4e5f60718293a-4b5c6d7e"


@pytest.mark.releases("slurm24")  # the process's life is ours, not Slurm's
async def test_serves_until_sigterm_then_exits_0(cluster: DevCluster, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(f"{TOKEN}\n")
    viewer = tmp_path / "viewer"
    viewer.write_text(f"{VIEWER}\n")
    port = free_port()
    env = {
        **cluster.env,
        "SIDECARS_TOKEN_FILE": str(token),
        "SIDECARS_VIEWER_TOKEN_FILE": str(viewer),
        "SIDECARS_KUBERNETES": "off",
        "SIDECARS_INTERVAL_SECONDS": "0.5",
    }
    proc = await control_plane_process(env, port, stderr=asyncio.subprocess.PIPE)
    try:
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKEN}"}) as s:

            async def ready() -> int:
                try:
                    async with s.get(f"http://127.0.0.1:{port}/readyz") as r:
                        return r.status
                except aiohttp.ClientConnectionError:
                    return 0

            await eventually(ready, lambda st: st == 200, within=20, what="readyz")
            async with s.get(f"http://127.0.0.1:{port}/v1/nodes") as r:
                assert [n["name"] for n in await r.json()] == ["n1"]
        proc.send_signal(signal.SIGTERM)
        _, err = await within(proc.communicate(), 10)
        assert proc.returncode == 0
        assert TOKEN.encode() not in err and VIEWER.encode() not in err  # no token is ever logged
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_bad_configuration_exits_2(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(f"{TOKEN}\n")
    viewer = tmp_path / "viewer"
    viewer.write_text(f"{VIEWER}\n")
    operator = ["control-plane", "--http", "127.0.0.1:0", "--token-file", str(token)]
    for given in (
        ["control-plane", "--http", "127.0.0.1:0", "--token-file", str(tmp_path / "missing")],
        ["control-plane", "--http", "nope", "--token-file", str(tmp_path / "missing")],
        # the web page's settings: no viewer token, one that cannot be read, the operator's again,
        # config-sync not as a URL
        operator,
        [*operator, "--viewer-token-file", str(token)],
        [*operator, "--viewer-token-file", "/nope"],
        [
            "control-plane",
            "--http",
            "127.0.0.1:0",
            "--token-file",
            str(token),
            "--config-sync",
            "127.0.0.1:9100",
        ],
        # topology: a label key that is none, a topology name Slurm could not take
        ["control-plane", "--http", "127.0.0.1:0", "--token-file", str(token), "--topology-labels", "a b,c"],
        ["control-plane", "--http", "127.0.0.1:0", "--token-file", str(token), "--topology-name", "x:y"],
        # a renewal period the leader would step down before reaching (2/3 of the lease)
        ["control-plane", "--http", "127.0.0.1:0", "--token-file", str(token), "--renew-seconds", "10"],
    ):
        argv = given
        if "--viewer-token-file" not in given and len(given) > 5:  # refused for what else it says
            argv = [*given, "--viewer-token-file", str(viewer)]
        proc = await asyncio.create_subprocess_exec(
            CLI, *argv, stderr=asyncio.subprocess.PIPE, env={**os.environ, "SIDECARS_KUBERNETES": "off"}
        )
        _, err = await proc.communicate()
        assert proc.returncode == 2, err
        assert err.decode().count("\n") == 1


async def test_without_a_cluster_config_kubernetes_is_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    assert await load_configuration() is None
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("""
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://127.0.0.1:1"}}]
users: [{name: u, user: {token: abc}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
""")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    conf = await load_configuration()
    assert conf is not None and conf.host == "http://127.0.0.1:1"
