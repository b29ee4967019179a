"""slurmdbd.conf gets slurm.conf's plugin and text checks: a `PluginDir=` into the Secret's own
volume (a Secret may carry a binary plugin) or a binary file is refused before the throwaway
slurmdbd, or the live one, could load anything; the live file stays."""

from __future__ import annotations

import pytest

from sidecars.configsync.fileset import dbdconf
from sidecars.devcluster import DevCluster
from tests.configsync.test_dbdsync import CONF, _with, dbd_sync


def test_a_binary_slurmdbd_conf_is_refused() -> None:
    good = b"StorageType=accounting_storage/mysql\n"
    assert dbdconf.check(good, 0o100600) == []
    said = ["slurmdbd.conf is not text (it holds NUL bytes)"]
    assert dbdconf.check(good + b"\x7fELF\0\0\0", 0o100600) == said


@pytest.mark.timeout(180)
@pytest.mark.cluster(nodes=1, accounting=True)
async def test_a_plugin_dir_in_the_secret_is_refused_before_slurmdbd_reads_it(cluster: DevCluster) -> None:
    c = cluster
    async with dbd_sync(c, restart_policy="restart") as h:
        await h.service.wait_until(lambda st: st["applied"] is not None, 30.0)
        pid, on_disk = c.hostpid("slurmdbd"), h.live.read_bytes()
        for plugin_dir in (h.secret.path, h.secret.path / "..data"):
            bad = {CONF: _with(h.original, f"PluginDir={plugin_dir}")}
            h.secret.write(bad)
            st = await h.outcome(bad, "rejected", 60.0)
            reason = st["rejected"]["reason"]
            assert "never loaded from there" in reason and "slurmdbd refused it" not in reason, reason
            assert h.live.read_bytes() == on_disk and c.hostpid("slurmdbd") == pid
