"""The slurmdbd of a dev cluster's accounting shape: its slurmdbd.conf, and what slurm.conf says to use it.

slurmdbd reads slurmdbd.conf from the directory of SLURM_CONF and refuses one that others can read
(it holds StoragePass), so the file is written 0600. The daemon runs in the cluster's namespace
(and chroot) like slurmctld, and is started before it, so the controller registers the cluster
and sends its job records from its first minute.
"""

from __future__ import annotations

from pathlib import Path

from sidecars.devcluster.mariadb import Database

CONF_NAME = "slurmdbd.conf"
CONF_MODE = 0o600


def render(d: Path, host: str, port: int, db: Database) -> str:
    """slurmdbd.conf for a cluster in DIR `d`, its daemon on `port`, storing into `db`."""
    lines = [
        "AuthType=auth/munge",
        f"AuthInfo=socket={d}/munge/munge.sock",
        f"DbdHost={host}",  # slurmdbd refuses to start on a host this does not name
        "DbdAddr=127.0.0.1",
        f"DbdPort={port}",
        "SlurmUser=root",
        f"LogFile={d}/log/slurmdbd.log",
        f"PidFile={d}/run/slurmdbd.pid",
        "DebugLevel=info",
        "StorageType=accounting_storage/mysql",
        "StorageHost=127.0.0.1",
        f"StoragePort={db.port}",
        f"StorageUser={db.user}",
        f"StoragePass={db.password}",
        f"StorageLoc={db.name}",
    ]
    return "\n".join(lines) + "\n"


def slurm_conf_lines(d: Path, port: int) -> list[str]:
    """What slurm.conf says to send job records to this slurmdbd."""
    return [
        "AccountingStorageType=accounting_storage/slurmdbd",
        "AccountingStorageHost=127.0.0.1",
        f"AccountingStoragePort={port}",
        # the munge socket towards slurmdbd (AuthInfo covers only slurmctld and slurmd; for
        # slurmdbd this key names it, as for a cross-cluster munged)
        f"AccountingStoragePass={d}/munge/munge.sock",
    ]


def write(etc: Path, text: str) -> Path:
    path = etc / CONF_NAME
    path.touch(mode=CONF_MODE)
    path.chmod(CONF_MODE)  # before the password is in it
    path.write_text(text)
    return path
