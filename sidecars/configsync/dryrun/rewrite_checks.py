"""The proofs for what the dry run rewrites (sandbox.py): a throwaway that names only this host its
controller, or runs no job completion plugin, never tests those parts of the set, so they are checked
here, before it starts."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sidecars.configsync.dryrun.slurmctld_opens import LIVE_PATHS
from sidecars.configsync.fileset import conffile
from sidecars.configsync.fileset.conffile import SlurmConf
from sidecars.configsync.fileset.sources import FileSet
from sidecars.slurm import hostlist


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


# Slurm's node port rule (src/common/node_conf.c, expand_nodeline_info, the same on 22.05, 24.11 and
# 26.05): the record's Port string is a hostlist, each entry goes through atoi(), and one that is not
# 1-65535 ends slurmctld with fatal("Invalid Port %s", the whole string), at start and at the re-exec
# of `scontrol reconfigure`. The throwaway's records carry a closed port instead (sandbox.py), so that
# check never runs there: it is run here, on the values as written.
PORT_MAX = 0xFFFF
_C_SPACE = " \t\n\v\f\r"


def c_atoi(text: str) -> int:
    """What glibc's atoi() makes of `text`: (int) strtol(text, NULL, 10). Leading white space, a
    sign, the digits up to the first other character ("6818x" is 6818, "abc" is 0); strtol clamps
    to the range of a long and the cast keeps the low 32 bits, as on the 64-bit hosts Slurm runs on."""
    s = text.lstrip(_C_SPACE)
    sign = 1
    if s[:1] in ("+", "-"):
        sign = -1 if s[0] == "-" else 1
        s = s[1:]
    digits = ""
    for ch in s:
        if not ("0" <= ch <= "9"):
            break
        digits += ch
        if len(digits) > 20:  # beyond any long: clamped below whatever follows
            break
    value = max(-(2**63), min(2**63 - 1, sign * int(digits or "0")))
    value &= 0xFFFFFFFF
    return value - 2**32 if value >= 2**31 else value


@dataclass(frozen=True, slots=True)
class RecordProblems:
    """What the node records' rewritten values would do to slurmctld: `fatal` in Slurm's words (the
    set is refused), `untestable` the values neither the throwaway nor we can judge (held)."""

    fatal: tuple[str, ...] = ()
    untestable: tuple[str, ...] = ()


def node_record_problems(conf: SlurmConf) -> RecordProblems:
    """Slurm's own checks of what the dry run rewrites in each NodeName record (sandbox.isolate_nodes:
    NodeAddr and Port), run on the values as written, with `NodeName=DEFAULT` values applied as
    slurmctld applies them (to the records after them; the throwaway keeps DEFAULT lines but gives
    every record its own Port, so a DEFAULT's Port would never be tried there either).

    - Port: Slurm's rule above, exactly (node_conf.c). The count of ports and of addresses (one, or one
      per node) stays in the throwaway's records, where Slurm checks it itself.
    - A NodeAddr, NodeHostname or Port list our hostlist reader cannot expand: the throwaway's record
      would carry a count we guessed, so neither Slurm's count check nor the port rule can be said to
      have run on it. Named and held."""
    fatal: list[str] = []
    untestable: list[str] = []
    defaults: dict[str, str] = {}
    for r in conf.of("nodename"):
        if r.name.upper() == "DEFAULT":
            defaults = {**defaults, **r.fields}
            continue
        given = {**defaults, **r.fields}
        for key in ("nodeaddr", "nodehostname", "port"):
            value = given.get(key, "")
            try:
                hostlist.expand(value)
            except Exception:
                untestable.append(
                    f"{r.origin}: NodeName={r.name} {_KEY_NAMES[key]}={value}: a list config-sync cannot "
                    "expand, so the dry run's record would not have its shape"
                )
                value = ""
            if key == "port" and value:
                bad = [p for p in hostlist.expand(value) if not 0 < c_atoi(p) <= PORT_MAX]
                if bad:
                    fatal.append(
                        f"{r.origin}: NodeName={r.name} Port={value}: slurmctld would stop at start and at "
                        f'`scontrol reconfigure` with "fatal: Invalid Port {value}" (each port 1-{PORT_MAX}; '
                        f"{', '.join(bad[:3])} is not)"
                    )
    return RecordProblems(tuple(fatal), tuple(untestable))


_KEY_NAMES = {"nodeaddr": "NodeAddr", "nodehostname": "NodeHostname", "port": "Port"}


def relative_path_problems(old: SlurmConf | None, new: SlurmConf) -> list[str]:
    """The paths the throwaway gets its own copies of (its log, pid file, state, sched log: sandbox.
    overrides) are checked where config-sync sees the files when they change (slurmctld_opens.
    path_problems), which needs an absolute path: a relative one resolves against slurmctld's working
    directory, which neither the dry run nor config-sync knows. A changed one is named and held."""
    if old is None:
        return []
    out = []
    for key in LIVE_PATHS:
        value = new.options.get(key.lower(), "").strip()
        if value and not value.startswith("/") and value != old.options.get(key.lower(), "").strip():
            if key == "JobCompLoc" and not new.options.get("jobcomptype", "").lower().endswith("/filetxt"):
                continue  # a URL or a host for the other plugins, not a file
            out.append(
                f"{key}={value}: a relative path, which slurmctld resolves against a working directory "
                "the dry run does not share"
            )
    return out
