"""The dry run's verdict on real Slurm: where a line falls in the throwaway's log does not matter
(its whole log is read as it grows), and a throwaway of another release than the live one is named
as such, never taken for a fault of the set."""

from __future__ import annotations

import re
from pathlib import Path

import aiohttp
import pytest

from sidecars.configsync.dryrun.runner import DryRunner
from sidecars.configsync.fileset import conffile
from sidecars.configsync.fileset.sources import FileSet
from sidecars.devcluster import DevCluster
from tests.configsync.harness import cluster_files, config_sync, read_set, set_sha
from tests.configsync.test_dry_run import runner, without_p2

pytestmark = pytest.mark.cluster(
    nodes=2, foreground_ctld=True, extra_conf="PartitionName=p2 Nodes=n2 State=UP"
)

NOISE_BYTES = 2 * 1024 * 1024  # four times the 512 KiB the verdict once read


class Verbose(DryRunner):
    """A throwaway whose log holds megabytes before slurmctld writes its first line, as one that
    recovers 10,000 jobs does (one line each) before it says it is the primary."""

    def _prepare(self, files: FileSet, d: Path, live_state: Path | None, ctld_port: int, dead: int) -> Path:
        out = super()._prepare(files, d, live_state, ctld_port, dead)
        line = b"[2026-01-01T00:00:00.000] Recovered JobId=999999 Assoc=0 (noise before the real log)\n"
        (d / "slurmctld.log").write_bytes(line * (NOISE_BYTES // len(line) + 1))  # slurmctld appends
        return out


@pytest.mark.per_release(
    "each release's slurmctld logs its fatals and job effects in its own words and order"
)
async def test_the_verdict_and_the_job_effects_come_from_the_whole_log(cluster: DevCluster) -> None:
    job = await cluster.sbatch("-p", "p2", wrap="sleep 600")
    await cluster.wait_job(job, "RUNNING")
    await cluster.job_state_saved(job)  # the throwaway loads only what was saved
    base = cluster_files(cluster)
    current = conffile.parse(read_set(base), "slurm.conf", cluster.conf_path.parent)
    good = await runner(cluster, Verbose, timeout=10.0).run(read_set(base), current)
    assert good.ok, good.reason
    # what loading the state did to a job, written after the megabytes, is still read
    dropped = await runner(cluster, Verbose, timeout=10.0).run(read_set(without_p2(base)), current)
    assert dropped.ok, dropped.reason
    assert job in dropped.jobs and "p2" in dropped.jobs[job], dropped.jobs
    assert 999999 not in dropped.jobs  # "Recovered JobId=999999" is no harm done


@pytest.mark.per_release(
    "what each release's slurmctld does before it answers (23.11+ defers fatals past primary)"
)
async def test_a_pass_comes_when_the_throwaway_answers_and_each_phase_is_told(cluster: DevCluster) -> None:
    """A pass is given as soon as the throwaway answers on its port (that proves what slurmctld
    initialises once primary: test_dry_run_strict), not a fixed time later that every change would
    pay; and the dry run says where its time went, phase by phase (in its log event too)."""
    base = cluster_files(cluster)
    current = conffile.parse(read_set(base), "slurm.conf", cluster.conf_path.parent)
    result = await runner(cluster, timeout=10.0).run(read_set(base), current)
    assert result.ok, result.reason
    ms = {k: v for k, v in result.phases.items() if v is not None}
    assert len(ms) == len(result.phases) == 7, result.phases  # every phase reached
    assert 0 < ms["primary_ms"] <= ms["answering_ms"] == ms["verdict_ms"], ms
    phases = ("sync_ms", "files_ms", "verdict_ms", "kill_ms", "cleanup_ms")
    assert all(ms[k] >= 0 for k in phases), ms
    # the phases make up the whole (each rounded to a millisecond)
    assert abs(sum(ms[k] for k in phases) - result.seconds * 1000) <= len(phases) + 1, (ms, result.seconds)


@pytest.mark.releases("slurm24", "slurm26")
@pytest.mark.per_release("22.05 as the dry run of a 24.11 and of a 26.05 set: each refuses in its own words")
async def test_a_dry_run_of_another_release_is_named_as_such(cluster: DevCluster) -> None:
    """The host's slurmctld (22.05) as the dry run of a 24.11/26.05 cluster: the config-sync image
    lagging the slurmctld image. Said at start, on /readyz and /status, and as the reason a change
    is not applied; Slurm's "CLUSTER NAME MISMATCH" and "refused it" (a fault of the set) never."""
    host = await cluster._exec(["slurmctld", "-V"])
    assert host.split()[-1].startswith("22.05")
    async with config_sync(cluster, dry_run_slurmctld=("slurmctld",)) as sync:
        st = await sync.status()
        said = st["dry_run"]["release_mismatch"]
        assert re.search(r"Slurm 22\.05\.\d+ and the live slurmctld is Slurm " + cluster.release.short, said)
        url = f"http://127.0.0.1:{sync.running.port}/readyz"
        async with aiohttp.ClientSession() as s, s.get(url) as r:
            body = await r.json()
            assert r.status == 503 and body["checks"]["dry_run_release"]["ok"] is False, body
            assert "22.05" in str(body["checks"]["dry_run_release"]), body
        good = sync.target_sha()
        files = {**sync.good(), "slurm.conf": sync.good()["slurm.conf"] + b"# a harmless change\n"}
        sync.config.write(files)
        st = await sync.wait(set_sha(files), key="rejected")
        reason = st["rejected"]["reason"]
        assert reason.startswith("the dry run's slurmctld is Slurm 22.05"), reason
        assert "none was judged" in reason
        assert "MISMATCH" not in reason and "refused it" not in reason
        assert sync.target_sha() == good
    # the control: the cluster's own release passes the same harmless change
    async with config_sync(cluster) as sync:
        files = {**sync.good(), "slurm.conf": sync.good()["slurm.conf"] + b"# a harmless change\n"}
        sync.config.write(files)
        st = await sync.wait(set_sha(files))
        assert st["dry_run"]["release_mismatch"] is None
