"""The throwaway's copy of a candidate: what the dry run rewrites so that its slurmctld reaches
nothing and touches nothing of the live cluster.

Lines appended to its slurm.conf (Slurm takes the last value of a key) point everything it could reach
elsewhere at a port held closed here: every NodeName record gets 127.0.0.1 and that port, as many times
as it listed addresses and ports (slurmctld checks the counts), as do SlurmdPort and slurmdbd; its
controller records name only this host, at 127.0.0.1; scripts it could run (PrologSlurmctld,
MailProg, power saving...) become /bin/true and JobCompType jobcomp/none. With auth/slurm it serves no
sack socket (`AuthInfo=...,disable_sack`): it would take the live controller's, which /run may share.
Each rewrite hides something from the dry run: rewrite_checks.py gives the proof instead.
"""

from __future__ import annotations

from pathlib import Path

from sidecars.configsync.fileset import conffile
from sidecars.configsync.fileset.conffile import SlurmConf
from sidecars.slurm import hostlist
from sidecars.slurm.daemons import ACCOUNTING_SLURMDBD

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


def _continued(lines: list[str], line: str, i: int) -> tuple[str, int]:
    """`line` joined with the lines its backslashes continue it with, and the index after them: as
    `line = line.rstrip()[:-1] + " " + lines[i]` would, but its pieces joined once (that form copied
    the growing line at each piece: a record continued over 80,000 lines took 0.5 s, a MiB of them
    minutes). The line's rstrip is its pieces' without the blank ones at its end."""
    parts = [line]
    while i < len(lines):
        last = len(parts) - 1
        while last > 0 and not parts[last].rstrip():  # each blank piece is passed once, then dropped
            last -= 1
        tail = parts[last].rstrip()
        if not tail.endswith("\\"):
            break
        parts[last] = tail[:-1]
        del parts[last + 1 :]
        parts.append(lines[i])
        i += 1
    return " ".join(parts), i


def _joined_node_lines(lines: list[str]) -> list[str]:
    """A NodeName line continued with a backslash made one line, as Slurm's parser reads it (a record
    left in pieces would keep its real address and port in the throwaway). Other lines as they are."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if line.strip().lower().startswith("nodename="):
            line, i = _continued(lines, line, i)
        out.append(line)
    return out


def isolate_nodes(text: str, port: int) -> str:
    """Every NodeName record at 127.0.0.1 and the closed port: whatever the throwaway sends a slurmd
    is refused here. The record keeps its shape (its node list, the number of addresses and ports it
    gives, NodeHostname as written: slurmctld only compares that with what a slurmd reports)."""
    out: list[str] = []
    for line in _joined_node_lines(text.splitlines()):
        head = line.strip()
        if not head.lower().startswith("nodename=") or head.endswith("\\"):
            out.append(line)
            continue
        words = conffile.words(conffile.strip_comment(head))
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
        words = conffile.words(conffile.strip_comment(head))
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
    # only the exact name: slurmctld loads plugins by their exact, case-sensitive name, so any other
    # spelling is left for the throwaway to load (and die of, in Slurm's words, as slurmctld would)
    if (conf.options.get("accountingstoragetype") or "").strip() == ACCOUNTING_SLURMDBD:
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
