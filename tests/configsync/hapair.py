"""config-sync beside each controller of an HA dev cluster, as one runs in each controller pod: each
stages into its own controller's configuration directory (`conf_per_controller`), all read the same
ConfigMap volume, and each is given the others as `--peer`."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from sidecars.configsync.fileset.sources import FileSet, read_source
from sidecars.configsync.judge.validate import Validator
from sidecars.configsync.main import Running, running
from sidecars.configsync.service.daemon import ConfigSync
from sidecars.configsync.settings import Settings
from sidecars.devcluster import ClusterSpec, DevCluster
from sidecars.devcluster.ports import lease_ports
from sidecars.devcluster.volume import AtomicVolume
from sidecars.slurm import SlurmClient
from sidecars.slurm.runner import SlurmMetrics
from tests.configsync.harness import cluster_files
from tests.helpers import RecordingEvents
from tests.settings import build

HA_SPEC = {"nodes": 1, "controllers": 2, "slurmctld_timeout_seconds": 5, "conf_per_controller": True}


def ha_spec(**more: Any) -> ClusterSpec:
    return ClusterSpec(**(HA_SPEC | more))


@dataclass
class Pod:
    """One controller pod's config-sync."""

    name: str
    running: Running
    settings: Settings
    registry: CollectorRegistry
    events: RecordingEvents

    @property
    def service(self) -> ConfigSync:
        return self.running.service

    def target_sha(self) -> str:
        entries, _ = read_source(self.settings.target, self.settings.max_file_bytes)
        return FileSet.build(entries).sha256

    def commands(self, command: str) -> float:
        """How many times this pod ran a Slurm command (its client's own count)."""
        total = 0.0
        for result in ("ok", "error", "timeout"):
            got = self.registry.get_sample_value(
                "slurm_sidecars_slurm_commands_total", {"command": command, "result": result}
            )
            total += got or 0.0
        return total


@dataclass
class Pair:
    cluster: DevCluster
    config: AtomicVolume
    secret: AtomicVolume
    base: dict[str, bytes]
    pods: dict[str, Pod] = field(default_factory=dict)
    settings: dict[str, Settings] = field(default_factory=dict)
    checkpoints: dict[str, Callable[[str], None] | None] = field(default_factory=dict)
    # a pod's own validator (e.g. tests.configsync.harness.parser_only, to let a set reach Slurm)
    validators: dict[str, Callable[[SlurmClient, Settings], Validator]] = field(default_factory=dict)
    _stacks: dict[str, contextlib.AsyncExitStack] = field(default_factory=dict)

    def good(self) -> dict[str, bytes]:
        return dict(self.base)

    async def start(self, name: str) -> Pod:
        """Start (or start again, as a pod restarted) controller `name`'s config-sync: a new process
        has new metrics and Events, the same directories and port."""
        assert name not in self._stacks, f"{name}'s config-sync runs already"
        settings = self.settings[name]
        registry = CollectorRegistry()
        client = SlurmClient(env=self.cluster.controller_env(name), metrics=SlurmMetrics(registry))
        events = RecordingEvents()
        async with contextlib.AsyncExitStack() as stack:
            r = await stack.enter_async_context(
                running(
                    settings,
                    client=client,
                    events=events,
                    registry=registry,
                    checkpoint=self.checkpoints[name],
                    validator=self.validators[name](client, settings) if name in self.validators else None,
                )
            )
            self._stacks[name] = stack.pop_all()
        pod = self.pods[name] = Pod(name, r, settings, registry, events)
        return pod

    async def stop(self, name: str) -> None:
        """End controller `name`'s config-sync (its pod lost, or restarting)."""
        await self._stacks.pop(name).aclose()

    async def stop_all(self) -> None:
        for name in list(self._stacks):
            await self.stop(name)

    async def all_hold(self, sha: str, within: float) -> None:
        """Every pod's config-sync reports `sha` as its set, nothing pending (a standby's: staged),
        and has heard every peer say the same."""

        def done(st: dict[str, Any]) -> bool:
            held = st["applied"] and st["applied"]["sha256"] == sha and not st["pending"]
            return bool(held and st["ha"]["in_step"])  # and its peers said they hold it too

        try:
            for pod in self.pods.values():
                await pod.service.wait_until(done, within)
        except TimeoutError:
            raise AssertionError(f"not every pod holds {sha[:12]} after {within}s: {self.said()}") from None

    def said(self) -> str:
        """Every pod's /status, for a failure's message."""
        return "; ".join(f"{n}: {p.service.status()}" for n, p in self.pods.items())

    async def one_set(self, within: float) -> str:
        """Poll until every pod holds the same set at once, none pending, each having heard its
        peers say so, and every target is that set on disk; returns its hash. (One pod alone
        can look settled on the old set for a moment, before its peer moves on.)"""
        deadline = time.monotonic() + within
        while True:
            states = [p.service.status() for p in self.pods.values()]
            shas = {st["applied"]["sha256"] if st["applied"] else None for st in states}
            if (
                len(shas) == 1
                and None not in shas
                and not any(st["pending"] or not st["ha"]["in_step"] for st in states)
            ):
                sha = str(next(iter(shas)))
                if all(p.target_sha() == sha for p in self.pods.values()):
                    return sha
            if time.monotonic() > deadline:
                raise AssertionError(f"never one set after {within}s: {self.said()}")
            await asyncio.sleep(0.1)


def conf_value(files: dict[str, bytes], key: str) -> str:
    for line in reversed(files["slurm.conf"].decode().splitlines()):
        if line.lower().startswith(key.lower() + "="):
            return line.split("=", 1)[1].strip()
    raise KeyError(key)


def with_min_job_age(files: dict[str, bytes], seconds: int) -> dict[str, bytes]:
    """A change a reconfigure takes, that Slurm reports (`MinJobAge`), and that a controller taking
    control reads from its own files (partition fields come back from the saved state instead)."""
    lines = [ln for ln in files["slurm.conf"].decode().splitlines() if not ln.startswith("MinJobAge=")]
    return {**files, "slurm.conf": ("\n".join([*lines, f"MinJobAge={seconds}"]) + "\n").encode()}


def state_fingerprint(state: Path) -> dict[str, tuple[str, int]]:
    """Every file under a StateSaveLocation: its content's hash and its mtime (ns)."""
    out: dict[str, tuple[str, int]] = {}
    for p in sorted(state.rglob("*")):
        if p.is_file() and not p.is_symlink():
            out[str(p.relative_to(state))] = (
                hashlib.sha256(p.read_bytes()).hexdigest(),
                p.stat().st_mtime_ns,
            )
    return out


@contextlib.asynccontextmanager
async def ha_pair(
    cluster: DevCluster,
    *,
    checkpoints: dict[str, Callable[[str], None]] | None = None,
    more_peers: dict[str, tuple[str, ...]] | None = None,
    validators: dict[str, Callable[[SlurmClient, Settings], Validator]] | None = None,
    secrets: dict[str, bytes] | None = None,
    initial: dict[str, bytes] | None = None,
    **overrides: Any,
) -> AsyncIterator[Pair]:
    base = initial or cluster_files(cluster)
    names = [c.name for c in cluster.controllers]
    for name in names:  # key files deployed with the cluster, as each slurmctld found them
        for file, data in (secrets or {}).items():
            path = cluster.conf_dir(name) / file
            path.write_bytes(data)
            path.chmod(0o600)
    config = AtomicVolume(cluster.dir / "vol" / "config")  # one ConfigMap, mounted in every pod
    config.write(base)
    secret = AtomicVolume(cluster.dir / "vol" / "secret", mode=0o600)  # and one Secret
    secret.write(secrets or {})
    pair = Pair(cluster, config, secret, base, validators=dict(validators or {}))
    plugin_dir = await cluster.plugin_dir()
    async with contextlib.AsyncExitStack() as stack:
        # leased, not merely free: each pod must know the others' ports before any binds its own
        lease = stack.enter_context(lease_ports(len(names)))
        ports = dict(zip(names, lease.ports, strict=True))
        for name in names:
            defaults: dict[str, Any] = {
                "sources": (config.path, secret.path),
                "target": cluster.conf_dir(name),
                # each controller reads its own directory as DIR/etc (its pod's /etc/slurm, the same
                # path in every pod), while this pod's config-sync writes it at DIR/<name>/etc
                "target_read_at": cluster.conf_path.parent,
                "state_dir": cluster.dir / f"config-sync-{name}",
                "plugin_dir": plugin_dir,
                "dry_run_slurmctld": tuple(cluster.in_namespace("slurmctld")),
                "http_address": ("127.0.0.1", ports[name]),
                "peers": tuple(f"http://127.0.0.1:{ports[n]}" for n in names if n != name)
                + (more_peers or {}).get(name, ()),
                "controller": name,
                "ha_poll_seconds": 0.2,
            }
            pair.settings[name] = build(Settings, **(defaults | overrides))
            pair.checkpoints[name] = (checkpoints or {}).get(name)
        stack.push_async_callback(pair.stop_all)
        for name in names:
            await pair.start(name)
        yield pair


def takeover_now(cluster: DevCluster) -> None:
    """`scontrol takeover 1` from inside a checkpoint of config-sync's staging (a plain function,
    run between two steps): it blocks the step until Slurm has the request, so the apply goes on
    while control moves."""
    done = subprocess.run(
        ["scontrol", "takeover", "1"], env=cluster.env, timeout=30, capture_output=True, check=False
    )
    assert done.returncode == 0, done.stderr.decode()
