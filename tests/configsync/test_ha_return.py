"""A controller pod lost mid-change and back: the pair ends on one set, the good change is never rolled
back, no job is touched, and a returning pod's slurmctld never starts on a set older than the one the
controller in control runs or is verifying (configsync/ha/return_gate.py).

A pod's loss is its slurmctld killed (SIGKILL, as with its node) and its config-sync stopped together;
its return is its config-sync started again and, as the kubelet does behind config-sync's startup
probe, its slurmctld started once that config-sync reports ready."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

import pytest

from sidecars.devcluster import DevCluster
from sidecars.slurm import SlurmClient, SlurmError
from tests.configsync.hapair import (
    HA_SPEC,
    Pair,
    Pod,
    conf_value,
    ha_pair,
    with_min_job_age,
)
from tests.configsync.harness import set_sha
from tests.configsync.hawatch import watching_answers, watching_control

pytestmark = [
    pytest.mark.releases("slurm24", "slurm26"),
    pytest.mark.cluster(**HA_SPEC),
    pytest.mark.timeout(600),
]

WITHIN = 240.0  # convergence bound on a loaded machine: Slurm's own handback alone takes ~30 s


def rolled_back(pod: Pod) -> float:
    got = pod.registry.get_sample_value("slurm_sidecars_config_applies_total", {"result": "rolled_back"})
    return got or 0.0


@dataclass
class Scenario:
    lost: tuple[str, ...]  # the pods lost together; they come back in this order
    away_seconds: float  # each away this long (the scenario's input, not a wait for an effect)


# a primary comes back: it starts on the state a backup in control saved (or stands that backup down
# first), which is where the releases differ (docs/ha.md, "Slurm's own handback")
PRIMARY_BACK = {
    "primary-back-after-1s": Scenario(("ctld-a",), 1.0),
    "primary-back-after-5s": Scenario(("ctld-a",), 5.0),
    "primary-back-after-30s": Scenario(("ctld-a",), 30.0),
    "both-primary-back-first": Scenario(("ctld-a", "ctld-b"), 1.0),
    "both-backup-back-first": Scenario(("ctld-b", "ctld-a"), 1.0),
}
# only the backup is lost: the primary stays in control and writes throughout, and the backup comes
# back in standby; no handback, no stand-down, no state read by a returning controller
BACKUP_BACK = {
    "backup-back-after-1s": Scenario(("ctld-b",), 1.0),
    "backup-back-after-5s": Scenario(("ctld-b",), 5.0),
    "backup-back-after-30s": Scenario(("ctld-b",), 30.0),
}


class Pods:
    """The pods' losses and returns, and what every incarnation of their config-sync did."""

    def __init__(self, pair: Pair) -> None:
        self.pair = pair
        self.rollbacks = 0.0  # over every incarnation: a lost pod's config-sync counts too
        self.starts: dict[str, str] = {}  # the set each returning slurmctld started on
        self.up = set(pair.pods)  # the pods not lost
        self.restarted: list[str] = []  # slurmctld containers the kubelet restarted (stood down)
        # where each controller's log was when the pods were lost: Slurm's words after it are read
        self.log_at = {c.name: c.log_file.stat().st_size for c in pair.cluster.controllers}

    async def lose(self, names: tuple[str, ...]) -> None:
        """The pods lost whole: their slurmctld killed and their config-sync ended together."""
        # the kills beside, the stops here: config-sync's context (its bound log context) is this task's
        self.up -= set(names)
        self.log_at = {c.name: c.log_file.stat().st_size for c in self.pair.cluster.controllers}
        kills = [
            asyncio.create_task(self.pair.cluster.kill_controller(n), name=f"test-kill-{n}") for n in names
        ]
        try:
            for name in names:
                self.rollbacks += rolled_back(self.pair.pods[name])
                await self.pair.stop(name)
        finally:
            await asyncio.gather(*kills)

    async def come_back(self, name: str) -> None:
        """The pod back: config-sync first; its slurmctld once config-sync is ready (the startup
        probe). The set it starts on is never older than the one a peer in control runs."""
        pod = await self.pair.start(name)
        deadline = time.monotonic() + WITHIN
        while not (pod.service.ready and pod.service.status()["ha"]["return"]["open"]):
            assert time.monotonic() < deadline, f"{name} never ready: {pod.service.status()}"
            await asyncio.sleep(0.05)
        self.starts[name] = pod.target_sha()
        for other in self.pair.pods.values():
            st = other.service.status()
            if other is not pod and st["ha"]["writer"] and not st["pending"]:
                assert st["applied"]["sha256"] == self.starts[name], (name, self.pair.said())
        await self.pair.cluster.start_controller(name)
        self.up.add(name)
        # the kubelet restarts a container that ended in a pod that is up: a backup that a returning
        # primary had shut down comes back (in standby)
        for other in sorted(self.up):
            if self.pair.cluster.controller_pid(other) is None:
                self.restarted.append(other)
                await self.pair.cluster.start_controller(other)

    def handbacks(self) -> list[str]:
        """Slurm's own handback since the loss, in its words (a backup answering REQUEST_CONTROL)."""
        said = []
        for c in self.pair.cluster.controllers:
            with c.log_file.open("rb") as f:
                f.seek(self.log_at[c.name])
                said += [f"{c.name}: {ln}" for ln in f.read().decode(errors="replace").splitlines()]
        return [ln for ln in said if "relinquishing control" in ln]

    def total_rollbacks(self) -> float:
        return self.rollbacks + sum(rolled_back(p) for p in self.pair.pods.values())


async def settled(pair: Pair, min_job_age: str) -> str:
    """Until the pair holds one set and the controller in control answers with it; returns the set.
    (Both pods can agree while Slurm still hands control back: the freeze comes after.)"""
    client = SlurmClient(env=pair.cluster.env)
    deadline = time.monotonic() + WITHIN
    while True:
        held = await pair.one_set(within=max(1.0, deadline - time.monotonic()))
        with contextlib.suppress(SlurmError):
            runs = (await client.show_config())["MinJobAge"].split()[0]
            left = max(1.0, deadline - time.monotonic())
            if runs == min_job_age and await pair.one_set(within=left) == held:
                return held
        assert time.monotonic() < deadline, f"never settled: {pair.said()}"
        await asyncio.sleep(0.2)


@pytest.mark.per_release(
    "a returning primary reads the state a backup in control saved: 26.05 replaces job_state in two "
    "renames and reads job_state alone, 24.11 falls back to job_state.old (docs/ha.md)"
)
@pytest.mark.parametrize("scenario", list(PRIMARY_BACK))
async def test_a_pod_lost_mid_change_and_back_leaves_one_set(cluster: DevCluster, scenario: str) -> None:
    await lost_and_back(cluster, scenario, PRIMARY_BACK[scenario])


@pytest.mark.parametrize("scenario", list(BACKUP_BACK))
async def test_a_backup_lost_mid_change_and_back_leaves_one_set(cluster: DevCluster, scenario: str) -> None:
    await lost_and_back(cluster, scenario, BACKUP_BACK[scenario])


async def lost_and_back(cluster: DevCluster, scenario: str, plan: Scenario) -> None:
    async with (
        ha_pair(cluster) as pair,
        watching_answers(cluster) as freeze,
        watching_control(cluster) as gaps,
    ):
        pods = Pods(pair)
        await pair.all_hold(set_sha(pair.good()), within=60)
        job = await cluster.sbatch("-N", "1", wrap="sleep 600")
        running = await cluster.wait_job(job, "RUNNING", timeout=30)
        # saved running: a takeover recovers only what was saved (Slurm's own behaviour, not ours)
        await cluster.job_state_saved(job)

        new = with_min_job_age(pair.good(), 181)
        sha = set_sha(new)
        pair.config.write(new)
        # mid-change: the writer (ctld-a, in control) has it in flight
        await pair.pods["ctld-a"].service.wait_until(lambda st: bool(st["pending"]), 60)
        lost = time.monotonic()
        await pods.lose(plan.lost)
        for name in plan.lost:
            await asyncio.sleep(plan.away_seconds)  # the scenario's input: how long the pod is away
            await pods.come_back(name)

        held = await settled(pair, conf_value(new, "MinJobAge"))
        print(
            f"\n{scenario}: one set after {time.monotonic() - lost:.1f}s, {await cluster.primary()} in "
            f"control; longest client wait {freeze.longest:.1f}s; controller-less "
            f"{[round(g, 1) for g in gaps.each()]}s; "
            f"restarted {pods.restarted or 'none'}; started on "
            + ", ".join(f"{n}: {s[:12]}" for n, s in pods.starts.items())
        )
        # no handback: a primary that starts while a backup is in control has it save its state after
        # answering, as the primary reads it (26.05 then can start with no jobs: docs/ha.md)
        assert not pods.handbacks(), pods.handbacks()
        assert held == sha, f"the good change was lost: {pair.said()}"
        assert pods.total_rollbacks() == 0, [p.service.history_view() for p in pair.pods.values()]
        jobs = {j.job_id: j for j in await SlurmClient(env=cluster.env).jobs()}
        assert jobs[job].state == "RUNNING" and jobs[job].start_time == running.start_time, jobs[job]
        await cluster.scancel(job)
