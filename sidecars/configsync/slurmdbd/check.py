"""Validating a slurmdbd.conf set (config-sync `--daemon slurmdbd`) without touching the database.

In order, the first refusal ending it:
(a) the set as read: slurmdbd.conf present, no file over the size limit, the reader's problems;
(b) our checks (dbdconf.check): syntax, StorageType, numbers and ports, the file's mode (slurmdbd
    refuses one group or others can access), and its owner (config-sync's user must be SlurmUser:
    slurmdbd refuses a file SlurmUser does not own);
(c) Slurm's own reading: a throwaway slurmdbd of the same release on a copy whose database is a
    port held closed (slurm/dbd_throwaway.py). It says in its own words what it cannot take (keys,
    values, debug levels, purge periods, auth plugins, SlurmUser) within tens of milliseconds.

Not tried, because only the live database or slurmdbd's own container can answer them: whether
the credentials (StorageUser/StoragePass) are accepted, whether StorageLoc exists, whether
DbdHost names the host slurmdbd runs on, ArchiveDir and ArchiveScript. A change's restart and
`sacctmgr ping` judge those, and a failure there is rolled back (slurmdbd/apply.py).

What the change needs: dbdconf.restart_reasons for slurmdbd.conf; any other file of the set (a
key slurmdbd's authentication reads) is read only at start, so its change is a restart too.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from sidecars.configsync.dryrun.runner import DryRunner
from sidecars.configsync.fileset import dbdconf
from sidecars.configsync.fileset.sources import FileSet
from sidecars.configsync.fileset.stage import write_files
from sidecars.configsync.judge import plugintrust
from sidecars.configsync.judge.restart import RestartReason
from sidecars.configsync.judge.validate import MAX_REASON, Verdict
from sidecars.slurm import SlurmClient, SlurmCommandError
from sidecars.slurm.dbd_throwaway import closed_port, read_conf

if TYPE_CHECKING:
    from sidecars.configsync.settings import Settings

log = structlog.get_logger(__name__)

PARSE_DIR = "slurmdbd-parse"  # under --state-dir: where the throwaway slurmdbd reads its copy


class DbdValidator:
    """slurmdbd's judge (validate.Judge): no dry run of slurmctld's, its own throwaway slurmdbd."""

    dry_runner: DryRunner | None = None

    def __init__(self, client: SlurmClient, settings: Settings) -> None:
        self.client = client
        self.target = settings.target
        self.work_dir = settings.state_dir
        self.sources = tuple(settings.sources)  # what the config's volumes fill: never a PluginDir
        self.max_bytes = settings.max_file_bytes
        self.parse_timeout = settings.parse_timeout_seconds
        self.command = settings.slurmdbd_command
        self.owner_uid = os.geteuid()  # the owner of every file config-sync stages
        self._parsing = asyncio.Lock()  # one throwaway at a time: they share PARSE_DIR

    @property
    def parse_dir(self) -> Path:
        return self.work_dir / PARSE_DIR

    def file_problems(self, files: FileSet) -> list[str]:
        problems = list(files.problems)
        for e in files.files.values():
            if e.size > self.max_bytes:
                problems.append(f"{e.name} is {e.size} bytes, over the {self.max_bytes}-byte limit")
        conf = files.files.get(dbdconf.CONF_NAME)
        if conf is None:
            return [*problems, f"{dbdconf.CONF_NAME} is missing from the set"]
        if problems:
            return problems
        # slurmdbd (the throwaway here first) loads plugins from its PluginDir: as for slurm.conf,
        # never from the config's own volumes nor from a directory others could write
        filled = {*self.sources, *(e.source for e in files.files.values()), self.target}
        return (
            dbdconf.check(conf.data, conf.mode)
            + dbdconf.owner_problems(conf.data, self.owner_uid)
            + plugintrust.value_problems(dbdconf.plugin_dir(conf.data), filled)
        )

    async def own_parse(self, files: FileSet) -> str | None:
        """slurmdbd's own words when it refuses the candidate; None when it takes it (or, said in
        the log, when it gave no verdict in time: the restart and its rollback remain)."""
        async with self._parsing:
            where = self.parse_dir
            shutil.rmtree(where, ignore_errors=True)
            write_files(where, files, durable=False)
            try:
                with closed_port() as port:
                    text = dbdconf.throwaway_text(
                        files.files[dbdconf.CONF_NAME].data, port, str(where / "slurmdbd.pid")
                    )
                    conf = where / dbdconf.CONF_NAME
                    conf.unlink()
                    fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                    with os.fdopen(fd, "wb") as f:
                        f.write(text)
                    result = await read_conf(
                        self.command,
                        where,
                        timeout=self.parse_timeout,
                        env=self.client.env,
                        metrics=self.client.metrics,
                    )
            except OSError as exc:  # no slurmdbd here: said, and the restart remains the test
                log.warning("slurmdbd_parse_not_run", error=str(exc))
                return None
            except SlurmCommandError as exc:  # the edge would not start it (slurm.plugindir): refused
                return exc.message
            finally:
                shutil.rmtree(where, ignore_errors=True)
        log.info("slurmdbd_parse", ok=result.ok, seconds=round(result.seconds, 3))
        if result.ok is None:
            log.warning("slurmdbd_parse_no_verdict", said=result.said)
            return None
        # slurmdbd names the file it read: say the target's name, not the throwaway's copy's
        return (
            None if result.ok else result.said.replace(str(where), str(self.target)) or "slurmdbd refused it"
        )

    async def validate(self, files: FileSet, current: FileSet | None) -> Verdict:
        problems = self.file_problems(files)
        if problems:
            return Verdict(False, "; ".join(problems)[:MAX_REASON])
        refused = await self.own_parse(files)
        if refused is not None:
            return Verdict(False, f"slurmdbd refused it: {refused}"[:MAX_REASON])
        return Verdict(True, "", tuple(restart_reasons(current, files)))


def restart_reasons(current: FileSet | None, files: FileSet) -> list[RestartReason]:
    if current is None:
        return []
    old, new = current.files.get(dbdconf.CONF_NAME), files.files[dbdconf.CONF_NAME]
    reasons = [
        RestartReason(why, dbdconf.CONF_NAME)
        for why in dbdconf.restart_reasons(old.data if old is not None else b"", new.data)
    ]
    for name in sorted(set(current.files) | set(files.files)):
        a, b = current.files.get(name), files.files.get(name)
        if name != dbdconf.CONF_NAME and (a is None or b is None or a.data != b.data):
            reasons.append(RestartReason(f"{name} changed (read by slurmdbd at start)", name))
    return reasons
