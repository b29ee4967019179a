"""A plan on real Slurm: config-sync's pipeline up to the swap, judged against the live set and
state, and nothing of the cluster changed (the target's files, slurmctld's reconfigure count)."""

from __future__ import annotations

import asyncio

import pytest

from sidecars.configsync.dryrun.runner import DryRunner
from sidecars.configsync.fileset.sources import FileSet, read_source
from sidecars.configsync.judge.validate import Validator
from sidecars.configsync.plans.plan import DRY_RUN, JOB_IMPACT, RESTART_TABLE, make_plan
from sidecars.devcluster import DevCluster
from sidecars.protocol.configsync import FORCE_FILE
from tests.configsync.harness import cluster_files, read_set
from tests.configsync.test_dry_run import KILLER, without_p2

pytestmark = [
    pytest.mark.cluster(nodes=2, extra_conf="PartitionName=p2 Nodes=n2 State=UP"),
    pytest.mark.timeout(120),
]


async def validator(cluster: DevCluster) -> Validator:
    """What config-sync builds beside this cluster: the live controller read, the dry run in the
    cluster's namespace on a shadow of its state."""
    client = cluster.client()
    work = cluster.dir / "plan-work"
    return Validator(
        client,
        cluster.conf_path.parent,
        work,
        plugin_dir=await cluster.plugin_dir(),
        dry_runner=DryRunner(
            command=cluster.in_namespace("slurmctld"),
            work_dir=work / "dry-run",
            target=cluster.conf_path.parent,
            client=client,
        ),
    )


def target_sha(cluster: DevCluster) -> str:
    entries, _ = read_source(cluster.conf_path.parent, 1024 * 1024)
    return FileSet.build(entries).sha256


async def reconfigures(cluster: DevCluster) -> int:
    """How many reconfigure requests slurmctld has processed: its log's line, every release (sdiag's
    count restarts with 24.11's and 26.05's re-exec on reconfigure, so it cannot tell)."""
    text = await asyncio.to_thread((cluster.dir / "log" / "slurmctld.log").read_text, errors="replace")
    return text.count("Processing Reconfiguration Request")


@pytest.mark.per_release("the dry run is that release's slurmctld: its fatal and its words are its own")
async def test_a_fatal_set_is_refused_in_slurms_words_and_nothing_changes(cluster: DevCluster) -> None:
    live = read_set(cluster_files(cluster))
    before, count = target_sha(cluster), await reconfigures(cluster)
    bad = read_set({**cluster_files(cluster), "slurm.conf": cluster_files(cluster)["slurm.conf"] + KILLER})
    plan = await make_plan(await validator(cluster), bad, live)
    assert plan.verdict == "refused" and plan.exit_code == 1, plan
    assert f"the dry run on Slurm {cluster.release.short} refused it" in plan.reason
    assert "fatal: Invalid configured licenses: foo:abc" in plan.reason  # slurmctld's own words
    assert DRY_RUN in plan.checks and plan.dry_run_seconds is not None and plan.dry_run_seconds > 0
    [change] = plan.files
    assert change.name == "slurm.conf" and change.diff is not None and "+Licenses=foo:abc" in change.diff
    assert target_sha(cluster) == before and await reconfigures(cluster) == count
    # the control: a reconfigure is counted
    await cluster._exec(cluster.in_namespace("scontrol", "reconfigure"))
    await cluster._poll(lambda: reconfigures(cluster), lambda n: n == count + 1, 20, "reconfigure counted")


async def test_a_plan_removing_a_busy_partition_lists_the_job(cluster: DevCluster) -> None:
    job = await cluster.sbatch("-p", "p2", wrap="sleep 600")
    await cluster.wait_job(job, "RUNNING")
    await cluster.job_state_saved(job)  # the throwaway loads only what was saved
    base = cluster_files(cluster)
    plan = await make_plan(await validator(cluster), read_set(without_p2(base)), read_set(base))
    assert plan.verdict == "held-for-jobs" and plan.exit_code == 3, plan
    assert job in plan.jobs and "p2" in plan.jobs[job], plan.jobs
    assert f"job {job}" in plan.reason
    assert plan.checks[-2:] == (DRY_RUN, JOB_IMPACT)
    # the marker that forces a change past the job check: config-sync would apply it, jobs listed
    forced = read_set({**without_p2(base), FORCE_FILE: b"alice: p2 is retired, job owners told\n"})
    plan = await make_plan(await validator(cluster), forced, read_set(base))
    assert plan.verdict == "would-apply" and plan.exit_code == 0, plan
    assert job in plan.jobs and plan.reason.startswith(f"forced by {FORCE_FILE}: alice"), plan.reason
    assert (await cluster.wait_job(job, "RUNNING")).state == "RUNNING"


async def test_a_restart_required_change_says_so(cluster: DevCluster) -> None:
    base = cluster_files(cluster)
    conf = base["slurm.conf"].decode()
    assert "maxjobcount" not in conf.lower()
    plan = await make_plan(
        await validator(cluster),
        read_set({**base, "slurm.conf": (conf + "MaxJobCount=4321\n").encode()}),
        read_set(base),
    )
    assert plan.verdict == "restart-required" and plan.exit_code == 4, plan
    assert any(r.startswith("maxjobcount changed") for r in plan.restart), plan.restart
    assert RESTART_TABLE in plan.checks and DRY_RUN in plan.checks


async def test_the_live_set_is_no_change_and_a_good_one_would_apply_with_secrets_withheld(
    cluster: DevCluster,
) -> None:
    base = cluster_files(cluster)
    same = await make_plan(await validator(cluster), read_set(base), read_set(base))
    assert same.verdict == "no-change" and same.exit_code == 0 and same.files == ()
    conf = base["slurm.conf"] + b"AccountingStoragePass=hunter2-but-longer\n"
    plan = await make_plan(await validator(cluster), read_set({**base, "slurm.conf": conf}), read_set(base))
    assert plan.verdict == "would-apply" and plan.exit_code == 0, plan
    [change] = plan.files
    assert change.diff is not None and "+AccountingStoragePass=<redacted>" in change.diff
    assert "hunter2" not in str(plan.as_json())
