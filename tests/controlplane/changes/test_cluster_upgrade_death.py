"""A whole-cluster upgrade 24.11 -> 26.05 whose new daemon dies at its start, on real daemons with
MariaDB, slurmctld daemonized as the demo runs it: the death is seen at once, not at the stage's
bound (60 s, as before), and the stage acts on it then; the status, the Event and `upgrade status`
quote Slurm's own last line.

- slurmctld: the 26.05 controller reads a config whose TopologyPlugin that release does not have
  (`fatal: Failed to initialize topology plugin`, as reported in issue 36): rolled back, every job
  kept, the rollback begun within 2 s of the death by the times the status records (Slurm's stamp
  on its fatal line, and the rollback's start);
- slurmdbd: the database user may no longer alter tables, the conversion fails and slurmdbd ends:
  the stage halts within 2 s of its end, naming its error;
- a worker: the 26.05 slurmd reads a config with a setting it does not know and ends: the roll
  stops with that worker drained, naming its fatal."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest

from sidecars.controlplane.changes.cluster_upgrade.stages import ClusterUpgrade
from sidecars.controlplane.changes.cluster_upgrade.status import ROLLING_BACK, Stage
from sidecars.devcluster import ClusterSpec, Release
from sidecars.devcluster.swap_roles import DevClusterRoles
from sidecars.operator.upgrade.main import render
from sidecars.slurm import Version
from tests.controlplane.changes.test_cluster_upgrade import Run, Sabotaged
from tests.controlplane.changes.upgrade_records import finished_record

pytestmark = [pytest.mark.releases("slurm24"), pytest.mark.timeout(300)]

BEFORE_SECONDS = 60.0  # the bound the stage waited out before (issue 36): the silence it is set against
WITHIN_SECONDS = 2.0  # the goal: the stage acts within 2 s of the death


@pytest.fixture
async def run(release: Release, newer: Release, request: pytest.FixtureRequest) -> AsyncIterator[Run]:
    sabotage: dict[str, list[str]] = getattr(request, "param", {})
    # daemonized, as the demo runs it (issue 36's measure): its death is in its log, not a child's exit
    spec = ClusterSpec(nodes=2, accounting=True)
    async with Sabotaged(release, spec, sabotage) as c:
        roles = DevClusterRoles(c, {"chroot": release, "sid": newer}, worker_timeout_seconds=60)
        yield Run(c, roles, Version.parse(newer.version))


def _upgrade(run: Run) -> ClusterUpgrade:
    # the stage's bound as it was when issue 36 measured it: the death must not wait for it
    return ClusterUpgrade(
        run.roles,
        run.target,
        {"slurmdbd": "sid", "slurmctld": "sid", "slurmd": "sid"},
        emit=run.emit,
        verify_timeout_seconds=BEFORE_SECONDS,
    )


def _seen_within(stage: Stage, what: str) -> float:
    """How long after the daemon's death the stage acted, by the times the status recorded; said."""
    assert stage.died_at is not None and stage.acted_at is not None, stage
    after = stage.acted_at - stage.died_at
    print(
        f"\n{what}: died {time.strftime('%H:%M:%S', time.gmtime(stage.died_at))}"
        f"{f'{stage.died_at % 1:.3f}'[1:]}, acted on {after:.3f} s later (before: {BEFORE_SECONDS:g} s); "
        f"its words: {stage.last_words!r}"
    )
    assert -1.0 <= after <= WITHIN_SECONDS, after  # Slurm's stamp has ms; ours is after it
    return after


def _write_conf(run: Run, extra: str) -> None:
    c = run.cluster
    (c.dir / "etc" / "refused.conf").write_text(c.conf_path.read_text() + extra)


@pytest.mark.parametrize(
    "run", [{"slurmctld": ["-f", "{dir}/etc/refused.conf"]}], indirect=True, ids=["slurmctld"]
)
async def test_a_new_slurmctld_that_dies_at_start_is_rolled_back_at_once_in_its_own_words(run: Run) -> None:
    c = run.cluster
    # a plugin 26.05 does not have: it reads its config, then dies loading it
    _write_conf(run, "TopologyPlugin=topology/nosuch\n")
    before = await run.submit()
    up = _upgrade(run)
    assert await up.run() == "rolled_back", up.status.report()
    stage = up.status.stage("slurmctld")
    assert "fatal:" in stage.last_words and "topology" in stage.last_words.lower(), stage
    _seen_within(stage, "slurmctld")
    # its words in the detail, the rollback's Event and `upgrade status`
    assert stage.last_words in stage.detail
    rolling = [m for s, st, m in run.events if (s, st) == ("slurmctld", ROLLING_BACK)]
    assert len(rolling) == 1 and stage.last_words in rolling[0], run.events
    shown = "\n".join(render({"cluster": up.status.report()}))
    assert stage.last_words in shown and "died" in shown, shown
    print(shown)
    assert up.status.slurmctld_unanswered_seconds is not None
    print(
        f"slurmctld unanswered {up.status.slurmctld_unanswered_seconds:.2f} s in all (stop to rolled "
        f"back); the stage {stage.seconds:.2f} s"
    )
    # every job kept, the old release back
    assert await run.roles.jobs() == before
    ran = (await run.roles.versions())[f"slurmctld:{c.host}"]
    assert ran.at_least(24, 11) and not ran.at_least(25)
    run.go.touch()
    await c.wait_job(run.spanning, "COMPLETED", timeout=60)
    assert await finished_record(c, run.spanning) == ("COMPLETED", "0:0")


async def test_a_new_slurmdbd_that_dies_in_its_conversion_halts_the_upgrade_at_once_saying_why(
    run: Run,
) -> None:
    c = run.cluster
    assert c.database is not None
    before = await run.submit()
    await c.database.sql(f"REVOKE ALTER ON `{c.database.name}`.* FROM '{c.database.user}'@'127.0.0.1';")
    up = _upgrade(run)
    assert await up.run() == "failed"
    stage = up.status.stage("slurmdbd")
    assert "error:" in stage.last_words or "fatal:" in stage.last_words, stage
    _seen_within(stage, "slurmdbd")
    assert stage.last_words in stage.detail and "not rolled back" in stage.detail
    assert ("slurmdbd", "failed") in [(s, st) for s, st, _ in run.events]
    assert await run.roles.jobs() == before  # slurmctld never touched


@pytest.mark.parametrize("run", [{"slurmd": ["-f", "{dir}/etc/refused.conf"]}], indirect=True, ids=["slurmd"])
async def test_a_worker_whose_new_slurmd_dies_stops_the_roll_at_once_saying_why(run: Run) -> None:
    c = run.cluster
    _write_conf(run, "ProctrackType=proctrack/nosuch\n")  # 26.05 daemonizes, then fails
    await run.submit()
    run.go.touch()
    await c.wait_job(run.spanning, "COMPLETED", timeout=60)
    up = _upgrade(run)
    assert await up.run() == "failed"
    stage = up.status.stage("workers")
    assert "error:" in stage.last_words and "proctrack" in stage.last_words, stage
    _seen_within(stage, "slurmd n1")
    assert "worker n1 did not come back" in stage.detail and stage.last_words in stage.detail
    n1 = await c.client().node("n1")
    assert n1 is not None and n1.state.drain
