"""A fast subset of the corpus (tests/configsync/test_corpus.py) against an HA pair: both pods refuse
or hold every bad set with a reason, neither controller dies or reconfigures, no job is touched, both
directories keep the last known good set; then a good change reaches both."""

from __future__ import annotations

from typing import Any

import pytest

from sidecars.devcluster import DevCluster
from tests.configsync.corpus import kind
from tests.configsync.hapair import HA_SPEC, ha_pair, with_min_job_age
from tests.configsync.harness import set_sha
from tests.configsync.test_corpus import CASES

# one or two of each kind: slurm.conf values, plugins, what HA needs (SlurmctldHost), jobs at risk,
# includes, the files only slurmd reads
SUBSET = (
    "unknown key",
    "CPUs not a number",
    "a scheduler plugin misspelt",
    "no SlurmctldHost",
    "slurm.conf missing",
    "a partition with a running job removed",
    "a NodeSet partition with a running job removed",
    "MaxJobId below the running jobs' ids",
    "include outside the set",
    # relative: an absolute Include of the target differs per pod here (each controller's directory
    # has its own path on this host), where every pod of Kubernetes mounts it at /etc/slurm
    "an included file moving a partition away under a new name",
    "garbage in gres.conf",
    "an unknown cgroup plugin",
)
EXTRA = """PartitionName=p2 Nodes=n2 State=UP
NodeSet=ns3 Nodes=n3
PartitionName=p3 Nodes=ns3 State=UP"""
PARTITIONS = {"debug": "n1", "p2": "n2", "p3": "n3"}

pytestmark = [
    pytest.mark.releases("slurm24", "slurm26"),
    pytest.mark.cluster(**(HA_SPEC | {"nodes": 3, "gpus": 2, "extra_conf": EXTRA})),
    pytest.mark.timeout(600),
]


async def test_the_corpus_subset_against_an_ha_pair(cluster: DevCluster) -> None:
    cases = [c for c in CASES if c.name in SUBSET]
    assert len(cases) == len(SUBSET), f"corpus cases gone: {set(SUBSET) - {c.name for c in cases}}"
    jobs = {
        part: await cluster.sbatch("-p", part, "-w", node, wrap="sleep 900")
        for part, node in PARTITIONS.items()
    }
    started = {j: (await cluster.wait_job(j, "RUNNING", timeout=60)).start_time for j in jobs.values()}
    pids = {c.name: cluster.controller_pid(c.name) for c in cluster.controllers}
    async with ha_pair(cluster) as pair:
        good = pair.good()
        good_sha = set_sha(good)
        failures: list[str] = []
        for case in cases:
            config, _ = case.change(dict(good), {}, str(cluster.conf_dir("ctld-a")))
            pair.config.write(config)
            sha = set_sha(config)

            def judged(st: dict[str, Any], sha: str = sha) -> bool:
                return bool(st["rejected"] and st["rejected"]["sha256"] == sha and not st["pending"])

            for name, pod in pair.pods.items():
                try:
                    st = await pod.service.wait_until(judged, 90)
                except TimeoutError:
                    failures.append(f"{case.name}: {name} never refused it: {pod.service.status()}")
                    continue
                reason = st["rejected"]["reason"].lower()
                if kind(st) not in case.kinds or not any(w.lower() in reason for w in case.says):
                    failures.append(f"{case.name}: {name} said {kind(st)}: {st['rejected']['reason']!r}")
                if pod.target_sha() != good_sha:
                    failures.append(f"{case.name}: {name}'s directory left the good set")
        assert not failures, "\n".join(failures)
        for name, pod in pair.pods.items():
            assert pod.commands("scontrol reconfigure") == 0, f"{name} reconfigured for a bad set"
        assert {c.name: cluster.controller_pid(c.name) for c in cluster.controllers} == pids
        for job, start in started.items():
            assert (await cluster.wait_job(job, "RUNNING", timeout=5)).start_time == start

        files = with_min_job_age(good, 201)
        pair.config.write(files)
        await pair.all_hold(set_sha(files), within=90)
        assert (await cluster.client().show_config())["MinJobAge"].split()[0] == "201"
