"""The dry run: the candidate set tried by a throwaway slurmctld of the same release before anything
reaches the live one (the last gate of validation; our own checks stay the fast first one).

The throwaway reads a copy of the candidate in a scratch directory, rewritten so that it reaches
nothing (sandbox.py), with a shadow of the live StateSaveLocation kept in step (shadow.py: it loads
the current jobs, nodes and reservations), on its own port, log and pid file. In a network namespace
(sidecars/slurm/throwaway.py) it could reach nothing anyway; without one the rewrites are the
isolation. What it rewrites gets its own proof first (rewrite_checks.py).

Before it, the two releases are compared: a dry run of another release than the live slurmctld
judges nothing (Slurm says "CLUSTER NAME MISMATCH"), and is reported as that, not as a fault of the
set. It passes when it became the primary controller and answered on its port; its fatal, in Slurm's
words, is the rejection. What it did to jobs while loading the state is read from its whole log
(joblog.py). Its directory is removed on every path, cancellation included.
docs/config-sync-dry-run.md says what a pass proves and what it does not.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import socket
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from sidecars.configsync.dryrun.joblog import job_effects, job_line
from sidecars.configsync.dryrun.rewrite_checks import (
    controller_names,
    identity_problem,
    jobcomp_problem,
    node_record_problems,
    relative_path_problems,
)
from sidecars.configsync.dryrun.sandbox import isolate_nodes, overrides, own_controller
from sidecars.configsync.dryrun.shadow import ShadowState, SyncStats
from sidecars.configsync.fileset import conffile
from sidecars.configsync.fileset.conffile import SlurmConf
from sidecars.configsync.fileset.sources import FileSet
from sidecars.configsync.fileset.stage import write_files
from sidecars.protocol.configsync import ISOLATION_AUTO, Isolation
from sidecars.runtime import offloop
from sidecars.runtime.waits import until_set
from sidecars.slurm.client import SlurmClient
from sidecars.slurm.errors import SlurmError
from sidecars.slurm.runner import SlurmMetrics
from sidecars.slurm.throwaway import (
    ClosedPort,
    Trial,
    free_port,
    netns_available,
    release_of,
    try_controller,
)

if TYPE_CHECKING:
    from sidecars.configsync.settings import Settings

log = structlog.get_logger(__name__)

# ports isolation: the throwaway's port is one free when chosen; another process may bind it before
# slurmctld does (slurmctld's words, then), and the dry run tries again on another, this many times
PORT_TAKEN = "Address already in use"
PORT_ATTEMPTS = 3

IsolationSetting = str  # ISOLATION_AUTO or an Isolation: checked by the flag (ISOLATION_SETTINGS)


@dataclass(frozen=True, slots=True)
class DryRunResult:
    ok: bool
    reason: str  # slurmctld's own words when it refused
    jobs: dict[int, str]  # job id -> what loading the state did to it (its log line)
    seconds: float
    isolation: Isolation
    # not tried: the dry run's slurmctld is another release than the live one (the reason says
    # which); the refusal is then no judgement of the set
    release_mismatch: bool = False
    # where its time went, in ms (None: not reached): the shadow's sync, the rest of the files, spawn
    # to primary and to answering on its port, to the verdict, killing it, removing its directory
    phases: dict[str, int | None] = field(default_factory=dict)


def release_line(version: str) -> str:
    """ "24.11.5" -> "24.11": releases of one line read each other's state and files."""
    return ".".join(version.split(".")[:2])


def mismatch_reason(dry: str, live: str) -> str:
    return (
        f"the dry run's slurmctld is Slurm {dry} and the live slurmctld is Slurm {live}: it cannot "
        "judge this cluster's files or state (the config-sync image must carry the slurmctld "
        "image's release); no set is applied until they match, and none was judged"
    )


class DryRunner:
    """Runs the dry runs of one config-sync: the same command, isolation and scratch space each time."""

    def __init__(
        self,
        *,
        command: Sequence[str],
        work_dir: Path,
        target: Path,
        main: str = "slurm.conf",
        isolation: IsolationSetting = ISOLATION_AUTO,
        stay_seconds: float = 0.0,
        timeout: float = 15.0,
        state_dir: Path | None = None,
        client: SlurmClient | None = None,
        metrics: SlurmMetrics | None = None,
    ) -> None:
        self.command = tuple(command)
        self.work_dir = work_dir
        self.target = target
        self.main = main
        self.isolation_setting = isolation
        self.stay_seconds = stay_seconds
        self.timeout = timeout
        self.state_dir = state_dir  # None: the StateSaveLocation the applied set names
        self.client = client  # the live controller, asked its release (None: not compared)
        self.metrics = metrics
        self._isolation: Isolation | None = None
        self._lock = asyncio.Lock()
        self.recent: deque[float] = deque(maxlen=1000)  # seconds of the latest dry runs (benchmarks)
        self.recent_phases: deque[dict[str, int | None]] = deque(maxlen=1000)  # and where they went
        self.shadow_path = work_dir.parent / f"{work_dir.name}-state"  # kept between runs
        self._shadow: ShadowState | None = None
        self.releases: tuple[str, str] | None = None  # (the dry run's, the live one's), once both known
        self.last_sync_seconds = 0.0  # the latest shadow sync (phases of a dry run, in its log event)
        self.last_sync: SyncStats | None = None  # and what it did
        self.warmed_seconds: float | None = None  # how long warm() took to build the shadow, once done

    @classmethod
    def from_settings(cls, settings: Settings, client: SlurmClient) -> DryRunner:
        return cls(
            command=settings.dry_run_slurmctld,
            work_dir=settings.state_dir / "dry-run",
            target=settings.conf_dir,
            main=settings.main_file,
            isolation=settings.dry_run_isolation,
            stay_seconds=settings.dry_run_stay_seconds,
            timeout=settings.dry_run_timeout_seconds,
            state_dir=settings.dry_run_state_dir,
            client=client,
            metrics=client.metrics,
        )

    @property
    def shadow(self) -> ShadowState | None:
        """The shadow of the live state the dry runs load (None until the first sync)."""
        return self._shadow

    @property
    def current_isolation(self) -> Isolation | None:
        """How the dry runs are isolated (None until the first one decided it)."""
        return self._isolation

    async def isolation(self) -> Isolation:
        if self._isolation is None:
            if self.isolation_setting == ISOLATION_AUTO:
                self._isolation = Isolation.NETNS if await netns_available(self.metrics) else Isolation.PORTS
            else:
                self._isolation = Isolation(self.isolation_setting)
            log.info("dry_run_isolation", isolation=self._isolation)
        return self._isolation

    @property
    def release_mismatch(self) -> str | None:
        """Why no dry run can judge a set here (another release than the live one), else None."""
        if self.releases is None or release_line(self.releases[0]) == release_line(self.releases[1]):
            return None
        return mismatch_reason(*self.releases)

    async def compare_releases(self) -> str | None:
        """Ask both releases (once both answered; again later while the live one does not): at start,
        so that a mismatch is reported before any change waits on it, and before each dry run."""
        if self.releases is not None or self.client is None:
            return self.release_mismatch
        try:
            dry = await release_of(self.command, self.metrics)
            live = (await self.client.show_config()).get("SLURM_VERSION", "")
        except SlurmError as exc:
            log.warning("dry_run_release_unknown", error=str(exc))
            return None
        if not live:
            return None
        self.releases = (dry, live)
        why = self.release_mismatch
        if why:
            log.error("dry_run_release_mismatch", dry_run=dry, live=live)
        else:
            log.info("dry_run_release", release=dry, live=live)
        return why

    async def running_hosts(self) -> list[str]:
        """The hosts whose controller answers now, by the names the applied set gives them."""
        if self.client is None:
            return []
        try:
            ping = await self.client.ping()
        except (SlurmError, OSError) as exc:
            log.warning("controller_hosts_unknown", error=str(exc))
            return []  # nothing to compare with: the dry run alone judges
        return sorted({name.split(":", 1)[1] for name, up in ping.controllers.items() if up})

    def isolate(self, text: str, dead_port: int) -> str:
        """A file's node records as the dry run sees them (tests turn this off to show it matters)."""
        return isolate_nodes(text, dead_port)

    def controller(self, text: str) -> str:
        """A file's controller records as the dry run sees them (tests turn this off, the control)."""
        return own_controller(text)

    def record_problem(self, candidate: SlurmConf, current: SlurmConf | None = None) -> str | None:
        """Slurm's checks of the node records' addresses and ports, which the throwaway's rewritten
        records never meet (rewrite_checks.node_record_problems), and what neither it nor config-sync
        can test (named, and the set not applied); tests turn this off, the control."""
        found = node_record_problems(candidate)
        if found.fatal:
            return "; ".join(found.fatal)
        untestable = [*found.untestable, *relative_path_problems(current, candidate)]
        if untestable:
            return (
                "held, not applied: the dry run cannot test what it rewrites here, and config-sync cannot "
                "check it as Slurm does: " + "; ".join(untestable)
            )
        return None

    def controller_host(self) -> str | None:
        """The one controller the throwaway is told of: this host (the name slurmctld checks)."""
        return socket.gethostname()

    def _prepare(self, files: FileSet, d: Path, live_state: Path | None, ctld_port: int, dead: int) -> Path:
        etc = d / "etc"
        prefix = str(self.target).rstrip("/") + "/"
        conf = conffile.parse(files, self.main, self.target)
        included = {inc for _, inc, _ in conf.includes if inc}

        def rewrite(name: str, data: bytes) -> bytes:
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                return data  # key material: copied as it is
            text = text.replace(prefix, str(etc) + "/")  # includes, plugstack, keys: the copies
            if name == self.main or name in included:
                text = self.isolate(self.controller(text), dead)
            if name == self.main:
                text = (
                    text
                    + ("" if text.endswith("\n") else "\n")
                    + overrides(conf, d, state, ctld_port, dead, self.controller_host())
                )
            return text.encode()

        state = self.state_path(live_state, d)
        d.mkdir(mode=0o755)
        write_files(etc, files, transform=rewrite, durable=False)
        self.prepare_state(live_state, state)
        with contextlib.suppress(OSError):
            if live_state is not None:
                st = live_state.stat()
                os.chown(d, st.st_uid, st.st_gid)  # its log and pid file are written as SlurmUser
        return etc / self.main

    def state_path(self, live_state: Path | None, d: Path) -> Path:
        """Where the throwaway keeps its state: the shadow of the live one, or an empty one in `d`."""
        if live_state is None:
            return d / "state"
        if self._shadow is None or self._shadow.live != live_state:
            if self._shadow is not None:
                self._shadow.reset()
            self._shadow = ShadowState(live_state, self.shadow_path)
        return self._shadow.path

    def prepare_state(self, live_state: Path | None, state: Path) -> None:
        """The throwaway's state made ready: the shadow brought in step (the benchmark's baseline
        replaces this with the copy every dry run once made)."""
        if live_state is None or self._shadow is None:
            state.mkdir(mode=0o700)
            return
        stats = self._shadow.sync()
        self.last_sync_seconds = stats.seconds
        self.last_sync = stats
        log.debug(
            "dry_run_state_synced",
            mirrored=stats.mirrored,
            removed=stats.removed,
            files=stats.files,
            listed=stats.listed,
            seconds=round(stats.seconds, 3),
        )

    def live_state(self, conf: SlurmConf) -> Path | None:
        """The live StateSaveLocation: --dry-run-state-dir, else the one the set names."""
        if self.state_dir is not None:
            return self.state_dir
        named = conf.options.get("statesavelocation")
        return Path(named) if named else None

    async def warm(self, current: SlurmConf) -> bool:
        """Bring the shadow of the state in step now, before a change needs it: its first build costs
        what every dry run once cost (seconds at 10,000 jobs), a later one what changed since. Under
        the dry runs' lock, so a dry run waits for it and never loads a shadow half brought in step
        (and its own sync, next, finds nothing left to do). False when it could not (said why)."""
        where = self.live_state(current)
        if where is None:
            return False
        async with self._lock:
            started = time.monotonic()
            try:
                state = self.state_path(where, self.work_dir)
                await offloop.whole(self.prepare_state, where, state)
            except OSError as exc:  # the next sync (or the dry run's own) tries again
                log.warning("dry_run_state_not_ready", state=str(where), error=str(exc))
                return False
            if self.warmed_seconds is None:
                self.warmed_seconds = time.monotonic() - started
                log.info("dry_run_state_ready", state=str(where), seconds=round(self.warmed_seconds, 3))
            return True

    async def keep_state(
        self, current: Callable[[], FileSet | None], stop: asyncio.Event, every_seconds: float
    ) -> None:
        """The shadow built at start and kept in step in the background, off every change's path:
        each dry run then only syncs what changed since the last of these (a state file the live
        slurmctld saved meanwhile), not the whole state (seconds at 10,000 jobs). `current`: the
        applied set, whose StateSaveLocation is the live one. A change that arrives during a sync
        waits for it (the lock): it is never judged on a shadow half brought in step."""
        parsed: tuple[str, SlurmConf] | None = None  # the applied set's, parsed once per set
        while not stop.is_set():
            files = current()
            try:
                if files is not None:
                    if parsed is None or parsed[0] != files.sha256:
                        size = sum(e.size for e in files.files.values())
                        conf = await offloop.sized(size, conffile.parse, files, self.main, self.target)
                        parsed = (files.sha256, conf)
                    await self.warm(parsed[1])
            except Exception as exc:  # one bad sync must not end the task; the dry run syncs anyway
                log.error("dry_run_state_sync_failed", error=str(exc), exc_info=True)
            if every_seconds <= 0 and self.warmed_seconds is not None:
                await stop.wait()  # built: the dry runs keep it in step themselves (a root task
                return  # that returns is a failure)
            await until_set(stop, every_seconds if every_seconds > 0 else 1.0)

    async def run(self, files: FileSet, current: SlurmConf | None) -> DryRunResult:
        """Try the candidate; the scratch directory and the process are gone when this returns or raises."""
        async with self._lock:  # one at a time: each holds its own scratch dir and ports
            return await self._run(files, current)

    async def _run(self, files: FileSet, current: SlurmConf | None) -> DryRunResult:
        isolation = await self.isolation()
        # before the first set no controller runs on these files (slurmctld starts after it), and a
        # client asked now waits out its own config retries: nothing live to compare with
        live = current is not None
        mismatch = await self.compare_releases() if live else None
        if mismatch:
            return DryRunResult(False, mismatch, {}, 0.0, isolation, release_mismatch=True)
        # both read the whole set: off the loop for a large one (runtime.offloop)
        names, candidate = await offloop.sized(
            sum(e.size for e in files.files.values()),
            lambda: (
                controller_names(files, self.main, self.target),
                conffile.parse(files, self.main, self.target),
            ),
        )
        problem = identity_problem(names, await self.running_hosts() if live else [])
        problem = problem or jobcomp_problem(current, candidate) or self.record_problem(candidate, current)
        if problem:
            return DryRunResult(False, problem, {}, 0.0, isolation)
        where = self.live_state(current or candidate)
        attempts = PORT_ATTEMPTS if isolation == Isolation.PORTS else 1
        while True:
            result = await self._trial(files, candidate, where, isolation)
            attempts -= 1
            # a port taken between its choice and slurmctld's bind is no verdict on the set
            if not attempts or PORT_TAKEN not in result.reason:
                return result
            log.warning("dry_run_port_taken", sha256=files.short, attempts_left=attempts)

    async def _trial(
        self, files: FileSet, candidate: SlurmConf, where: Path | None, isolation: Isolation
    ) -> DryRunResult:
        """One throwaway slurmctld on the candidate, in a scratch directory of its own."""
        d = self.work_dir / f"dryrun-{files.short}-{secrets.token_hex(3)}"
        dead = ClosedPort()
        started = time.monotonic()
        prepared = ended = started
        self.last_sync_seconds = 0.0
        try:
            self.work_dir.mkdir(parents=True, exist_ok=True)
            # in a namespace of its own the live port is free; otherwise one nobody else uses
            # (the candidate's own value is judged by Slurm's client parse, not here: a value that is
            # no port gives the default)
            given = candidate.options.get("slurmctldport", "").split("-")[0]
            ctld_port = int(given) if given.isdigit() and 0 < int(given) <= 0xFFFF else 6817
            if isolation == Isolation.PORTS:
                ctld_port = free_port()
            conf_path = await offloop.whole(self._prepare, files, d, where, ctld_port, dead.port)
            prepared = time.monotonic()
            trial: Trial = await try_controller(
                [*self.command, "-D", "-f", str(conf_path)],
                log_file=d / "slurmctld.log",
                stderr_file=d / "stderr",
                isolation=isolation,
                port=ctld_port,
                stay=self.stay_seconds,
                timeout=self.timeout,
                keep=job_line,
                metrics=self.metrics,
            )
            ended = time.monotonic()
        finally:
            dead.close()
            await asyncio.shield(asyncio.to_thread(shutil.rmtree, d, True))
        seconds = time.monotonic() - started
        self.recent.append(seconds)
        reason = trial.reason.replace(str(d / "etc"), str(self.target))

        def ms(value: float | None) -> int | None:
            return None if value is None else round(value * 1000)

        phases = {
            "sync_ms": ms(self.last_sync_seconds),
            "files_ms": ms(prepared - started - self.last_sync_seconds),
            "primary_ms": ms(trial.primary_seconds),
            "answering_ms": ms(trial.answering_seconds),
            "verdict_ms": ms(trial.seconds),
            "kill_ms": ms(ended - prepared - trial.seconds),
            "cleanup_ms": ms(started + seconds - ended),
        }
        self.recent_phases.append(phases)
        log.info(
            "dry_run",
            sha256=files.short,
            ok=trial.started,
            seconds=round(seconds, 3),
            isolation=isolation,
            **phases,
        )
        effects = job_effects(trial.kept)
        return DryRunResult(trial.started, reason, effects, seconds, isolation, phases=phases)
