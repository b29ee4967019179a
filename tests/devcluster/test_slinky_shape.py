"""The Slinky-shaped dev cluster: configless slurmctld, `slurmd -Z` workers registering as dynamic
nodes through a NodeSet, auth/slurm with a generated key and no munge; and Slurm's own health
endpoints where the release serves them."""

from __future__ import annotations

import contextlib
from pathlib import Path

import aiohttp
import pytest

from sidecars.devcluster import ClusterError, ClusterSpec, DevCluster, Release
from sidecars.slurm import health


def _procs(c: DevCluster) -> list[tuple[str, list[str], dict[str, str]]]:
    out = []
    for pid in c.processes():
        with contextlib.suppress(OSError):
            base = Path(f"/proc/{pid}")
            argv = [w.decode() for w in base.joinpath("cmdline").read_bytes().split(b"\0") if w]
            env = dict(
                e.decode().split("=", 1)
                for e in base.joinpath("environ").read_bytes().split(b"\0")
                if b"=" in e
            )
            out.append((base.joinpath("comm").read_text().strip(), argv, env))
    return out


@pytest.mark.releases("slurm24", "slurm26")
@pytest.mark.cluster(shape="slinky", nodes=3, gpus=2)
@pytest.mark.per_release("each release's configless slurmd -Z, NodeSets and auth/slurm")
async def test_configless_dynamic_workers_in_a_nodeset_with_auth_slurm(cluster: DevCluster) -> None:
    config = await cluster.client().show_config()
    assert config["AuthType"] == "auth/slurm" and config["CredType"] == "cred/slurm"
    assert "enable_configless" in config["SlurmctldParameters"]
    procs = _procs(cluster)
    assert not any(name == "munged" for name, _, _ in procs)
    workers = [(argv, env) for name, argv, env in procs if name.startswith("slurmd")]
    assert len(workers) == 3
    for argv, env in workers:  # no slurm.conf of their own: fetched from slurmctld
        assert "-Z" in argv and "--conf-server" in argv and "SLURM_CONF" not in env, argv
    nodes = await cluster.client().nodes()
    assert sorted(n.name for n in nodes) == ["n1", "n2", "n3"]
    assert all("DYNAMIC_NORM" in n.state.flags and n.features == ("slinky",) for n in nodes)
    assert len({n.port for n in nodes}) == 3  # one port each, on one host
    parts = await cluster.client().partitions()
    assert [(p.name, sorted(p.nodes)) for p in parts] == [("debug", ["n1", "n2", "n3"])]
    job = await cluster.sbatch("-N", "3", "--gres=gpu:1", wrap="srun printenv CUDA_VISIBLE_DEVICES")
    assert (await cluster.wait_job(job, {"COMPLETED", "FAILED"}, timeout=60)).state == "COMPLETED"
    assert (cluster.out_dir / f"slurm-{job}.out").read_text().split() == ["0", "0", "0"]


@pytest.mark.releases("slurm24", "slurm26")
@pytest.mark.cluster(shape="slinky", nodes=1, nodesets={"n2": "gpu"})
@pytest.mark.per_release("each release's dynamic registration into a NodeSet")
async def test_a_worker_started_later_joins_its_nodeset(cluster: DevCluster) -> None:
    await cluster.start_slurmd("n2")
    node = await cluster.wait_node("n2", lambda n: n.state.registered and n.state.base == "IDLE")
    assert node.features == ("gpu",)
    parts = {p.name: p for p in await cluster.client().partitions()}
    assert sorted(parts["debug"].nodes) == ["n1", "n2"]
    job = await cluster.sbatch("-C", "gpu", "-t", "1", wrap="hostname")
    assert (await cluster.wait_job(job, {"COMPLETED", "FAILED"}, timeout=60)).nodes == ("n2",)


@pytest.mark.releases("slurm22")
def test_22_05_cannot_run_the_slinky_shape(release: Release) -> None:
    with pytest.raises(ClusterError, match=r"needs Slurm 23\.11 or later \(auth/slurm\)"):
        DevCluster(release, ClusterSpec(shape="slinky"))
    with pytest.raises(ClusterError, match="unknown cluster shape 'k8s'"):
        DevCluster(release, ClusterSpec(shape="k8s"))


async def _answers(cluster: DevCluster) -> list[bool]:
    node = await cluster.client().node("n1")
    assert node is not None and cluster.ports is not None
    async with aiohttp.ClientSession() as s:
        return [
            (await health.probe(s, "127.0.0.1", port, path)).ok
            for port in (cluster.ports.slurmctld, node.port or 0)
            for path in ("/livez", "/readyz")
        ]


@pytest.mark.releases("slurm24", "slurm26")
@pytest.mark.cluster(shape="slinky", nodes=1)
@pytest.mark.per_release("26.05 serves /livez and /readyz, 24.11 serves none")
async def test_slurms_own_health_endpoints_where_the_release_serves_them(cluster: DevCluster) -> None:
    version = await cluster.client().version()
    served = health.served(version, (await cluster.client().show_config())["CommunicationParameters"])
    assert served == (cluster.release.short >= "25.11")
    assert await _answers(cluster) == [served] * 4  # slurmctld's and slurmd's /livez and /readyz


@pytest.mark.releases("slurm26")
@pytest.mark.cluster(shape="slinky", nodes=1, extra_conf="CommunicationParameters=NoInAddrAny,disable_http")
async def test_disable_http_turns_them_off(cluster: DevCluster) -> None:
    version = await cluster.client().version()
    assert not health.served(version, (await cluster.client().show_config())["CommunicationParameters"])
    assert await _answers(cluster) == [False] * 4
