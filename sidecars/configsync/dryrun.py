"""The dry run: the candidate set tried by a throwaway slurmctld of the same release before anything
reaches the live one (the last gate of validation; our own checks stay the fast first one).

The throwaway reads a copy of the candidate in a scratch directory, with a copy of the live
StateSaveLocation (so it loads the current jobs, nodes and reservations), on its own port, log and
pid file. Lines appended to its slurm.conf (Slurm takes the last value of a key) point everything it
could reach elsewhere at a port held closed here: every NodeName gets `NodeAddr=127.0.0.1` and that
port, as do SlurmdPort and slurmdbd; its controller records name only this host, at 127.0.0.1;
scripts it could run (PrologSlurmctld, MailProg, power saving...) become /bin/true and JobCompType
jobcomp/none. With auth/slurm it serves no sack socket (`AuthInfo=...,disable_sack`): it would take
the live controller's, which /run may share. In a network namespace (sidecars/slurm/dryrun.py) it
could reach nothing anyway; without one these rewrites are the isolation.

It passes when it became the primary controller and stayed up a moment; its fatal, in Slurm's words,
is the rejection. What it did to jobs while loading the state ("Invalid partition (p2) for
JobId=7") is read from its log. Its directory is removed on every path, cancellation included.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import shutil
import socket
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import structlog

from sidecars.configsync import conffile
from sidecars.configsync.conffile import SlurmConf
from sidecars.configsync.sources import FileSet
from sidecars.configsync.stage import write_files
from sidecars.slurm.dryrun import (
    ClosedPort,
    Isolation,
    Trial,
    free_port,
    netns_available,
    try_controller,
    uses_slurmdbd,
)
from sidecars.slurm.runner import SlurmMetrics

log = structlog.get_logger(__name__)

IsolationSetting = Literal["auto", "netns", "ports"]

# scripts slurmctld may run while loading the state or soon after (a job it fails runs
# EpilogSlurmctld and mails); in the dry run they do nothing, where the candidate sets them
SCRIPT_KEYS = (
    "PrologSlurmctld",
    "EpilogSlurmctld",
    "ResvProlog",
    "ResvEpilog",
    "SlurmctldPrimaryOnProg",
    "SlurmctldPrimaryOffProg",
    "ResumeProgram",
    "SuspendProgram",
    "ResumeFailProgram",
    "RebootProgram",
)

_JOB_LINE = re.compile(r"JobId=(\d+)")
_JOB_HARM = re.compile(r"\berror\b|invalid|kill|requeue|cancel|vanished|fail", re.IGNORECASE)
_JOB_BENIGN = re.compile(r"^Recovered JobId|Purged files for defunct", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class DryRunResult:
    ok: bool
    reason: str  # slurmctld's own words when it refused
    jobs: dict[int, str]  # job id -> what loading the state did to it (its log line)
    seconds: float
    isolation: Isolation


def job_effects(text: str) -> dict[int, str]:
    """Jobs the throwaway's log says it found invalid, killed or requeued while loading the state."""
    out: dict[int, str] = {}
    for raw in text.splitlines():
        line = raw.split("] ", 1)[-1].removeprefix("slurmctld: ").strip()
        if _JOB_BENIGN.search(line) or not _JOB_HARM.search(line):
            continue
        for m in _JOB_LINE.finditer(line):
            out.setdefault(int(m[1]), line[:200])
    return out


def _quote(value: str) -> str:
    return f'"{value}"' if any(c.isspace() for c in value) else value


def isolate_nodes(text: str, port: int) -> str:
    """Every NodeName record split per node, at 127.0.0.1 and the closed port: whatever the
    throwaway sends a slurmd is refused here (NodeHostname goes too: slurmctld never reaches it)."""
    out: list[str] = []
    for line in text.splitlines():
        head = line.strip()
        if not head.lower().startswith("nodename=") or head.endswith("\\"):
            out.append(line)
            continue
        words = conffile._words(conffile._strip_comment(head))
        name = words[0].split("=", 1)[1]
        if name.upper() == "DEFAULT":
            out.append(line)
            continue
        keep = [
            w for w in words[1:] if w.split("=", 1)[0].lower() not in ("nodeaddr", "nodehostname", "port")
        ]
        kept = " ".join(f"{w.split('=', 1)[0]}={_quote(w.split('=', 1)[1])}" if "=" in w else w for w in keep)
        for node in conffile._expand(name):
            out.append(f"NodeName={node} NodeAddr=127.0.0.1 Port={port} {kept}".rstrip())
    return "\n".join(out) + "\n"


def uses_auth_slurm(conf: SlurmConf) -> bool:
    kinds = f"{conf.options.get('authtype', '')},{conf.options.get('authalttypes', '')}".lower()
    return "auth/slurm" in kinds


# the controller records: slurmctld starts only on a host they name as its own (else "This host (x)
# not a valid controller", exit 1), and a backup they name is one more address it could reach
CONTROLLER_KEYS = ("slurmctldhost", "controlmachine", "controladdr", "backupcontroller", "backupaddr")


def own_controller(text: str) -> str:
    """The controller records taken out (overrides() names this host instead): config-sync need not
    run on a host named SlurmctldHost (Compose gives each container its own hostname; a pod shares
    one, but the dry run must not depend on it), and the throwaway knows no backup to talk to."""
    out: list[str] = []
    for line in text.splitlines():
        head = line.strip()
        if head.startswith("#") or head.endswith("\\") or "=" not in head:
            out.append(line)
            continue
        words = conffile._words(conffile._strip_comment(head))
        keep = [w for w in words if w.split("=", 1)[0].lower() not in CONTROLLER_KEYS]
        if len(keep) == len(words):
            out.append(line)
        elif keep:
            out.append(
                " ".join(
                    f"{w.split('=', 1)[0]}={_quote(w.split('=', 1)[1])}" if "=" in w else w for w in keep
                )
            )
    return "\n".join(out) + "\n"


def overrides(conf: SlurmConf, d: Path, ctld_port: int, dead_port: int, host: str | None = None) -> str:
    lines = [
        "# slurm-sidecars dry run: its own port and files; nothing it can reach",
        *([f"SlurmctldHost={host}(127.0.0.1)"] if host else []),
        f"SlurmctldPort={ctld_port}",
        f"StateSaveLocation={d / 'state'}",
        f"SlurmctldLogFile={d / 'slurmctld.log'}",
        f"SlurmctldPidFile={d / 'slurmctld.pid'}",
        "SlurmctldDebug=info",
        "SlurmctldSyslogDebug=quiet",
        f"SlurmdPort={dead_port}",
        "MailProg=/bin/true",
        "JobCompType=jobcomp/none",
    ]
    if conf.options.get("slurmschedlogfile"):
        lines.append(f"SlurmSchedLogFile={d / 'sched.log'}")
    if uses_slurmdbd(conf.options.get("accountingstoragetype")):
        lines += ["AccountingStorageHost=127.0.0.1", f"AccountingStoragePort={dead_port}"]
        # without its slurmdbd, a controller whose state holds no TRES yet (the live one writes
        # them only at shutdown) dies: "running with a database but ... no TRES from it"
        lines.append("AccountingStorageType=accounting_storage/none")
    if uses_auth_slurm(conf):
        # an auth/slurm slurmctld serves local clients' tokens on /run/slurmctld/sack.socket and
        # unlinks whatever is there first: the throwaway would take the live controller's socket,
        # leaving it dead once killed (scontrol: "failed to connect to any sack sockets")
        info = [w for w in conf.options.get("authinfo", "").split(",") if w]
        lines.append(f"AuthInfo={_quote(','.join([*info, 'disable_sack']))}")
    for key in SCRIPT_KEYS:
        if conf.options.get(key.lower()):
            lines.append(f"{key}=/bin/true")
    return "\n".join(lines) + "\n"


def copy_state(live: Path, dest: Path) -> None:
    """The live StateSaveLocation: its state files (jobs, nodes, reservations, triggers...) copied,
    and the per-job script directories (hash.N/job.M/) mirrored with empty files. slurmctld checks
    at start that each batch job's script is there (a job without one is FAILED: "Script for JobId=N
    lost"), but reads it only to launch the job, which a dry run never does; the scripts are what
    makes a state directory large."""
    dest.mkdir(mode=0o700)
    try:
        st = live.stat()
        entries = list(os.scandir(live))
    except OSError as exc:
        log.warning("dry_run_without_state", state=str(live), error=str(exc))
        return
    made = [dest]
    for e in entries:
        with contextlib.suppress(OSError):  # a file renamed under us by slurmctld: the .old one stays
            if e.is_file(follow_symlinks=False):
                shutil.copy2(e.path, dest / e.name)
                made.append(dest / e.name)
            elif e.is_dir(follow_symlinks=False) and e.name.startswith("hash."):
                for root, _dirs, names in os.walk(e.path):
                    here = dest / os.path.relpath(root, live)
                    here.mkdir(exist_ok=True)
                    made.append(here)
                    for name in names:
                        (here / name).touch()
                        made.append(here / name)
    with contextlib.suppress(OSError):  # slurmctld drops to SlurmUser: the copy must be its
        if os.geteuid() == 0 and (st.st_uid, st.st_gid) != (0, 0):
            for path in made:
                os.chown(path, st.st_uid, st.st_gid)


class DryRunner:
    """Runs the dry runs of one config-sync: the same command, isolation and scratch space each time."""

    def __init__(
        self,
        *,
        command: Sequence[str],
        work_dir: Path,
        target: Path,
        main: str = "slurm.conf",
        isolation: IsolationSetting = "auto",
        stay_seconds: float = 0.2,
        timeout: float = 15.0,
        state_dir: Path | None = None,
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
        self.metrics = metrics
        self._isolation: Isolation | None = None
        self._lock = asyncio.Lock()
        self.recent: deque[float] = deque(maxlen=1000)  # seconds of the latest dry runs (benchmarks)

    @property
    def current_isolation(self) -> Isolation | None:
        """How the dry runs are isolated (None until the first one decided it)."""
        return self._isolation

    async def isolation(self) -> Isolation:
        if self._isolation is None:
            if self.isolation_setting == "auto":
                self._isolation = "netns" if await netns_available(self.metrics) else "ports"
            else:
                self._isolation = self.isolation_setting
            log.info("dry_run_isolation", isolation=self._isolation)
        return self._isolation

    def isolate(self, text: str, dead_port: int) -> str:
        """A file's node records as the dry run sees them (tests turn this off to show it matters)."""
        return isolate_nodes(text, dead_port)

    def controller(self, text: str) -> str:
        """A file's controller records as the dry run sees them (tests turn this off, the control)."""
        return own_controller(text)

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
                    + overrides(conf, d, ctld_port, dead, self.controller_host())
                )
            return text.encode()

        d.mkdir(mode=0o755)
        write_files(etc, files, transform=rewrite, durable=False)
        if live_state is not None:
            copy_state(live_state, d / "state")
        else:
            (d / "state").mkdir(mode=0o700)
        with contextlib.suppress(OSError):
            if live_state is not None:
                st = live_state.stat()
                os.chown(d, st.st_uid, st.st_gid)  # its log and pid file are written as SlurmUser
        return etc / self.main

    async def run(self, files: FileSet, current: SlurmConf | None) -> DryRunResult:
        """Try the candidate; the scratch directory and the process are gone when this returns or raises."""
        async with self._lock:  # one at a time: each holds its own scratch dir and ports
            return await self._run(files, current)

    async def _run(self, files: FileSet, current: SlurmConf | None) -> DryRunResult:
        isolation = await self.isolation()
        candidate = conffile.parse(files, self.main, self.target)
        where = self.state_dir
        if where is None:
            named = (current or candidate).options.get("statesavelocation")
            where = Path(named) if named else None
        d = self.work_dir / f"dryrun-{files.short}-{secrets.token_hex(3)}"
        dead = ClosedPort()
        started = time.monotonic()
        try:
            self.work_dir.mkdir(parents=True, exist_ok=True)
            # in a namespace of its own the live port is free; otherwise one nobody else uses
            ctld_port = int(candidate.options.get("slurmctldport", "6817").split("-")[0] or 6817)
            if isolation == "ports":
                ctld_port = free_port()
            conf_path = await asyncio.to_thread(self._prepare, files, d, where, ctld_port, dead.port)
            trial: Trial = await try_controller(
                [*self.command, "-D", "-f", str(conf_path)],
                log_file=d / "slurmctld.log",
                stderr_file=d / "stderr",
                isolation=isolation,
                stay=self.stay_seconds,
                timeout=self.timeout,
                metrics=self.metrics,
            )
        finally:
            dead.close()
            await asyncio.shield(asyncio.to_thread(shutil.rmtree, d, True))
        seconds = time.monotonic() - started
        self.recent.append(seconds)
        reason = trial.reason.replace(str(d / "etc"), str(self.target))
        log.info(
            "dry_run", sha256=files.short, ok=trial.started, seconds=round(seconds, 3), isolation=isolation
        )
        return DryRunResult(trial.started, reason, job_effects(trial.log), seconds, isolation)
