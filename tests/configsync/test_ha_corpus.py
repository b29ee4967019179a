"""The whole corpus (tests/configsync/test_corpus.py's CASES) against an HA pair, one pair per
release, the cases back to back: both pods refuse or hold every bad set with a reason, neither
controller dies or reconfigures, no job is touched, both directories keep the last known good set;
then a good change reaches both.

The absolute `Include`s of the corpus name the target as slurmctld reads it: DIR/etc in every
controller's mount namespace (as /etc/slurm in every controller pod), while each pod's config-sync
writes that directory at its own path here (`--target-read-at`)."""

from __future__ import annotations

import time

import pytest

from sidecars.devcluster import Release
from tests.configsync.corpus import judged, wrong_verdict
from tests.configsync.hapair import ha_pair, ha_spec, with_min_job_age
from tests.configsync.harness import cluster_files, set_sha
from tests.configsync.test_corpus import CASES, EXTRA, PARTITIONS, SECRET, TOPOLOGY, CorpusCluster

pytestmark = [pytest.mark.releases("slurm24", "slurm26"), pytest.mark.timeout(1200)]

CASE_SECONDS = 60.0  # each pod's verdict on one case (two dry runs at once on a shared machine)


@pytest.mark.per_release("each release's HA pair meets each bad set its own way")
async def test_the_whole_corpus_against_an_ha_pair(release: Release) -> None:
    spec = ha_spec(nodes=3, gpus=2, extra_conf=EXTRA)
    async with CorpusCluster(release, spec) as cluster:
        jobs = {
            part: await cluster.sbatch("-p", part, "-w", node, wrap="sleep 900")
            for part, node in PARTITIONS.items()
        }
        started = {j: (await cluster.wait_job(j, "RUNNING", timeout=60)).start_time for j in jobs.values()}
        pids = {c.name: cluster.controller_pid(c.name) for c in cluster.controllers}
        target = str(cluster.conf_path.parent)  # as every controller reads its own directory
        initial = {**cluster_files(cluster), "topology.conf": TOPOLOGY}
        t0 = time.monotonic()
        async with ha_pair(cluster, secrets=SECRET, initial=initial) as pair:
            good = pair.good()
            good_sha = set_sha(good, SECRET)
            for name, pod in pair.pods.items():
                assert pod.target_sha() == good_sha, f"{name} did not start on the deployed set"
            failures: list[str] = []
            for case in CASES:
                config, secrets = case.change(dict(good), dict(SECRET), target)
                pair.config.write(config)
                pair.secret.write(secrets)
                sha = set_sha(config, secrets)
                for name, pod in pair.pods.items():
                    try:
                        st = await pod.service.wait_until(judged(sha), CASE_SECONDS)
                    except TimeoutError:
                        failures.append(f"{case.name}: {name} gave no verdict: {pod.service.status()}")
                        continue
                    if st["applied"]["sha256"] == sha:
                        failures.append(f"{case.name}: {name} applied or staged it")
                        continue
                    failures += [f"{case.name}: {name}: {wrong}" for wrong in wrong_verdict(case, st, jobs)]
                    if st["applied"]["sha256"] != good_sha or pod.target_sha() != good_sha:
                        failures.append(f"{case.name}: {name}'s directory left the last known good set")
                now = {c.name: cluster.controller_pid(c.name) for c in cluster.controllers}
                if now != pids:
                    failures.append(f"{case.name}: a controller died or restarted: {pids} -> {now}")
                    pids = now
            took = time.monotonic() - t0
            assert not failures, f"{len(failures)} failures over {len(CASES)} cases:\n" + "\n".join(failures)
            for name, pod in pair.pods.items():
                assert pod.commands("scontrol reconfigure") == 0, f"{name} reconfigured for a bad set"
            for job, start in started.items():
                assert (await cluster.wait_job(job, "RUNNING", timeout=5)).start_time == start
            print(f"HA corpus on {release}: {len(CASES)} cases on two pods in {took:.1f}s")

            files = with_min_job_age(good, 201)  # a good change still reaches both after all that
            pair.config.write(files)
            pair.secret.write(SECRET)
            await pair.all_hold(set_sha(files, SECRET), within=90)
            assert (await cluster.client().show_config())["MinJobAge"].split()[0] == "201"
