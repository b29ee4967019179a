"""A whole-cluster upgrade 24.11 -> 26.05 through the control plane's API, on real daemons with
MariaDB: started, paused between stages, resumed, read per stage (`/v1/upgrade`, the page's
document, the metrics, the operator's `upgrade status`), and refused with one line where it must be
(a bad version, an image missing, no token, one already running, no roles to act through, the
Kubernetes workloads not named); a new slurmctld refusing to start ends `rolled_back` there too."""

from __future__ import annotations

import argparse
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from sidecars.controlplane.changes import FileStore
from sidecars.controlplane.changes.cluster_upgrade.store import CONFIG_MAP, KEY
from sidecars.controlplane.service import NO_ROLES, ControlPlaneService
from sidecars.devcluster import ClusterSpec, Release
from sidecars.devcluster.swap import SwappableCluster
from sidecars.devcluster.swap_roles import DevClusterRoles
from sidecars.operator.upgrade import UpgradeSettings, configure, render
from sidecars.runtime.settings import ConfigError
from tests.controlplane.changes.test_cluster_upgrade import Sabotaged
from tests.controlplane.changes.upgrade_records import finished_record
from tests.controlplane.conftest import Running, control_plane
from tests.fakekube import FakeKube
from tests.helpers import eventually
from tests.settings import VIEWER
from tests.web.cdp import chromium

pytestmark = [pytest.mark.releases("slurm24"), pytest.mark.timeout(300)]

IMAGES = {"slurmdbd": "sid", "slurmctld": "sid", "slurmd": "sid"}
KEPT = "cluster-upgrade.json"


@pytest.fixture
async def cluster(swappable_cluster: SwappableCluster) -> SwappableCluster:
    return swappable_cluster


@pytest.fixture
async def plane(cluster: SwappableCluster, release: Release, newer: Release) -> AsyncIterator[Running]:
    def hand_roles(p: ControlPlaneService) -> None:
        roles = DevClusterRoles(cluster, {"chroot": release, "sid": newer}, worker_timeout_seconds=30)
        p.cluster_upgrades.roles = roles
        p.cluster_upgrades.store = FileStore(cluster.dir / KEPT)  # the dev cluster's: no ConfigMap

    async with control_plane(cluster, prepare=hand_roles) as running:
        yield running
    # the upgrade's task ended with the control plane (none left behind)


async def _cluster(plane: Running) -> dict[str, Any]:
    status, body = await plane.get("/v1/upgrade")
    assert status == 200, body
    return dict(body)


async def _until(
    plane: Running, ok: Callable[[dict[str, Any]], bool], within: float, what: str
) -> dict[str, Any]:
    """The upgrade report once `ok` holds of it."""

    async def read() -> dict[str, Any]:
        return await _cluster(plane)

    return await eventually(read, ok, within=within, what=what)


def _stages(report: dict[str, Any]) -> dict[str, str]:
    return {s["name"]: s["state"] for s in report["cluster"]["stages"]}


async def _page_rows(plane: Running) -> list[dict[str, Any]]:
    headers = {"Authorization": f"Bearer {VIEWER}"}
    async with aiohttp.ClientSession() as http, http.get(plane.url + "/ui/api/state", headers=headers) as r:
        assert r.status == 200, await r.text()
        doc = await r.json()
    return list(doc["upgrade"])


async def _the_browser_shows_every_stage_done(plane: Running, tmp_path: Path) -> None:
    """The page itself (headless Chromium), logged in with the viewer token: the Upgrades section
    has a row per stage, each done."""
    async with chromium(tmp_path / "profile") as page:
        await page.navigate(plane.url + "/ui/")
        await page.wait_for("!document.getElementById('login').hidden", what="the login form")
        await page.evaluate(
            f"document.getElementById('token').value = {json.dumps(VIEWER)};"
            "document.getElementById('login-form').requestSubmit()"
        )
        rows = "[...document.querySelectorAll('#upgrade-body tbody tr')].map(r => r.textContent)"
        shown = await page.wait_for(
            f"(({rows}).filter(t => t.includes('to 26.05.0: complete')).length === 4) && {rows}",
            what="four stage rows, the upgrade complete",
        )
    for stage, text in zip(("preflight", "slurmdbd", "slurmctld", "workers"), shown, strict=False):
        assert stage in text and "done" in text, shown


async def test_start_pause_resume_and_status_through_the_api(
    plane: Running, cluster: SwappableCluster, tmp_path: Path
) -> None:
    go = cluster.out_dir / "go"
    spanning = await cluster.sbatch(wrap=f"while [ ! -e {go} ]; do sleep 0.2; done")
    await cluster.wait_job(spanning, "RUNNING", timeout=60)
    held = await cluster.sbatch("--hold", wrap="true")
    # nothing to pause yet, and nothing reported
    status, text = await plane.post("/v1/upgrade/pause", {})
    assert status == 404 and "no whole-cluster upgrade runs" in text
    assert (await _cluster(plane))["cluster"] is None

    status, text = await plane.post("/v1/upgrade/cluster", {"slurm_version": "26.05", "images": IMAGES})
    assert status == 201, text
    # paused at once: the preflight under way finishes, the slurmdbd stage waits
    status, text = await plane.post("/v1/upgrade/pause", {})
    assert status == 200 and '"paused": true' in text, text
    report = await _until(plane, lambda r: r["cluster"]["state"] == "paused", within=60, what="paused")
    assert _stages(report) == {
        "preflight": "done",
        "slurmdbd": "pending",
        "slurmctld": "pending",
        "workers": "pending",
    }
    assert report["cluster"]["target"] == "26.05.0"
    # one upgrade at a time: a second start is refused, with why
    status, text = await plane.post("/v1/upgrade/cluster", {"slurm_version": "26.05", "images": IMAGES})
    assert status == 409 and "an upgrade to 26.05.0 runs (paused)" in text, text
    # the page shows each stage's state
    rows = await _page_rows(plane)
    assert [(r["stage"], r["state"]) for r in rows if "stage" in r] == [
        ("preflight", "done"),
        ("slurmdbd", "pending"),
        ("slurmctld", "pending"),
        ("workers", "pending"),
    ]
    assert rows[0]["cluster upgrade"] == "to 26.05.0: paused"
    # the report reads the status; the gauge is set when the stage machine tells its change, just after
    await eventually(
        lambda: plane.sample("slurm_sidecars_cluster_upgrade_stage_state", stage="preflight"),
        lambda state: state == 2,  # done
        what="the preflight's gauge at done",
    )
    # still 24.11 everywhere: a pause holds before anything moves
    assert (await cluster.client().show_config())["SLURM_VERSION"].startswith("24.11")

    status, text = await plane.post("/v1/upgrade/resume", {})
    assert status == 200 and '"paused": false' in text, text
    await _until(
        plane,
        lambda r: _stages(r)["workers"] != "pending",
        within=120,
        what="workers stage",
    )
    go.touch()  # the roll waits for the job on its worker: it ends now, as jobs do
    report = await _until(
        plane,
        lambda r: r["cluster"]["state"] not in ("running", "paused"),
        within=180,
        what="the upgrade's end",
    )
    assert report["cluster"]["state"] == "complete", report["cluster"]["stages"][3]["detail"]
    assert set(_stages(report).values()) == {"done"}
    kept = json.loads((cluster.dir / KEPT).read_text())
    assert [s["state"] for s in kept["stages"]] == ["done"] * 4 and kept["backup"] and kept["state_copy"]
    assert (cluster.dir / KEPT).stat().st_mode & 0o777 == 0o600
    assert report["cluster"]["slurmctld_unanswered_seconds"] > 0
    assert (await cluster.client().show_config())["SLURM_VERSION"].startswith("26.05")
    jobs = {j.job_id: j.state for j in await cluster.client().jobs()}
    assert jobs[held] == "PENDING"
    assert await finished_record(cluster, spanning) == ("COMPLETED", "0:0")
    # per stage: the page, the metrics, the operator's words
    rows = await _page_rows(plane)
    assert [(r["stage"], r["state"]) for r in rows if "stage" in r] == [
        (s, "done") for s in ("preflight", "slurmdbd", "slurmctld", "workers")
    ]
    for stage in ("preflight", "slurmdbd", "slurmctld", "workers"):
        assert plane.sample("slurm_sidecars_cluster_upgrade_stage_state", stage=stage) == 2
        assert plane.sample("slurm_sidecars_cluster_upgrade_stage_seconds", stage=stage) > 0
    await _the_browser_shows_every_stage_done(plane, tmp_path)
    said = render(report)
    assert said[0] == "cluster upgrade to 26.05.0: complete"
    assert any(line.split()[:2] == ["slurmctld", "done"] for line in said[1:5])
    # nothing runs now: pause has nothing to hold
    status, text = await plane.post("/v1/upgrade/pause", {})
    assert status == 404


BAD = [
    ({"slurm_version": "26.5", "images": IMAGES}, "slurm_version must be a Slurm release"),
    ({"slurm_version": "latest", "images": IMAGES}, "slurm_version must be a Slurm release"),
    ({"images": IMAGES}, "slurm_version must be a Slurm release"),
    ({"slurm_version": "26.05", "images": {"slurmdbd": "sid", "slurmctld": "sid"}}, "images must name"),
    ({"slurm_version": "26.05", "images": {**IMAGES, "slurmd": "sid; rm -rf /"}}, "the image of slurmd"),
    ({"slurm_version": "26.05", "images": IMAGES, "budget": "1"}, "unknown fields: budget"),
]


async def test_refusals_say_why_in_one_line_and_start_nothing(
    plane: Running, cluster: SwappableCluster, fake_kube: tuple[FakeKube, str]
) -> None:
    # one cluster for every refusal: each leaves nothing started, which the next one checks
    for body, words in BAD:
        status, text = await plane.post("/v1/upgrade/cluster", body)
        assert status == 400 and words in text, (body, text)
        assert "\n" not in text.strip()
        assert (await _cluster(plane))["cluster"] is None
    async with (
        aiohttp.ClientSession() as http,
        http.post(plane.url + "/v1/upgrade/cluster", json={"slurm_version": "26.05", "images": IMAGES}) as r,
    ):
        assert r.status == 401
    assert (await _cluster(plane))["cluster"] is None
    # a control plane handed no roles says what it misses
    async with control_plane(cluster) as bare:
        status, text = await bare.post("/v1/upgrade/cluster", {"slurm_version": "26.05", "images": IMAGES})
        assert status == 409 and NO_ROLES in text, text
        # where it runs, and that this one has no backend for it (issue 36)
        for words in ("driven on Kubernetes", "the demo's own stack", "outside Kubernetes has no backend"):
            assert words in text, text
        report = await _cluster(bare)
        assert report["cluster"] is None and report["cluster_unavailable"] == NO_ROLES
    # in Kubernetes without its workloads named: refused, naming the settings (never a silent no-op)
    async with control_plane(cluster, kube_url=fake_kube[1]) as in_kube:
        status, text = await in_kube.post("/v1/upgrade/cluster", {"slurm_version": "26.05", "images": IMAGES})
        assert status == 409 and "--upgrade-slurmctld-statefulset" in text, text
        assert "--upgrade-slurmctld-statefulset" in (await _cluster(in_kube))["cluster_unavailable"]
    # a kept status nobody can read (a hand edit, another tool's): reported, and nothing starts
    # over it, with the roles there to start it
    fake, url = fake_kube
    fake.config_maps[("slurm", CONFIG_MAP)] = {
        "metadata": {"name": CONFIG_MAP, "namespace": "slurm", "resourceVersion": "1"},
        "data": {KEY: '{"target": "26.05.0", "stages": "all done"}'},
    }

    def roles_only(p: ControlPlaneService) -> None:
        p.cluster_upgrades.roles = plane.plane.cluster_upgrades.roles

    async with control_plane(cluster, kube_url=url, prepare=roles_only) as garbled:
        await eventually(lambda: garbled.plane.leader.is_leader, what="the Lease held")
        status, text = await garbled.post("/v1/upgrade/cluster", {"slurm_version": "26.05", "images": IMAGES})
        assert status == 409 and f"the kept status in ConfigMap slurm/{CONFIG_MAP} cannot be read" in text
        assert "remove it" in text and "\n" not in text.strip()
        report = await _cluster(garbled)
        assert report["cluster"] is None and "cannot be read" in report["cluster_error"]
        assert render(report)[0].startswith("cluster upgrade: the kept status in ConfigMap")
    assert (await cluster.client().show_config())["SLURM_VERSION"].startswith("24.11")
    # a target outside Slurm's window starts, and its preflight refuses it: nothing moved
    status, text = await plane.post("/v1/upgrade/cluster", {"slurm_version": "27.11", "images": IMAGES})
    assert status == 201, text
    report = await _until(plane, lambda r: r["cluster"]["state"] != "running", within=60, what="preflight")
    assert report["cluster"]["state"] == "refused"
    assert "nothing changed" in report["cluster"]["stages"][0]["detail"]
    # the report reads the status; the gauge is set when the stage machine tells its change, just after
    await eventually(
        lambda: plane.sample("slurm_sidecars_cluster_upgrade_stage_state", stage="preflight"),
        lambda state: state == 4,  # refused
        what="the preflight's gauge at refused",
    )
    assert not (cluster.dir / "upgrade").exists()  # not even a backup taken
    # and it ended: a new one may start (refused again, the same way)
    status, text = await plane.post("/v1/upgrade/cluster", {"slurm_version": "27.11", "images": IMAGES})
    assert status == 201, text


def _settings(token: Path, *argv: str) -> UpgradeSettings:
    p = argparse.ArgumentParser()
    configure(p)
    where = ("--control-plane", "http://127.0.0.1:1", "--token-file", str(token))
    return UpgradeSettings.from_args(p.parse_args([*argv, *where]))


def test_the_command_asks_for_a_whole_cluster_upgrade_with_every_role(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("an-operator-token-of-enough-bytes-0123456789\n")
    images = ("--image", "slurmdbd=sid", "--image", "slurmctld=sid", "--image", "slurmd=sid")
    req = _settings(token, "start", "--slurm-version", "26.05", *images).request()
    assert (req.method, req.path) == ("POST", "/v1/upgrade/cluster")
    assert req.body == {"slurm_version": "26.05", "images": IMAGES}
    with pytest.raises(ConfigError, match="needs --image for slurmd"):
        _settings(token, "start", "--slurm-version", "26.05", *images[:4])
    with pytest.raises(ConfigError, match="needs --slurm-version"):
        _settings(token, "start", *images)
    with pytest.raises(ConfigError, match="ROLE one of"):
        _settings(token, "start", "--slurm-version", "26.05", *images, "--image", "slurmrestd=x")
    with pytest.raises(ConfigError, match="given twice"):
        _settings(token, "start", "--slurm-version", "26.05", *images, "--image", "slurmd=y")
    # pause, resume and status are the same calls for either kind of upgrade
    assert _settings(token, "pause").request().path == "/v1/upgrade/pause"


async def test_a_rollback_is_in_the_status_the_metrics_and_the_events(
    release: Release, newer: Release, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    # the new slurmctld refuses its config (a setting it does not know): rolled back automatically
    spec = ClusterSpec(nodes=2, accounting=True, foreground_ctld=True)
    async with Sabotaged(release, spec, {"slurmctld": ["-f", "{dir}/etc/refused.conf"]}) as c:
        (c.dir / "etc" / "refused.conf").write_text(c.conf_path.read_text() + "NoSuchSetting=1\n")
        job = await c.sbatch("--hold", wrap="true")

        def hand_roles(p: ControlPlaneService) -> None:
            p.cluster_upgrades.roles = DevClusterRoles(c, {"chroot": release, "sid": newer})

        async with control_plane(c, url, prepare=hand_roles, pod_name="cp-0") as plane:
            await eventually(lambda: plane.plane.leader.is_leader, what="the Lease held")
            status, text = await plane.post(
                "/v1/upgrade/cluster", {"slurm_version": "26.05", "images": IMAGES}
            )
            assert status == 201, text
            report = await _until(
                plane,
                lambda r: r["cluster"]["state"] not in ("running", "paused"),
                within=180,
                what="its end",
            )
            assert report["cluster"]["state"] == "rolled_back", report["cluster"]["stages"]
            assert _stages(report)["slurmctld"] == "rolled_back" and _stages(report)["workers"] == "pending"
            assert "rolled back" in report["cluster"]["stages"][2]["detail"]
            # the report reads the status; the gauges are set when the stage machine tells its end
            await eventually(
                lambda: plane.sample("slurm_sidecars_cluster_upgrade_stage_state", stage="slurmctld"),
                lambda state: state == 6,  # rolled_back
                what="the slurmctld stage's gauge at rolled_back",
            )
            await eventually(
                lambda: plane.sample("slurm_sidecars_cluster_upgrade_slurmctld_unanswered_seconds"),
                lambda seconds: seconds > 0,
                what="the unanswered seconds' gauge",
            )
            assert (await c.client().show_config())["SLURM_VERSION"].startswith("24.11")
            assert job in {j.job_id for j in await c.client().jobs()}
            # one Event per stage start and end, and the rollback's start, on the holder's pod
            said = [(e["reason"], e["type"]) for e in fake.events if e["reason"].startswith("ClusterUpgrade")]
            assert said == [
                ("ClusterUpgradePreflightStarted", "Normal"),
                ("ClusterUpgradePreflightDone", "Normal"),
                ("ClusterUpgradeSlurmdbdStarted", "Normal"),
                ("ClusterUpgradeSlurmdbdDone", "Normal"),
                ("ClusterUpgradeSlurmctldStarted", "Normal"),
                ("ClusterUpgradeSlurmctldRollingBack", "Warning"),
                ("ClusterUpgradeSlurmctldRolledBack", "Warning"),
            ]
            events = [e for e in fake.events if e["reason"].startswith("ClusterUpgrade")]
            assert {e["involvedObject"]["name"] for e in events} == {"cp-0"}
            assert "rolling back to the saved state" in events[5]["message"]
            assert events[6]["message"].startswith("upgrade to 26.05.0: the new slurmctld on")
            # kept: a next holder reads the rollback, not an upgrade under way
            kept = json.loads(fake.config_maps[("slurm", CONFIG_MAP)]["data"][KEY])
            assert [s["state"] for s in kept["stages"]] == ["done", "done", "rolled_back", "pending"]
