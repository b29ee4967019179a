"""The client shims of a chroot release (DIR/bin): every Slurm call of a test and of the code under
test enters the cluster's namespace and chroot through them, with the caller's environment, its
SLURM_CONF (the cluster's when unset) and its working directory when that lies under DIR (which is
bind-mounted at the same path), else DIR/out, so that job output lands where the host sees it."""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecars.devcluster import DevCluster
from sidecars.runtime import process

# the host release's shim is two lines that run the host's client; these enter the chroot
pytestmark = [pytest.mark.releases("slurm24", "slurm26"), pytest.mark.cluster(nodes=1)]


async def _run(cluster: DevCluster, cwd: Path, *argv: str, **env: str) -> process.Completed:
    return await process.run(argv, timeout=30, env={**cluster.env, **env}, cwd=cwd, merge_stderr=True)


async def _sbatch(cluster: DevCluster, cwd: Path, **env: str) -> int:
    done = await _run(cluster, cwd, "sbatch", "--parsable", "--wrap", "pwd", **env)
    assert done.returncode == 0, done.text()
    return int(done.text().strip().split(";")[0])


async def test_a_job_runs_where_its_submitter_stands_under_dir_and_in_dir_out_otherwise(
    cluster: DevCluster, tmp_path: Path
) -> None:
    inside = cluster.dir / "work"
    inside.mkdir()
    jobs = {await _sbatch(cluster, inside): inside, await _sbatch(cluster, tmp_path): cluster.out_dir}
    for job, where in jobs.items():
        await cluster.wait_job(job, "COMPLETED")
        assert (where / f"slurm-{job}.out").read_text().strip() == str(where)


async def test_the_callers_environment_and_slurm_conf_reach_the_client(cluster: DevCluster) -> None:
    job = await _sbatch(cluster, cluster.out_dir, SBATCH_JOB_NAME="named-by-env")
    shown = await _run(cluster, cluster.out_dir, "scontrol", "-o", "show", "job", str(job))
    assert "JobName=named-by-env" in shown.text(), shown.text()

    # a file Slurm refuses, named by the caller: the client reads it (and says so) instead of the cluster's
    bad = cluster.dir / "etc" / "bad.conf"
    bad.write_text("NotASlurmKey=1\n" + cluster.conf_path.read_text())
    refused = await _run(cluster, cluster.out_dir, "scontrol", "ping", SLURM_CONF=str(bad))
    assert refused.returncode != 0 and "NotASlurmKey" in refused.text(), refused.text()
    # with none set, the cluster's
    bare = {k: v for k, v in cluster.env.items() if k != "SLURM_CONF"}
    done = await process.run(
        ["scontrol", "ping"], timeout=30, env=bare, cwd=cluster.out_dir, merge_stderr=True
    )
    assert done.returncode == 0 and "UP" in done.text(), done.text()
