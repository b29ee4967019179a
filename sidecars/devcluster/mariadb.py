"""A MariaDB server of a dev cluster's own, for its slurmdbd: Debian's mariadb-server from the host.

Its datadir, socket, pid file and log live under DIR/mariadb and it listens on a leased port of
127.0.0.1 only. It runs in the cluster's PID namespace (entered with `nsenter -p` alone, so the
chroot releases use the host's server too), so it dies with the cluster however the cluster ends;
its files go with DIR. Root logs in over the socket only (unix_socket authentication); slurmdbd
uses a user of its own with a password made for this cluster.

`mariadb-install-db` costs seconds (it syncs every file it writes), the same for every cluster: a
run that starts many clusters makes one datadir with `template()` and each cluster copies it.
"""

from __future__ import annotations

import asyncio
import fcntl
import secrets
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sidecars.runtime import process


class DatabaseError(RuntimeError):
    """The database could not be set up or did not answer; says why, in MariaDB's words."""


@dataclass(frozen=True, slots=True)
class Database:
    dir: Path  # DIR/mariadb
    port: int
    user: str = "slurm"
    name: str = "slurm_acct_db"
    password: str = field(default_factory=lambda: secrets.token_urlsafe(24), repr=False)

    @property
    def socket(self) -> Path:
        return self.dir / "mysqld.sock"

    @property
    def log(self) -> Path:
        return self.dir / "error.log"

    @property
    def root_client(self) -> list[str]:
        """The `mariadb` client's argv as the server's root, over its socket."""
        return ["mariadb", "--no-defaults", f"--socket={self.socket}", "-u", "root"]

    def log_tail(self, limit: int = 1500) -> str:
        try:
            return self.log.read_text(errors="replace")[-limit:].strip()
        except OSError:
            return ""

    async def sql(self, statements: str, timeout: float = 30.0) -> str:
        """Run `statements` as the server's root (on stdin: never in a command line, which any local
        user can read); their output, or DatabaseError in MariaDB's words."""
        done = await process.run(
            self.root_client, timeout=timeout, stdin=statements.encode(), merge_stderr=True
        )
        if done.returncode != 0:
            raise DatabaseError(
                f"{statements[:200]!r} failed (exit {done.returncode}): {done.text(1500).strip()}"
            )
        return done.text()


def _server_options(db: Database) -> list[str]:
    return [
        "--no-defaults",  # nothing from /etc/mysql: this server is the cluster's alone
        "--user=root",
        f"--datadir={db.dir / 'data'}",
        # its own: temporary tables are named after the server's pid, which every cluster's PID
        # namespace makes alike, so servers sharing /tmp remove each other's files
        f"--tmpdir={db.dir / 'tmp'}",
        # small: a test database, one of several on a shared machine
        "--innodb-buffer-pool-size=16M",
        "--innodb-log-file-size=8M",
    ]


async def _run(argv: Sequence[str], timeout: float) -> str:
    try:
        done = await process.run(argv, timeout=timeout, merge_stderr=True)
    except process.ProcessTimeout:
        raise DatabaseError(f"{argv[0]} did not finish within {timeout:g}s") from None
    if done.returncode != 0:
        # its own error lines: the end of its output is the same advice whatever went wrong
        errors = [line for line in done.text().splitlines() if "error" in line.lower()]
        said = "\n".join(errors)[-1500:] or done.text(1500).strip()
        raise DatabaseError(f"{' '.join(argv[:2])} failed (exit {done.returncode}): {said}")
    return done.text()


def _install(db: Database, enter: Sequence[str]) -> list[str]:
    return [
        *enter,
        "mariadb-install-db",
        *_server_options(db),
        "--auth-root-authentication-method=socket",
        "--skip-test-db",
    ]


TEMPLATE_MADE = "made"  # written last: a datadir without it is a partial one (a run killed mid-way)


async def template(dir: Path, timeout: float = 120.0) -> Path:
    """The datadir `mariadb-install-db` makes, made once in `dir` for `start(template=...)` to copy
    (it holds no password: root logs in over the socket, slurmdbd's user is made per cluster).
    Processes sharing `dir` (test workers) wait on a lock for the first one's; a partial one is
    made again. Returns the datadir."""
    dir.mkdir(parents=True, exist_ok=True)
    made = Database(dir, port=0)
    with open(dir / "lock", "w") as lock:
        await asyncio.to_thread(fcntl.flock, lock, fcntl.LOCK_EX)
        try:
            if not (dir / TEMPLATE_MADE).exists():
                shutil.rmtree(dir / "data", ignore_errors=True)
                shutil.rmtree(dir / "tmp", ignore_errors=True)
                (dir / "data").mkdir()
                (dir / "tmp").mkdir(mode=0o700)
                await _run(_install(made, []), timeout)  # no server runs on it: no namespace needed
                (dir / TEMPLATE_MADE).write_text("mariadb-install-db\n")
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return dir / "data"


async def start(
    db: Database, enter: Sequence[str], timeout: float = 60.0, *, template: Path | None = None
) -> None:
    """Create the datadir (a copy of `template`, a datadir `template()` made, else a new one), start
    the server through `enter` (the namespace prefix) and create slurmdbd's user; returns once
    that user's grant is in."""
    (db.dir / "tmp").mkdir(mode=0o700, parents=True, exist_ok=True)
    if template is not None:
        # a copy, never the template itself: the server writes into its datadir
        try:
            await asyncio.to_thread(shutil.copytree, template, db.dir / "data", symlinks=True)
        except OSError as e:
            raise DatabaseError(f"could not copy the datadir template {template}: {e}") from None
    else:
        (db.dir / "data").mkdir(parents=True, exist_ok=True)
        await _run(_install(db, enter), timeout)
    server = [
        "mariadbd",
        *_server_options(db),
        f"--socket={db.socket}",
        f"--port={db.port}",
        "--bind-address=127.0.0.1",
        "--skip-networking=0",
        f"--pid-file={db.dir / 'mariadbd.pid'}",
        f"--log-error={db.log}",
        "--skip-log-bin",
    ]
    # backgrounded by sh, which then exits: the server is left to the namespace's init, which reaps it
    await _run([*enter, "sh", "-c", '"$@" </dev/null >/dev/null 2>&1 &', "sh", *server], 10.0)
    sql = (
        f"CREATE USER IF NOT EXISTS '{db.user}'@'127.0.0.1' IDENTIFIED BY '{db.password}'; "
        f"GRANT ALL ON `{db.name}`.* TO '{db.user}'@'127.0.0.1';"
    )
    deadline = time.monotonic() + timeout
    while True:
        done = await process.run(
            db.root_client,
            timeout=10.0,
            stdin=sql.encode(),  # not in argv: any local user can read a process's command line
            merge_stderr=True,
        )
        if done.returncode == 0:
            return
        if time.monotonic() >= deadline:
            raise DatabaseError(
                f"mariadbd did not answer within {timeout:g}s: {done.text(300).strip()}; "
                f"its log: {db.log_tail()}"
            )
        await asyncio.sleep(0.1)
