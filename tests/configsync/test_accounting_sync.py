"""config-sync on a cluster with accounting, on every release: slurm.conf changes still apply (the
dry run cannot reach slurmdbd and must not need it), and a slurmdbd.conf from the Secret that
slurmdbd would refuse is refused before it is staged, without the password in the status, the
log or an Event."""

from __future__ import annotations

import re

import aiohttp
import pytest

from sidecars.devcluster import DevCluster
from tests.configsync.harness import config_sync, set_sha


@pytest.mark.timeout(180)
@pytest.mark.cluster(nodes=1, accounting=True)
@pytest.mark.per_release("each release's slurmctld beside its slurmdbd, and what its slurmdbd refuses")
async def test_changes_on_an_accounting_cluster(
    cluster: DevCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    c = cluster
    assert c.database is not None
    dbd = c.dir / "etc" / "slurmdbd.conf"
    secrets = {"slurmdbd.conf": dbd.read_bytes()}
    async with config_sync(c, secrets=secrets) as sync:
        good = sync.good()
        changed = dict(good)
        changed["slurm.conf"] = re.sub(rb"MaxTime=\S+", b"MaxTime=77", good["slurm.conf"])
        sync.config.write(changed)
        await sync.wait(set_sha(changed, secrets), within=60.0)
        (part,) = await c.client().partitions()
        assert part.max_time_minutes == 77

        broken = {"slurmdbd.conf": re.sub(rb"StorageType=\S+\n", b"", secrets["slurmdbd.conf"])}
        sync.secrets.write(broken)
        st = await sync.wait(set_sha(changed, broken), key="rejected", within=30.0)
        assert "StorageType is required" in st["rejected"]["reason"]
        assert dbd.read_bytes() == secrets["slurmdbd.conf"]  # never staged
        # a new password that slurmdbd would take: judged (a key file's change waits for a restart),
        # and neither password is in what config-sync says or serves
        rotated = {
            "slurmdbd.conf": secrets["slurmdbd.conf"].replace(c.database.password.encode(), b"N3w-pw-x9")
        }
        sync.secrets.write(rotated)
        await sync.service.wait_until(lambda st: not st["pending"] and st["restart_required"], 30.0)
        out, err = capsys.readouterr()
        url = f"http://127.0.0.1:{sync.running.port}/history"
        async with aiohttp.ClientSession() as http, http.get(url) as r:
            history = await r.text()  # as served
        said = str(await sync.status()) + history + str(sync.events.events) + out + err
        assert "dbd.conf" in history  # its name, though the redaction of its values may mask "slurm"
        assert c.database.password not in said and "N3w-pw-x9" not in said
