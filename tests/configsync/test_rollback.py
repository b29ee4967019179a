"""When a set that passed validation is refused by slurmctld itself, the files go back to the last
known good set, and the refusal is reported in Slurm's words.

Our validation catches every case known to kill slurmctld, so to reach this path the test swaps in
a validator that only runs Slurm's client parse (which accepts a partition naming an unknown node).
"""

from __future__ import annotations

import pytest

from sidecars.devcluster import DevCluster
from tests.configsync.harness import config_sync, parser_only, set_sha


@pytest.mark.per_release("each release's slurmctld refuses in its own words")
async def test_refused_set_is_rolled_back_and_reported(cluster: DevCluster) -> None:
    job = await cluster.sbatch(wrap="sleep 600")
    await cluster.wait_job(job, "RUNNING")
    async with config_sync(cluster, validator_factory=parser_only) as sync:
        good = sync.target_sha()
        files = sync.good()
        files["slurm.conf"] = files["slurm.conf"].replace(b"MaxTime=INFINITE", b"MaxTime=90")
        files["slurm.conf"] += b"PartitionName=p2 Nodes=n9\n"
        sync.config.write(files)
        st = await sync.wait(set_sha(files), key="rejected")
        reason = st["rejected"]["reason"]
        assert sync.target_sha() == good == st["applied"]["sha256"]
        assert await sync.metric("slurm_sidecars_config_applies_total", result="rolled_back") == 1
        assert any(r == "ConfigRolledBack" for r, _, _ in sync.events.events)
        if cluster.release.short == "22.05":
            # 22.05 dies of it (why nothing unvalidated may reach it); its container restarts it on
            # the restored files, and it comes back healthy
            assert "Zero Bytes were transmitted" in reason or "Invalid node names" in reason
            await cluster._poll(
                cluster._async(lambda: cluster.hostpid("slurmctld")),
                lambda p: p is None,
                10,
                "slurmctld gone",
            )
            await cluster.start_slurmctld()
        else:
            # 24.11 refuses and keeps its old config; the files now agree with it again
            assert "Unspecified error" in reason
            assert "Invalid node names in partition p2" in reason  # from slurmctld's log, in its words
        parts = {p.name: p for p in await cluster.client().partitions()}
        assert set(parts) == {"debug"} and parts["debug"].max_time_minutes is None
        await cluster.wait_job(job, "RUNNING", timeout=15)
        # a later fixed set applies normally
        fixed = sync.good()
        fixed["slurm.conf"] = fixed["slurm.conf"].replace(b"MaxTime=INFINITE", b"MaxTime=90")
        sync.config.write(fixed)
        st = await sync.wait(set_sha(fixed))
        assert st["rejected"] is None
        assert (await cluster.client().partitions())[0].max_time_minutes == 90
