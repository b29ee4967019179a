"""`slurm-sidecars probe restd-livez|restd-readyz` against a real slurmrestd (Debian's, with the
auth/jwt plugin) beside a real cluster, run as the kubelet runs an exec probe: a process, its exit
code and its words. 26.05 answers through its own `/livez` and `/readyz` (behind the token) and a
ping; 24.11, which has no health paths, through a ping alone. Readiness fails while no controller
responds behind slurmrestd (26.05's own `/readyz` stays 204 then), and comes back with slurmctld."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from sidecars.cli import self_argv
from sidecars.devcluster import DevCluster
from sidecars.devcluster import restd as devrestd
from sidecars.slurm import restd as restd_edge

pytestmark = [
    pytest.mark.releases("slurm24", "slurm26"),
    pytest.mark.per_release("each release's slurmrestd serves other probes and API versions"),
    pytest.mark.cluster(nodes=1, jwt=True),
]

# each probe run is a fresh interpreter (about 1 s of CPU); on a loaded machine several times that
PROBE_TIMEOUT_SECONDS = 20.0
SETTLE_SECONDS = 120.0  # how long a change of slurmctld's state may take to reach slurmrestd's ping


async def _probe(which: str, url: str, token_file: Path | None) -> tuple[int | None, str]:
    argv = self_argv("probe", which, "--url", url, "--timeout-seconds", str(PROBE_TIMEOUT_SECONDS))
    if token_file is not None:
        argv += ["--token-file", str(token_file)]
    done = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env=dict(os.environ)
    )
    out, _ = await done.communicate()
    return done.returncode, out.decode()


async def _until(which: str, url: str, token_file: Path, code: int) -> str:
    """Run the probe until it exits `code`; its words then. No pause between runs: each is a new
    interpreter's start (about a second of CPU), which paces the loop by itself."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while True:
        rc, words = await _probe(which, url, token_file)
        if rc == code:
            return words
        assert time.monotonic() < deadline, f"{which} still exits {rc} after {SETTLE_SECONDS:g}s: {words}"


async def _token_file(cluster: DevCluster, path: Path) -> Path:
    path.write_text(await devrestd.token(cluster) + "\n")
    path.chmod(0o600)
    return path


async def test_ready_while_a_controller_responds_behind_slurmrestd(
    cluster: DevCluster, tmp_path: Path
) -> None:
    token = await _token_file(cluster, tmp_path / "token")
    new = cluster.release.short >= "26.05"
    async with devrestd.serving(cluster) as restd:
        rc, words = await _probe("restd-livez", restd.url, token)
        assert rc == 0, words
        assert ("/livez: 204" if new else "/livez: 404 (release before 26.05)") in words
        rc, words = await _probe("restd-readyz", restd.url, token)
        assert rc == 0, words
        # 26.05: its own /readyz, then the newest ping it serves; 24.11: the newest of v0.0.40-42
        assert ("/readyz: 204; /slurm/v0.0.45/ping" if new else "/slurm/v0.0.42/ping") in words, words
        assert "(primary) up" in words

        await cluster.stop_slurmctld()
        words = await _until("restd-readyz", restd.url, token, 1)
        assert "no controller responds" in words and "(primary) down" in words, words
        rc, words = await _probe("restd-livez", restd.url, token)
        assert rc == 0, f"slurmrestd itself is live with slurmctld away: {words}"

        await cluster.start_slurmctld()
        words = await _until("restd-readyz", restd.url, token, 0)
        assert "(primary) up" in words


async def test_a_refused_token_and_a_stopped_slurmrestd_say_so(cluster: DevCluster, tmp_path: Path) -> None:
    token = await _token_file(cluster, tmp_path / "token")
    # signed with another key: what a caller holds after the key was rotated under it
    forged = tmp_path / "forged"
    header, payload, _ = token.read_text().strip().split(".")
    forged.write_text(f"{header}.{payload}.{'A' * 43}\n")
    async with devrestd.serving(cluster) as restd:
        for which in ("restd-livez", "restd-readyz"):
            # 26.05 refuses with a malformed reply (its 401 written twice): still read as a 401
            rc, words = await _probe(which, restd.url, None)
            assert rc == 1, words
            assert "401: slurmrestd refused the token (none presented)" in words, words
        # slurmrestd passes a token on unchecked (26.05's own /readyz is 204 with it): slurmctld refuses it
        rc, words = await _probe("restd-readyz", restd.url, forged)
        assert rc == 1, words
        assert "Protocol authentication error" in words, words
        url = restd.url
    rc, words = await _probe("restd-livez", url, token)
    assert rc == 1 and "unreachable" in words, words


@pytest.mark.cluster(nodes=1, controllers=2, slurmctld_timeout_seconds=5, jwt=True)
async def test_it_follows_the_controller_in_control_of_an_ha_pair(
    cluster: DevCluster, tmp_path: Path
) -> None:
    """slurmrestd reaches whichever controller of the SlurmctldHost list is in control: the probe
    lists both, stays ready while one answers, and a request that needs the controller in control
    (`/diag`, at v0.0.42, which 24.11 and 26.05 both serve) goes through after the backup took over."""
    token = await _token_file(cluster, tmp_path / "token")
    async with devrestd.serving(cluster) as restd:
        words = await _until("restd-readyz", restd.url, token, 0)
        assert "ctld-a (primary) up" in words and "ctld-b" in words, words
        assert await _diag(restd.port, token) == 200

        await cluster.kill_controller("ctld-a")
        await cluster.wait_primary("ctld-b", timeout=SETTLE_SECONDS)
        deadline = time.monotonic() + SETTLE_SECONDS
        while "ctld-a (primary) down" not in (words := (await _probe("restd-readyz", restd.url, token))[1]):
            assert time.monotonic() < deadline, words
        assert "restd-readyz: ok" in words and " up" in words.split("ctld-b", 1)[1], words
        assert await _diag(restd.port, token) == 200

        await cluster.kill_controller("ctld-b")
        words = await _until("restd-readyz", restd.url, token, 1)
        assert "no controller responds" in words, words


async def _diag(port: int, token_file: Path) -> int:
    headers = restd_edge.auth_headers(token_file.read_text().strip())
    reply = await restd_edge.get("127.0.0.1", port, "/slurm/v0.0.42/diag", headers, PROBE_TIMEOUT_SECONDS)
    return reply.status
