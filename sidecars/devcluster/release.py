"""Which Slurm releases a dev cluster can run here, and building the chroot that holds the newer one.

- `host`: the Slurm packages installed on this machine (Debian 12: 22.05).
- `chroot`: Debian 13's Slurm (24.11) in a debootstrap tree, built once (about 35 s) and reused;
  a marker file records the versions so tests can print them.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import shutil
import socket
import time
from dataclasses import dataclass
from pathlib import Path

import structlog

from sidecars.runtime import process

log = structlog.get_logger(__name__)

CHROOT_PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
MARKER = ".slurm-chroot"


class ReleaseUnavailable(RuntimeError):
    """This release cannot run here (packages missing, chroot not buildable); the message says why."""


@dataclass(frozen=True, slots=True)
class Release:
    """A Slurm installation to run clusters from. `root` is None for the host's own packages."""

    name: str  # "host" or "chroot"
    root: Path | None
    version: str  # e.g. "22.05.8"

    @property
    def short(self) -> str:
        return ".".join(self.version.split(".")[:2])

    def __str__(self) -> str:
        return f"slurm {self.version} ({self.name})"


def default_chroot_root() -> Path:
    env = os.environ.get("SIDECARS_SLURM_CHROOT")
    if env:
        return Path(env)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "slurm-sidecars" / "slurm-trixie-root"


def _marker_version(root: Path) -> str | None:
    try:
        for line in (root / MARKER).read_text().splitlines():
            if line.startswith("slurmctld="):
                return line.split("=", 1)[1].split("-")[0].split("+")[0]
    except OSError:
        return None
    return None


async def _check(*argv: str, env: dict[str, str] | None = None) -> str:
    # no time limit (debootstrap and apt take what the mirror takes); cancelled, its group is killed
    done = await process.run(argv, timeout=None, env=env, merge_stderr=True)
    text = done.text()
    if done.returncode != 0:
        raise ReleaseUnavailable(f"{' '.join(argv[:4])} failed (exit {done.returncode}): {text[-2000:]}")
    return text


async def host_release() -> Release:
    """The host's Slurm packages, or ReleaseUnavailable naming what is missing."""
    missing = [
        c for c in ("slurmctld", "slurmd", "scontrol", "munged", "unshare", "nsenter") if not shutil.which(c)
    ]
    if missing:
        raise ReleaseUnavailable(f"not installed on this host: {', '.join(missing)} (run `make setup`)")
    out = await _check("dpkg-query", "-W", "-f=${Version}", "slurmctld")
    return Release("host", None, out.strip().split("-")[0].split("+")[0])


async def build_chroot(
    root: Path | None = None, *, suite: str = "trixie", mirror: str = "http://deb.debian.org/debian"
) -> Release:
    """Build (once) a chroot with Debian `suite`'s Slurm; later calls return at once.

    A lock file makes concurrent callers (parallel test runs) wait for one build.
    """
    root = (root or default_chroot_root()).resolve()
    if os.geteuid() != 0:
        raise ReleaseUnavailable("building the Slurm chroot needs root")
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{root}.lock", "w") as lock:
        await asyncio.to_thread(fcntl.flock, lock, fcntl.LOCK_EX)
        try:
            version = _marker_version(root)
            if version:
                return Release("chroot", root, version)
            await _build(root, suite, mirror)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    version = _marker_version(root)
    if not version:
        raise ReleaseUnavailable(f"chroot at {root} built without a version marker")
    return Release("chroot", root, version)


async def _build(root: Path, suite: str, mirror: str) -> None:
    started = time.monotonic()
    if not shutil.which("debootstrap"):
        raise ReleaseUnavailable("debootstrap is not installed (run `make setup`)")
    with open("/proc/mounts") as mounts:
        if any(f" {root}/" in line or f" {root} " in line for line in mounts):
            raise ReleaseUnavailable(f"something is mounted under {root}; refusing to rebuild it")
    if root.exists():
        shutil.rmtree(root)  # a partial build from an interrupted run
    log.info("chroot_build_started", root=str(root), suite=suite)
    await _check("debootstrap", "--variant=minbase", suite, str(root), mirror)
    shutil.copy("/etc/resolv.conf", root / "etc/resolv.conf")
    host = socket.gethostname()
    (root / "etc/hosts").write_text(f"127.0.0.1 localhost {host.split('.')[0]} {host}\n")
    policy = root / "usr/sbin/policy-rc.d"
    policy.write_text("#!/bin/sh\nexit 101\n")  # packages must never start daemons in the chroot
    policy.chmod(0o755)
    script = (
        'set -e; R=$1; shift; mount -t proc proc "$R/proc"; mount --rbind /dev "$R/dev"; '
        'mount -t sysfs sysfs "$R/sys"; chroot "$R" apt-get update -qq; '
        'DEBIAN_FRONTEND=noninteractive chroot "$R" apt-get install -y -qq --no-install-recommends "$@"; '
        'chroot "$R" apt-get clean; rm -rf "$R"/var/lib/apt/lists/*'
    )
    # /proc, /dev and /sys for dpkg live in a private mount namespace and vanish with it
    await _check(
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "--",
        "bash",
        "-c",
        script,
        "bash",
        str(root),
        *CHROOT_PACKAGES,
    )
    (root / "etc/munge/munge.key").unlink(missing_ok=True)  # each cluster has its own key
    versions = await _check(
        "chroot", str(root), "dpkg-query", "-W", "-f=${Package}=${Version}\\n", *CHROOT_PACKAGES
    )
    (root / MARKER).write_text(f"suite={suite}\n{versions}built={time.strftime('%FT%TZ', time.gmtime())}\n")
    log.info("chroot_build_done", root=str(root), seconds=round(time.monotonic() - started, 1))


async def available_releases(*, build: bool = True) -> tuple[list[Release], list[str]]:
    """Every release usable here, and the reasons for those that are not."""
    found: list[Release] = []
    missing: list[str] = []
    try:
        found.append(await host_release())
    except ReleaseUnavailable as exc:
        missing.append(f"host: {exc}")
    try:
        root = default_chroot_root()
        if build:
            found.append(await build_chroot(root))
        elif _marker_version(root):
            found.append(Release("chroot", root, _marker_version(root) or ""))
        else:
            missing.append(f"chroot: not built at {root}")
    except ReleaseUnavailable as exc:
        missing.append(f"chroot: {exc}")
    return found, missing
