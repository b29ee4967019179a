"""A job's user against the agent, on real Slurm: a job submitted as an unprivileged user (made for
the test, removed after) tries each move on the pod's shared volumes.

- As the kubelet makes emptyDirs (0777), the moves succeed on disk: the job renames the config
  directory and plants a slurm.conf with its own PluginDir, swaps the agent's socket for its own,
  plants the drain record's old temporary name and rewrites a GPU mapping file. The agent then runs
  no Slurm command on that config, refuses those directories (exit 2), and the drain hook never
  believes the planted socket.
- With the modes the manifests' init step sets (owned by root or the agent, 0755), every move is
  denied, and the agent, the hook and the mapping do their work as if the job had done nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import yaml
from aiohttp import web

from sidecars.devcluster import DevCluster, Release
from sidecars.runtime import process
from sidecars.runtime.http import serve_unix
from sidecars.runtime.settings import ConfigError
from sidecars.worker.service import Agent
from sidecars.worker.settings import configure, from_args
from tests.helpers import eventually
from tests.worker.agents import hook, running, settings_for

pytestmark = pytest.mark.timeout(240)

MOVES = """#!/bin/sh
try() {{ what=$1; shift; if "$@" 2>/dev/null; then echo "ok $what"; else echo "denied $what"; fi; }}
{{
try rename-conf-dir mv {conf_dir} {conf_dir}.job
try make-conf-dir mkdir {conf_dir}
try plant-slurm-conf sh -c 'printf "PluginDir={home}/plugins\\n" > {conf_dir}/slurm.conf'
try move-socket-away mv {sock} {sock}.job
try plant-socket mv {planted_sock} {sock}
try plant-old-temp-name ln -s {home}/owned {state}/.drain-n1.json.tmp
try plant-temp-name touch {state}/.tmp-planted
try rewrite-mapping-0 sh -c 'echo 999 > {mapping}/0'
try rewrite-mapping-1 sh -c 'echo 999 > {mapping}/1'
}} > {home}/moves
sleep {linger}
"""


@pytest.fixture
def job_user(release: Release) -> Iterator[pwd.struct_passwd]:
    """An ordinary user where the release's slurmd looks users up (the host, or its chroot)."""
    name = f"sjob{os.getpid() % 100000}"
    uid = next(u for u in range(61000, 62000) if not _uid_taken(u, release.root))
    root = ["-R", str(release.root)] if release.root else []
    process_run(["useradd", *root, "-M", "-N", "-g", "nogroup", "-u", str(uid), "-s", "/bin/sh", name])
    try:
        yield pwd.struct_passwd((name, "x", uid, 65534, "", "/nonexistent", "/bin/sh"))
    finally:
        process_run(["userdel", *root, name])


def _uid_taken(uid: int, root: Path | None) -> bool:
    passwd = (root or Path("/")) / "etc" / "passwd"
    return any(line.split(":")[2:3] == [str(uid)] for line in passwd.read_text().splitlines())


def process_run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr.decode()


@contextlib.asynccontextmanager
async def pod_dirs(cluster: DevCluster, user: pwd.struct_passwd, mode: int) -> AsyncIterator[dict[str, Path]]:
    """The pod's volumes under the cluster's directory (seen alike inside a release's chroot): each
    made with `mode`, owned by root (the agent here), and the job user's own home."""
    base = Path(tempfile.mkdtemp(prefix="pod-", dir=cluster.dir))
    base.chmod(0o755)
    dirs = {name: base / name for name in ("run", "sock", "state", "mapping", "home")}
    try:
        for name, d in dirs.items():
            d.mkdir()
            d.chmod(mode)
            if name == "home":
                os.chown(d, user.pw_uid, user.pw_gid)
                d.chmod(0o700)
        conf = dirs["run"] / "conf"
        shutil.copytree(cluster.conf_path.parent, conf)
        conf.chmod(0o755)
        yield dirs
    finally:
        shutil.rmtree(base, ignore_errors=True)


async def submit_as(cluster: DevCluster, user: pwd.struct_passwd, home: Path, script: str, *args: str) -> int:
    path = home / "moves.sh"
    path.write_text(script)
    os.chown(path, user.pw_uid, user.pw_gid)
    argv = cluster.in_namespace(
        "runuser", "-u", user.pw_name, "--", "sbatch", "--parsable", f"--chdir={home}",
        f"--output={home}/job.out", "-w", "n1", "-t", "2", *args, str(path),
    )  # fmt: skip
    done = await process.run(argv, timeout=60.0)
    assert done.returncode == 0, done.stderr.decode()
    return int(done.stdout.decode().split(";")[0])


def moves(home: Path) -> dict[str, str]:
    """What the job reported: move -> ok or denied."""
    lines = (home / "moves").read_text().splitlines() if (home / "moves").exists() else []
    return {move: verdict for verdict, move in (line.split(" ", 1) for line in lines)}


@contextlib.asynccontextmanager
async def answering_drained(path: Path) -> AsyncIterator[list[str]]:
    """A socket that says "drained" at once, as a job's user would plant it; yields what it heard."""
    heard: list[str] = []

    async def drain(request: web.Request) -> web.Response:
        heard.append(request.path)
        return web.json_response({"result": "drained", "detail": "planted", "seconds": 0})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", drain)
    async with serve_unix(app, str(path)):
        yield heard


def worker_args(dirs: dict[str, Path]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    configure(p)
    return p.parse_args(
        ["--node-name", "n1", "--http", "127.0.0.1:0", "--socket", str(dirs["sock"] / "agent.sock"),
         "--state-dir", str(dirs["state"]), "--job-mapping-dir", str(dirs["mapping"])]
    )  # fmt: skip


@pytest.mark.cluster(nodes=1)
async def test_on_the_kubelets_world_writable_volumes_the_agent_and_the_hook_refuse_what_the_job_planted(
    cluster: DevCluster, job_user: pwd.struct_passwd, sockdir: Path
) -> None:
    async with pod_dirs(cluster, job_user, 0o777) as dirs:
        home = dirs["home"]
        sock, planted = dirs["sock"] / "agent.sock", home / "planted.sock"
        # the real agent's socket (owned by the agent's uid), and the job user's own beside it
        async with answering_drained(sock) as agent_heard, answering_drained(planted) as planted_heard:
            os.chown(planted, job_user.pw_uid, job_user.pw_gid)
            conf = dirs["run"] / "conf" / "slurm.conf"
            env = {**cluster.env, "SLURM_CONF": str(conf)}
            s = settings_for(cluster, sockdir, registration_timeout_seconds=600.0)
            agent = Agent(s, env=env)
            async with running(agent, lambda: agent.last_tick is not None, "a first look"):
                script = MOVES.format(
                    conf_dir=conf.parent, home=home, sock=sock, planted_sock=planted,
                    state=dirs["state"], mapping=dirs["mapping"], linger=0,
                )  # fmt: skip
                job = await submit_as(cluster, job_user, home, script)
                assert (await cluster.wait_job(job, {"COMPLETED", "FAILED"}, timeout=60)).state == "COMPLETED"
                done = moves(home)
                # the threat is real: on 0777 volumes every move worked
                assert len(done) == 9 and set(done.values()) == {"ok"}, done
                assert "PluginDir=" in conf.read_text()
                await eventually(lambda: agent.obs is not None and agent.obs.error, what="a failed look")
                assert agent.obs is not None and "not safe from other users" in str(agent.obs.error)
                ran = [
                    m.samples for m in agent.registry.collect() if m.name == "slurm_sidecars_slurm_commands"
                ]
                assert not [x for samples in ran for x in samples if x.name.endswith("_total")], ran

            # the hook never talks to a socket the job's user owns, in a directory anyone can write
            code, answer = await hook(dataclasses.replace(s, socket_path=sock), within=1.0)
            assert code == 1 and "untrusted socket" in str(answer), answer
            assert planted_heard == [] and agent_heard == []

        # and the agent refuses those directories outright: exit 2, one line naming the flag
        with pytest.raises(ConfigError, match=r"--socket: .* is not safe from other users: .*every user"):
            from_args(worker_args(dirs), env={})
        dirs["sock"].chmod(0o755)
        with pytest.raises(ConfigError, match=r"--state-dir: .* every user"):
            from_args(worker_args(dirs), env={})
        dirs["state"].chmod(0o755)
        with pytest.raises(ConfigError, match=r"--job-mapping-dir: .* every user"):
            from_args(worker_args(dirs), env={})


@pytest.mark.cluster(nodes=1, gpus=2, cpus=2)
async def test_with_the_init_steps_modes_every_move_is_denied_and_the_agent_hook_and_mapping_carry_on(
    cluster: DevCluster, job_user: pwd.struct_passwd
) -> None:
    async with pod_dirs(cluster, job_user, 0o755) as dirs:
        home = dirs["home"]
        planted = home / "planted.sock"
        s = settings_for(
            cluster,
            dirs["sock"],
            state_dir=dirs["state"],
            job_mapping_dir=dirs["mapping"],
            registration_timeout_seconds=600.0,
        )
        # the agent's Slurm config is the cluster's own, where only root can write
        agent = Agent(s, env=cluster.env)
        async with answering_drained(planted) as planted_heard:
            os.chown(planted, job_user.pw_uid, job_user.pw_gid)
            async with running(agent, lambda: agent.last_tick is not None, "a first look"):
                from_args(worker_args(dirs), env={})  # the same directories pass the start-up check
                script = MOVES.format(
                    conf_dir=cluster.conf_path.parent, home=home, sock=s.socket_path, planted_sock=planted,
                    state=dirs["state"], mapping=dirs["mapping"], linger=6,
                )  # fmt: skip
                job = await submit_as(cluster, job_user, home, script, "--gres=gpu:1")
                running_job = await cluster.wait_job(job, "RUNNING", timeout=60)
                await eventually(lambda: len(moves(home)) == 9, what="every move tried", within=30)
                done = moves(home)
                assert set(done.values()) == {"denied"}, done
                gpu = running_job.gpu_indices["n1"][0]
                mapped = dirs["mapping"] / str(gpu)
                await eventually(lambda: mapped.exists() and mapped.read_text() == f"{job}\n", what="mapping")
                # the hook waits for the job the planted socket would have cut short
                code, answer = await hook(s, within=90.0)
                assert code == 0 and answer["result"] == "drained", answer
                # ended already (the hook waited for it); Slurm may still be completing it
                assert (await cluster.wait_job(job, {"COMPLETED"}, timeout=30)).state == "COMPLETED"
                assert planted_heard == []
                assert not [p for p in dirs["state"].iterdir() if p.name.startswith(".")]
        assert (cluster.conf_path.parent / "slurm.conf").stat().st_uid == 0


# linux/capability.h, for the ones the manifests give slurmd
CAPABILITY_BITS = {
    "CHOWN": 0,
    "DAC_OVERRIDE": 1,
    "DAC_READ_SEARCH": 2,
    "FOWNER": 3,
    "KILL": 5,
    "SETGID": 6,
    "SETUID": 7,
    "SYS_RESOURCE": 24,
}


def proc_status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, v in (line.split(":", 1) for line in lines)}


def slurmd_capabilities() -> list[str]:
    """The capabilities manifests/base gives the slurmd container (in place of `privileged`)."""
    path = Path(__file__).resolve().parents[2] / "manifests" / "base" / "slurmd.yaml"
    deployment = next(d for d in yaml.safe_load_all(path.read_text()) if d and d["kind"] == "Deployment")
    slurmd = next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "slurmd")
    sc = slurmd["securityContext"]
    assert sc["capabilities"]["drop"] == ["ALL"] and sc["allowPrivilegeEscalation"] is False
    return [str(c) for c in sc["capabilities"]["add"]]


@pytest.mark.cluster(nodes=1)
@pytest.mark.per_release("the capabilities each release's slurmd and slurmstepd need")
async def test_slurmd_with_only_the_manifests_capabilities_runs_and_cancels_a_users_jobs(
    cluster: DevCluster, job_user: pwd.struct_passwd
) -> None:
    caps = slurmd_capabilities()
    await cluster.kill_slurmd("n1")
    # as the manifests run it: root, every other capability gone, no_new_privs
    bounding = ",".join(["-all", *(f"+{c.lower()}" for c in caps)])
    argv = cluster.in_namespace(
        "setpriv", "--no-new-privs", "--bounding-set", bounding, "--inh-caps", "-all", "slurmd", "-N", "n1"
    )
    done = await process.run(argv, timeout=30.0)
    assert done.returncode == 0, done.stderr.decode()
    await cluster.wait_node("n1", lambda n: n.state.registered and n.state.base == "IDLE", timeout=60)
    pid = await eventually(lambda: cluster.hostpid("slurmd-n1"), what="slurmd's pid file")
    theirs, mine = proc_status(pid), proc_status(os.getpid())
    assert theirs["NoNewPrivs"] == "1"
    # exactly the manifests' list (less what this machine's own container lacks)
    want = sum(1 << CAPABILITY_BITS[c] for c in caps)
    assert int(theirs["CapBnd"], 16) == want & int(mine["CapBnd"], 16)

    async with pod_dirs(cluster, job_user, 0o755) as dirs:
        home = dirs["home"]
        ran = await submit_as(cluster, job_user, home, "#!/bin/sh\nid -u > uid\n")
        assert (await cluster.wait_job(ran, {"COMPLETED", "FAILED"}, timeout=60)).state == "COMPLETED"
        assert (home / "uid").read_text().strip() == str(job_user.pw_uid)
        assert (home / "job.out").stat().st_uid == job_user.pw_uid  # slurmstepd opened it as the user
        # cancelling signals another uid's processes (KILL): the job ends, nothing of it is left
        held = await submit_as(cluster, job_user, home, "#!/bin/sh\necho $$ > pid\nexec sleep 300\n")
        await cluster.wait_job(held, "RUNNING", timeout=60)
        await eventually(lambda: (home / "pid").exists() and (home / "pid").read_text().strip(), what="pid")
        await cluster.scancel(held)
        await cluster.wait_job(held, "CANCELLED", timeout=60)
        await cluster.wait_node("n1", lambda n: n.state.base == "IDLE", timeout=60)
