"""The whole-cluster upgrade's kept status (the image slurmctld is rolled back to, the state copy
it is restored from) is read back only when the control plane signed it: whoever may write the
ConfigMap cannot choose what a resumed upgrade does. Driven through the fake API server."""

from __future__ import annotations

import json

import pytest

from sidecars.controlplane.changes import ConfigMapStore, signing_key
from sidecars.controlplane.changes.cluster_upgrade.store import CONFIG_MAP, KEY
from sidecars.kube import KubeClient
from tests.fakekube import FakeKube
from tests.fakekube.server import configuration
from tests.settings import TOKEN

STATUS = {"target": "26.05", "memory": {"slurmctld_image": "registry.example/slurmctld:24.11"}}


async def test_a_status_written_by_another_hand_is_not_read(fake_kube: tuple[FakeKube, str]) -> None:
    fake, url = fake_kube
    fake.tokens.add(TOKEN)
    async with KubeClient(configuration(url, TOKEN)) as client:
        store = ConfigMapStore(client, "slurm", signing_key("operator-token-" + "x" * 40))
        await store.save(STATUS)
        assert await store.load() == STATUS
        # whoever may write the ConfigMap picks slurmctld's rollback image
        kept = fake.config_maps[("slurm", CONFIG_MAP)]["data"]
        forged = json.loads(kept[KEY])
        forged["memory"]["slurmctld_image"] = "evil.example/slurmctld:latest"
        kept[KEY] = json.dumps(forged)
        with pytest.raises(ValueError, match="not signed by this control plane") as refused:
            await store.load()
        assert "\n" not in str(refused.value)
        # another control plane's key (another token, or a rotated one) reads nothing either
        await store.save(STATUS)
        other = ConfigMapStore(client, "slurm", signing_key("another-token-" + "y" * 40))
        with pytest.raises(ValueError, match="not signed"):
            await other.load()
        # nor a document with its signature removed
        del fake.config_maps[("slurm", CONFIG_MAP)]["data"]["status.json.hmac-sha256"]
        with pytest.raises(ValueError, match="not signed"):
            await store.load()
