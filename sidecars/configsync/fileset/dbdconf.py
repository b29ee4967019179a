"""slurmdbd.conf, as config-sync receives it from its Secret: checked without touching the database,
and what a change of it needs.

Checked here, before anything is staged: the syntax (`Key=Value` lines, `#` comments), the keys
slurmdbd cannot start without (StorageType: "fatal: StorageType must be specified"), the values
that must be numbers or ports, and the file's mode: slurmdbd refuses a slurmdbd.conf that group or
others may read ("should be 600"), and the file holds StoragePass. Whether the database accepts the
credentials is not tried: that would touch the live database; slurmdbd's restart and
`sacctmgr ping` are the test, with the previous file put back when it fails.

slurmdbd.conf(5): changes "take effect upon restart of SlurmDBD or daemon receipt of the SIGHUP
signal unless otherwise noted"; the storage connection, the daemon's own address, port, user and
authentication are read once at start, so only the keys in RELOADABLE count as a reload; any other
change restarts slurmdbd (or is held, by the same policy as slurmctld's restarts).

No message here carries a value from the file: StoragePass is one.
"""

from __future__ import annotations

import pwd
import re
import stat
from dataclasses import dataclass, field

CONF_NAME = "slurmdbd.conf"
STORAGE_TYPES = frozenset({"accounting_storage/mysql"})
PORT_KEYS = ("dbdport", "storageport")
NUMBER_KEYS = ("commitdelay", "messagetimeout", "tcptimeout", "maxquerytimerange")
# what slurmdbd re-reads and uses on SIGHUP (`sacctmgr reconfigure`): logging and purging; the rest
# is read at start
RELOADABLE = frozenset(
    {
        "debuglevel",
        "debuglevelsyslog",
        "debugflags",
        "logtimeformat",
        "privatedata",
        "trackwckey",
        "trackslurmctlddown",
        "allownodefacct",
        "messagetimeout",
        "maxquerytimerange",
        *(f"purge{kind}after" for kind in ("event", "job", "resv", "step", "suspend", "txn", "usage")),
    }
)
_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")
# slurmdbd's defaults (read_config.c): the database on localhost, MySQL's port
DEFAULT_STORAGE_HOST = "localhost"
DEFAULT_STORAGE_PORT = 3306
# what a throwaway slurmdbd (slurm/dbd_throwaway.py) must not take from the candidate: where the
# database is (it gets a port held closed), the live daemon's pid file (slurmdbd signals the pid it
# names), its log (the verdict is read from stderr), and archive paths that live in slurmdbd's
# container rather than config-sync's
THROWAWAY_DROPS = frozenset(
    {"storagehost", "storagebackuphost", "storageport", "pidfile", "logfile", "archivedir", "archivescript"}
)


@dataclass(frozen=True, slots=True)
class DbdConf:
    options: dict[str, str] = field(default_factory=dict)  # lower-case key -> last value
    problems: tuple[str, ...] = ()


def parse(text: str) -> DbdConf:
    """Keys and values; malformed lines are problems, named by line and key, never by value."""
    options: dict[str, str] = {}
    problems: list[str] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not _KEY.match(key):
            problems.append(f"{CONF_NAME} line {n}: not a Key=Value line")
            continue
        value = value.strip()
        if not value:
            problems.append(f"{CONF_NAME} line {n}: {key} has no value")
            continue
        options[key.lower()] = value
    return DbdConf(options, tuple(problems))


def plugin_dir(data: bytes) -> str:
    """The `PluginDir=` slurmdbd would load its plugins from ("" when not set, or not text)."""
    try:
        return parse(data.decode("utf-8")).options.get("plugindir", "")
    except UnicodeDecodeError:
        return ""


def check(data: bytes, mode: int) -> list[str]:
    """Every reason slurmdbd would refuse this file (empty: nothing we can see without the database)."""
    problems: list[str] = []
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        problems.append(
            f"{CONF_NAME} has mode {stat.S_IMODE(mode):04o}: slurmdbd refuses one that group or others "
            "can access (it holds StoragePass); set the Secret's defaultMode (or items.mode) to 0600"
        )
    if b"\0" in data:  # as slurm.conf: a config is text, never a carrier for a binary
        return [*problems, f"{CONF_NAME} is not text (it holds NUL bytes)"]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return [*problems, f"{CONF_NAME} is not UTF-8 text"]
    conf = parse(text)
    problems += conf.problems
    if "storagetype" not in conf.options:
        problems.append(f"{CONF_NAME}: StorageType is required (slurmdbd will not start without it)")
    kind = conf.options.get("storagetype", "").lower()
    if kind and kind not in STORAGE_TYPES:
        problems.append(f"{CONF_NAME}: StorageType must be one of {', '.join(sorted(STORAGE_TYPES))}")
    for key in PORT_KEYS:
        value = conf.options.get(key)
        if value is not None and not (value.isdigit() and 0 < int(value) < 65536):
            problems.append(f"{CONF_NAME}: {key} is not a port (1 to 65535)")
    for key in NUMBER_KEYS:
        value = conf.options.get(key)
        if value is not None and not value.isdigit():
            problems.append(f"{CONF_NAME}: {key} is not a whole number")
    return problems


def restart_reasons(old: bytes, new: bytes) -> list[str]:
    """The changed keys that slurmdbd reads only at start (empty: a SIGHUP applies the change).
    Names only: a changed StoragePass is reported as changed, never shown."""
    a = parse(old.decode("utf-8", "replace")).options
    b = parse(new.decode("utf-8", "replace")).options
    changed = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    return [f"{key} changed (read by slurmdbd at start)" for key in changed if key not in RELOADABLE]


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where slurmdbd finds its database (StorageHost/StoragePort, with slurmdbd's defaults)."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def storage_endpoint(data: bytes) -> Endpoint:
    options = parse(data.decode("utf-8", "replace")).options
    port = options.get("storageport", "")
    return Endpoint(
        options.get("storagehost", DEFAULT_STORAGE_HOST),
        int(port) if port.isdigit() else DEFAULT_STORAGE_PORT,
    )


def owner_problems(data: bytes, owner_uid: int) -> list[str]:
    """slurmdbd refuses a slurmdbd.conf whose owner is not SlurmUser ("slurmdbd.conf not owned by
    SlurmUser"). The file config-sync stages is owned by config-sync's own user: that user must be
    SlurmUser. Not judged (empty) when SlurmUser has no entry here: the throwaway slurmdbd says."""
    user = parse(data.decode("utf-8", "replace")).options.get("slurmuser", "root")
    try:
        want = pwd.getpwnam(user).pw_uid
    except KeyError:
        return []
    if want == owner_uid:
        return []
    return [
        f"{CONF_NAME} would be owned by uid {owner_uid} (config-sync's user), but SlurmUser is {user} "
        f"(uid {want}): slurmdbd refuses a file SlurmUser does not own; run config-sync as SlurmUser"
    ]


def throwaway_text(data: bytes, storage_port: int, pid_file: str) -> bytes:
    """The candidate as a throwaway slurmdbd reads it: every line kept as written (a malformed one
    must be refused as slurmdbd would), but the database pointed at `127.0.0.1:storage_port` and
    the keys in THROWAWAY_DROPS left out."""
    kept = []
    for raw in data.decode("utf-8", "replace").splitlines():
        key = raw.split("#", 1)[0].partition("=")[0].strip().lower()
        if "=" in raw.split("#", 1)[0] and key in THROWAWAY_DROPS:
            continue
        kept.append(raw)
    kept += ["StorageHost=127.0.0.1", f"StoragePort={storage_port}", f"PidFile={pid_file}"]
    return ("\n".join(kept) + "\n").encode()
