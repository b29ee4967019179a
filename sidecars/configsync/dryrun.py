"""The dry run: the candidate set tried by a throwaway slurmctld of the same release before anything
reaches the live one (the last gate of validation; our own checks stay the fast first one).

The throwaway reads a copy of the candidate in a scratch directory, with a shadow of the live
StateSaveLocation kept in step (shadow.py: it loads the current jobs, nodes and reservations), on its
own port, log and pid file. Lines appended to its slurm.conf (Slurm takes the last value of a key)
point everything it could reach elsewhere at a port held closed here: every NodeName record gets
127.0.0.1 and that port, as many times as it listed addresses and ports (slurmctld checks the
counts), as do SlurmdPort and slurmdbd; its controller records name only this host, at 127.0.0.1;
scripts it could run (PrologSlurmctld, MailProg, power saving...) become /bin/true and JobCompType
jobcomp/none. With auth/slurm it serves no sack socket (`AuthInfo=...,disable_sack`): it would take
the live controller's, which /run may share. In a network namespace (sidecars/slurm/dryrun.py) it
could reach nothing anyway; without one these rewrites are the isolation. What it rewrites gets its
own proof here: the controller records must still name every host a controller runs on now.

Before it, the two releases are compared: a dry run of another release than the live slurmctld
judges nothing (Slurm says "CLUSTER NAME MISMATCH"), and is reported as that, not as a fault of the
set. It passes when it became the primary controller, answered on its port and stayed up a moment;
its fatal, in Slurm's words, is the rejection. What it did to jobs while loading the state ("Invalid
partition (p2) for JobId=7") is read from its whole log. Its directory is removed on every path,
cancellation included. docs/config-sync-dry-run.md says what a pass proves and what it does not.
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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import structlog

from sidecars.configsync import conffile
from sidecars.configsync.conffile import SlurmConf
from sidecars.configsync.shadow import ShadowState
from sidecars.configsync.sources import FileSet
from sidecars.configsync.stage import write_files
from sidecars.slurm import hostlist
from sidecars.slurm.client import SlurmClient
from sidecars.slurm.dryrun import (
    ClosedPort,
    Isolation,
    Trial,
    free_port,
    netns_available,
    release_of,
    try_controller,
    uses_slurmdbd,
)
from sidecars.slurm.errors import SlurmError
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


def _bare(raw: str) -> str:
    return raw.split("] ", 1)[-1].removeprefix("slurmctld: ").strip()


def job_line(raw: str) -> bool:
    """A log line that says something was done to a job (what the follower keeps of the whole log)."""
    line = _bare(raw)
    return "JobId=" in line and not _JOB_BENIGN.search(line) and bool(_JOB_HARM.search(line))


def job_effects(lines: Iterable[str]) -> dict[int, str]:
    """Jobs the throwaway's log says it found invalid, killed or requeued while loading the state."""
    out: dict[int, str] = {}
    for raw in lines:
        if not job_line(raw):
            continue
        line = _bare(raw)
        for m in _JOB_LINE.finditer(line):
            out.setdefault(int(m[1]), line[:200])
    return out


def _quote(value: str) -> str:
    return f'"{value}"' if any(c.isspace() for c in value) else value


def _closed(value: str, fill: str) -> str:
    """`fill` as many times as `value` lists entries: slurmctld checks that NodeAddr and Port give one
    per node or a single one ("NodeAddr count must equal that of NodeName records", fatal at start
    on every release), so the dry run keeps the count it must test and changes only the values."""
    try:
        count = len(hostlist.expand(value)) if value else 1
    except Exception:  # a malformed list: Slurm's parser says so in its own words
        count = 1
    return ",".join([fill] * max(1, count))


def isolate_nodes(text: str, port: int) -> str:
    """Every NodeName record at 127.0.0.1 and the closed port: whatever the throwaway sends a slurmd
    is refused here. The record keeps its shape (its node list, the number of addresses and ports it
    gives, NodeHostname as written: slurmctld only compares that with what a slurmd reports)."""
    out: list[str] = []
    for line in text.splitlines():
        head = line.strip()
        if not head.lower().startswith("nodename=") or head.endswith("\\"):
            out.append(line)
            continue
        words = conffile._words(conffile._strip_comment(head))
        if words[0].split("=", 1)[1].upper() == "DEFAULT":
            out.append(line)
            continue
        given = {w.split("=", 1)[0].lower(): w.split("=", 1)[1] for w in words[1:] if "=" in w}
        keep = [w for w in words[1:] if w.split("=", 1)[0].lower() not in ("nodeaddr", "port")]
        kept = " ".join(f"{w.split('=', 1)[0]}={_quote(w.split('=', 1)[1])}" if "=" in w else w for w in keep)
        # no NodeAddr: slurmctld takes NodeHostname's list for it, and counts that one
        addr = _closed(given.get("nodeaddr") or given.get("nodehostname", ""), "127.0.0.1")
        ports = _closed(given.get("port", ""), str(port))
        out.append(f"{words[0]} NodeAddr={addr} Port={ports} {kept}".rstrip())
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


def controller_names(files: FileSet, main: str, target: Path) -> list[str]:
    """The hosts the set's controller records name (SlurmctldHost, or the older ControlMachine and
    BackupController), in the main file and what it includes."""
    conf = conffile.parse(files, main, target)
    out: list[str] = []
    for name in [main, *(inc for _, inc, _ in conf.includes if inc)]:
        entry = files.files.get(name)
        if entry is None:
            continue
        for line in entry.data.decode("utf-8", "replace").splitlines():
            for w in line.split("#", 1)[0].split():
                key, _, value = w.partition("=")
                if key.lower() in ("slurmctldhost", "controlmachine", "backupcontroller") and value:
                    out.append(value.split("(", 1)[0].strip())
    return out


def identity_problem(names: Sequence[str], running: Sequence[str]) -> str | None:
    """The dry run names this host its only controller (own_controller), so it never tests the set's
    records: a controller running now on a host they no longer name stops at the reconfigure ("This
    host (...) not a valid controller", every release), and a kubelet restarting it reads the same."""
    # slurmctld compares its host name, short and full, with each record: a record that changes only
    # the domain may still match, which only that host could tell
    short = {n.split(".", 1)[0] for n in names}
    gone = [h for h in running if h.split(".", 1)[0] not in short]
    if not gone:
        return None
    return (
        f"the controller records ({', '.join(names) or 'none'}) no longer name {', '.join(gone)}, where "
        'slurmctld runs now: it would stop with "This host not a valid controller"'
    )


def jobcomp_problem(old: SlurmConf | None, new: SlurmConf) -> str | None:
    """The dry run runs no job completion plugin (JobCompType=jobcomp/none), so it never tests one:
    jobcomp/script's JobCompLoc is the script it runs, and 24.11 and 26.05 die at start when it is
    missing ("Failed to initialize jobcomp plugin"; measured). Checked when it changes, as the other
    paths slurmctld opens are (validate.path_problems, which covers jobcomp/filetxt): a value that
    stays is never checked, so a script only slurmctld's container has keeps working."""

    def opt(conf: SlurmConf | None, key: str) -> str:
        return "" if conf is None else conf.options.get(key, "").strip()

    if not opt(new, "jobcomptype").lower().endswith("/script"):
        return None
    loc = opt(new, "jobcomploc")
    if old is not None and (opt(old, "jobcomptype").lower(), opt(old, "jobcomploc")) == (
        opt(new, "jobcomptype").lower(),
        loc,
    ):
        return None
    if not loc:
        return "JobCompType=jobcomp/script needs JobCompLoc, the script it runs"
    if not (os.path.isfile(loc) and os.access(loc, os.X_OK)):
        return (
            f"JobCompLoc={loc}: no executable file here, where config-sync sees the files (mount it here "
            "too if only slurmctld's container has it); slurmctld would not start (jobcomp/script)"
        )
    return None


def overrides(
    conf: SlurmConf, d: Path, state: Path, ctld_port: int, dead_port: int, host: str | None = None
) -> str:
    lines = [
        "# slurm-sidecars dry run: its own port and files; nothing it can reach",
        *([f"SlurmctldHost={host}(127.0.0.1)"] if host else []),
        f"SlurmctldPort={ctld_port}",
        f"StateSaveLocation={state}",
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
        self.shadow_path = work_dir.parent / f"{work_dir.name}-state"  # kept between runs
        self._shadow: ShadowState | None = None
        self.releases: tuple[str, str] | None = None  # (the dry run's, the live one's), once both known
        self.last_sync_seconds = 0.0  # the latest shadow sync (phases of a dry run, in its log event)
        self.warmed_seconds: float | None = None  # how long warm() took to build the shadow, once done

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
        log.debug(
            "dry_run_state_synced",
            mirrored=stats.mirrored,
            removed=stats.removed,
            files=stats.files,
            seconds=round(stats.seconds, 3),
        )

    def live_state(self, conf: SlurmConf) -> Path | None:
        """The live StateSaveLocation: --dry-run-state-dir, else the one the set names."""
        if self.state_dir is not None:
            return self.state_dir
        named = conf.options.get("statesavelocation")
        return Path(named) if named else None

    async def warm(self, current: SlurmConf) -> None:
        """Build the shadow of the state before a change needs it (its first build costs what every
        dry run once cost: a few seconds at 10,000 jobs)."""
        where = self.live_state(current)
        if where is None:
            return
        async with self._lock:
            started = time.monotonic()
            try:
                state = self.state_path(where, self.work_dir)
                await asyncio.to_thread(self.prepare_state, where, state)
            except OSError as exc:  # the first dry run tries again, and says why if it fails too
                log.warning("dry_run_state_not_ready", state=str(where), error=str(exc))
                return
            self.warmed_seconds = time.monotonic() - started
            log.info("dry_run_state_ready", state=str(where), seconds=round(self.warmed_seconds, 3))

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
        problem = identity_problem(
            controller_names(files, self.main, self.target), await self.running_hosts() if live else []
        )
        candidate = conffile.parse(files, self.main, self.target)
        problem = problem or jobcomp_problem(current, candidate)
        if problem:
            return DryRunResult(False, problem, {}, 0.0, isolation)
        where = self.live_state(current or candidate)
        d = self.work_dir / f"dryrun-{files.short}-{secrets.token_hex(3)}"
        dead = ClosedPort()
        started = time.monotonic()
        prepared = ended = started
        self.last_sync_seconds = 0.0
        try:
            self.work_dir.mkdir(parents=True, exist_ok=True)
            # in a namespace of its own the live port is free; otherwise one nobody else uses
            ctld_port = int(candidate.options.get("slurmctldport", "6817").split("-")[0] or 6817)
            if isolation == "ports":
                ctld_port = free_port()
            conf_path = await asyncio.to_thread(self._prepare, files, d, where, ctld_port, dead.port)
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
