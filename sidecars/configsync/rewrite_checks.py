"""The proofs for what the dry run rewrites (sandbox.py): a throwaway that names only this host its
controller, or runs no job completion plugin, never tests those parts of the set, so they are checked
here, before it starts."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from sidecars.configsync import conffile
from sidecars.configsync.conffile import SlurmConf
from sidecars.configsync.sources import FileSet


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
