"""The rules a roll or a window is refused by, on their own: budgets, Slurm's version skew, durations,
start times and Node annotations (the end-to-end refusals are in test_upgrade.py/test_maintenance.py)."""

from __future__ import annotations

from typing import Any

import pytest

from sidecars.controlplane.changes.deploy_roll import ANNOTATION, refusal
from sidecars.controlplane.changes.maintenance import WindowError, parse_duration, parse_start
from sidecars.controlplane.changes.node_windows import parse_annotation, window_name
from sidecars.controlplane.changes.upgrade import (
    UpgradeError,
    UpgradePlan,
    parse_budget,
    release_distance,
    skew_error,
)
from sidecars.controlplane.fleet.versions import STALE_SECONDS, AgentVersions, describe, guard_inputs
from sidecars.kube import Deployment, Pod
from sidecars.slurm import Version

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("text", "total", "workers"),
    [("25%", 64, 16), ("25%", 10, 3), ("1%", 64, 1), ("100%", 7, 7), ("3", 64, 3), ("200", 4, 200)],
)
def test_budgets(text: str, total: int, workers: int) -> None:
    assert parse_budget(text, total) == workers


@pytest.mark.parametrize("text", ["0", "0%", "", "x", "-1", "25 %", "101%", "2.5"])
def test_bad_budgets_are_refused(text: str) -> None:
    with pytest.raises(UpgradeError) as err:
        parse_budget(text, 64)
    assert err.value.status == 422


def v(text: str) -> Version:
    return Version.parse(text)


def test_release_distance_counts_major_releases_not_years() -> None:
    assert release_distance(v("24.11.5"), v("24.05.1")) == 1
    assert release_distance(v("24.11.5"), v("23.11.0")) == 2
    assert release_distance(v("26.05.0"), v("24.11.0")) == 3
    assert release_distance(v("27.05.0"), v("26.05.0")) == 1  # not yet known: placed in order


def test_version_skew() -> None:
    ctld = v("24.11.5")
    assert skew_error(ctld, {"n1": v("24.11.5"), "n2": v("24.05.2")}, v("24.11.6")) is None
    assert skew_error(ctld, {}, v("23.11.1")) is None  # two releases back: supported
    assert skew_error(ctld, {}, v("23.02.7")) is None  # three: supported since 24.11
    newer = skew_error(ctld, {"n1": v("25.05.0")}, None)
    assert newer is not None and "older than slurmd 25.05.0 on n1" in newer and "slurmdbd first" in newer
    target = skew_error(ctld, {}, v("25.05.0"))
    assert target is not None and "newer than slurmctld" in target
    far = skew_error(ctld, {}, v("22.05.8"))
    assert far is not None and "more than 3 releases behind" in far
    before = skew_error(v("24.05.1"), {}, v("22.05.8"))  # before 24.11 the window was two releases
    assert before is not None and "more than 2 releases behind" in before
    stale = skew_error(v("26.05.0"), {"n9": v("24.05.0")}, None)
    assert stale is not None and "n9" in stale
    # slurmdbd goes first: a slurmdbd older than slurmctld refuses the roll, whatever the slurmds
    dbd = skew_error(ctld, {"n1": v("24.11.5")}, v("24.11.5"), slurmdbd=v("24.05.3"))
    assert dbd is not None and "slurmdbd 24.05.3 is older than slurmctld 24.11.5" in dbd
    assert skew_error(ctld, {}, v("24.11.5"), slurmdbd=v("25.05.0")) is None


@pytest.mark.parametrize(("text", "seconds"), [("90m", 5400), ("2h", 7200), ("1h30m", 5400), ("1d", 86400)])
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0m", "90", "1.5h", "soon", "1m2h", "400d", "-1h"])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(WindowError):
        parse_duration(text)


def test_starts() -> None:
    assert parse_start("now", NOW) == int(NOW)
    assert parse_start("2027-01-15T08:00:00Z", NOW) == parse_start("2027-01-15T09:00:00+01:00", NOW)
    assert parse_start("2027-01-15T08:00:00Z", NOW) == 1_800_000_000  # 2027-01-15 08:00 UTC
    for bad, words in (
        ("2020-01-01T00:00:00Z", "past"),
        ("2030-01-01T00:00:00", "offset"),
        ("x", "RFC 3339"),
    ):
        with pytest.raises(WindowError, match=words):
            parse_start(bad, NOW)


def test_node_annotations() -> None:
    assert window_name("ip-10-0-1-7.ec2.internal") == "k8s-ip-10-0-1-7-ec2-internal"
    start = "2027-01-15T08:00:00Z"
    begin = parse_start(start, NOW)
    assert parse_annotation(f"{start}/2h", float(begin - 3600)) == (begin, 7200)
    # already started: opened now, for what is left of it (whole minutes)
    assert parse_annotation(f"{start}/2h", float(begin + 1800)) == (begin + 1800, 5400)
    assert parse_annotation(f"{start}/2h", float(begin + 7200)) is None  # over
    for bad in ("now/1h", "2h", f"{start}/soon"):
        with pytest.raises(WindowError):
            parse_annotation(bad, NOW)


def test_the_skew_guard_takes_an_agents_report_over_the_node_record_until_it_goes_stale() -> None:
    now = [1000.0]
    versions = AgentVersions(clock=lambda: now[0])
    records = {"n1": v("24.11.5"), "n2": v("24.11.5")}
    assert guard_inputs(versions.fresh(), records) == records  # no agent yet: the records stand
    versions.report("n2", "25.05.0")  # its slurmd runs a newer binary than it registered with
    versions.report("n3", "24.05.1")  # no record read for it: the report still counts
    inputs = guard_inputs(versions.fresh(), records)
    assert inputs == {"n1": v("24.11.5"), "n2": v("25.05.0"), "n3": v("24.05.1")}
    why = skew_error(v("24.11.5"), inputs, None)
    assert why is not None and "slurmd 25.05.0 on n2" in why
    shown = describe(v("24.11.5"), versions.fresh(), records)
    assert shown["controller"] == "24.11.5"
    assert shown["nodes"]["n2"] == {"agent": "25.05.0", "record": "24.11.5"}
    assert shown["nodes"]["n1"] == {"agent": None, "record": "24.11.5"}
    now[0] += STALE_SECONDS  # the agent stopped repeating it: gone
    assert guard_inputs(versions.fresh(), records) == records
    assert skew_error(v("24.11.5"), guard_inputs(versions.fresh(), records), None) is None


def deployment(**overrides: Any) -> Deployment:
    base: dict[str, Any] = {
        "namespace": "slurm",
        "name": "workers",
        "generation": 3,
        "replicas": 4,
        "paused": False,
        "strategy": "RollingUpdate",
        "max_surge": "25%",
        "max_unavailable": "25%",
        "selector": {"app": "slurmd"},
        "template": "abc",
        "annotations": {},
        "observed_generation": 3,
        "available": 4,
        "updated": 4,
    }
    return Deployment(**{**base, **overrides})


def test_what_a_paced_deployment_roll_refuses() -> None:
    assert refusal(deployment(), "workers", {"old"}) is None
    for d, hashes, status, words in (
        (None, {"old"}, 404, "no Deployment workers"),
        (deployment(strategy="Recreate"), {"old"}, 409, "every pod at once"),
        (deployment(paused=True), {"old"}, 409, "paused by someone else"),
        (deployment(updated=2), {"old", "new"}, 409, "already rolling"),
        (deployment(observed_generation=2), {"old"}, 409, "already rolling"),
        (deployment(), set(), 409, "no worker pods"),
    ):
        why = refusal(d, "workers", hashes)
        assert why is not None and why.status == status and words in why.message, (d, why)
    # paused by an earlier start of ours (its annotation): started again, not refused
    assert (
        refusal(deployment(paused=True, annotations={ANNOTATION: "old"}, updated=2), "workers", {"old"})
        is None
    )


def test_a_deployment_plan_tells_old_pods_by_the_old_replica_sets_hash() -> None:
    plan = UpgradePlan("workers.old", "1", kind="Deployment", workload="workers", from_revision="old")
    assert UpgradePlan.from_data(plan.data()) == plan
    assert plan.old(worker_pod({"pod-template-hash": "old"}))
    assert not plan.old(worker_pod({"pod-template-hash": "f00d"}))  # Kubernetes named the new one
    statefulset = UpgradePlan("new", "1")
    assert statefulset.old(worker_pod({"controller-revision-hash": "old"}))
    assert not statefulset.old(worker_pod({"controller-revision-hash": "new"}))


def worker_pod(labels: dict[str, str]) -> Pod:
    return Pod("slurm", "w", "u", "n1", labels, {}, True, "Running", "ReplicaSet", False, "1")
