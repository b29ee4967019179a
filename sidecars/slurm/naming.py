"""What a command line is, in Slurm's words: the metric label of a Slurm command, whatever runs it.

A Slurm command reaches us under other names: Debian installs `slurmd-wlm` behind an alternatives
link, a chroot or a namespace is entered through a shim or `nsenter … scontrol`, the dry run starts
slurmctld through a small Python helper. A label must name the Slurm command (dashboards are built on
it) and come from a short fixed list (every distinct value is a time series kept forever)."""

from __future__ import annotations

import os
from collections.abc import Sequence

# Slurm's own programs (clients and daemons): the only names a `command` label may carry
COMMANDS = frozenset(
    {
        "sacct",
        "sacctmgr",
        "sackd",
        "salloc",
        "sattach",
        "sbatch",
        "sbcast",
        "scancel",
        "scontrol",
        "scrontab",
        "sdiag",
        "sinfo",
        "slurmctld",
        "slurmd",
        "slurmdbd",
        "slurmrestd",
        "slurmstepd",
        "sprio",
        "squeue",
        "sreport",
        "srun",
        "sshare",
        "sstat",
        "strigger",
    }
)
# scontrol's verbs worth a series of their own (a reconfigure is not a read); any other stays `scontrol`
SCONTROL_VERBS = frozenset(
    {"show", "update", "create", "delete", "reconfigure", "ping", "shutdown", "takeover", "reboot", "token"}
)
# what packagers append to a program's name: Debian's `-wlm`, a release (`slurmd-24.11`), `.real`
_SUFFIX_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")


def _stem(name: str) -> str:
    """`name` without the suffix from its first `-` or `.` on, when the suffix holds only
    `[A-Za-z0-9._-]`. Not `[-.][A-Za-z0-9._-]*$`, which runs to the end from each `-` (quadratic)."""
    start = len(name)
    while start and name[start - 1] in _SUFFIX_CHARS:
        start -= 1
    cuts = [i for i in (name.find("-", start), name.find(".", start)) if i >= 0]
    return name[: min(cuts)] if cuts else name


def program(word: str) -> str | None:
    """The Slurm program `word` (a path or a name) runs, or None when it is none of them."""
    name = os.path.basename(word).split(" ")[0]  # /proc/PID/exe of a replaced binary ends " (deleted)"
    if name in COMMANDS:
        return name
    stem = _stem(name)
    return stem if stem in COMMANDS else None


def label(argv: Sequence[str]) -> str | None:
    """The label of this command line: its first word that names a Slurm program (wrappers such as
    `nsenter …`, `chroot DIR`, `env`, an interpreter running a helper come before it), with
    scontrol's verb when one follows. None: no Slurm program in it (it is counted nowhere)."""
    for i, word in enumerate(argv):
        if word.startswith("-") or "=" in word:
            continue  # an option or an environment assignment (`env SLURM_CONF=/etc/sinfo.conf ...`)
        name = program(word)
        if name is None:
            continue
        verb = argv[i + 1].lower() if i + 1 < len(argv) else ""
        # only a verb right after the name counts (`scontrol -o show` stays `scontrol`, as it always was)
        return f"{name} {verb}" if name == "scontrol" and verb in SCONTROL_VERBS else name
    return None


def labels() -> frozenset[str]:
    """Every value `label` can return: the bounded set a dashboard may expect."""
    return COMMANDS | {f"scontrol {v}" for v in SCONTROL_VERBS}
