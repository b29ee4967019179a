"""A change after which Slurm drains workers is rolled back, and what Slurm set because of it is
undone: only that. An admin's drain set before the change stays, with the admin's reason."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from sidecars.configsync.settings import Settings
from sidecars.configsync.validate import Validator
from sidecars.devcluster import DevCluster
from sidecars.slurm import SlurmClient
from tests.configsync.harness import config_sync, key_secret, set_sha

CLASSIC = {"nodes": 2, "gpus": 1}
SLINKY = {"shape": "slinky", "nodes": 2, "gpus": 1}
ADMIN = "admin: fan swap"
Change = Callable[[dict[str, bytes]], dict[str, bytes]]


def unpredicted(client: SlurmClient, settings: Settings) -> Validator:
    """The validator without the predictions: what the live judge must catch when they miss."""
    v = Validator.from_settings(settings, client)
    v.predict = False
    return v


def drop_gres_conf(files: dict[str, bytes]) -> dict[str, bytes]:
    return {n: d for n, d in files.items() if n != "gres.conf"}


async def fleet(cluster: DevCluster) -> dict[str, tuple[bool, str | None]]:
    """Each worker: drained, and why."""
    return {
        n.name: (n.state.drain, n.reason.text if n.reason else None)
        for n in await cluster.client().node_listing()
    }


async def rolled_back_as_it_was(cluster: DevCluster, change: Change, *, predict: bool) -> dict[str, Any]:
    secrets = key_secret(cluster) if cluster.slinky else {}
    await cluster.client().drain(["n2"], ADMIN)
    before = await fleet(cluster)
    assert before == {"n1": (False, None), "n2": (True, ADMIN)}, before
    factory = None if predict else unpredicted
    async with config_sync(cluster, secrets=secrets, validator_factory=factory) as sync:
        good_sha = (await sync.status())["applied"]["sha256"]
        files = change(sync.good())
        sync.config.write(files)
        st = await sync.wait(set_sha(files, secrets), key="rejected")
        assert st["applied"]["sha256"] == good_sha and sync.target_sha() == good_sha
        assert await fleet(cluster) == before, st  # n1 usable again, n2 still the admin's
        return st


@pytest.mark.cluster(**CLASSIC)
async def test_gres_conf_dropped_is_rolled_back_and_the_drains_undone_classic(cluster: DevCluster) -> None:
    st = await rolled_back_as_it_was(cluster, drop_gres_conf, predict=False)
    assert "gres/gpu count reported lower than configured" in st["rejected"]["reason"], st
    assert "undone after the rollback" in st["rejected"]["reason"], st


@pytest.mark.releases("slurm24", "slurm26")
@pytest.mark.cluster(**SLINKY)
async def test_gres_conf_dropped_is_rolled_back_and_the_drains_undone_slinky(cluster: DevCluster) -> None:
    st = await rolled_back_as_it_was(cluster, drop_gres_conf, predict=False)
    assert "gres/gpu count reported lower than configured" in st["rejected"]["reason"], st
    assert st["harm"]["undone"]["resumed"] == ["n1"] and st["harm"]["undone"]["redrained"] == ["n2"], st
    assert st["harm"]["registration_wait_seconds"] > 0
