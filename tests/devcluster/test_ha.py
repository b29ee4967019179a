"""An HA dev cluster: two slurmctld sharing one StateSaveLocation, each at its own address in its own
network namespace, as Slinky runs a primary and a backup. `scontrol takeover` and a killed primary
both move control; a job started before the move completes after it; the cluster's end removes
every namespace, veth and process it made."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import random
import signal
import sys
import time
from pathlib import Path

import pytest

from sidecars.devcluster import ClusterError, ClusterSpec, DevCluster, Release
from sidecars.devcluster.netblocks import AddressBlock, host_addresses, in_use, lease_block
from sidecars.devcluster.slurmconf import Ports, render
from sidecars.runtime import process
from sidecars.runtime.waits import within
from tests.devcluster import lifetime

REPO = Path(__file__).resolve().parents[2]

HA = {"nodes": 1, "controllers": 2, "slurmctld_timeout_seconds": 5}
pytestmark = [
    pytest.mark.releases("slurm22", "slurm24", "slurm26"),
    pytest.mark.per_release("each release's takeover, backup and handback, and what they leave"),
]


async def _output_says(c: DevCluster, job: int, word: str, timeout: float = 30) -> str:
    """Poll the job's output file until it holds `word` (the job really runs on its node)."""
    out = c.out_dir / f"slurm-{job}.out"
    deadline = time.monotonic() + timeout
    while True:
        text = out.read_text() if out.exists() else ""
        if word in text:
            return text
        assert time.monotonic() < deadline, f"job {job} never wrote {word!r}; output: {text!r}"
        await asyncio.sleep(0.1)


def _net_namespaces_of(pids: list[int]) -> set[str]:
    return {os.readlink(f"/proc/{p}/ns/net") for p in pids}


def _processes_in(netns: set[str]) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/ns/net") in netns:
                    found.append(int(entry))
            except OSError:
                continue
    return found


@pytest.mark.timeout(120)
@pytest.mark.cluster(**HA)
async def test_takeover_moves_control_and_a_running_job_completes(cluster: DevCluster) -> None:
    assert await cluster.primary() == "ctld-a"
    # the client's view: the backup answers pings as a healthy standby, not as a failure
    ping = await cluster.client(timeout=30.0).ping()
    assert ping.hosts() == ["ctld-a", "ctld-b"], ping
    assert (ping.up, ping.in_control) == (True, "ctld-a"), ping
    assert [ping.role(h) for h in ("ctld-a", "ctld-b", "ctld-z")] == ["in control", "standby", "unknown"]
    assert not await cluster.in_control("ctld-b")  # ... and serves nothing while ctld-a is in control

    job = await cluster.sbatch("-N", "1", wrap="echo started; sleep 3; echo finished")
    await _output_says(cluster, job, "started")
    await cluster.takeover()
    assert await cluster.primary() == "ctld-b"
    # Slurm shuts down the controllers before the one that took over
    assert cluster.controller_pid("ctld-a") is None
    assert cluster.controller_pid("ctld-b") is not None
    ping = await cluster.client(timeout=30.0).ping()
    assert (ping.in_control, ping.role("ctld-a"), ping.role("ctld-b")) == ("ctld-b", "down", "in control")

    await cluster.wait_job(job, "COMPLETED", timeout=60)
    assert "finished" in await _output_says(cluster, job, "finished")


@pytest.mark.timeout(120)
@pytest.mark.cluster(**HA)
async def test_a_killed_primary_moves_control_and_the_backup_schedules(cluster: DevCluster) -> None:
    # the job ends only once the backup is in control: one that ends while no controller is (the
    # SlurmctldTimeout window) is reconciled by Slurm later, at a pace a loaded machine stretches
    go = cluster.out_dir / "go"
    running = await cluster.sbatch(
        "-N", "1", wrap=f"echo started; while [ ! -e {go} ]; do sleep 0.1; done; echo finished"
    )
    await _output_says(cluster, running, "started")
    # a job whose start the primary had not saved yet comes back held (JobHeldUser): Slurm's own
    # behaviour after a crash, not what this test is about
    await cluster.job_state_saved(running)
    await cluster.kill_controller("ctld-a")
    # SlurmctldTimeout=5 s: the backup takes control once the primary's heartbeat is that old
    await cluster.wait_primary("ctld-b", timeout=60)
    assert cluster.controller_pid("ctld-a") is None
    ping = await cluster.client(timeout=30.0).ping()
    assert (ping.in_control, ping.role("ctld-a"), ping.role("ctld-b")) == ("ctld-b", "down", "in control")

    go.touch()
    await cluster.wait_job(running, "COMPLETED", timeout=60)
    after = await cluster.sbatch("-N", "1", wrap="echo started")
    await cluster.wait_job(after, "COMPLETED", timeout=60)


@pytest.mark.timeout(120)
@pytest.mark.releases("slurm24", "slurm26")  # the Slinky shape needs auth/slurm (23.11+)
@pytest.mark.cluster(**HA, shape="slinky")
async def test_slinky_workers_follow_a_takeover(cluster: DevCluster) -> None:
    """Configless workers given every controller (`--conf-server a,b`, as Slinky's are) run jobs
    before and after control moves."""
    before = await cluster.sbatch("-N", "1", wrap="echo started; sleep 3; echo finished")
    await _output_says(cluster, before, "started")
    await cluster.takeover()
    await cluster.wait_job(before, "COMPLETED", timeout=60)
    after = await cluster.sbatch("-N", "1", wrap="echo started")
    await cluster.wait_job(after, "COMPLETED", timeout=60)
    assert (await cluster.client(timeout=30.0).ping()).in_control == "ctld-b"


@pytest.mark.timeout(90)
async def test_nothing_is_left_behind(release: Release) -> None:
    c = DevCluster(release, ClusterSpec(nodes=1, controllers=2, slurmctld_timeout_seconds=5))
    async with c:
        links = c.links
        assert len(links) == 2
        assert all(Path("/sys/class/net", link).exists() for link in links)
        netns = _net_namespaces_of([p for n in ("ctld-a", "ctld-b") if (p := c.controller_pid(n))])
        assert len(netns) == 2 and os.readlink("/proc/self/ns/net") not in netns
        assert _processes_in(netns)
        # a controller reaches its cluster's addresses and nothing else (no default route)
        assert c.address_block is not None
        block = c.address_block.network
        for n in ("ctld-a", "ctld-b"):
            shown = await process.run(
                ["nsenter", f"--net=/proc/{c.controller_pid(n)}/ns/net", "--", "ip", "-4", "route"],
                timeout=10,
            )
            routes = [ln.split()[0] for ln in shown.text().splitlines() if ln.strip()]
            assert routes and all(
                r != "default" and ipaddress.IPv4Network(r).subnet_of(block) for r in routes
            ), shown.text()
    assert not [link for link in links if Path("/sys/class/net", link).exists()]
    assert not _processes_in(netns)
    assert not c.processes()
    assert not c.dir.exists()


@pytest.mark.timeout(150)
@pytest.mark.releases("slurm22", "slurm26")  # the host's packages and a chroot; the chroots alike
async def test_an_owner_killed_leaves_no_controller_namespace_or_link(
    release: Release, tmp_path: Path
) -> None:
    info_file, log = tmp_path / "holding", tmp_path / "owner.log"
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.devcluster.lifetime",
            cwd=REPO,
            env={
                **os.environ,
                lifetime.HOLD_ENV: lifetime.release_json(release),
                lifetime.INFO_ENV: str(info_file),
                lifetime.CONTROLLERS_ENV: "2",
            },
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )
    info, watched = None, None
    try:
        deadline = time.monotonic() + 120
        while not info_file.exists():
            assert proc.returncode is None, f"the owner exited early: {log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no cluster after 120s: {log.read_text()[-3000:]}"
            await asyncio.sleep(0.1)
        info = json.loads(info_file.read_text()[len(lifetime.HOLDING) :])
        links = info["links"]
        assert len(links) == 2 and all(Path("/sys/class/net", link).exists() for link in links)
        watched = await lifetime.Watched.capture(proc.pid, info["init"], info["dir"])
        assert watched.names() >= lifetime.CLUSTER_NAMES, watched.procs
        netns = _net_namespaces_of([p for p, (_, name) in watched.procs.items() if name == "slurmctld"])
        assert len(netns) == 2, watched.procs  # each controller in a network namespace of its own
        proc.send_signal(signal.SIGKILL)
        await within(proc.wait(), 30)
        left = await watched.wait_gone(lifetime.FEW_SECONDS)
        assert not left, f"still running after the owner was killed: {left}"
        deadline = time.monotonic() + lifetime.FEW_SECONDS
        while (there := [link for link in links if Path("/sys/class/net", link).exists()]) and (
            time.monotonic() < deadline
        ):
            await asyncio.sleep(0.05)
        assert not there, f"links left after the owner was killed: {there}"
        assert not _processes_in(netns)
    finally:
        await lifetime.clean_up(proc, watched, info["dir"] if info is not None else None, release)


def test_address_blocks_avoid_what_the_machine_uses(tmp_path: Path) -> None:
    block = AddressBlock(3)
    assert block.network.with_prefixlen == "198.18.0.48/28"
    assert (block.node_address, block.controller_address(1)) == ("198.18.0.49", "198.18.0.54")
    used = [*host_addresses()]
    assert not in_use(block, [])
    assert in_use(block, [*used, ipaddress.IPv4Interface("198.18.0.0/24")])
    assert not in_use(block, [ipaddress.IPv4Interface("198.18.1.0/24")])


def test_a_leased_block_is_nobody_elses_until_released(tmp_path: Path) -> None:
    first = lease_block(random.Random(1), tmp_path)
    second = lease_block(random.Random(1), tmp_path)  # same order of tries: must step past the first
    assert first.block != second.block
    first.release()
    third = lease_block(random.Random(1), tmp_path)
    assert third.block == first.block
    second.release()
    third.release()


def test_every_controller_reads_one_file_naming_them_all() -> None:
    block = AddressBlock(7)
    ports = Ports(20000, 20001, {"n1": 20002})
    conf = render(ClusterSpec(nodes=1, controllers=2), Path("/tmp/dc"), ports, "vm", "c1", block)[
        "slurm.conf"
    ]
    lines = conf.splitlines()
    assert [ln for ln in lines if ln.startswith("SlurmctldHost=")] == [
        f"SlurmctldHost=ctld-a({block.controller_address(0)})",
        f"SlurmctldHost=ctld-b({block.controller_address(1)})",
    ]
    # each controller's mount namespace maps DIR/ctld to its own dir: one pid file each
    assert "SlurmctldPidFile=/tmp/dc/ctld/slurmctld.pid" in lines
    assert f"NodeAddr={block.node_address} " in conf
    assert "NoInAddrAny" not in conf  # a slurmd bound to 127.0.0.1 is out of the controllers' reach
    with pytest.raises(ValueError, match="address block"):
        render(ClusterSpec(controllers=2), Path("/tmp/dc"), ports, "vm", "c1")


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        (ClusterSpec(controllers=5), "1 to 4 controllers"),
        (ClusterSpec(controllers=0), "1 to 4 controllers"),
        (ClusterSpec(controllers=2, foreground_ctld=True), "daemonized"),
    ],
)
def test_a_spec_it_cannot_run_is_refused_with_the_reason(spec: ClusterSpec, why: str) -> None:
    with pytest.raises(ClusterError, match=why):
        DevCluster(Release("sid", None, "26.05.5"), spec)
