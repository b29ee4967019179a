"""What the live slurmctld opens that the dry run does not open for it: plugin files (a misspelt name
kills slurmctld) and the paths the dry run points at scratch copies of its own (its log, pid file,
state and job completion file). Checked where config-sync sees the files, for changed values only."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from sidecars.configsync.fileset.conffile import SlurmConf

# slurm.conf keys naming plugins slurmctld loads, and their files' prefix. A misspelt name passes the
# client parse (it loads no plugin) and kills slurmctld on reconfigure or at its next start
# (measured: PreemptType and MCSPlugin on 22.05; those, PriorityType, JobCompType, JobAcctGatherType
# and JobSubmitPlugins on 24.11 `slurmctld -D`). `none` needs no file (24.11 ships none).
PLUGIN_KEYS = {
    "PreemptType": "preempt",
    "PriorityType": "priority",
    "JobCompType": "jobcomp",
    "JobAcctGatherType": "jobacct_gather",
    "JobSubmitPlugins": "job_submit",
    "MCSPlugin": "mcs",
    "SchedulerType": "sched",
    "ProctrackType": "proctrack",
    "TaskPlugin": "task",
    "TopologyPlugin": "topology",
}


def plugin_problems(old: SlurmConf | None, new: SlurmConf, dirs: Sequence[Path]) -> list[str]:
    """Plugins named by a changed key that have no file in slurmctld's plugin directories."""
    problems: list[str] = []
    for key, prefix in PLUGIN_KEYS.items():
        value = new.options.get(key.lower())
        if not value or (old is not None and old.options.get(key.lower()) == value):
            continue  # what slurmctld runs on now loaded fine
        for item in value.split(","):
            name = item.strip().rsplit("/", 1)[-1]  # "preempt/qos" and JobSubmitPlugins' bare "lua"
            if not name or name.lower() == "none":
                continue
            so = f"{prefix}_{name}.so"
            if not any((d / so).is_file() for d in dirs):
                where = ":".join(str(d) for d in dirs)
                problems.append(f"{key}={value}: no plugin {so} in {where}; slurmctld would die loading it")
    return problems


# files the live slurmctld opens that the dry run points at scratch copies of its own (it must not
# write the live log, pid file, state or job completion file), so their places are checked here: a
# directory that is not there kills slurmctld at reconfigure (measured on 24.11 and 26.05 `-D`:
# JobCompLoc=/nonexistent/dir/file, `fatal: open ...: No such file or directory`). Only a value that
# changes is checked: one slurmctld runs on now may lie in a volume only its container mounts.
LIVE_PATHS = {
    "SlurmctldLogFile": False,  # False: the file's directory must exist; True: the directory itself
    "SlurmctldPidFile": False,
    "SlurmSchedLogFile": False,
    "JobCompLoc": False,
    "StateSaveLocation": True,
}


def path_problems(old: SlurmConf | None, new: SlurmConf) -> list[str]:
    """Changed paths of files the live slurmctld opens whose directory does not exist here."""
    if old is None:
        return []

    def opt(conf: SlurmConf, key: str) -> str:
        return conf.options.get(key.lower(), "").strip()  # the parse already took the quotes off

    problems: list[str] = []
    for key, is_dir in LIVE_PATHS.items():
        value = opt(new, key)
        changed = value != opt(old, key)
        if key == "JobCompLoc":
            kind = opt(new, "JobCompType").lower()
            if not kind.endswith("/filetxt"):
                continue  # a URL or a host for the other plugins, not a file
            changed = changed or kind != opt(old, "JobCompType").lower()
        if not changed or not value.startswith("/"):
            continue
        where = Path(value) if is_dir else Path(value).parent
        if not where.is_dir():
            problems.append(
                f"{key}={value}: no directory {where} where config-sync sees the files (mount it here "
                "too if only slurmctld's container has it); slurmctld would die opening it"
            )
    return problems
