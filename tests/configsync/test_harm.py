"""Changes the workers' registration refuses. Each is refused before the swap where that can be
predicted (predict.py); with the predictions off, the live judge (harm.py) rolls it back and undoes
the drains Slurm set because of it, and only those: the fleet is as it was, and an admin's drain
set before the change stays, with the admin's reason."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from sidecars.configsync.apply.harm import judge
from sidecars.configsync.judge.predict import GresSpec, parse_gres
from sidecars.devcluster import DevCluster
from sidecars.slurm import Node, NodeState
from sidecars.slurm.models import Reason
from tests.configsync.harness import Sync, cluster_files, config_sync, key_secret, set_sha

# SlurmdParameters=config_overrides (the dev cluster's default) tells Slurm not to drain a worker
# that reports less than slurm.conf says: the classic cluster here leaves it out, as most do
CLASSIC = {"nodes": 2, "gpus": 2, "extra_conf": "SlurmdParameters=shutdown_on_reboot"}
# typed GPUs (`--conf Gres=gpu:h100:2`, gres.conf `Type=h100`); no RealMemory in the workers' `--conf`,
# so each registers the memory it has; and no config_overrides, so Slurm drains for low memory
SLINKY = {
    "shape": "slinky",
    "nodes": 2,
    "gpus": 2,
    "gpu_type": "h100",
    "memory": 0,
    "extra_conf": "SlurmdParameters=shutdown_on_reboot",
}
ADMIN = "admin: fan swap"
Files = dict[str, bytes]


@dataclass(frozen=True)
class Case:
    name: str
    change: Callable[[Files], Files]
    predicted: str | None  # in the refusal when predicted; None: only the live judge can tell
    slurm_says: str  # in the rollback's reason: Slurm's own words for the drain
    # releases whose Slurm takes the set without draining anyone (measured): applied, fleet intact
    harmless_on: tuple[str, ...] = ()


def drop_gres_conf(files: Files) -> Files:
    return {n: d for n, d in files.items() if n != "gres.conf"}


def appended(line: bytes, name: str = "slurm.conf") -> Callable[[Files], Files]:
    def change(files: Files) -> Files:
        return {**files, name: files[name] + line + b"\n"}

    return change


def conf(old: bytes, new: bytes, name: str = "slurm.conf") -> Callable[[Files], Files]:
    def change(files: Files) -> Files:
        assert old in files[name], files[name]
        return {**files, name: files[name].replace(old, new)}

    return change


def both(*changes: Callable[[Files], Files]) -> Callable[[Files], Files]:
    def change(files: Files) -> Files:
        for c in changes:
            files = c(files)
        return files

    return change


GRES_LOWER = "gres/gpu count reported lower than configured"
DROPPED = Case("gres.conf dropped", drop_gres_conf, "gres.conf gives them none", GRES_LOWER)
CLASSIC_CASES = [
    DROPPED,
    Case(
        "GRES typed differently",
        both(
            conf(b"Gres=gpu:2", b"Gres=gpu:h100:2"), conf(b"Name=gpu ", b"Name=gpu Type=a100 ", "gres.conf")
        ),
        "its Gres types it h100, gres.conf only a100",
        GRES_LOWER,
    ),
    Case(
        "a count above the devices",
        conf(b"Gres=gpu:2", b"Gres=gpu:3"),
        "3 configured, gres.conf gives 2",
        GRES_LOWER,
        harmless_on=("22.05",),
    ),
    Case(
        "RealMemory above what workers have",
        conf(b"RealMemory=1000", b"RealMemory=90000000"),
        None,
        "Low RealMemory",
    ),
    Case(
        "a NodeSet feature no worker has",
        conf(b"PartitionName=debug Nodes=ALL", b"NodeSet=fast Feature=fast\nPartitionName=debug Nodes=fast"),
        "NodeSet fast selects Feature=fast, which no worker has",
        "partition debug has no usable node left",
    ),
]
SLINKY_CASES = [
    DROPPED,
    Case(
        "GRES typed differently",
        conf(b"Type=h100", b"Type=a100", "gres.conf"),
        "its Gres types it h100, gres.conf only a100",
        GRES_LOWER,
    ),
    # a dynamic worker's memory is its own `--conf`'s, else what it has: slurm.conf's defaults are
    # not applied to it (measured on 24.11 and 26.05), so no ConfigMap change raises it. The set
    # applies and nobody is drained; naming the worker in a NodeName line is another harm (a node
    # table clash its registration fails on, the workers' verdict's)
    Case(
        "RealMemory above what workers have",
        appended(b"NodeName=DEFAULT RealMemory=90000000"),
        None,
        "Low RealMemory",
        harmless_on=("24.11", "26.05"),
    ),
    Case(
        "a count above the devices",
        conf(b"nvidia[0-1]", b"nvidia[0-0]", "gres.conf"),
        "2 configured, gres.conf gives 1",
        GRES_LOWER,
    ),
    Case(
        "a NodeSet feature no worker has",
        conf(b"NodeSet=slinky Feature=slinky", b"NodeSet=slinky Feature=fast"),
        "NodeSet slinky selects Feature=fast, which no worker has",
        "partition debug has no usable node left",
    ),
]


async def fleet(cluster: DevCluster) -> dict[str, tuple[bool, str | None, frozenset[str]]]:
    """Each worker: drained, why (24.11 keeps a resumed node's last reason, as for any resume: only
    a drain's is compared), and its flags but the dynamic node's own."""
    return {
        n.name: (
            n.state.drain,
            n.reason.text if n.reason and n.state.drain else None,
            n.state.flags - {"DYNAMIC_NORM"},
        )
        for n in await cluster.client().node_listing()
    }


async def judged(sync: Sync, files: Files, secrets: Files, good_sha: str) -> str | None:
    """The rejection's reason, once the set is rejected (the good set still applied and on disk);
    None when it was applied."""
    sync.config.write(files)
    sha = set_sha(files, secrets)

    def done(st: dict[str, Any]) -> bool:
        return not st["pending"] and sha in ((st["rejected"] or {}).get("sha256"), st["applied"]["sha256"])

    st = await sync.service.wait_until(done, 30)
    if st["applied"]["sha256"] == sha:
        return None
    assert st["applied"]["sha256"] == good_sha and sync.target_sha() == good_sha, st
    return str(st["rejected"]["reason"])


async def back_to_good(sync: Sync, good: Files, good_sha: str) -> None:
    sync.config.write(good)
    await sync.service.wait_until(
        lambda st: st["rejected"] is None and not st["pending"] and st["applied"]["sha256"] == good_sha, 30
    )


async def each_refused_or_rolled_back(cluster: DevCluster, cases: list[Case]) -> None:
    secrets = key_secret(cluster) if cluster.slinky else {}
    await cluster.client().drain(["n2"], ADMIN)
    before = await fleet(cluster)
    assert before == {"n1": (False, None, frozenset()), "n2": (True, ADMIN, frozenset({"DRAIN"}))}, before
    async with config_sync(cluster, secrets=secrets) as sync:
        good = sync.good()
        good_sha = (await sync.status())["applied"]["sha256"]
        for case in cases:
            if case.predicted is None:
                continue
            reason = await judged(sync, case.change(dict(good)), secrets, good_sha)
            assert (
                reason is not None
                and reason.startswith("the workers would refuse it")
                and case.predicted in reason
            ), (
                case,
                reason,
            )
            assert await fleet(cluster) == before, case
            await back_to_good(sync, good, good_sha)
        sync.service.validator.predict = False  # what the live judge must catch when predictions miss
        for case in cases:
            reason = await judged(sync, case.change(dict(good)), secrets, good_sha)
            if cluster.release.short in case.harmless_on:
                assert reason is None, (case, reason)  # applied: Slurm drained no one
            else:
                assert reason is not None and case.slurm_says in reason, (case, reason)
            assert await fleet(cluster) == before, (case, reason)  # n1 usable, n2 still the admin's
            await back_to_good(sync, good, good_sha)


@pytest.mark.timeout(600)
@pytest.mark.cluster(**CLASSIC)
@pytest.mark.per_release(
    "a Gres count above the devices drains no worker on 22.05 (applied) and is rolled back on 24.11+; "
    "the rollback's resumes meet 24.11's kept reason"
)
async def test_changes_the_workers_refuse_classic(cluster: DevCluster) -> None:
    await each_refused_or_rolled_back(cluster, CLASSIC_CASES)


@pytest.mark.timeout(600)
@pytest.mark.releases("slurm24", "slurm26")
@pytest.mark.cluster(**SLINKY)
@pytest.mark.per_release(
    "each release's dynamic workers register (and are drained) in their own words, and the rollback's "
    "resumes meet 24.11's kept reason"
)
async def test_changes_the_workers_refuse_slinky(cluster: DevCluster) -> None:
    await each_refused_or_rolled_back(cluster, SLINKY_CASES)


@pytest.mark.releases("slurm24", "slurm26")
@pytest.mark.cluster(shape="slinky", nodes=2, gpus=1)
async def test_a_rollback_says_what_it_undid(cluster: DevCluster) -> None:
    secrets = key_secret(cluster)
    await cluster.client().drain(["n2"], ADMIN)
    async with config_sync(cluster, secrets=secrets) as sync:
        sync.service.validator.predict = False
        good_sha = (await sync.status())["applied"]["sha256"]
        reason = await judged(sync, drop_gres_conf(sync.good()), secrets, good_sha)
        assert (
            reason is not None
            and "undone after the rollback: resumed n1; gave n2 their earlier drain back" in reason
        ), reason
        st = await sync.status()
        undone = st["harm"]["undone"]
        assert undone["resumed"] == ["n1"] and undone["redrained"] == ["n2"] and undone["left"] == {}, st
        assert st["harm"]["registration_wait_seconds"] > 0


@pytest.mark.releases("slurm24", "slurm26")
@pytest.mark.cluster(**SLINKY)
async def test_a_nodename_line_for_a_dynamic_worker_is_refused(cluster: DevCluster) -> None:
    """A NodeName line naming a registered Slinky worker: Slurm turns the node static, the worker's
    registration fails ("Node already exists in the node table") and it stops answering. The judge
    rolls that back (its partition emptied), but the worker stays NOT_RESPONDING after the rollback
    (measured on both releases): so it is refused before the swap, the fleet untouched."""
    secrets = key_secret(cluster)
    await cluster.client().drain(["n2"], ADMIN)
    before = await fleet(cluster)
    async with config_sync(cluster, secrets=secrets) as sync:
        good = sync.good()
        good_sha = (await sync.status())["applied"]["sha256"]
        named = appended(b"NodeName=n1 CPUs=1 RealMemory=1000 State=UNKNOWN")(dict(good))
        reason = await judged(sync, named, secrets, good_sha)
        assert reason is not None and "NodeName names the registered dynamic worker n1" in reason, reason
        assert await fleet(cluster) == before


def test_gres_as_slurm_writes_it() -> None:
    assert parse_gres("gpu:2,gpu:a100:1(S:0-1),nic") == [
        GresSpec("gpu", None, 2),
        GresSpec("gpu", "a100", 1),
        GresSpec("nic", None, 1),
    ]
    assert parse_gres("(null)") == [] and parse_gres("mps:1K") == [GresSpec("mps", None, 1024)]


def _node(name: str, state: str, reason: str | None = None, at: int | None = None) -> Node:
    why = Reason(reason, "root", at) if reason is not None else None
    return Node(
        name, NodeState.parse(state), why, 1, 0, 1000, (), (), "", "", "127.0.0.1", "h", (), None, 1, None
    )


def test_only_what_slurm_set_after_the_change_is_harm() -> None:
    t = 1_000_000
    before = {
        "ok": _node("ok", "IDLE"),
        "admin": _node("admin", "IDLE+DRAIN", ADMIN, t - 60),
        "later": _node("later", "IDLE"),
        "old": _node("old", "IDLE+DRAIN", "Low RealMemory", t - 60),
        "down": _node("down", "DOWN", "Not responding", t - 60),
    }
    after = {
        "ok": _node(
            "ok", "IDLE+DRAIN+INVALID_REG", "gres/gpu count reported lower than configured (0 < 1)", t
        ),
        "admin": _node(
            "admin", "IDLE+DRAIN+INVALID_REG", "gres/gpu count reported lower than configured (0 < 1)", t
        ),
        "later": _node("later", "IDLE+DRAIN", "admin: reboot for a kernel", t + 1),  # someone else's
        "old": _node("old", "IDLE+DRAIN", "Low RealMemory", t - 60),  # there before the change
        "down": _node("down", "DOWN+INVALID_REG", "gres/gpu count reported lower than configured", t),
    }
    harm = judge(before, after, t + 0.4)
    assert [(h.name, h.admin_reason) for h in harm.harmed] == [("ok", None), ("admin", ADMIN)]
    assert "Slurm drained admin, ok after the change (gres/gpu count" in harm.reason()
    # 24.11 drains a resumed node again under its last (older) reason: the INVALID mark tells
    again = {"ok": _node("ok", "IDLE+DRAIN+INVALID_REG", "gres/gpu count reported lower", t - 30)}
    assert [h.name for h in judge({"ok": before["ok"]}, again, t).harmed] == ["ok"]
    assert judge(before, before, t).ok


def test_an_admins_words_at_the_change_are_not_slurms() -> None:
    """Only Slurm's own registration reasons (or its INVALID mark) make a drain the change's: an
    admin's drain set in the change's second, worded like a feature or topology problem, is not."""
    t = 1_000_000
    before = {n: _node(n, "IDLE") for n in ("feature", "topology", "invalid", "slurm", "memory")}
    after = {
        "feature": _node("feature", "IDLE+DRAIN", "admin: feature flag rollout", t),
        "topology": _node("topology", "IDLE+DRAIN", "admin: topology rewire, rack 4", t),
        "invalid": _node("invalid", "IDLE+DRAIN", "Invalid DIMM, RMA 1234", t),
        "slurm": _node("slurm", "IDLE+DRAIN", "Failed to set topology 'k8s:a'", t),
        "memory": _node("memory", "IDLE+DRAIN", "Low RealMemory (reported:24105 < 100.00% of conf", t),
    }
    assert sorted(h.name for h in judge(before, after, t).harmed) == ["memory", "slurm"]


# a tree whose one switch the Slinky workers register under (`--conf Topology=kubernetes:kubernetes`)
TOPOLOGY = """---
- topology: kubernetes
  cluster_default: true
  tree:
    switches:
      - switch: kubernetes
"""
PLACED = {"n1": "kubernetes:kubernetes", "n2": "kubernetes:kubernetes"}


@pytest.mark.timeout(600)
@pytest.mark.releases("slurm26")
@pytest.mark.cluster(shape="slinky", nodes=2, topology=PLACED, files={"topology.yaml": TOPOLOGY})
async def test_a_topology_that_strands_the_workers_is_refused(cluster: DevCluster) -> None:
    """26.05 is the release whose workers register in a topology (`--conf Topology=`), and its one
    topology reason at registration, `Failed to set topology` (INVALID_REG), is a new worker's
    (tests/worker/test_registration_topology.py). A set that takes away the switch the registered
    workers sit under does not drain them: slurmctld refuses the reconfigure ("Requested topology
    configuration is not available") and keeps running the old set. Refused by the dry run; with the
    dry run off, by the reconfigure, rolled back with the fleet as it was."""
    secrets = key_secret(cluster)
    await cluster.client().drain(["n2"], ADMIN)
    before = await fleet(cluster)
    initial = {**cluster_files(cluster), "topology.yaml": TOPOLOGY.encode()}
    async with config_sync(cluster, secrets=secrets, initial=initial) as sync:
        good = sync.good()
        good_sha = (await sync.status())["applied"]["sha256"]
        stranded = conf(b"switch: kubernetes", b"switch: root", "topology.yaml")(dict(good))
        refused = await judged(sync, stranded, secrets, good_sha)
        assert refused is not None and "dry run" in refused, refused
        assert await fleet(cluster) == before
        await back_to_good(sync, good, good_sha)
        sync.service.validator.dry_runner = None  # what the live apply must catch without it
        refused = await judged(sync, stranded, secrets, good_sha)
        assert refused is not None and "Requested topology configuration is not available" in refused, refused
        assert await fleet(cluster) == before  # n1 usable, n2 still the admin's
        await back_to_good(sync, good, good_sha)
