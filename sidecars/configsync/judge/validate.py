"""Validation before anything reaches slurmctld.

(a) Slurm's own parser: a Slurm client started with SLURM_CONF at the staged candidate parses the
    whole file (and its includes) before it does anything else; `scontrol --version` is the cheapest
    such command (it sends nothing) and prints the parse error in Slurm's words.
(b) What the client parse accepts but kills slurmctld (measured on 22.05): partitions or nodesets
    naming unknown nodes, duplicate nodes; and what we refuse to manage: includes that are missing or
    point outside the set, files that are not text or too large, key files that disappeared.
(c) Changes that need a restart rather than a reconfigure (restart.py), and those no restart can
    take (a new ClusterName).
(d) Plugin names with no plugin file where slurmctld loads them from (a misspelt one kills it).
(d') What the workers' registration would refuse (GRES against gres.conf, NodeSet features against
    the fleet): predict.py. What cannot be predicted is judged after the swap (harm.py).
(e) Last, the dry run (dryrun/runner.py): a throwaway slurmctld of the same release started on the candidate
    and a copy of the live state. Hand-written checks trail Slurm's own; this one is Slurm's own. With
    it, what the change does to pending and running jobs (jobs.py).
"""

from __future__ import annotations

import asyncio
import shutil
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from sidecars.configsync.dryrun.runner import DryRunner, DryRunResult
from sidecars.configsync.dryrun.slurmctld_opens import path_problems, plugin_problems
from sidecars.configsync.fileset import conffile, dbdconf
from sidecars.configsync.fileset.conffile import SlurmConf
from sidecars.configsync.fileset.sources import FileSet
from sidecars.configsync.fileset.stage import write_files
from sidecars.configsync.judge import jobs, predict, restart
from sidecars.configsync.judge.auxfiles import aux_problems
from sidecars.configsync.judge.plugintrust import plugin_dir_problems
from sidecars.configsync.judge.restart import RestartReason
from sidecars.runtime import offloop
from sidecars.runtime.waits import all_of
from sidecars.slurm import SlurmClient, SlurmError
from sidecars.slurm.models import JobPlacement, Version

if TYPE_CHECKING:
    from sidecars.configsync.settings import Settings

log = structlog.get_logger(__name__)

MAX_REASON = 2000
# Node features a set may name (distinct, over every NodeName line; and on one line, repeats
# counted). slurmctld keeps its features in a list searched once per feature of each node line as it
# starts and reconfigures, so its time grows with the square of their number: measured on 22.05 (a
# throwaway slurmctld, one node line): 4,000 features 0.5 s, 16,000 4 s, 32,000 past the dry run's
# 15 s; 24.11 past 15 s at 64,000. Real fleets name tens; past this the set is refused before any
# Slurm program runs on it, rather than judged by a dry run that times out (docs/limits.md).
MAX_FEATURES = 4096


@dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool
    reason: str = ""  # why not, in Slurm's words when Slurm gave any
    restart: tuple[RestartReason, ...] = ()
    conf: SlurmConf | None = field(default=None, compare=False)
    jobs: dict[int, str] = field(default_factory=dict)  # job id -> what the change would do to it
    dry_run: DryRunResult | None = field(default=None, compare=False)

    @property
    def restart_required(self) -> bool:
        return self.ok and bool(self.restart)


def _reject(reason: str) -> Verdict:
    return Verdict(False, reason[:MAX_REASON])


def file_problems(files: FileSet, current: FileSet | None, main: str, max_bytes: int) -> list[str]:
    problems = list(files.problems)
    if main not in files.files:
        problems.append(f"{main} is missing from the set")
    elif not files.files[main].data.strip():
        problems.append(f"{main} is empty")
    for e in files.files.values():
        if e.size > max_bytes:
            problems.append(f"{e.name} is {e.size} bytes, over the {max_bytes}-byte limit")
            continue
        if e.secret:
            continue  # key material may be binary
        if b"\0" in e.data:
            problems.append(f"{e.name} is not text (it holds NUL bytes)")
            continue
        try:
            e.data.decode("utf-8")
        except UnicodeDecodeError as exc:
            problems.append(f"{e.name} is not UTF-8 text (byte {exc.start})")
    dbd = files.files.get(dbdconf.CONF_NAME)
    if dbd is not None and dbd.size <= max_bytes:
        problems += dbdconf.check(dbd.data, dbd.mode)
    if current is not None:
        for name, e in current.files.items():
            if e.secret and name not in files.files:
                problems.append(f"key file {name} was removed from the set")
    return problems


def semantic_problems(conf: SlurmConf) -> list[str]:
    """What slurmctld dies of although the client parse accepts it."""
    problems = list(conf.problems)
    nodes = conf.node_names()
    for name, count in sorted(Counter(nodes).items()):
        if count > 1:
            problems.append(f"node {name} is defined {count} times")
    for kind, label in (("partitionname", "partition"), ("nodeset", "NodeSet")):
        names = [r.name for r in conf.of(kind) if r.name.upper() != "DEFAULT"]
        for name, count in sorted(Counter(names).items()):
            if count > 1:  # 22.05's slurmctld dies of a duplicate partition on reconfigure (measured)
                problems.append(f"{label} {name} is defined {count} times")
    gres_types = {g.strip().lower() for g in (conf.options.get("grestypes") or "").split(",") if g.strip()}
    for r in conf.of("nodename"):
        for item in (r.fields.get("gres") or "").split(","):
            name = item.split(":", 1)[0].strip().lower()
            if name and name != "(null)" and name not in gres_types:
                problems.append(f"{r.origin}: node {r.name} has GRES {name!r}, which GresTypes does not name")
    problems += feature_problems(conf)
    known = set(nodes)
    nodesets = {r.name for r in conf.of("nodeset")}
    for r in conf.of("nodeset"):
        expr = r.fields.get("nodes", "")
        if expr and expr.upper() != "ALL":
            unknown = [n for n in conffile.expand(expr) if n not in known]
            if unknown:
                problems.append(f"{r.origin}: NodeSet {r.name} names unknown node(s) {','.join(unknown)}")
    for r in conf.of("partitionname"):
        expr = r.fields.get("nodes", "")
        if not expr:
            continue
        unknown = [n for n in conffile.expand(expr) if n.upper() != "ALL" and n not in known | nodesets]
        if unknown:
            problems.append(f"{r.origin}: partition {r.name} names unknown node(s) {','.join(unknown)}")
    return problems


def feature_problems(conf: SlurmConf) -> list[str]:
    """Node features past `MAX_FEATURES`: what slurmctld takes too long to start on (see there)."""
    distinct: set[str] = set()
    for r in conf.of("nodename"):
        items = [f for f in (r.fields.get("feature") or r.fields.get("features") or "").split(",") if f]
        if len(items) > MAX_FEATURES:
            return [
                f"{r.origin}: node {r.name[:64]} lists {len(items)} features, over the cap of "
                f"{MAX_FEATURES}: slurmctld's start and reconfigure time grow with the square of the "
                "features it reads (not tried by Slurm; docs/limits.md)"
            ]
        distinct.update(items)  # Slurm compares features as written
    if len(distinct) > MAX_FEATURES:
        return [
            f"the node lines name {len(distinct)} distinct features, over the cap of {MAX_FEATURES}: "
            "slurmctld's start and reconfigure time grow with the square of the features it reads "
            "(not tried by Slurm; docs/limits.md)"
        ]
    return []


def identity_problems(old: SlurmConf, new: SlurmConf) -> list[str]:
    """Changes neither a reconfigure nor a restart can take. slurmctld keeps its ClusterName in
    StateSaveLocation and refuses to start under another one (measured, 22.05 and 24.11: `fatal:
    CLUSTER NAME MISMATCH`); 22.05 even takes the new name on reconfigure, and dies at its next start."""
    a, b = old.options.get("clustername"), new.options.get("clustername")
    if (a or "").strip().lower() == (b or "").strip().lower():
        return []
    return [
        f"ClusterName changed ({a!r} -> {b!r}): slurmctld refuses to start on the state saved "
        "under the old name (fatal: CLUSTER NAME MISMATCH)"
    ]


def _rules(
    files: FileSet,
    current: FileSet | None,
    old: SlurmConf | None,
    conf: SlurmConf,
    version: Version,
    dirs: list[Path],
) -> Verdict | list[RestartReason]:
    """What no reconfigure or restart can take, the restarts the change needs, and the plugins and
    paths slurmctld would open: CPU-bound over both sets (a reject, or the restart reasons)."""
    reasons: list[RestartReason] = []
    if current is not None and old is not None:
        problems = identity_problems(old, conf)
        if problems:
            return _reject("; ".join(problems))
        reasons = restart.classify(old, conf, current, files, version)
    problems = (plugin_problems(old, conf, dirs) if dirs else []) + path_problems(old, conf)
    if problems:
        return _reject("; ".join(problems))
    return reasons


def candidate_copy(files: FileSet, where: Path, target: Path) -> None:
    """The set written to `where` for the client parse, with includes of the target pointed at the copy."""
    prefix = str(target).rstrip("/") + "/"

    def rewrite(name: str, data: bytes) -> bytes:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return data
        out = []
        for line in text.splitlines(keepends=True):
            if line.lstrip().lower().startswith("include") and prefix in line:
                out.append(line.replace(prefix, str(where).rstrip("/") + "/"))
            else:
                out.append(line)
        return "".join(out).encode()

    write_files(where, files, transform=rewrite, durable=False)


class Judge(Protocol):
    """What the daemon asks of a set's judge: slurmctld's (Validator) or slurmdbd's
    (slurmdbd/check.py), each a class of its own."""

    dry_runner: DryRunner | None  # slurmctld's throwaway, shown in /status; None: no dry run

    async def validate(self, files: FileSet, current: FileSet | None) -> Verdict: ...


class Validator:
    def __init__(
        self,
        client: SlurmClient,
        target: Path,
        work_dir: Path,
        *,
        main: str = "slurm.conf",
        max_bytes: int = 1024 * 1024,
        parse_timeout: float = 10.0,
        plugin_dir: Path | None = None,
        dry_runner: DryRunner | None = None,
        sources: Sequence[Path] = (),
    ) -> None:
        self.client = client
        self.target = target
        self.sources = tuple(sources)  # what the config's volumes fill: never a PluginDir
        self.work_dir = work_dir
        self.main = main
        self.max_bytes = max_bytes
        self.parse_timeout = parse_timeout
        self.plugin_dir = plugin_dir  # None: slurmctld's PluginDir, asked once
        self._plugin_dirs: list[Path] | None = None
        self.dry_runner = dry_runner
        self.predict = True  # what the workers' registration would say, judged before the swap (predict.py)

    @classmethod
    def from_settings(cls, settings: Settings, client: SlurmClient) -> Validator:
        return cls(
            client,
            settings.conf_dir,
            settings.state_dir,
            main=settings.main_file,
            max_bytes=settings.max_file_bytes,
            parse_timeout=settings.parse_timeout_seconds,
            plugin_dir=settings.plugin_dir,
            dry_runner=DryRunner.from_settings(settings, client) if settings.dry_run else None,
            sources=settings.sources,
        )

    async def plugin_dirs(self) -> list[Path]:
        """Where slurmctld's plugins are, as seen from here; [] when that cannot be known here
        (the check is then skipped and said so, rather than refusing every change)."""
        if self._plugin_dirs is not None:
            return self._plugin_dirs
        if self.plugin_dir is not None:
            dirs = [self.plugin_dir]
        else:
            try:
                reported = (await self.client.show_config()).get("PluginDir", "")
            except SlurmError as exc:
                log.warning("plugin_dir_unknown", error=str(exc))
                return []  # asked again at the next change
            dirs = [Path(d) for d in reported.split(":") if d]
        found = [d for d in dirs if d.is_dir()]
        if not found:
            log.warning("plugin_names_not_checked", plugin_dirs=[str(d) for d in dirs], why="not found here")
        self._plugin_dirs = found
        return found

    async def client_parse(self, files: FileSet) -> tuple[str | None, Version | None]:
        """Slurm's own parse of the candidate: (its message when it refuses, the client's release)."""
        where = self.work_dir / f"candidate-{files.short}"

        def fresh_copy() -> None:
            shutil.rmtree(where, ignore_errors=True)
            candidate_copy(files, where, self.target)

        # a MiB set's copy (its lines rewritten, written) and its removal: in a thread, like its read
        await offloop.whole(fresh_copy)
        try:
            client = self.client.with_env(SLURM_CONF=str(where / self.main))
            return None, await client.parse_config(timeout=self.parse_timeout)
        except SlurmError as exc:
            # Slurm names the file it read: say the target's name, not our scratch copy's
            text = exc.message.replace(str(where), str(self.target))
            return text or f"Slurm's parser failed ({exc})", None
        finally:
            await offloop.whole(shutil.rmtree, where, ignore_errors=True)

    def _read(self, files: FileSet, current: FileSet | None) -> Verdict | tuple[SlurmConf, SlurmConf | None]:
        """Our checks of the text, and both sets parsed: CPU-bound, linear in the sets' size."""
        problems = file_problems(files, current, self.main, self.max_bytes)
        if problems:
            return _reject("; ".join(problems))
        conf = conffile.parse(files, self.main, self.target)
        filled = {*self.sources, *(e.source for e in files.files.values()), self.target}
        problems = semantic_problems(conf) + aux_problems(files, conf) + plugin_dir_problems(conf, filled)
        if problems:
            return _reject("; ".join(problems))
        return conf, conffile.parse(current, self.main, self.target) if current is not None else None

    async def validate(self, files: FileSet, current: FileSet | None) -> Verdict:
        size = sum(e.size for s in (files, current) if s is not None for e in s.files.values())
        read = await offloop.sized(size, self._read, files, current)  # a 1 MiB set takes ~0.5 s
        if isinstance(read, Verdict):
            return read
        conf, old = read
        # the dry run (and the live jobs' read) go on while the quicker checks run; a refusal by
        # one of those, in its plainer words, cancels them
        tasks: list[asyncio.Task[Any]] = []
        if self.dry_runner is not None:
            tasks.append(asyncio.create_task(self.dry_runner.run(files, old)))
            if old is not None:
                pending = jobs.pending_at_risk(old, conf)
                tasks.append(asyncio.create_task(self._placements(set(old.node_names()), pending=pending)))
        try:
            return await self._judge(files, current, old, conf, tasks)
        finally:
            for t in tasks:
                if not t.done():
                    t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _judge(
        self,
        files: FileSet,
        current: FileSet | None,
        old: SlurmConf | None,
        conf: SlurmConf,
        tasks: list[asyncio.Task[Any]],
    ) -> Verdict:
        refused, version = await self.client_parse(files)
        if refused or version is None:
            return _reject(refused or "Slurm's parser gave no version")
        dirs = await self.plugin_dirs()
        size = sum(e.size for s in (files, current) if s is not None for e in s.files.values())
        rules = await offloop.sized(size, _rules, files, current, old, conf, version, dirs)
        if isinstance(rules, Verdict):
            return rules
        reasons = rules
        predicted: list[str] = []
        if self.predict and old is not None and current is not None:
            # what the workers' registration would refuse, said before the swap (predict.py)
            predicted = await predict.problems(self.client, old, conf, current, files)
        foreseen = _reject("the workers would refuse it: " + "; ".join(predicted)) if predicted else None
        if not tasks:
            return foreseen or Verdict(True, "", tuple(reasons), conf)
        verdict = await self._after_dry_run(old, conf, version, reasons, tasks)
        if foreseen is not None and not (verdict.ok and verdict.jobs):
            return foreseen
        # a set that would also end or requeue jobs is held for them, as every such set is: the
        # operator who forces it past them forces it past this too (the live judge still watches)
        return verdict

    async def _after_dry_run(
        self,
        old: SlurmConf | None,
        conf: SlurmConf,
        version: Version,
        reasons: list[RestartReason],
        tasks: list[asyncio.Task[Any]],
    ) -> Verdict:
        result: DryRunResult = await tasks[0]
        placed, resv, dynamic = await tasks[1] if len(tasks) > 1 else ([], {}, {})
        if result.ok and old is not None and set(result.jobs) - {p.job_id for p in placed}:
            # the dry run names jobs the read of the running ones did not hold: which of them are
            # still queued is read now, all of it (a change that hurts jobs, not every change)
            placed, resv, dynamic = await self._placements(set(old.node_names()), pending=True)
        return self._dry_run_verdict(result, placed, resv, dynamic, old, conf, version, tuple(reasons))

    async def _placements(
        self, static: set[str], *, pending: bool
    ) -> tuple[list[JobPlacement], dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]]:
        """The live controller's running jobs (and its pending ones when `pending`), its
        reservations, and the dynamic nodes that run jobs with their features (those the files do
        not define: read by name, a few nodes, not the fleet). Empty when it does not answer."""
        try:
            placed, resv = await all_of(
                self.client.job_placements(pending=pending), self.client.reservations()
            )
            busy = {n for p in placed if p.running for n in p.nodes} - static
            nodes = await self.client.nodes_named(busy) if busy else {}
            dynamic = {n.name: n.features for n in nodes.values()}
            return placed, {r.name: r.nodes for r in resv}, dynamic
        except SlurmError as exc:
            log.warning("jobs_unreadable", error=exc.message)
            return [], {}, {}

    @staticmethod
    def _dry_run_verdict(
        result: DryRunResult,
        placed: list[JobPlacement],
        resv: dict[str, tuple[str, ...]],
        dynamic: dict[str, tuple[str, ...]],
        old: SlurmConf | None,
        conf: SlurmConf,
        version: Version,
        reasons: tuple[RestartReason, ...],
    ) -> Verdict:
        if result.release_mismatch:
            return Verdict(False, result.reason[:MAX_REASON], dry_run=result)  # no word on the set
        if not result.ok:
            release = f"{version.major}.{version.minor:02d}"
            return Verdict(
                False,
                f"the dry run on Slurm {release} refused it: {result.reason}"[:MAX_REASON],
                dry_run=result,
            )
        known = {p.job_id for p in placed}
        risk = {j: f"slurmctld loading the state: {why}" for j, why in result.jobs.items() if j in known}
        if old is not None:
            for j, why in jobs.compare(old, conf, placed, resv, dynamic).items():
                risk.setdefault(j, why)
        return Verdict(True, "", reasons, conf, jobs=risk, dry_run=result)
