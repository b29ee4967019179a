"""A corpus of bad and dangerous change sets, on every release, against a foreground slurmctld
(`slurmctld -D`, as our images run it) with a job running in each partition.

Across slurm.conf, its includes, gres.conf, cgroup.conf, topology.conf and key files: values out of
range, required things missing, objects running jobs use removed, files only slurmd reads. For
every set: it is refused or held with a reason, slurmctld never dies (same process, never exited),
no job is lost (each still RUNNING since the same start), the target keeps the last known good set.
Then a good change still applies. One cluster per release serves the whole corpus; a failing case
is collected, so one run names them all.
"""

from __future__ import annotations

import os
import re
import time

import pytest

from sidecars.devcluster import ClusterSpec, DevCluster, Release
from tests.configsync.corpus import (
    Case,
    append,
    conf,
    drop,
    file,
    held,
    include,
    judged,
    node_line,
    refused,
    wrong_verdict,
)
from tests.configsync.harness import cluster_files, config_sync, set_sha

SECRET = {"slurm.key": os.urandom(64)}
EXTRA = """TopologyPlugin=topology/tree
PartitionName=p2 Nodes=n2 State=UP
NodeSet=ns3 Nodes=n3
PartitionName=p3 Nodes=ns3 State=UP"""
TOPOLOGY = b"SwitchName=s0 Nodes=n[1-3]\n"
PARTITIONS = {"debug": "n1", "p2": "n2", "p3": "n3"}
SHAPED = "Sockets=4 CoresPerSocket=4 ThreadsPerCore=2"  # more than the machine: the node is INVALID


class CorpusCluster(DevCluster):
    """The dev cluster with a topology.conf, which slurmctld reads at start."""

    def _write_files(self) -> None:
        super()._write_files()
        (self.conf_path.parent / "topology.conf").write_bytes(TOPOLOGY)


CASES = [
    # --- slurm.conf: values out of range or malformed
    refused("unknown key", append("ThisIsNotAKey=1"), "unrecognized key"),
    refused("garbage line", append("this is garbage"), "Parse error"),
    Case("CPUs not a number", conf(lambda t: t.replace("CPUs=1", "CPUs=abc")), ("not a valid number",)),
    Case("RealMemory not a number", conf(lambda t: t.replace("RealMemory=1000", "RealMemory=abc")), ("abc",)),
    Case("MaxTime nonsense", conf(lambda t: t.replace("MaxTime=INFINITE", "MaxTime=banana")), ("banana",)),
    Case("partition State nonsense", append("PartitionName=p9 Nodes=n1 State=BOGUS"), ("BOGUS",)),
    Case("node State nonsense", conf(lambda t: t.replace("State=UNKNOWN", "State=BOGUS", 1)), ("BOGUS",)),
    Case("SlurmctldPort not a number", append("SlurmctldPort=abc"), ("SlurmctldPort",)),
    Case("licenses malformed", append("Licenses=foo:abc"), ("Invalid configured licenses",)),
    Case("a scheduler plugin misspelt", append("SchedulerType=sched/bogus"), ("sched",)),
    Case("ReturnToService nonsense", append("ReturnToService=abc"), ("ReturnToService", "abc")),
    Case(
        "OverSubscribe nonsense", append("PartitionName=p9 Nodes=n1 OverSubscribe=SOMETIMES"), ("SOMETIMES",)
    ),
    Case("PreemptMode nonsense", append("PreemptMode=BOGUS"), ("PreemptMode", "BOGUS")),
    Case("DefMemPerCPU not a number", append("DefMemPerCPU=abc"), ("DefMemPerCPU", "abc")),
    Case("MessageTimeout not a number", append("MessageTimeout=abc"), ("MessageTimeout", "abc")),
    Case(
        "node Weight not a number",
        conf(lambda t: t.replace("State=UNKNOWN", "Weight=abc State=UNKNOWN", 1)),
        ("abc",),
    ),
    Case("PriorityWeightAge not a number", append("PriorityWeightAge=abc"), ("PriorityWeightAge", "abc")),
    Case("SelectType without the parameters it needs", append("SelectType=select/linear"), ("select",)),
    Case("SelectTypeParameters nonsense", append("SelectTypeParameters=CR_Bogus"), ("SelectTypeParameter",)),
    Case("a preempt plugin misspelt", append("PreemptType=preempt/qos_typo"), ("preempt",)),
    Case("an MCS plugin misspelt", append("MCSPlugin=mcs/bogus"), ("mcs",)),
    refused(
        "a job completion file in a directory that is not there",
        append("JobCompType=jobcomp/filetxt\nJobCompLoc=/nonexistent/dir/jobcomp.txt"),
        "JobCompLoc=/nonexistent/dir/jobcomp.txt: no directory",
    ),
    Case("a priority plugin misspelt", append("PriorityType=priority/bogus"), ("priority",)),
    Case("a job_submit plugin misspelt", append("JobSubmitPlugins=bogus"), ("job_submit",)),
    Case("a topology plugin misspelt", append("TopologyPlugin=topology/bogus"), ("topology",)),
    Case(
        "an unknown GRES on the nodes",
        conf(lambda t: t.replace("Gres=gpu:2", "Gres=bogus:1")),
        ("gres", "bogus"),
    ),
    Case("GresTypes dropped while nodes have GPUs", conf(drop("GresTypes=")), ("gres",)),
    # --- slurm.conf: required things missing
    refused("no SlurmctldHost", conf(drop("SlurmctldHost")), "SlurmctldHost"),
    Case("no ClusterName", conf(drop("ClusterName")), ("ClusterName",)),
    refused("slurm.conf empty", file("slurm.conf", b""), "empty"),
    refused("slurm.conf missing", file("slurm.conf", None), "missing"),
    refused("a NodeSet a partition uses removed", conf(drop("NodeSet=ns3")), "ns3"),
    # --- what running jobs use, removed
    held("a partition with a running job removed", conf(drop("PartitionName=p2")), ("p2",), "p2"),
    held("a NodeSet partition with a running job removed", conf(drop("PartitionName=p3")), ("p3",), "p3"),
    held(
        "the default partition renamed",
        conf(lambda t: t.replace("PartitionName=debug", "PartitionName=main")),
        ("debug",),
        "debug",
    ),
    held(
        "a node with a running job removed",
        conf(lambda t: drop("NodeName=n3 ")(t).replace("NodeSet=ns3 Nodes=n3", "NodeSet=ns3 Nodes=n2")),
        ("n3",),
        "p3",
    ),
    held(
        "a busy node's sockets, cores and threads redefined",
        conf(lambda t: t.replace(node_line(t), f"{node_line(t)} {SHAPED}")),
        ("n1 it runs on is redefined", "change in socket/core configuration"),  # ours, or the dry run's
        "debug",
    ),
    held(
        "a busy node's port moved",
        conf(lambda t: t.replace(node_line(t, "n2"), re.sub(r"Port=\d+", "Port=1", node_line(t, "n2")))),
        ("n2 it runs on is redefined (port)", "JobId=2"),
        "p2",
    ),
    held("MaxJobId below the running jobs' ids", append("MaxJobId=2"), ("MaxJobId=2", "JobId=3"), "p2", "p3"),
    Case("every partition removed", conf(drop("PartitionName=")), ("partition",)),
    # --- includes
    refused("missing include", append("Include @T@/nope.conf"), "nope.conf"),
    refused("include outside the set", append("Include /etc/hostname"), "outside the set"),
    refused("an included file with a bad key", include(b"AlsoNotAKey=2\n"), "AlsoNotAKey"),
    Case(
        "an included file that kills slurmctld",
        include(b"Licenses=bar:xyz\n"),
        ("Invalid configured licenses",),
    ),
    held(
        "an included file moving a partition away under a new name",
        file(
            "extra.conf",
            b"PartitionName=p22 Nodes=n2 State=UP\n",
            conf(lambda t: drop("PartitionName=p2 ")(t) + "Include extra.conf\n"),
        ),
        ("p2",),
        "p2",
    ),
    # --- gres.conf (only slurmd reads it)
    refused("garbage in gres.conf", file("gres.conf", b"this is garbage\n"), "gres.conf"),
    refused("unknown key in gres.conf", file("gres.conf", b"Name=gpu Bogus=1 File=/dev/null\n"), "Bogus"),
    refused(
        "a GRES gres.conf names outside GresTypes", file("gres.conf", b"Name=tpu Count=2\n"), "GresTypes"
    ),
    refused("a gres.conf Count that is not one", file("gres.conf", b"Name=gpu Count=lots\n"), "Count"),
    # --- cgroup.conf (only slurmd reads it)
    refused(
        "garbage in cgroup.conf", file("cgroup.conf", b"CgroupPlugin=disabled\nnonsense\n"), "cgroup.conf"
    ),
    refused("an unknown cgroup plugin", file("cgroup.conf", b"CgroupPlugin=cgroup/v9\n"), "CgroupPlugin"),
    refused(
        "a cgroup.conf yes/no that is neither",
        file("cgroup.conf", b"CgroupPlugin=disabled\nConstrainCores=maybe\n"),
        "ConstrainCores",
    ),
    refused(
        "a cgroup.conf space that is no number",
        file("cgroup.conf", b"CgroupPlugin=disabled\nAllowedRAMSpace=lots\n"),
        "AllowedRAMSpace",
    ),
    # --- topology.conf (slurmctld reads it at start)
    Case(
        "garbage in topology.conf", file("topology.conf", b"this is garbage\n"), ("topology", "Parse error")
    ),
    Case(
        "unknown key in topology.conf",
        file("topology.conf", b"SwitchName=s0 Nodes=n[1-3] Bogus=1\n"),
        ("Bogus", "unrecognized"),
    ),
    Case("topology.conf removed", file("topology.conf", None), ("topology",)),
    # --- key files
    refused("a key file removed", lambda c, s, t: (c, {}), "key file slurm.key was removed"),
    Case(
        "a key rotated",
        lambda c, s, t: (c, {"slurm.key": os.urandom(64)}),
        ("key file slurm.key changed",),
        frozenset({"restart_required"}),
    ),
    Case(
        "JWT with a key that is not there",
        append("AuthAltTypes=auth/jwt\nAuthAltParameters=jwt_key=@T@/jwt.key"),
        ("jwt", "authalttypes"),
    ),
]


@pytest.mark.timeout(900)
@pytest.mark.per_release(
    "each release's slurmctld -D meets each bad set its own way (refusal, death, requeue)"
)
async def test_the_corpus_never_kills_slurmctld_nor_a_job(release: Release) -> None:
    assert len(CASES) >= 40
    spec = ClusterSpec(nodes=3, gpus=2, foreground_ctld=True, extra_conf=EXTRA)
    async with CorpusCluster(release, spec) as cluster:
        jobs: dict[str, int] = {}
        for part, node in PARTITIONS.items():
            jobs[part] = await cluster.sbatch("-p", part, "-w", node, wrap="sleep 900")
        started = {j: (await cluster.wait_job(j, "RUNNING", timeout=60)).start_time for j in jobs.values()}
        pid = cluster.foreground_pid()
        target = str(cluster.conf_path.parent)
        initial = {**cluster_files(cluster), "topology.conf": TOPOLOGY}
        async with config_sync(cluster, secrets=SECRET, initial=initial) as sync:
            good_config = sync.good()
            good_sha = (await sync.status())["applied"]["sha256"]
            failures: list[str] = []
            took: list[float] = []
            for case in CASES:
                config, secrets = case.change(dict(good_config), dict(SECRET), target)
                sync.config.write(config)
                sync.secrets.write(secrets)
                sha = set_sha(config, secrets)
                t0 = time.monotonic()
                try:
                    st = await sync.service.wait_until(judged(sha), 30.0)
                except TimeoutError:
                    failures.append(f"{case.name}: no verdict; status {await sync.status()}")
                    continue
                if st["applied"]["sha256"] == sha:
                    failures.append(f"{case.name}: applied")
                    sync.config.write(good_config)  # back to the good set for the next cases
                    sync.secrets.write(SECRET)
                    await sync.service.wait_until(lambda st: st["applied"]["sha256"] == good_sha, 30.0)
                    continue
                took.append(time.monotonic() - t0)
                if took[-1] > 5:
                    print("slow case", release, case.name, round(took[-1], 1), st["rejected"]["reason"][:300])
                st = await sync.status()  # through HTTP, as a user sees it
                failures += [f"{case.name}: {wrong}" for wrong in wrong_verdict(case, st, jobs)]
                if st["applied"]["sha256"] != good_sha or sync.target_sha() != good_sha:
                    failures.append(f"{case.name}: the target no longer holds the last known good set")
                if cluster.foreground_pid() != pid or cluster.foreground_exit is not None:
                    failures.append(f"{case.name}: slurmctld died ({cluster.ctld_stderr_tail()[-500:]})")
                    await cluster.start_slurmctld()
                    pid = cluster.foreground_pid()
                live = {j.job_id: j for j in await cluster.client().jobs()}
                lost = [
                    j
                    for j, t in started.items()
                    if j not in live or live[j].state != "RUNNING" or live[j].start_time != t
                ]
                if lost:
                    failures.append(f"{case.name}: jobs {lost} no longer run as they did")
                    started = {j: t for j, t in started.items() if j not in lost}
            assert not failures, f"{len(failures)} of {len(CASES)} cases failed:\n" + "\n".join(failures)
            # a good change applies after all that
            fixed = {
                **good_config,
                "slurm.conf": good_config["slurm.conf"].replace(b"MaxTime=INFINITE", b"MaxTime=30", 1),
            }
            sync.config.write(fixed)
            sync.secrets.write(SECRET)
            await sync.wait(set_sha(fixed, SECRET), within=30.0)
            parts = {p.name: p for p in await cluster.client().partitions()}
            assert parts["debug"].max_time_minutes == 30
            p50 = sorted(took)[len(took) // 2]
            print(f"corpus on {release}: {len(CASES)} cases, verdict p50 {p50:.2f}s, max {max(took):.2f}s")
        for j, t in started.items():
            assert (await cluster.wait_job(j, "RUNNING")).start_time == t
        assert cluster.foreground_pid() == pid and cluster.foreground_exit is None
