"""The corpus's sets for the Slinky shape: sets that touch busy dynamic workers (configless `slurmd
-Z` nodes, defined by their registration). Each is refused or held for the jobs it would requeue;
slurmctld never dies (foreground, as our images run it), no job is lost, the target keeps the last
known good set, and a good change still applies after them."""

from __future__ import annotations

from typing import Any

import pytest

from sidecars.devcluster import DevCluster
from tests.configsync.corpus import Case, append, conf, held, judged, wrong_verdict
from tests.configsync.harness import config_sync, key_secret, set_sha

pytestmark = [
    pytest.mark.releases("slurm24", "slurm26"),
    pytest.mark.cluster(shape="slinky", nodes=3, nodesets={"n3": "other"}, foreground_ctld=True),
]
WORKERS = {"slinky": "n1", "other": "n3"}  # a job runs on each, in the default partition


def static_line(name: str) -> Any:
    return append(f"NodeName={name} NodeAddr=127.0.0.1 Port=1 CPUs=1 RealMemory=1000 State=UNKNOWN")


CASES = [
    held("a static line for a busy worker", static_line("n1"), ("dynamic node n1",), "slinky"),
    held("a static line for the other busy worker", static_line("n3"), ("dynamic node n3",), "other"),
    held(
        "a NodeSet's feature renamed under its busy worker",
        conf(lambda t: t.replace("NodeSet=slinky Feature=slinky", "NodeSet=slinky Feature=gone")),
        ("dynamic node n1",),
        "slinky",
    ),
    held(
        "a NodeSet dropped from the partition its busy worker runs in",
        conf(lambda t: t.replace("Nodes=other,slinky", "Nodes=slinky")),
        ("dynamic node n3",),
        "other",
    ),
    Case(
        "a NodeSet the partition uses removed",
        conf(lambda t: t.replace("NodeSet=other Feature=other\n", "")),
        ("other",),
    ),
]


@pytest.mark.timeout(600)
@pytest.mark.per_release("each release's dynamic workers and NodeSets meet each set their own way")
async def test_sets_touching_busy_dynamic_workers_never_kill_slurmctld_nor_a_job(cluster: DevCluster) -> None:
    jobs = {ns: await cluster.sbatch("-w", node, wrap="sleep 900") for ns, node in WORKERS.items()}
    started = {j: (await cluster.wait_job(j, "RUNNING", timeout=60)).start_time for j in jobs.values()}
    pid = cluster.foreground_pid()
    secrets = key_secret(cluster)
    target = str(cluster.conf_path.parent)
    async with config_sync(cluster, secrets=secrets) as sync:
        good = sync.good()
        assert b"Nodes=other,slinky" in good["slurm.conf"], good["slurm.conf"]
        good_sha = (await sync.status())["applied"]["sha256"]
        failures: list[str] = []
        for case in CASES:
            config, _ = case.change(dict(good), dict(secrets), target)
            assert config != good, case.name
            sync.config.write(config)
            sha = set_sha(config, secrets)
            st = await sync.service.wait_until(judged(sha), 60.0)
            if st["applied"]["sha256"] == sha:
                failures.append(f"{case.name}: applied")
                break  # the cluster is no longer the one the other cases assume
            failures += [f"{case.name}: {wrong}" for wrong in wrong_verdict(case, st, jobs)]
            if sync.target_sha() != good_sha or cluster.foreground_pid() != pid:
                failures.append(f"{case.name}: the target or slurmctld changed")
        assert not failures, "\n".join(failures)
        fixed = {**good, "slurm.conf": good["slurm.conf"].replace(b"MaxTime=INFINITE", b"MaxTime=30", 1)}
        sync.config.write(fixed)
        await sync.wait(set_sha(fixed, secrets), within=60.0)
    for j, t in started.items():
        assert (await cluster.wait_job(j, "RUNNING")).start_time == t, j
    assert cluster.foreground_pid() == pid and cluster.foreground_exit is None
