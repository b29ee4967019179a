"""With SwitchType=switch/nvidia_imex (a real slurmctld and slurmd running with it), the agent's
readiness needs the IMEX channel device: not ready, saying which, while it is missing; ready once
it is there. Without that SwitchType nothing is looked at."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sidecars.devcluster import DevCluster
from tests.helpers import eventually
from tests.worker.agents import http_get, running_agent, settings_for


@pytest.mark.releases("slurm24")  # switch/nvidia_imex ships from 24.11; the check is ours
@pytest.mark.cluster(shape="slinky", nodes=1, extra_conf="SwitchType=switch/nvidia_imex")
async def test_readiness_needs_the_imex_channel_when_the_switch_is_imex(
    cluster: DevCluster, sockdir: Path
) -> None:
    channel = sockdir / "channel0"  # stands for /dev/nvidia-caps-imex-channels/channel0
    async with running_agent(cluster, settings_for(cluster, sockdir, imex_channel=channel)) as agent:
        await eventually(lambda: agent.registration.status.state == "registered", what="registered")
        status, body = await http_get(agent, "/readyz")
        assert status == 503, body
        assert f"IMEX channel {channel} is missing" in json.dumps(body)
        _, st = await http_get(agent, "/status")
        assert st["imex_channel"]["ok"] is False
        channel.touch()
        status, body = await eventually(
            lambda: http_get(agent, "/readyz"), lambda r: r[0] == 200, what="ready"
        )
        assert body["checks"]["imex_channel"]["detail"] == f"IMEX channel {channel} present"
        # slurm.conf without the IMEX switch (read from the file, not asked of slurmctld): none needed
        channel.unlink()
        conf = Path(cluster.env["SLURM_CONF"])
        conf.write_text(conf.read_text().replace("SwitchType=switch/nvidia_imex", "SwitchType=switch/none"))
        status, body = await http_get(agent, "/readyz")
        assert status == 200, body
        assert "no IMEX channel needed" in body["checks"]["imex_channel"]["detail"]
