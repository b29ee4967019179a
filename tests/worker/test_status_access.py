"""The agent's /status maps this node's GPUs to job ids: a pod on the network gets it only with the
viewer token; without one configured, only a loopback caller (an exec, a port-forward) gets it. The
probes and metrics stay open."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest import mock

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from sidecars.devcluster import DevCluster
from sidecars.runtime.http import bearer_or_loopback
from sidecars.worker.service import STATUS
from tests.helpers import eventually
from tests.settings import VIEWER
from tests.worker.agents import running_agent, settings_for


async def get(port: int, path: str, token: str | None = None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}{path}", headers=headers) as r:
        return r.status, await r.json()


@pytest.mark.releases("slurm26")  # the server is ours; one release shows it
@pytest.mark.cluster(nodes=1, gpus=2, cpus=2)
async def test_the_agents_status_needs_the_viewer_token(
    cluster: DevCluster, sockdir: Path, tmp_path: Path
) -> None:
    mapping = tmp_path / "gpu-jobs"
    mapping.mkdir()
    s = settings_for(cluster, sockdir, job_mapping_dir=mapping, viewer_token=VIEWER)
    async with running_agent(cluster, s) as agent:
        assert agent.http_port is not None
        port = agent.http_port
        job = await cluster.sbatch("-t", "1", "--gres=gpu:1", wrap="sleep 60")
        await cluster.wait_job(job, "RUNNING")
        # what it would leak: which job runs on which GPU
        _, st = await eventually(
            lambda: get(port, "/status", VIEWER), lambda r: bool(r[1].get("gpu_jobs")), what="the GPU's job"
        )
        assert str(job) in str(st["gpu_jobs"])
        for anonymous in (None, "not-the-viewer-token-0123456789abcdef"):
            status, body = await get(port, "/status", anonymous)
            assert status == 401 and "gpu_jobs" not in body, body
        # the probes and the metrics need nothing
        for path in ("/livez", "/readyz"):
            assert (await get(port, path))[0] in (200, 503)
        async with aiohttp.ClientSession() as c, c.get(f"http://127.0.0.1:{port}/metrics") as r:
            assert r.status == 200


def request_from(remote: str) -> web.Request:
    transport = mock.Mock()
    transport.get_extra_info.side_effect = lambda name, default=None: (
        (remote, 40000) if name == "peername" else default
    )
    return make_mocked_request("GET", "/status", transport=transport)


@pytest.mark.parametrize(
    ("remote", "status"), [("10.0.0.9", 401), ("fd00::9", 401), ("127.0.0.1", 200), ("::1", 200)]
)
async def test_without_a_viewer_token_status_answers_loopback_callers_only(remote: str, status: int) -> None:
    async def handler(_: web.Request) -> web.StreamResponse:
        return web.json_response({"gpu_jobs": {"0": "42"}})

    answer = await bearer_or_loopback(STATUS, None)(request_from(remote), handler)
    assert answer.status == status
