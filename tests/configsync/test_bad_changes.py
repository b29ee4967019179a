"""A corpus of bad change sets: none of them may hurt slurmctld or a running job.

One cluster per release serves the whole corpus (rejections never touch slurmctld, which is the point,
so the cases do not disturb each other). For each case: the set is refused for the right reason,
/status says why, the target still holds the last known good set, slurmctld keeps its PID and
answers, and the running job keeps running. Failures are collected so one run reports every case.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from sidecars.devcluster import ClusterSpec, DevCluster, Release
from sidecars.devcluster.release import RELEASE_NAMES
from tests.configsync.harness import config_sync, set_sha

Files = dict[str, bytes]
SECRET = {"slurm.key": os.urandom(64)}


@dataclass(frozen=True)
class Case:
    name: str
    change: Callable[[Files, Files, str], tuple[Files, Files]]  # (config, secrets, target) -> new ones
    says: str  # a piece of the reason /status must give
    restart_required: bool = False
    releases: frozenset[str] = field(default_factory=lambda: frozenset(RELEASE_NAMES))
    exact_sha: bool = True  # False where the set read is not simply config + secrets


def conf(edit: Callable[[str], str]) -> Callable[[Files, Files, str], tuple[Files, Files]]:
    def change(c: Files, s: Files, target: str) -> tuple[Files, Files]:
        return {**c, "slurm.conf": edit(c["slurm.conf"].decode().replace("@T@", target)).encode()}, s

    return change


def append(text: str) -> Callable[[Files, Files, str], tuple[Files, Files]]:
    return conf(lambda t: t + text.replace("@T@", "@T@") + "\n")


def with_target(text: str) -> Callable[[Files, Files, str], tuple[Files, Files]]:
    def change(c: Files, s: Files, target: str) -> tuple[Files, Files]:
        body = c["slurm.conf"].decode() + text.replace("@T@", target) + "\n"
        return {**c, "slurm.conf": body.encode()}, s

    return change


def first_node_line(t: str) -> str:
    return next(ln for ln in t.splitlines() if ln.startswith("NodeName=n1 "))


CASES = [
    Case("unknown key", append("ThisIsNotAKey=1"), "unrecognized key: ThisIsNotAKey"),
    Case("garbage line", append("this is garbage"), "Parse error in file"),
    Case(
        "bad number",
        conf(lambda t: t.replace("CPUs=1", "CPUs=abc")),
        'CPUs value "abc" is not a valid number',
    ),
    Case("bad time", conf(lambda t: t.replace("MaxTime=INFINITE", "MaxTime=banana")), 'Bad value "banana"'),
    Case("bad partition state", append("PartitionName=p3 Nodes=n1 State=BOGUS"), 'Bad value "BOGUS"'),
    Case("bad port number", append("SlurmctldPort=abc"), "Invalid SlurmctldPort abc"),
    Case(
        "no SlurmctldHost",
        conf(lambda t: "\n".join(ln for ln in t.splitlines() if not ln.startswith("SlurmctldHost"))),
        "No SlurmctldHost defined",
    ),
    Case(
        "partition naming an unknown node",
        append("PartitionName=p2 Nodes=n9"),
        "partition p2 names unknown node(s) n9",
    ),
    Case(
        "nodeset naming an unknown node",
        append("NodeSet=ns1 Nodes=n7"),
        "NodeSet ns1 names unknown node(s) n7",
    ),
    Case(
        "duplicate partition",
        append("PartitionName=debug Nodes=n1 MaxTime=5"),
        "partition debug is defined 2 times",
    ),
    Case("duplicate node", conf(lambda t: t + first_node_line(t) + "\n"), "node n1 is defined 2 times"),
    Case(
        "a new NodeName line (22.05)",
        conf(lambda t: t + first_node_line(t).replace("n1", "n9") + "\n"),
        "nodes added: n9",
        restart_required=True,
        releases=frozenset({"host"}),
    ),
    Case("missing include", with_target("Include @T@/nope.conf"), "nope.conf is not in the set"),
    Case("missing relative include", append("Include extra.conf"), "extra.conf is not in the set"),
    Case("include outside the set", append("Include /etc/hostname"), "points outside the set"),
    Case(
        "an included file with a bad key",
        lambda c, s, t: (
            {
                **c,
                "slurm.conf": c["slurm.conf"] + f"Include {t}/extra.conf\n".encode(),
                "extra.conf": b"AlsoNotAKey=2\n",
            },
            s,
        ),
        "unrecognized key: AlsoNotAKey",
    ),
    Case(
        "garbage in gres.conf",
        lambda c, s, t: ({**c, "gres.conf": c["gres.conf"] + b"this is garbage\n"}, s),
        "gres.conf:2: 'this is garbage' is not Key=Value",
    ),
    Case(
        "unknown key in gres.conf",
        lambda c, s, t: ({**c, "gres.conf": b"Name=gpu Bogus=1 File=/dev/null\n"}, s),
        "gres.conf:1: unknown key 'Bogus'",
    ),
    Case(
        "garbage in cgroup.conf",
        lambda c, s, t: ({**c, "cgroup.conf": b"CgroupPlugin=disabled\nnonsense\n"}, s),
        "cgroup.conf:2: 'nonsense' is not Key=Value",
    ),
    Case("empty slurm.conf", lambda c, s, t: ({**c, "slurm.conf": b""}, s), "slurm.conf is empty"),
    Case("blank slurm.conf", lambda c, s, t: ({**c, "slurm.conf": b"\n  \n"}, s), "slurm.conf is empty"),
    Case(
        "slurm.conf removed",
        lambda c, s, t: ({k: v for k, v in c.items() if k != "slurm.conf"}, s),
        "slurm.conf is missing",
    ),
    Case(
        "binary content",
        lambda c, s, t: ({**c, "slurm.conf": c["slurm.conf"] + b"\0\x01\x02\xff"}, s),
        "not text",
    ),
    Case("not UTF-8", lambda c, s, t: ({**c, "extra.conf": b"Name=caf\xe9\n"}, s), "not UTF-8"),
    Case(
        "a 5 MB file",
        lambda c, s, t: ({**c, "huge.conf": b"#" * (5 * 1024 * 1024)}, s),
        "over the 1048576-byte limit",
    ),
    Case("a Secret removed", lambda c, s, t: (c, {}), "key file slurm.key was removed"),
    Case(
        "the same file in two volumes",
        lambda c, s, t: (c, {**s, "slurm.conf": c["slurm.conf"]}),
        "is in both",
        exact_sha=False,
    ),
    # a restart would have died of it: select/linear refuses CR_CPU (found by the dry run)
    Case("SelectType changed", append("SelectType=select/linear"), "Invalid SelectTypeParameters"),
    Case("AuthType changed", append("AuthType=auth/none"), "authtype changed", restart_required=True),
    Case("SlurmctldPort changed", append("SlurmctldPort=1"), "slurmctldport changed", restart_required=True),
    Case("MaxNodeCount set", append("MaxNodeCount=10"), "maxnodecount changed", restart_required=True),
    Case(
        "a key rotated",
        lambda c, s, t: (c, {"slurm.key": os.urandom(64)}),
        "key file slurm.key changed",
        restart_required=True,
    ),
]


@dataclass
class Failure:
    case: str
    what: str


@pytest.mark.per_release("each release's parser and slurmctld refuse the corpus their own way")
async def test_bad_change_sets_never_reach_slurmctld(release: Release) -> None:
    assert len(CASES) >= 20
    async with DevCluster(release, ClusterSpec(nodes=2, gpus=2)) as cluster:
        job = await cluster.sbatch(wrap="sleep 600")
        await cluster.wait_job(job, "RUNNING")
        pid = cluster.hostpid("slurmctld")
        target = str(cluster.conf_path.parent)
        async with config_sync(cluster, secrets=SECRET) as sync:
            good_config, good_sha = sync.good(), (await sync.status())["applied"]["sha256"]
            assert good_sha == set_sha(good_config, SECRET)
            assert oct((cluster.conf_path.parent / "slurm.key").stat().st_mode & 0o777) == "0o600"
            failures: list[Failure] = []
            ran = 0
            for case in CASES:
                if release.name not in case.releases:
                    continue
                ran += 1
                config, secrets = case.change(dict(good_config), dict(SECRET), target)
                last = await sync.status()  # before the write: a verdict then can only be this case's
                sync.config.write(config)
                sync.secrets.write(secrets)
                sha = set_sha(config, secrets)

                def judged(
                    st: dict[str, Any],
                    sha: str = sha,
                    last: dict[str, Any] = last,
                    exact: bool = case.exact_sha,
                ) -> bool:
                    r = st["rejected"]
                    if exact:
                        return bool(r and r["sha256"] == sha and not st["pending"])
                    return bool(r and r != last["rejected"] and not st["pending"])

                try:
                    await sync.service.wait_until(judged, 30.0)  # a throwaway slurmctld on a loaded machine
                except TimeoutError:
                    failures.append(Failure(case.name, f"no verdict; status {await sync.status()}"))
                    continue
                st = await sync.status()  # through HTTP, as a user sees it
                reason = st["rejected"]["reason"]
                if case.says.lower() not in reason.lower():
                    failures.append(Failure(case.name, f"reason {reason!r} lacks {case.says!r}"))
                if st["restart_required"] != case.restart_required:
                    failures.append(Failure(case.name, f"restart_required is {st['restart_required']}"))
                if st["applied"]["sha256"] != good_sha or sync.target_sha() != good_sha:
                    failures.append(Failure(case.name, "the target no longer holds the last known good set"))
                if cluster.hostpid("slurmctld") != pid or not (await cluster.client().ping()).up:
                    failures.append(Failure(case.name, "slurmctld restarted or stopped answering"))
                    pid = cluster.hostpid("slurmctld")
                if SECRET["slurm.key"].hex() in reason or "caf\xe9" in reason:
                    failures.append(Failure(case.name, "the reason quotes file contents it must not"))
            await cluster.wait_job(job, "RUNNING", timeout=30)  # still running: room for a slow answer
            assert not failures, "\n".join(f"{f.case}: {f.what}" for f in failures)
            expected_rejections = sum(
                1 for c in CASES if release.name in c.releases and not c.restart_required
            )
            assert (
                await sync.metric("slurm_sidecars_config_applies_total", result="rejected")
                == expected_rejections
            )
            assert await sync.metric("slurm_sidecars_config_applies_total", result="applied") == 0
            kinds = {reason for reason, _, _ in sync.events.events}
            assert {"ConfigRejected", "ConfigRestartRequired"} <= kinds
            # back to the good set: nothing to do, nothing pending, no rejection standing
            sync.config.write(good_config)
            sync.secrets.write(SECRET)
            st = await sync.service.wait_until(lambda s: s["rejected"] is None and not s["pending"], 30.0)
            assert st["applied"]["generation"] == 1
            # and a fixed config still applies normally after all those rejections
            fixed = {
                **good_config,
                "slurm.conf": good_config["slurm.conf"].replace(b"MaxTime=INFINITE", b"MaxTime=30"),
            }
            sync.config.write(fixed)
            st = await sync.wait(set_sha(fixed, SECRET))
            assert (await cluster.client().partitions())[0].max_time_minutes == 30
            await cluster.wait_job(job, "RUNNING", timeout=30)
        assert ran >= 20
