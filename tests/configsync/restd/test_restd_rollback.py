"""A set the real slurmrestd refuses to start on, rolled back: slurm.conf naming a SlurmUser whose
group is slurmrestd's own (nogroup here: `_apt`). Slurm's own parse (`scontrol`) takes it; only
slurmrestd, once it has dropped to its user, refuses it ("slurmrestd should not be run with
SlurmUser's group", then exits), on 24.11 and 26.05 alike. config-sync reads those words from
slurmrestd's output (--restd-log-file), puts the good set back, restarts slurmrestd on it, and says
why in slurmrestd's words, at once rather than after the restart timeout."""

from __future__ import annotations

import re

import pytest

from sidecars.configsync.restd import answer, inflight
from sidecars.devcluster import DevCluster
from tests.configsync.restd.harness import DRAIN_SECONDS, restd_pod, slurm_conf_for
from tests.helpers import eventually

pytestmark = [pytest.mark.releases("slurm24", "slurm26"), pytest.mark.cluster(nodes=1, jwt=True)]

# a user of the chroot whose primary group is nogroup (65534), slurmrestd's group in the dev cluster
SLURM_USER_IN_RESTDS_GROUP = "_apt"
WORDS = "slurmrestd should not be run with SlurmUser's group"


@pytest.mark.per_release("each release's slurmrestd runs its own checks of its user at start")
async def test_a_set_slurmrestd_refuses_to_start_on_is_rolled_back_in_its_words(cluster: DevCluster) -> None:
    async with restd_pod(cluster) as pod:
        good = (pod.target / "slurm.conf").read_text()
        first = inflight.read(pod.port).listener
        bad = re.sub(
            r"(?m)^SlurmUser=.*$",
            f"SlurmUser={SLURM_USER_IN_RESTDS_GROUP}",
            slurm_conf_for(cluster, pod.target),
        )
        assert bad != good
        pod.conf.write({"slurm.conf": bad})
        st = await eventually(
            pod.status,
            lambda s: bool(s["rejected"]) and not s["pending"],
            within=DRAIN_SECONDS,
            what="rolled back",
        )
        reason = st["rejected"]["reason"]
        # slurmrestd's own words, not the restart timeout's
        assert WORDS in reason, reason
        assert "the previous set is back and slurmrestd listens on it" in reason, reason
        assert st["applied"]["generation"] == 1, st
        assert st["restd"]["last_restart"]["ok"] is False, st
        assert (pod.target / "slurm.conf").read_text() == good
        # the slurmrestd started on the good set again serves, on a new listening socket
        assert inflight.read(pod.port).listener not in (None, first)
        assert await answer.answers(pod.port, DRAIN_SECONDS)
        assert await pod.readyz() == 200
        rolled = await eventually(
            lambda: [m for r, m, _ in pod.events.events if r == "ConfigRolledBack"],
            within=DRAIN_SECONDS,
            what="the ConfigRolledBack Event",
        )
        assert WORDS in rolled[-1], pod.events.events
