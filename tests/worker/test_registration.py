"""Registration and healing: a dead slurmd is restarted, a slurmd that never registers is declared
unregistered after the healing steps, and a controller outage is never remediated."""

from __future__ import annotations

import shlex

import pytest

from sidecars.devcluster import DevCluster
from sidecars.probe import check
from tests.helpers import RecordingEvents, eventually
from tests.worker.agents import hook, http_get, registered_by_its_restart, running_agent, settings_for


@pytest.mark.cluster(nodes=1)
async def test_healthy_agent_is_live_and_ready(cluster: DevCluster, sockdir) -> None:
    s = settings_for(cluster, sockdir)
    async with running_agent(cluster, s) as agent:
        await eventually(lambda: agent.registration.status.state == "registered", what="registered")
        status, body = await http_get(agent, "/readyz")
        assert status == 200 and body["checks"]["registered"]["ok"], body
        status, body = await http_get(agent, "/livez")
        assert status == 200, body
        assert body["checks"]["slurmd_alive"]["detail"] == f"slurmd pid {cluster.hostpid('slurmd-n1')}"
        assert await check(f"http://127.0.0.1:{agent.http_port}", "readyz", 5) == (True, "readyz: ok")
        _, metrics = await http_get(agent, "/metrics")
        assert "slurm_sidecars_worker_registered 1.0" in metrics


@pytest.mark.cluster(nodes=1)
@pytest.mark.per_release("how a restarted slurmd registers and how each release shows it")
async def test_killed_slurmd_is_restarted_and_registers_again(cluster: DevCluster, sockdir) -> None:
    events = RecordingEvents()
    s = settings_for(cluster, sockdir, slurmd_restart_command=tuple(cluster.slurmd_argv("n1")))
    async with running_agent(cluster, s, events) as agent:
        await eventually(lambda: agent.registration.status.state == "registered", what="registered")
        old = await cluster.kill_slurmd("n1")
        await eventually(
            lambda: cluster.hostpid("slurmd-n1") not in (None, old), within=30, what="a new slurmd"
        )
        await cluster.wait_node("n1", lambda n: n.state.registered and n.state.base == "IDLE")
        await eventually(lambda: agent.registration.status.state == "registered", what="registered again")
        assert agent.metrics.heal_attempts.labels(result="restarted")._value.get() == 1
        assert "SlurmdRestarted" in events.reasons()
        status, body = await http_get(agent, "/livez")
        assert status == 200, body
        # the new slurmd still runs jobs
        job = await cluster.sbatch("-t", "1", wrap="true")
        assert (await cluster.wait_job(job, {"COMPLETED", "FAILED"})).state == "COMPLETED"


@pytest.mark.cluster(nodes=1)
async def test_slurmd_that_never_registers_is_declared_unregistered(cluster: DevCluster, sockdir) -> None:
    events = RecordingEvents()
    # Slurm rejects this name: every restart starts a slurmd that dies at once
    s = settings_for(
        cluster,
        sockdir,
        node="nosuch",
        registration_timeout_seconds=1.0,
        heal_attempts=2,
        heal_backoff_seconds=0.3,
        slurmd_restart_command=tuple(cluster.slurmd_argv("nosuch")),
    )
    async with running_agent(cluster, s, events) as agent:
        await eventually(
            lambda: agent.registration.status.declared_unregistered, within=30, what="declared unregistered"
        )
        status, body = await http_get(agent, "/readyz")
        assert status == 503
        detail = body["checks"]["registered"]["detail"]
        # what the last look saw first is a race (the rejected slurmd dies at once): either says why
        assert "gave up after 2 slurmd restart(s)" in detail, detail
        assert "no record of this node" in detail or "slurmd process gone" in detail, detail
        assert events.reasons().count("SlurmdRestarted") == 2
        assert events.reasons()[-1] == "SlurmdUnregistered"
        _, metrics = await http_get(agent, "/metrics")
        assert "slurm_sidecars_worker_unregistered_declared 1.0" in metrics


@pytest.mark.cluster(nodes=1)
async def test_failing_restart_command_ends_unregistered(cluster: DevCluster, sockdir) -> None:
    s = settings_for(
        cluster,
        sockdir,
        node="nosuch",
        registration_timeout_seconds=0.5,
        heal_attempts=1,
        heal_backoff_seconds=0.2,
        slurmd_restart_command=tuple(shlex.split("sh -c 'echo no luck; exit 3'")),
    )
    async with running_agent(cluster, s) as agent:
        await eventually(
            lambda: agent.registration.status.declared_unregistered, within=30, what="declared unregistered"
        )
        assert agent.metrics.heal_attempts.labels(result="failed")._value.get() == 1
        _, body = await http_get(agent, "/status")
        assert "exited 3: no luck" in body["registration"]["detail"]


@pytest.mark.cluster(nodes=1)
async def test_controller_outage_is_not_remediated(cluster: DevCluster, sockdir) -> None:
    # the agent looks (and fails) through an outage longer than the registration timeout; after it
    # the nodes re-register within a second or two, and the timeout counts afresh from the return
    s = settings_for(
        cluster,
        sockdir,
        registration_timeout_seconds=5.0,
        heal_backoff_seconds=0.2,
        slurmd_restart_command=tuple(cluster.slurmd_argv("n1")),
    )
    async with running_agent(cluster, s) as agent:
        await eventually(lambda: agent.registration.status.state == "registered", what="registered")
        pid = cluster.hostpid("slurmd-n1")
        await cluster.stop_slurmctld()
        await eventually(
            lambda: agent.registration.status.state == "controller_unreachable", within=40, what="outage seen"
        )
        outage_seen = agent.last_tick
        assert outage_seen is not None
        await eventually(
            lambda: (agent.last_tick or 0) > outage_seen + s.registration_timeout_seconds + 1,
            within=30,
            what="looks during an outage longer than the registration timeout",
        )
        assert agent.registration.status.state == "controller_unreachable"
        status, body = await http_get(agent, "/readyz")
        assert status == 200, body  # an outage of the controller is not this worker's fault
        await cluster.start_slurmctld()
        await eventually(
            lambda: agent.registration.status.state == "registered", within=40, what="registered"
        )
        assert cluster.hostpid("slurmd-n1") == pid
        assert agent.metrics.heal_attempts.labels(result="restarted")._value.get() == 0


@pytest.mark.cluster(nodes=1)
async def test_no_healing_once_the_pod_is_terminating(cluster: DevCluster, sockdir) -> None:
    s = settings_for(cluster, sockdir, slurmd_restart_command=tuple(cluster.slurmd_argv("n1")))
    async with running_agent(cluster, s) as agent:
        await eventually(lambda: agent.registration.status.state == "registered", what="registered")
        code, answer = await hook(s, within=30)
        assert (code, answer["result"]) == (0, "drained"), answer
        # after the hook the kubelet stops slurmd on purpose: the agent must not bring it back
        await cluster.kill_slurmd("n1")
        seen = agent.last_tick
        for _ in range(5):
            await eventually(lambda t=seen: agent.last_tick != t, what="another look")
            seen = agent.last_tick
        assert cluster.hostpid("slurmd-n1") is None
        assert agent.metrics.heal_attempts.labels(result="restarted")._value.get() == 0
        status, body = await http_get(agent, "/livez")
        assert status == 200, body


@pytest.mark.cluster(nodes=1, max_node_count=4)
@pytest.mark.per_release("dynamic nodes (slurmd -Z) register differently on 22.05 and 23.x")
async def test_dynamic_node_that_never_showed_up_is_started_and_registers(
    cluster: DevCluster, sockdir
) -> None:
    # the pod's slurmd -Z never came up: Slurm has no record at all until the agent's restart
    command = tuple(cluster.slurmd_argv("d1", "-Z", "--conf", "CPUs=1 RealMemory=1000"))
    async with registered_by_its_restart(cluster, sockdir, "d1", command) as agent:
        node = await cluster.client().node("d1")
        assert node is not None and node.state.registered and "DYNAMIC_NORM" in node.state.flags
        status, body = await http_get(agent, "/readyz")
        assert status == 200, body


@pytest.mark.cluster(nodes=1)
@pytest.mark.per_release("23.11+ re-execs slurmd on reconfigure (a new pid); 22.05 rereads in place")
async def test_reconfigure_is_not_a_slurmd_death(cluster: DevCluster, sockdir) -> None:
    # 24.11 re-execs slurmd under a new PID at every reconfigure; 22.05 keeps it
    s = settings_for(
        cluster,
        sockdir,
        slurmd_missing_grace_seconds=2.0,
        slurmd_restart_command=tuple(cluster.slurmd_argv("n1")),
    )
    async with running_agent(cluster, s) as agent:
        await eventually(lambda: agent.registration.status.state == "registered", what="registered")
        before = cluster.hostpid("slurmd-n1")
        result = await cluster.client().reconfigure()
        assert result.returncode == 0
        await cluster.wait_node("n1", lambda n: n.state.registered and n.state.base == "IDLE")
        seen = agent.last_tick
        for _ in range(6):  # a few looks past the grace
            await eventually(lambda t=seen: agent.last_tick != t, what="another look")
            seen = agent.last_tick
        status, body = await http_get(agent, "/livez")
        assert status == 200, body
        assert agent.metrics.heal_attempts.labels(result="restarted")._value.get() == 0
        after = cluster.hostpid("slurmd-n1")
        assert after is not None
        if cluster.release.short != "22.05":  # 24.11 and later re-exec every slurmd on reconfigure
            assert after != before
