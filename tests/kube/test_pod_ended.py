"""A pod's container that ended, read from its status as the kubelet writes it: terminated now, or
restarted after a termination; never a Ready pod or one being deleted (a rollout's old pod)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sidecars.kube.workloads import PodHealth

TERMINATED = {"reason": "Error", "exitCode": 1, "message": "fatal: x", "finishedAt": "2026-12-06T04:19:50Z"}


def _pod(status: dict[str, Any], *, ready: bool = False, deleting: bool = False) -> PodHealth:
    meta: dict[str, Any] = {"name": "slurmctld-0"}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-06T04:19:51Z"
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    return PodHealth.from_json({"metadata": meta, "status": {"conditions": conditions, **status}})


def test_a_first_exit_and_a_restart_after_one_are_deaths_with_their_time_and_message() -> None:
    first = _pod(
        {"containerStatuses": [{"name": "slurmctld", "restartCount": 0, "state": {"terminated": TERMINATED}}]}
    )
    assert first.ended is not None
    assert (first.ended.reason, first.ended.exit_code, first.ended.message) == ("Error", 1, "fatal: x")
    assert first.ended.finished_at == datetime(2026, 12, 6, 4, 19, 50, tzinfo=UTC).timestamp()
    again = _pod(
        {
            "containerStatuses": [
                {
                    "name": "slurmctld",
                    "restartCount": 2,
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                    "lastState": {"terminated": TERMINATED},
                }
            ]
        }
    )
    assert again.ended is not None and again.ended.restarts == 2 and again.crash_looping


def test_not_a_death_running_ready_being_deleted_or_an_old_last_state_without_restart() -> None:
    running = {"name": "slurmctld", "restartCount": 0, "state": {"running": {}}}
    assert _pod({"containerStatuses": [running]}).ended is None
    done = {"name": "slurmctld", "restartCount": 0, "state": {"terminated": TERMINATED}}
    assert _pod({"containerStatuses": [done]}, ready=True).ended is None
    assert _pod({"containerStatuses": [done]}, deleting=True).ended is None
    stale = {**running, "lastState": {"terminated": TERMINATED}}
    assert _pod({"containerStatuses": [stale]}).ended is None
    junk = {"name": "c", "restartCount": 1, "state": {"terminated": {"finishedAt": "yesterday"}}}
    found = _pod({"containerStatuses": [junk]}).ended
    assert found is not None and found.finished_at is None and found.exit_code is None
