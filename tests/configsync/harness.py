"""Running config-sync beside a dev cluster: the cluster's files in a kubelet-style volume, the target
being the directory slurmctld reads, and the sidecar's state under the cluster's dir (the 24.11
chroot sees only that)."""

from __future__ import annotations

import asyncio
import contextlib
import re
import shlex
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client import CollectorRegistry

from sidecars import probe
from sidecars.cli import self_argv
from sidecars.configsync.fileset import conffile
from sidecars.configsync.fileset.sources import FileEntry, FileSet, read_source
from sidecars.configsync.judge.validate import Validator, Verdict
from sidecars.configsync.main import Running, running
from sidecars.configsync.settings import Settings
from sidecars.devcluster import DevCluster, free_port
from sidecars.devcluster.volume import AtomicVolume
from sidecars.runtime import process
from sidecars.slurm import SlurmClient
from sidecars.slurm.runner import SlurmMetrics
from tests.helpers import RecordingEvents
from tests.settings import build

FILES = ("slurm.conf", "gres.conf", "cgroup.conf")


@dataclass
class Sync:
    cluster: DevCluster
    config: AtomicVolume
    secrets: AtomicVolume
    settings: Settings
    running: Running
    events: RecordingEvents

    @property
    def service(self) -> Any:
        return self.running.service

    def good(self) -> dict[str, bytes]:
        return dict(self.base)

    base: dict[str, bytes] | None = None

    async def status(self) -> dict[str, Any]:
        async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{self.running.port}/status") as r:
            return dict(await r.json())

    async def metrics(self) -> str:
        async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{self.running.port}/metrics") as r:
            return await r.text()

    async def metric(self, name: str, **labels: str) -> float:
        want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        pattern = re.compile(rf"^{re.escape(name)}(?:\{{([^}}]*)\}})? (\S+)$", re.M)
        for m in pattern.finditer(await self.metrics()):
            got = ",".join(sorted((m.group(1) or "").split(","))) if m.group(1) else ""
            if got == want:
                return float(m.group(2))
        return 0.0

    def target_sha(self) -> str:
        entries, _ = read_source(self.settings.target, self.settings.max_file_bytes)
        return FileSet.build(entries).sha256

    # an apply runs a throwaway slurmctld, a reconfigure (24.11 on: every daemon re-execs) and a
    # verify: seconds each on a loaded machine, so the default leaves room for all three
    async def wait(self, sha: str, key: str = "applied", within: float = 30.0) -> dict[str, Any]:
        def done(st: dict[str, Any]) -> bool:
            return bool(st[key] and st[key]["sha256"] == sha and not st["pending"])

        return await self.service.wait_until(done, within)


def cluster_files(cluster: DevCluster) -> dict[str, bytes]:
    etc = cluster.conf_path.parent
    return {n: (etc / n).read_bytes() for n in FILES if (etc / n).exists()}


def read_set(files: dict[str, bytes], limit: int | None = None) -> FileSet:
    """The FileSet the reader would make of these files (keeping `limit` bytes of each)."""
    return FileSet.build([FileEntry(n, d[:limit], 0o644, len(d), Path("/")) for n, d in files.items()])


def set_sha(config: dict[str, bytes], secrets: dict[str, bytes] | None = None) -> str:
    # what the reader keeps of an oversize file
    return read_set({**config, **(secrets or {})}, limit=1024 * 1024 + 1).sha256


@contextlib.asynccontextmanager
async def config_sync(
    cluster: DevCluster,
    *,
    secrets: dict[str, bytes] | None = None,
    validator_factory: Any = None,
    initial: dict[str, bytes] | None = None,
    watch_files: bool = True,
    checkpoint: Any = None,
    hold_rules: Any = None,
    path_first: Path | None = None,
    **overrides: Any,
) -> AsyncIterator[Sync]:
    """config-sync on `cluster`; `path_first` puts a test's commands before Slurm's on its PATH (a
    shim in front of one command)."""
    base = initial or cluster_files(cluster)
    for name, data in (secrets or {}).items():  # deployed with the cluster, as slurmctld found them
        path = cluster.conf_path.parent / name
        path.write_bytes(data)
        path.chmod(0o600)
    config = AtomicVolume(cluster.dir / "vol" / "config")
    config.write(base)
    secret = AtomicVolume(cluster.dir / "vol" / "secret", mode=0o600)
    secret.write(secrets or {})
    defaults: dict[str, Any] = {
        "sources": (config.path, secret.path),
        "target": cluster.conf_path.parent,
        "state_dir": cluster.dir / "config-sync",
        "plugin_dir": await cluster.plugin_dir(),  # 24.11's live in its chroot, not where it reports
        # the dry run's slurmctld is the cluster's release, started in its namespace (and chroot) as
        # the cluster's own is; the cluster's teardown would take a leftover one with it
        "dry_run_slurmctld": tuple(cluster.in_namespace("slurmctld")),
    }
    settings = build(Settings, **(defaults | overrides))  # a test's own value wins
    registry = CollectorRegistry()
    env = cluster.env
    if path_first is not None:
        env["PATH"] = f"{path_first}:{env['PATH']}"
    client = SlurmClient(env=env, metrics=SlurmMetrics(registry))
    validator: Validator | None = validator_factory(client, settings) if validator_factory else None
    events = RecordingEvents()
    async with running(
        settings,
        client=client,
        events=events,
        registry=registry,
        validator=validator,
        watch_files=watch_files,
        checkpoint=checkpoint,
        hold_rules=hold_rules,
    ) as r:
        sync = Sync(cluster, config, secret, settings, r, events, base={**base, **(secrets or {})})
        sync.base = dict(base)
        yield sync


@dataclass
class Command:
    """The real `slurm-sidecars config-sync` process and the port of its HTTP face."""

    proc: asyncio.subprocess.Process
    port: int

    async def get(self, path: str) -> Any:
        async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{self.port}{path}") as r:
            return await r.json() if r.content_type == "application/json" else await r.text()


async def start_command(
    cluster: DevCluster, vol: AtomicVolume, *args: str, env: dict[str, str] | None = None
) -> Command:
    """Start the command on `vol` with the cluster's directory as target; return once it is ready."""
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        *self_argv(
            "--log-format",
            "json",
            "config-sync",
            "--source",
            str(vol.path),
            "--target",
            str(cluster.conf_path.parent),
            "--http",
            f"127.0.0.1:{port}",
            *args,
        ),
        # the dry run's slurmctld: the cluster's release, in its namespace (see config_sync)
        env={
            **cluster.env,
            "SIDECARS_DRY_RUN_SLURMCTLD": shlex.join(cluster.in_namespace("slurmctld")),
            **(env or {}),
        },
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    for _ in range(300):
        if (await probe.check(f"http://127.0.0.1:{port}", "readyz", 2.0))[0]:
            return Command(proc, port)
        if proc.returncode is not None:
            break
        await asyncio.sleep(0.05)
    proc.kill()
    _, err = await proc.communicate()
    raise AssertionError(f"config-sync never became ready: {err.decode()[-2000:]}")


# a validator that only runs Slurm's client parse: what reaches slurmctld when our rules miss a killer
class ParserOnly(Validator):
    async def validate(self, files: FileSet, current: FileSet | None) -> Verdict:
        refused, _ = await self.client_parse(files)
        if refused:
            return Verdict(False, refused)
        return Verdict(True, conf=conffile.parse(files, self.main, self.target))


def parser_only(client: SlurmClient, settings: Settings) -> Validator:
    return ParserOnly(client, settings.target, settings.state_dir)


@contextlib.asynccontextmanager
async def container_restarts(cluster: DevCluster) -> AsyncIterator[list[int]]:
    """Stand in for slurmctld's container: when the controller exits, start it again."""
    restarts: list[int] = []

    async def loop() -> None:
        while True:
            # like a kubelet, only once the process has exited: a foreground slurmctld removes its
            # pid file a moment before it ends
            pid = cluster.foreground_pid() or cluster.hostpid("slurmctld")
            if pid is None:
                await cluster.start_slurmctld()
                restarts.append(cluster.hostpid("slurmctld") or 0)
            await asyncio.sleep(0.05)

    task = asyncio.create_task(loop())
    try:
        yield restarts
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def bump_max_job_count(files: dict[str, bytes]) -> dict[str, bytes]:
    """A change slurmctld takes only by a restart (MaxJobCount)."""
    return {**files, "slurm.conf": files["slurm.conf"] + b"MaxJobCount=12345\n"}


async def container_start(cluster: DevCluster, target: str) -> str:
    """What slurmctld's container does when it (re)starts: the image's entrypoint runs the guard,
    then execs slurmctld on whatever the target holds. Returns what the guard said."""
    done = await process.run(self_argv("config-guard", "--target", target), timeout=60, merge_stderr=True)
    assert done.returncode == 0, done.text()
    await cluster.start_slurmctld()  # raises if slurmctld dies at start
    return done.text()


def key_secret(cluster: DevCluster) -> dict[str, bytes]:
    """slurm.key as Slinky mounts it: from a Secret, next to slurm.conf."""
    return {"slurm.key": (cluster.conf_path.parent / "slurm.key").read_bytes()}
