"""A running worker agent, started as the kubelet starts it, carries only what its role uses: no
Kubernetes client in a classic worker, no `rich` (structlog loads it whenever it is installed), none
of the control plane's code (its web page included). Every megabyte is paid in thousands of pods."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
from pathlib import Path

import aiohttp
import pytest

from sidecars.devcluster import DevCluster, free_port
from sidecars.runtime.waits import within
from tests.helpers import worker_args

# the process as `python -m sidecars` runs it, writing at exit the modules it had loaded
DUMP = (
    "import atexit, json, sys\n"
    "path = sys.argv.pop(1)\n"
    "atexit.register(lambda: open(path, 'w').write(json.dumps("
    "sorted(m for m, v in sys.modules.items() if v is not None))))\n"
    "import runpy\nrunpy.run_module('sidecars', run_name='__main__')\n"
)
MUST_NOT_LOAD = (
    "kubernetes_asyncio",
    "rich",
    "pygments",
    "sidecars.controlplane",
    "sidecars.configsync",
    "sidecars.kube.client",
)


@pytest.mark.cluster(nodes=1)
@pytest.mark.timeout(90)
@pytest.mark.releases("slurm22")  # the imports are ours, not Slurm's: one release shows it
async def test_a_classic_worker_agent_loads_only_its_own_modules(cluster: DevCluster, tmp_path: Path) -> None:
    port = free_port()
    dump = tmp_path / "modules.json"
    argv = worker_args("n1", port, tmp_path / "a.sock")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", DUMP, str(dump), *argv,
        env=cluster.env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        async with aiohttp.ClientSession() as http:

            async def ready() -> None:
                while True:
                    with contextlib.suppress(aiohttp.ClientError):
                        async with http.get(f"http://127.0.0.1:{port}/readyz") as r:
                            if r.status == 200:
                                return
                    await asyncio.sleep(0.1)

            await within(ready(), 45)
            async with http.get(f"http://127.0.0.1:{port}/metrics") as r:
                assert r.status == 200  # its metrics rendered too: what a scrape loads is counted
        proc.send_signal(signal.SIGTERM)
        _, err = await within(proc.communicate(), 30)
        assert proc.returncode == 0, err.decode()[-2000:]
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    loaded = json.loads(dump.read_text())
    assert "sidecars.worker.service" in loaded  # it is the agent that was measured
    for name in MUST_NOT_LOAD:
        assert not [m for m in loaded if m == name or m.startswith(name + ".")], name
