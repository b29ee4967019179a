"""Roles report on their own pod when they run in a cluster, and in the log otherwise, without
loading the Kubernetes client there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sidecars.kube import pod_events
from sidecars.runtime.events import LogEventSink
from tests.fakekube import FakeKube, write_kubeconfig


async def test_outside_a_cluster_events_go_to_the_log() -> None:
    async with pod_events("slurm-sidecars-worker", env={"POD_NAME": "w-1"}) as sink:
        assert isinstance(sink, LogEventSink)
        await sink.emit("SlurmdRestarted", "restarted slurmd once")


async def test_in_a_cluster_events_land_on_the_pod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeKube()
    async with fake.serving() as url:
        kubeconfig = write_kubeconfig(tmp_path / "config", url, fake.token)
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))  # no service account here: the kubeconfig stands in
        env = {"POD_NAME": "slurmctld-0", "POD_NAMESPACE": "slurm", "KUBERNETES_SERVICE_HOST": "10.0.0.1"}
        async with pod_events("slurm-sidecars-config-sync", env=env) as sink:
            assert not isinstance(sink, LogEventSink)
            await sink.emit("ConfigRejected", "Parsing error at unrecognized key: X", type="Warning")
            await sink.emit("ConfigApplied", "generation 2")
    event, second = fake.events
    assert second["reason"] == "ConfigApplied"
    assert event["involvedObject"]["name"] == "slurmctld-0" and event["involvedObject"]["kind"] == "Pod"
    assert event["metadata"]["namespace"] == "slurm"
    assert (event["reason"], event["type"]) == ("ConfigRejected", "Warning")
    assert event["message"] == "Parsing error at unrecognized key: X"
    # the role that reported is named, so `kubectl describe pod` tells config-sync from the agent
    assert event["source"]["component"] == "slurm-sidecars-config-sync"
    assert event["reportingComponent"] == "slurm-sidecars-config-sync"


def test_the_kubernetes_client_is_loaded_only_at_the_first_event() -> None:
    code = (
        "import asyncio, sys\nfrom sidecars.kube import pod_events\n"
        "async def main():\n"
        "    env = {'POD_NAME': 'w', 'POD_NAMESPACE': 'ns', 'KUBERNETES_SERVICE_HOST': '10.0.0.1'}\n"
        "    async with pod_events('c', env=env):\n"
        "        print('kubernetes_asyncio' in sys.modules)\n"
        "asyncio.run(main())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
