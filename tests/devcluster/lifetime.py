"""For the tests that kill a cluster's owner: the owner itself, and a record of what must end with it.

`python -m tests.devcluster.lifetime` (with SIDECARS_HOLD_RELEASE set) is a small owner: it starts
a dev cluster, runs a job on it, prints one `HOLDING {...}` line (also written to the file named by
SIDECARS_HOLD_INFO, when set) and waits to be killed. Run by pytest (`pytest
tests/devcluster/lifetime.py`, not collected otherwise), `test_hold_a_cluster_until_killed` does
the same inside a pytest run, for the tests that stop a whole run with SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from sidecars.devcluster import ClusterSpec, DevCluster, Release
from tests.conftest import descendants

HOLD_ENV = "SIDECARS_HOLD_RELEASE"
INFO_ENV = "SIDECARS_HOLD_INFO"
CONTROLLERS_ENV = "SIDECARS_HOLD_CONTROLLERS"  # how many slurmctld the held cluster runs (default 1)
ACCOUNTING_ENV = "SIDECARS_HOLD_ACCOUNTING"  # set: the accounting shape (MariaDB, slurmdbd) too
# the kernel ends them all at once (measured: within 0.1 s of the owner's death); a few seconds is
# ample on a loaded machine, and shorter than the 5 s an orphaned xdist worker waits before it
# stops its test gracefully, so only a death tied to the owner's passes
FEW_SECONDS = 4.0
HOLDING = "HOLDING "
# what a cluster with a job on it runs: every one of them must be seen before the owner is killed,
# so a test that watched nothing cannot pass
CLUSTER_NAMES = frozenset({"munged", "slurmctld", "slurmd", "slurmstepd", "sleep"})
ACCOUNTING_NAMES = CLUSTER_NAMES | {"mariadbd", "slurmdbd"}


def release_json(release: Release) -> str:
    root = str(release.root) if release.root else None
    return json.dumps({"name": release.name, "root": root, "v": release.version})


def _release_from_env() -> Release:
    r = json.loads(os.environ[HOLD_ENV])
    return Release(r["name"], Path(r["root"]) if r["root"] else None, r["v"])


async def hold() -> None:
    spec = ClusterSpec(
        nodes=2,
        controllers=int(os.environ.get(CONTROLLERS_ENV, "1")),
        accounting=ACCOUNTING_ENV in os.environ,
    )
    async with DevCluster(_release_from_env(), spec) as c:
        job = await c.sbatch("-N", "1", wrap="sleep 600")
        await c.wait_job(job, "RUNNING", timeout=60)
        line = HOLDING + json.dumps({"dir": str(c.dir), "init": c.init_pid, "links": c.links})
        print(line, flush=True)
        if INFO_ENV in os.environ:  # an xdist worker's output does not reach its controller's
            tmp = Path(os.environ[INFO_ENV] + ".tmp")
            tmp.write_text(line + "\n")
            tmp.rename(os.environ[INFO_ENV])  # whole, or not there at all
        await asyncio.sleep(3600)


async def wait_holding(proc: asyncio.subprocess.Process, info_file: Path, log: Path) -> dict[str, Any]:
    """The owner's HOLDING record, once its cluster runs (fails when the owner exits first)."""
    deadline = time.monotonic() + 150
    while not info_file.exists():
        assert proc.returncode is None, f"the owner exited early: {log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"no cluster after 150s: {log.read_text()[-3000:]}"
        await asyncio.sleep(0.1)
    info: dict[str, Any] = json.loads(info_file.read_text()[len(HOLDING) :])
    return info


async def test_hold_a_cluster_until_killed() -> None:
    if HOLD_ENV not in os.environ:
        pytest.skip(f"the owner run by test_killed_owner.py (needs {HOLD_ENV})")
    await hold()


# ---------------------------------------------------------------------- watching processes
def _stat(pid: int) -> tuple[str, str] | None:
    """(start time, name) of a live process; None once it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        return None
    return fields[19], stat[stat.index("(") + 1 : stat.rindex(")")]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def namespace_of(init_pid: int) -> str:
    return os.readlink(f"/proc/{init_pid}/ns/pid")


def in_namespace(pidns: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{entry}/ns/pid") == pidns and _stat(int(entry)):
                    found.append(int(entry))
    return found


@dataclass
class Watched:
    """Every process an owner had started, directly or not, and its cluster's namespace and dir."""

    pidns: str
    cluster_dir: str
    procs: dict[int, tuple[str, str]] = field(default_factory=dict)  # pid -> (start time, name)
    cmdlines: dict[int, str] = field(default_factory=dict)

    @classmethod
    async def capture(
        cls,
        owner: int,
        init_pid: int,
        cluster_dir: str,
        timeout: float = 60.0,
        names: frozenset[str] = CLUSTER_NAMES,
    ) -> Watched:
        """Wait until the cluster runs everything in `names`, then record the owner's tree and
        the namespace."""
        w = cls(namespace_of(init_pid), cluster_dir)
        deadline = time.monotonic() + timeout
        while True:
            w.procs.clear()
            for pid in [p for p, _ in descendants(owner)] + in_namespace(w.pidns):
                st = _stat(pid)
                if st:
                    w.procs[pid] = st
                    w.cmdlines[pid] = _cmdline(pid)
            if w.names() >= names or time.monotonic() > deadline:
                return w
            await asyncio.sleep(0.1)

    def names(self) -> set[str]:
        return {name for _, name in self.procs.values()}

    def left(self) -> list[tuple[int, str]]:
        """What still runs: anything recorded, anything in the namespace, anything naming the dir."""
        out = {pid: name for pid, (start, name) in self.procs.items() if _stat(pid) == (start, name)}
        for pid in in_namespace(self.pidns):
            out[pid] = (_stat(pid) or ("", "?"))[1]
        for entry in os.listdir("/proc"):
            pid = int(entry) if entry.isdigit() else os.getpid()
            if pid != os.getpid() and self.cluster_dir in _cmdline(pid) and _stat(pid):
                out[pid] = _cmdline(pid)
        return sorted(out.items())

    async def wait_gone(self, timeout: float) -> list[tuple[int, str]]:
        """Poll /proc until nothing is left, or `timeout`; returns what is left."""
        deadline = time.monotonic() + timeout
        while (left := self.left()) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return left


async def kill_left(watched: Watched) -> None:
    """After a failure: what the owner left behind must not run into the next test."""
    for pid, _ in watched.left():
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    await watched.wait_gone(10.0)


def remove_dir(cluster_dir: str, release: Release) -> None:
    """The files a killed owner could not remove (its processes are gone; its directory is not)."""
    shutil.rmtree(cluster_dir, ignore_errors=True)
    if release.root is not None:
        with contextlib.suppress(OSError):
            (release.root / cluster_dir.lstrip("/")).rmdir()


async def clean_up(
    proc: asyncio.subprocess.Process, watched: Watched | None, cluster_dir: str | None, release: Release
) -> None:
    """After a kill test, whatever it found: the owner gone, anything it left killed, its files removed."""
    if proc.returncode is None:
        proc.kill()
        await proc.wait()
    if watched is not None:
        await kill_left(watched)
    if cluster_dir is not None:
        remove_dir(cluster_dir, release)


if __name__ == "__main__":
    asyncio.run(hold())
