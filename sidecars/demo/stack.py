"""Everything on one machine: a real Slurm, config-sync on a ConfigMap-like volume, the control plane
and one worker agent per node, each started through the `slurm-sidecars` command as in a pod."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import secrets
import shlex
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import aiohttp
import structlog

from sidecars import probe
from sidecars.cli import self_argv
from sidecars.devcluster import ClusterSpec, DevCluster, Release, free_port
from sidecars.devcluster.swap import SwappableCluster
from sidecars.devcluster.volume import AtomicVolume
from sidecars.runtime import process
from sidecars.runtime.pdeathsig import die_with_parent
from sidecars.runtime.waits import all_of

log = structlog.get_logger(__name__)


class DemoError(RuntimeError):
    pass


@dataclass
class Role:
    name: str
    url: str
    process: process.Child | None  # None: served in the demo's own process
    log_path: Path


@dataclass
class DemoStack:
    release: Release
    nodes: int = 3
    shape: str = "classic"  # or "slinky" (see sidecars/devcluster/slinky.py)
    accounting: bool = False  # slurmdbd on a MariaDB of the cluster's own (classic shape only)
    # a newer release the tour's last step upgrades the whole cluster to (with accounting): its
    # daemons swap releases, and the control plane runs in this process, handed them as its roles
    upgrade_to: Release | None = None
    cluster: DevCluster = field(init=False)
    roles: dict[str, Role] = field(default_factory=dict, init=False)
    volume: AtomicVolume = field(init=False)
    token_file: Path = field(init=False)
    viewer_token_file: Path = field(init=False)
    sockets: dict[str, Path] = field(default_factory=dict, init=False)
    _inside: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack, init=False)

    @property
    def config_sync_url(self) -> str:
        return self.roles["config-sync"].url

    @property
    def control_plane_url(self) -> str:
        return self.roles["control-plane"].url

    @property
    def token(self) -> str:
        return self.token_file.read_text().strip()

    @property
    def page_url(self) -> str:
        """The operator's web page (log in with the token in `viewer_token_file`)."""
        return self.control_plane_url + "/ui/"

    @property
    def viewer_token(self) -> str:
        return self.viewer_token_file.read_text().strip()

    async def __aenter__(self) -> DemoStack:
        # the partition limit gives jobs an expected end, which the scale-in order ranks by
        spec = ClusterSpec(
            nodes=self.nodes, gpus=4, partition_max_time="60", shape=self.shape, accounting=self.accounting
        )
        self.cluster = (
            SwappableCluster(self.release, spec)
            if self.upgrade_to is not None
            else DevCluster(self.release, spec)
        )
        await self.cluster.start()
        try:
            await self._start_roles()
        except BaseException:
            await self._stop_to_the_end()
            raise
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._stop_to_the_end()

    async def _stop_to_the_end(self) -> None:
        """stop(), carried through even when the caller is cancelled meanwhile: the daemon runtime
        cancels the demo 1.5 s after a signal, and a teardown cut there left the cluster running."""
        task = asyncio.create_task(self.stop(), name="demo-stop")
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            await task
            raise

    async def _start_roles(self) -> None:
        d = self.cluster.dir
        etc = self.cluster.conf_path.parent
        self.volume = AtomicVolume(d / "configmap")
        # slurm.key, and slurmdbd.conf with its StoragePass, come from a Secret as Slinky mounts them
        secret_files = {p.name for p in etc.iterdir() if p.suffix == ".key" or p.name == "slurmdbd.conf"}
        self.volume.write(
            {
                p.name: p.read_text()
                for p in sorted(etc.iterdir())
                if p.suffix == ".conf" and p.name not in secret_files
            }
        )
        secret = AtomicVolume(d / "secret", mode=0o600)
        secret.write({name: (etc / name).read_bytes() for name in sorted(secret_files)})
        self.token_file = d / "token"
        self.token_file.write_text(secrets.token_urlsafe(32) + "\n")
        self.token_file.chmod(0o600)
        self.viewer_token_file = d / "viewer-token"  # the page's own read-only credential
        self.viewer_token_file.write_text(secrets.token_urlsafe(24) + "\n")
        self.viewer_token_file.chmod(0o600)
        port = free_port()
        await self._spawn(
            "config-sync",
            port,
            [
                "config-sync",
                "--source",
                str(d / "configmap"),
                "--secret-source",  # its files' contents are never shown (history, logs, Events)
                str(d / "secret"),
                "--target",
                str(etc),
                "--state-dir",
                str(d / "config-sync-state"),
                "--settle-seconds",
                "1",
                "--plugin-dir",  # for 24.11: its plugins are in the chroot, not where slurmctld says
                str(await self.cluster.plugin_dir()),
                # the dry run's throwaway slurmctld is the cluster's own release, in its namespace (and
                # chroot): the host's slurmctld would be another release, refusing every change
                "--dry-run-slurmctld",
                shlex.join(self.cluster.in_namespace("slurmctld")),
                "--operator-token-file",  # plans served (POST /v1/plan), and listed on the page
                str(self.token_file),
            ],
        )
        port = free_port()
        await (self._serve_control_plane if self.upgrade_to is not None else self._spawn)(
            "control-plane",
            port,
            [
                "control-plane",
                "--token-file",
                str(self.token_file),
                "--viewer-token-file",
                str(self.viewer_token_file),
                "--config-sync",
                self.config_sync_url,
                # a read a second (4 RPCs/s, nothing for one slurmctld): the tour's windows and roll
                # move within seconds; production keeps the default
                "--interval-seconds",
                "1",
            ],
        )
        for name in self.cluster.node_names:
            sock = d / "run" / f"agent-{name}.sock"
            self.sockets[name] = sock
            await self._spawn(
                f"worker-{name}",
                free_port(),
                [
                    "worker",
                    "--node-name",
                    name,
                    "--socket",
                    str(sock),
                    "--control-plane",
                    self.control_plane_url,
                    # no Kubernetes here, so no ServiceAccount token to review: the demo's agents hold
                    # the operator's token (in a cluster each holds its own pod's projected token)
                    "--token-file",
                    str(self.token_file),
                    "--job-mapping-dir",
                    str(d / "gpu-jobs" / name),
                    "--slurmd-restart-command",
                    shlex.join(self.cluster.slurmd_argv(name)),
                    "--registration-timeout-seconds",
                    "30",
                    "--poll-seconds",
                    "5",
                ],
            )
        await self._wait_ready(60)

    async def _spawn(self, name: str, port: int, args: list[str]) -> None:
        log_path = self.cluster.log_dir / f"{name}.log"
        out = log_path.open("ab")
        try:
            proc = await process.start(
                self_argv("--log-format", "json", *args, "--http", f"127.0.0.1:{port}"),
                env=self.cluster.env,
                stdout=out,
                stderr=out,
                preexec_fn=die_with_parent(),  # a demo killed by SIGKILL takes its sidecars with it
            )
        finally:
            out.close()
        self.roles[name] = Role(name, f"http://127.0.0.1:{port}", proc, log_path)

    async def _serve_control_plane(self, name: str, port: int, args: list[str]) -> None:
        """The control plane in this process, as `slurm-sidecars control-plane ARGS` would run it,
        handed the dev cluster's release swap as its whole-cluster upgrade's roles (a Python object:
        no flag could hand it to a process of its own) and a file to keep its status in."""
        from prometheus_client import CollectorRegistry

        from sidecars.controlplane import settings as cp_settings
        from sidecars.controlplane.changes import FileStore
        from sidecars.controlplane.service import ControlPlaneService
        from sidecars.devcluster.swap_roles import DevClusterRoles

        assert isinstance(self.cluster, SwappableCluster) and self.upgrade_to is not None
        parser = argparse.ArgumentParser()
        cp_settings.configure(parser)
        settings = cp_settings.from_args(parser.parse_args([*args[1:], "--http", f"127.0.0.1:{port}"]))
        registry = CollectorRegistry()
        plane = ControlPlaneService(settings, self.cluster.client(timeout=10.0), None, registry)
        releases = {self.release.name: self.release, self.upgrade_to.name: self.upgrade_to}
        plane.cluster_upgrades.roles = DevClusterRoles(self.cluster, releases, worker_timeout_seconds=60)
        plane.cluster_upgrades.store = FileStore(self.cluster.dir / "cluster-upgrade.json")
        await self._inside.enter_async_context(plane.running())
        self.roles[name] = Role(name, f"http://127.0.0.1:{port}", None, self.cluster.log_dir / f"{name}.log")

    async def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        pending = dict(self.roles)
        while pending:
            for name, role in list(pending.items()):
                if role.process is not None and role.process.returncode is not None:
                    tail = role.log_path.read_text()[-1500:]
                    raise DemoError(f"{name} exited with {role.process.returncode}:\n{tail}")
                if (await probe.check(role.url, "readyz", 2.0))[0]:
                    del pending[name]
            if time.monotonic() > deadline:
                raise DemoError(
                    f"not ready after {timeout:g}s: {', '.join(pending)} (see {self.cluster.log_dir})"
                )
            await asyncio.sleep(0.2)

    async def stop(self) -> None:
        # all at once: each gets SIGTERM and 5 s to exit gracefully, then its group is killed. A stop
        # cut short (the daemon loop's grace ran out) kills the roles at once, and the cluster is
        # stopped all the same, never left running
        try:
            try:
                await self._inside.aclose()  # the control plane served here, its upgrade's task with it
            finally:
                await all_of(*(r.process.stop(grace=5) for r in self.roles.values() if r.process))
        finally:
            await self.cluster.stop()

    async def post(self, url: str, body: Mapping[str, object]) -> tuple[int, object]:
        """An operator's write to the control plane: (status, the JSON or text answered)."""
        headers = {"Authorization": f"Bearer {self.token}"}
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as s,
            s.post(url, json=body, headers=headers) as r,
        ):
            answer = await (r.json() if r.content_type == "application/json" else r.text())
            return r.status, answer

    async def get(self, url: str, *, auth: bool = False, viewer: bool = False) -> object:
        """A read: with the operator's token (`auth`), the page's (`viewer`), or none."""
        token = self.token if auth else self.viewer_token if viewer else ""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as s,
            s.get(url, headers=headers) as r,
        ):
            if r.content_type == "application/json":
                return await r.json()
            return await r.text()
