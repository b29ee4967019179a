"""slurmrestd beside a dev cluster (`ClusterSpec(jwt=True)`, a chroot release: Debian 13 and sid
ship it with the auth/jwt plugin): started in the cluster's namespace, as Slinky's RestApi pod runs
it, and tokens for its callers.

What it takes, measured on 24.11 and 26.05:
- it refuses to run as root or as SlurmUser: it drops to `-u/-g` (nobody here);
- `SLURM_JWT=daemon` makes it reach slurmctld with the caller's token; without it every token is
  refused ("Rejecting thread config token"), and its own key read needs the jwt key readable by it;
- it refuses tokens of root and SlurmUser: callers use an ordinary user's (`scontrol token username=`);
- `-s openapi/slurmctld`: without slurmdbd, 24.11's default plugin set fails to load (openapi/slurmdbd);
- no user namespaces for its hardening's unshare here (`SLURMRESTD_SECURITY`), as in a container.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sidecars.devcluster.ports import free_port
from sidecars.runtime import process

if TYPE_CHECKING:
    from sidecars.devcluster.base import ClusterBase

RESTD_UID = 65534  # nobody: neither root nor SlurmUser, both of which slurmrestd refuses
TOKEN_USER = "nobody"  # an ordinary user: slurmrestd refuses root's and SlurmUser's tokens


class RestdError(RuntimeError):
    """slurmrestd did not come up; the message carries its log's tail."""


@dataclass(frozen=True, slots=True)
class Restd:
    url: str  # http://127.0.0.1:PORT
    port: int
    log: Path
    child: process.Child


def argv(cluster: ClusterBase, port: int, conf: Path | None = None) -> list[str]:
    """The command line of a slurmrestd for this cluster listening on 127.0.0.1:port; reading `conf`
    (a path the cluster's namespace sees: under its dir) instead of the cluster's slurm.conf."""
    return cluster.in_namespace(
        "env",
        *([f"SLURM_CONF={conf}"] if conf is not None else []),
        "SLURM_JWT=daemon",
        "SLURMRESTD_SECURITY=disable_unshare_sysv,disable_unshare_files",
        "slurmrestd",
        "-u",
        str(RESTD_UID),
        "-g",
        str(RESTD_UID),
        "-a",
        "rest_auth/jwt",
        "-s",
        "openapi/slurmctld",
        f"127.0.0.1:{port}",
    )


def log_path(cluster: ClusterBase, port: int) -> Path:
    """Where every slurmrestd on `port` writes its output (appended: the container's log file)."""
    return cluster.log_dir / f"slurmrestd-{port}.log"


async def _listening(port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


async def start(
    cluster: ClusterBase, *, port: int | None = None, timeout: float = 60.0, conf: Path | None = None
) -> Restd:
    """Start slurmrestd and wait until it takes connections (or fail with its last words)."""
    if not cluster.spec.jwt or cluster.release.root is None:
        raise RestdError("slurmrestd runs on a chroot release's cluster made with ClusterSpec(jwt=True)")
    port = port or free_port()
    log = log_path(cluster, port)
    with open(log, "ab") as sink:
        child = await process.start(argv(cluster, port, conf), stdout=sink, stderr=process.STDOUT)
    deadline = time.monotonic() + timeout
    try:
        while not await _listening(port):
            if child.returncode is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-1500:]
                raise RestdError(f"slurmrestd on port {port} did not come up: {tail}")
            await asyncio.sleep(0.1)
    except BaseException:
        await child.kill()
        raise
    return Restd(f"http://127.0.0.1:{port}", port, log, child)


@contextlib.asynccontextmanager
async def serving(cluster: ClusterBase, *, port: int | None = None) -> AsyncIterator[Restd]:
    """`async with restd.serving(cluster) as r:` a slurmrestd for the block, stopped after it."""
    r = await start(cluster, port=port)
    try:
        yield r
    finally:
        await stop(r)


async def stop(r: Restd, grace: float = 10.0) -> None:
    """SIGTERM to slurmrestd's whole group (the nsenter before it waits for it and would not pass a
    signal on), `grace` seconds, then SIGKILL to whatever of the group is left."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(r.child.pid, signal.SIGTERM)
    with contextlib.suppress(TimeoutError):
        await r.child.wait(grace)
    await r.child.kill()


async def token(cluster: ClusterBase, *, lifespan_seconds: int = 3600, user: str = TOKEN_USER) -> str:
    """A token slurmctld signs for `user` (`scontrol token`), as an operator hands one out."""
    done = await process.run(
        cluster.in_namespace("scontrol", "token", f"username={user}", f"lifespan={lifespan_seconds}"),
        timeout=30.0,
        merge_stderr=True,
    )
    text = done.text().strip()
    if done.returncode != 0 or not text.startswith("SLURM_JWT="):
        raise RestdError(f"scontrol token failed (exit {done.returncode}): {text[-500:]}")
    return text.split("=", 1)[1]
