"""`slurm-sidecars probe controller` against a real HA pair (a primary and a backup sharing their
state): the controller in control is live and in control, a healthy backup is live and a standby,
not a failure; the roles swap in the probe's answers after `scontrol takeover`; a killed controller
is not live. On every release: 26.05 answers through its own `/livez` and `/readyz`, 22.05 and
24.11 (no HTTP on the controller's port) through Slurm's commands asking each controller alone."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from sidecars import probe
from sidecars.cli import self_argv
from sidecars.devcluster import DevCluster
from sidecars.slurm import Version, health, standby

HA = {"nodes": 1, "controllers": 2, "slurmctld_timeout_seconds": 5}
pytestmark = pytest.mark.releases("slurm22", "slurm24", "slurm26")

IN_CONTROL = (True, "controller: live, in control")
STANDBY_WORDS = "slurm_load_license error: Slurm backup controller in standby mode"


def _env(cluster: DevCluster) -> dict[str, str]:
    """The cluster's client environment, with temporary files where its Slurm (chroot) sees them."""
    return {**cluster.env, "TMPDIR": str(cluster.dir)}


def _url(cluster: DevCluster, name: str) -> str:
    assert cluster.ports is not None
    (c,) = (c for c in cluster.controllers if c.name == name)
    return f"http://{c.address}:{cluster.ports.slurmctld}"


async def _probe(cluster: DevCluster, name: str) -> tuple[bool, str]:
    return await probe.check_controller(_url(cluster, name), 10, name, _env(cluster))


def _in_control(answer: tuple[bool, str]) -> None:
    """In control; on 26.05 the message goes on to say why the plain /readyz decided (no credential
    given here: tests/probe/test_slurm26_http.py reads the verbose one)."""
    ok, said = answer
    assert ok and (said == IN_CONTROL[1] or said.startswith(IN_CONTROL[1] + "; no credential for")), answer


def _left_behind(cluster: DevCluster) -> list[str]:
    """Configurations naming one controller still there (each probe removes its own)."""
    return [p.name for p in cluster.dir.iterdir() if p.name.startswith("slurm-sidecars-ask-")]


async def _command(cluster: DevCluster, argv: list[str]) -> tuple[int | None, bytes, bytes]:
    """The probe as the kubelet runs it: a process; its exit code and output."""
    done = await asyncio.create_subprocess_exec(
        *argv,
        env={**os.environ, **_env(cluster)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await done.communicate()
    return done.returncode, out, err


async def _standby(cluster: DevCluster, name: str) -> str:
    """Poll until `name` answers as a standby (one just started answers nothing for a few seconds,
    measured on 24.11 and 26.05); its message."""
    deadline = time.monotonic() + 30
    while not (answer := await _probe(cluster, name))[0]:
        assert time.monotonic() < deadline, answer
        await asyncio.sleep(0.2)
    return answer[1]


@pytest.mark.timeout(120)
@pytest.mark.cluster(**HA)
@pytest.mark.per_release("26.05 answers on /livez and /readyz, 22.05 and 24.11 through the commands")
async def test_primary_in_control_backup_standby_and_the_roles_swap_on_takeover(cluster: DevCluster) -> None:
    _in_control(await _probe(cluster, "ctld-a"))
    said = await _standby(cluster, "ctld-b")
    if health.served(Version.parse(cluster.release.version)):
        assert said.startswith("controller: live, standby (/readyz: 500 from"), said
        # Slurm's own endpoints answer 204: healthy for `probe livez` too; a standby's /readyz is not
        assert await probe.check(_url(cluster, "ctld-b"), "livez", 5) == (True, "livez: ok")
        ok, why = await probe.check(_url(cluster, "ctld-b"), "readyz", 5)
        assert not ok and why.startswith("readyz: HTTP 500"), why
    else:
        assert said == f"controller: live, standby (ctld-b: {STANDBY_WORDS})", said

    await cluster.takeover()
    # Slurm shuts down the controllers before the one that took over: ctld-a answers nothing
    ok, why = await _probe(cluster, "ctld-a")
    assert not ok and why.startswith("controller: not live:"), why
    _in_control(await _probe(cluster, "ctld-b"))
    assert not _left_behind(cluster)


@pytest.mark.timeout(120)
@pytest.mark.releases("slurm24", "slurm26")  # the Slinky shape needs auth/slurm (23.11+)
@pytest.mark.cluster(**HA, shape="slinky", extra_conf="CommunicationParameters=disable_http")
@pytest.mark.per_release("26.05 with its HTTP off and 24.11 without it take the commands' path")
async def test_asked_alone_with_slinkys_key_and_where_slurm_serves_no_http(cluster: DevCluster) -> None:
    """auth/slurm's key lies beside slurm.conf: the configuration naming one controller finds it
    there too. A 26.05 whose HTTP is turned off is asked through the commands, as older ones are."""
    _in_control(await _probe(cluster, "ctld-a"))
    assert await _standby(cluster, "ctld-b") == f"controller: live, standby (ctld-b: {STANDBY_WORDS})"
    assert not _left_behind(cluster)


@pytest.mark.timeout(120)
@pytest.mark.cluster(**HA)
@pytest.mark.per_release("26.05 answers on /livez and /readyz, 22.05 and 24.11 through the commands")
async def test_a_killed_controller_is_not_live_and_the_command_says_so(cluster: DevCluster) -> None:
    await _standby(cluster, "ctld-b")
    argv = self_argv("probe", "controller", "--url", _url(cluster, "ctld-b"), "--controller", "ctld-b")
    code, out, err = await _command(cluster, argv)
    assert code == 0 and out.startswith(b"controller: live, standby"), (out, err)

    await cluster.kill_controller("ctld-a")
    ok, why = await _probe(cluster, "ctld-a")
    if health.served(Version.parse(cluster.release.version)):
        assert not ok and why.startswith(f"controller: not live: {_url(cluster, 'ctld-a')}/livez: "), why
    else:
        assert not ok and why == "controller: not live: ctld-a: Slurmctld(primary) at ctld-a is DOWN", why
    await cluster.wait_primary("ctld-b", timeout=60)  # after SlurmctldTimeout
    _in_control(await _probe(cluster, "ctld-b"))

    await cluster.kill_controller("ctld-b")
    code, out, err = await _command(cluster, argv)
    assert code == 1 and err.startswith(b"controller: not live: "), (out, err)


@pytest.mark.timeout(60)
@pytest.mark.releases("slurm24")
@pytest.mark.cluster(**HA)
async def test_a_name_the_configuration_does_not_give_is_refused_with_the_reason(cluster: DevCluster) -> None:
    ok, why = await probe.check_controller(_url(cluster, "ctld-a"), 5, "ctld-z", _env(cluster))
    assert not ok and "no SlurmctldHost 'ctld-z' in slurm.conf (it names: ctld-a, ctld-b)" in why, why


CONF = """ClusterName=c1
SlurmctldHost=ctld-a(10.0.0.2)
  slurmctldhost = ctld-b   # the backup
SlurmctldHost=ctld-c(10.0.0.4)
SlurmctldPort=6817
"""


def test_the_configuration_naming_one_controller_keeps_everything_else() -> None:
    assert standby.host_names(CONF) == ["ctld-a", "ctld-b", "ctld-c"]
    assert (
        standby.naming_only(CONF, "ctld-b")
        == "ClusterName=c1\n  slurmctldhost = ctld-b   # the backup\nSlurmctldPort=6817\n"
    )
    assert standby.naming_only(CONF, "ctld-c").splitlines()[1] == "SlurmctldHost=ctld-c(10.0.0.4)"
    with pytest.raises(standby.NotAController, match="no SlurmctldHost 'ctld' in"):
        standby.naming_only(CONF, "ctld")
    with pytest.raises(standby.NotAController, match="ControlMachine"):
        standby.naming_only("ControlMachine=a\nBackupController=b\n", "a")
