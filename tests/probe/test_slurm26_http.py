"""26.05's authenticated HTTP endpoints against a real HA pair: `/readyz?verbose` read with a JWT
where the probe has one (root's or SlurmUser's only) and the plain `/readyz` with the reason where
it has none or is refused; a standby's `/metrics` 303 followed to the primary, never a failure;
metrics behind `MetricsAuthUsers` read with a token, and "unauthorized"/"forbidden" without one
or with the wrong one. 22.05 and 24.11 (no HTTP on the controller's port) answer as before,
credential or not."""

from __future__ import annotations

import os
import time
from pathlib import Path

import aiohttp
import pytest

from sidecars import probe
from sidecars.cli import self_argv
from sidecars.devcluster import DevCluster
from sidecars.devcluster.slurmconf import JWT_KEY
from sidecars.probe.main import TIMEOUT_SECONDS
from sidecars.runtime import process
from sidecars.slurm import scrape
from sidecars.slurm.httpauth import Credential, mint
from tests.helpers import eventually

HA = {"nodes": 1, "controllers": 2, "slurmctld_timeout_seconds": 5}
METRICS = "MetricsType=metrics/openmetrics"
# a backup just started answers nothing for its first seconds (~5 s measured); a takeover comes
# after SlurmctldTimeout: both bounded by it, generously (a loaded machine runs 5-10x slower)
START_SECONDS = 6 * HA["slurmctld_timeout_seconds"]
TAKEOVER_SECONDS = 12 * HA["slurmctld_timeout_seconds"]
COMMAND_SECONDS = 20 * TIMEOUT_SECONDS  # the probe as a process: its own timeout, and a start


def _env(cluster: DevCluster) -> dict[str, str]:
    return {**cluster.env, "TMPDIR": str(cluster.dir)}


def _command_env(cluster: DevCluster) -> dict[str, str]:
    return {**os.environ, **_env(cluster)}


def _url(cluster: DevCluster, name: str) -> str:
    assert cluster.ports is not None
    (c,) = (c for c in cluster.controllers if c.name == name)
    return f"http://{c.address}:{cluster.ports.slurmctld}"


def _key(cluster: DevCluster) -> Path:
    return cluster.dir / "etc" / JWT_KEY


def _keyed(cluster: DevCluster, user: str) -> Credential:
    return Credential(key_file=_key(cluster), user=user)


async def _probe(cluster: DevCluster, name: str, cred: Credential | None = None) -> tuple[bool, str]:
    return await probe.check_controller(_url(cluster, name), 10, name, _env(cluster), cred)


async def _live(cluster: DevCluster, name: str, cred: Credential | None = None) -> str:
    """Poll until `name` is live (a backup just started answers nothing at first); its message."""
    answer: tuple[bool, str] = await eventually(
        lambda: _probe(cluster, name, cred), lambda a: a[0], within=START_SECONDS, what=f"{name} live"
    )
    return answer[1]


async def _metrics(
    cluster: DevCluster, name: str, path: str, cred: Credential | None = None
) -> tuple[bool, str]:
    return await probe.check_metrics(_url(cluster, name), path, 10, _env(cluster), cred)


@pytest.mark.timeout(180)
@pytest.mark.releases("slurm26")
@pytest.mark.cluster(**HA, jwt=True, http_auth=True, extra_conf=METRICS)
async def test_verbose_readiness_with_a_token_and_the_plain_one_with_the_reason_without(
    cluster: DevCluster, tmp_path: Path
) -> None:
    root = _keyed(cluster, "root")  # the dev cluster's SlurmUser is root
    said = await _live(cluster, "ctld-b", root)
    assert said.startswith("controller: live, standby (/readyz: 500 from"), said
    assert "Slurm says: primary:F | reconfiguring:F" in said, said
    ok, said = await _probe(cluster, "ctld-a", root)
    assert ok and said.startswith("controller: live, in control; Slurm says: primary:T | "), said

    # no credential: the plain /readyz decides, and says so
    ok, said = await _probe(cluster, "ctld-a")
    assert ok and said.startswith("controller: live, in control; no credential for /readyz?verbose"), said
    ok, said = await _probe(cluster, "ctld-b")
    assert ok and said.startswith("controller: live, standby (/readyz: 500 from"), said
    assert "no credential for /readyz?verbose" in said and "Slurm says" not in said, said

    # a token file (read at each probe): a good one, then one expired, then a user not allowed
    token = tmp_path / "token"
    token.write_text(mint(_key(cluster).read_bytes(), "root") + "\n")
    ok, said = await _probe(cluster, "ctld-a", Credential(token_file=token))
    assert ok and "Slurm says: primary:T" in said, said
    token.write_text(mint(_key(cluster).read_bytes(), "root", now=time.time() - 3600))
    ok, said = await _probe(cluster, "ctld-a", Credential(token_file=token))
    assert ok and "/readyz?verbose answered 401 (Authentication credential expired)" in said, said
    ok, said = await _probe(cluster, "ctld-a", _keyed(cluster, "daemon"))
    assert ok and "/readyz?verbose answered 403" in said and "only root's and SlurmUser's" in said, said
    ok, said = await _probe(cluster, "ctld-a", Credential(token_file=tmp_path / "none"))
    assert ok and said.startswith("controller: live, in control; --slurm-token-file: cannot read"), said

    # the command as the kubelet runs it, with the key
    argv = self_argv(
        "probe", "controller", "--url", _url(cluster, "ctld-b"), "--controller", "ctld-b",
        "--jwt-key-file", str(_key(cluster)), "--jwt-user", "root",
    )  # fmt: skip
    done = await process.run(
        argv, timeout=COMMAND_SECONDS, env={**os.environ, **_env(cluster)}, merge_stderr=True
    )
    assert done.returncode == 0 and "Slurm says: primary:F" in done.text(), done.text()


@pytest.mark.timeout(180)
@pytest.mark.releases("slurm26")
@pytest.mark.cluster(**HA, extra_conf=METRICS)
async def test_without_slurmctld_http_auth_parameters_every_token_is_refused_and_said(
    cluster: DevCluster, tmp_path: Path
) -> None:
    key = tmp_path / "jwt.key"
    key.write_text("a key slurmctld does not check")
    key.chmod(0o600)
    ok, said = await _probe(cluster, "ctld-a", Credential(key_file=key, user="root"))
    assert ok and said.startswith("controller: live, in control; /readyz?verbose answered 401"), said
    assert "or SlurmctldHttpAuthParameters=jwt_key=FILE unset (then every one is)" in said, said
    key.chmod(0o644)  # a key others can read mints anyone's token: refused before use
    ok, said = await _probe(cluster, "ctld-a", Credential(key_file=key, user="root"))
    assert ok and "--jwt-key-file: " in said and "is open to other users" in said, said


@pytest.mark.timeout(180)
@pytest.mark.releases("slurm26")
@pytest.mark.cluster(**HA, extra_conf=METRICS)
async def test_a_standbys_metrics_303_is_followed_to_the_primary_and_never_a_failure(
    cluster: DevCluster,
) -> None:
    await _live(cluster, "ctld-b")
    primary = _url(cluster, "ctld-a")
    ok, said = await _metrics(cluster, "ctld-b", "/metrics/nodes")
    assert ok and said.startswith("metrics: ok ("), said
    assert f"a standby's 303 followed: 200 from {primary}/metrics/nodes" in said, said
    ok, said = await _metrics(cluster, "ctld-a", "/metrics/jobs")
    assert ok and said.startswith("metrics: ok (") and f"200 from {primary}/metrics/jobs" in said, said

    # the same 303 with nothing in our slurm.conf naming its target: reported, not fetched
    async with aiohttp.ClientSession() as s:
        got = await scrape.scrape(s, _url(cluster, "ctld-b") + "/metrics", controllers=["ctld-b"])
    assert got.outcome is scrape.ScrapeOutcome.STANDBY and got.text == "", got
    assert "is no SlurmctldHost of this cluster" in got.detail, got

    # no controller in control: the backup's 303 leads to a dead primary, said as such
    await cluster.kill_controller("ctld-a")
    ok, said = await _metrics(cluster, "ctld-b", "/metrics")
    assert ok and said.startswith(("metrics: standby: ", "metrics: ok")), said  # ok: it took control
    if said.startswith("metrics: standby: "):
        assert f"its 303 followed to {primary}/metrics: " in said, said
    await cluster.wait_primary("ctld-b", timeout=TAKEOVER_SECONDS)
    answer: tuple[bool, str] = await eventually(  # serving metrics follows taking control
        lambda: _metrics(cluster, "ctld-b", "/metrics"),
        lambda a: a[1].startswith("metrics: ok"),
        within=START_SECONDS,
        what="ctld-b serving metrics",
    )
    assert answer[0] and f"200 from {_url(cluster, 'ctld-b')}/metrics" in answer[1], answer


@pytest.mark.timeout(180)
@pytest.mark.releases("slurm26")
@pytest.mark.cluster(**HA, jwt=True, http_auth=True, extra_conf=f"{METRICS}\nMetricsAuthUsers=slurm")
async def test_metrics_behind_metrics_auth_users_are_read_with_a_token_and_refusals_said(
    cluster: DevCluster,
) -> None:
    await _live(cluster, "ctld-b")
    ok, said = await _metrics(cluster, "ctld-a", "/metrics/jobs")
    assert not ok and said.startswith("metrics: unauthorized: 401 from"), said
    assert "to no credential" in said, said
    ok, said = await _metrics(cluster, "ctld-a", "/metrics/jobs", _keyed(cluster, "daemon"))
    assert not ok and said.startswith("metrics: forbidden: 403 from") and "MetricsAuthUsers" in said, said
    for user in ("slurm", "root"):  # listed, and root (as SlurmUser) always
        ok, said = await _metrics(cluster, "ctld-a", "/metrics/jobs", _keyed(cluster, user))
        assert ok and said.startswith("metrics: ok ("), (user, said)
    # through the standby: the token goes with the followed 303 (to our own primary only)
    ok, said = await _metrics(cluster, "ctld-b", "/metrics/jobs", _keyed(cluster, "slurm"))
    assert ok and "a standby's 303 followed: 200 from" in said, said
    ok, said = await _metrics(cluster, "ctld-b", "/metrics/jobs")
    assert not ok and said.startswith("metrics: unauthorized: a standby's 303 followed: 401"), said

    argv = self_argv("probe", "metrics", "--url", _url(cluster, "ctld-a"), "--path", "/metrics/scheduler")
    done = await process.run(
        argv, timeout=COMMAND_SECONDS, env={**os.environ, **_env(cluster)}, merge_stderr=True
    )
    assert done.returncode == 1 and "metrics: unauthorized" in done.text(), done.text()
    done = await process.run(
        [*argv, "--jwt-key-file", str(_key(cluster))],
        timeout=COMMAND_SECONDS,
        env=_command_env(cluster),
        merge_stderr=True,
    )  # --jwt-user's default: slurm
    assert done.returncode == 0 and done.text().startswith("metrics: ok ("), done.text()


@pytest.mark.timeout(120)
@pytest.mark.releases("slurm22", "slurm24")
@pytest.mark.per_release("22.05 and 24.11 answer through their own commands: each as before")
@pytest.mark.cluster(**HA)
async def test_older_releases_answer_as_before_credential_or_not(cluster: DevCluster, tmp_path: Path) -> None:
    key = tmp_path / "jwt.key"
    key.write_text("unused here")
    key.chmod(0o600)
    cred = Credential(key_file=key, user="root")
    assert await _probe(cluster, "ctld-a", cred) == (True, "controller: live, in control")
    assert await _probe(cluster, "ctld-a") == (True, "controller: live, in control")
    plain = await _live(cluster, "ctld-b")
    assert await _probe(cluster, "ctld-b", cred) == (True, plain)
    # no HTTP on their port: a metrics read fails, saying so, and never sends the token anywhere else
    ok, said = await _metrics(cluster, "ctld-a", "/metrics", cred)
    assert not ok and said.startswith(f"metrics: failed: {_url(cluster, 'ctld-a')}/metrics: "), said
