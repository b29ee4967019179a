"""Which Slurm releases a dev cluster can run here, and building the chroots that hold the newer ones.

- `host`: the Slurm packages installed on this machine (Debian 12: 22.05).
- `chroot`: Debian 13 (trixie)'s Slurm (24.11) in a debootstrap tree, built once (about 35 s) and reused.
- `sid`: Debian unstable's Slurm (26.05) in a second such tree.

A marker file in each tree records the versions of CHROOT_PACKAGES so tests can print them. A tree
whose marker lacks a package added to that list since it was built (slurmdbd for accounting, slurmrestd) gets
it installed in place, at the version of the tree's own slurmctld, and its marker rewritten.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import shutil
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog

from sidecars.runtime import process

log = structlog.get_logger(__name__)

# slurmdbd: the accounting shape (its database, MariaDB, runs from the host's packages);
# slurmrestd and the auth/jwt plugin: the REST daemon Slinky's operator talks through, and the
# tokens it takes (both added to built trees in place)
CHROOT_PACKAGES = (
    "slurmctld",
    "slurmd",
    "slurm-client",
    "munge",
    "slurmdbd",
    "slurmrestd",
    "slurm-wlm-jwt-plugin",
)
MARKER = ".slurm-chroot"

# a release's tree ($R) gets its own /proc, /dev and /sys: run in a mount namespace of its own
# (`in_private_mounts`), they vanish with it
MOUNT_TREE = 'mount -t proc proc "$R/proc"; mount --rbind /dev "$R/dev"; mount -t sysfs sysfs "$R/sys"; '


def in_private_mounts(script: str, *args: str, unshare: Sequence[str] = ()) -> list[str]:
    """argv running the bash `script` (with `args` as $1, $2, ...) in a mount namespace of its own,
    which `unshare`'s further options can make a PID namespace too."""
    return [
        "unshare",
        *unshare,
        "--mount",
        "--propagation",
        "private",
        "--",
        "bash",
        "-c",
        script,
        "bash",
        *args,
    ]


@dataclass(frozen=True, slots=True)
class ChrootRecipe:
    """How one chroot release is built: the Debian suite and where its tree lives by default."""

    suite: str
    dirname: str  # under ~/.cache/slurm-sidecars
    env: str  # names another root for it
    apt_conf: str = ""  # written to the tree's /etc/apt/apt.conf.d before `apt-get update`


CHROOTS = {
    "chroot": ChrootRecipe("trixie", "slurm-trixie-root", "SIDECARS_SLURM_CHROOT"),
    # sid's Release file carries a Valid-Until the mirror's copy has passed: apt refuses it without this
    "sid": ChrootRecipe(
        "sid", "slurm-sid-root", "SIDECARS_SLURM_SID_CHROOT", 'Acquire::Check-Valid-Until "false";\n'
    ),
}
RELEASE_NAMES = ("host", *CHROOTS)


class ReleaseUnavailable(RuntimeError):
    """This release cannot run here (packages missing, chroot not buildable); the message says why."""


@dataclass(frozen=True, slots=True)
class Release:
    """A Slurm installation to run clusters from. `root` is None for the host's own packages."""

    name: str  # one of RELEASE_NAMES
    root: Path | None
    version: str  # e.g. "22.05.8"

    @property
    def short(self) -> str:
        return ".".join(self.version.split(".")[:2])

    def __str__(self) -> str:
        return f"slurm {self.version} ({self.name})"


def _recipe(name: str) -> ChrootRecipe:
    try:
        return CHROOTS[name]
    except KeyError:
        raise ReleaseUnavailable(f"no chroot release named {name!r} (one of: {', '.join(CHROOTS)})") from None


def default_chroot_root(name: str = "chroot") -> Path:
    recipe = _recipe(name)
    env = os.environ.get(recipe.env)
    if env:
        return Path(env)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "slurm-sidecars" / recipe.dirname


def _marker_packages(root: Path) -> dict[str, str]:
    """Package -> Debian version, as the tree's marker records them (empty when it has none)."""
    try:
        lines = (root / MARKER).read_text().splitlines()
    except OSError:
        return {}
    return dict(line.split("=", 1) for line in lines if "=" in line)


def _marker_version(root: Path) -> str | None:
    full = _marker_packages(root).get("slurmctld")
    return full.split("-")[0].split("+")[0] if full else None


def _missing_packages(root: Path) -> list[str]:
    held = _marker_packages(root)
    return [p for p in CHROOT_PACKAGES if p not in held]


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
    root: Path | None = None, *, name: str = "chroot", mirror: str = "http://deb.debian.org/debian"
) -> Release:
    """Build (once) the chroot of release `name` (see CHROOTS); later calls return at once.

    A lock file makes concurrent callers (parallel test runs, test workers) wait for one build.
    """
    recipe = _recipe(name)
    root = (root or default_chroot_root(name)).resolve()
    if os.geteuid() != 0:
        raise ReleaseUnavailable("building the Slurm chroot needs root")
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{root}.lock", "w") as lock:
        await asyncio.to_thread(fcntl.flock, lock, fcntl.LOCK_EX)
        try:
            version = _marker_version(root)
            if version and _missing_packages(root):
                await _add_packages(root, _missing_packages(root))
            elif not version:
                await _build(root, recipe, mirror)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    version = _marker_version(root)
    if not version:
        raise ReleaseUnavailable(f"chroot at {root} built without a version marker")
    return Release(name, root, version)


async def release_named(name: str) -> Release:
    """The release called `name` (one of RELEASE_NAMES), building its chroot if it has one."""
    if name == "host":
        return await host_release()
    return await build_chroot(name=name)


async def _build(root: Path, recipe: ChrootRecipe, mirror: str) -> None:
    suite = recipe.suite
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
    if recipe.apt_conf:
        (root / "etc/apt/apt.conf.d/99slurm-sidecars").write_text(recipe.apt_conf)
    await _apt_install(root, CHROOT_PACKAGES)
    (root / "etc/munge/munge.key").unlink(missing_ok=True)  # each cluster has its own key
    await _write_marker(root, f"suite={suite}\n")
    log.info("chroot_build_done", root=str(root), seconds=round(time.monotonic() - started, 1))


async def _apt_install(root: Path, packages: Sequence[str]) -> None:
    script = (
        f'set -e; R=$1; shift; {MOUNT_TREE}chroot "$R" apt-get update -qq; '
        'DEBIAN_FRONTEND=noninteractive chroot "$R" apt-get install -y -qq --no-install-recommends "$@"; '
        'chroot "$R" apt-get clean; rm -rf "$R"/var/lib/apt/lists/*'
    )
    await _check(*in_private_mounts(script, str(root), *packages))  # dpkg wants /proc, /dev and /sys


async def _write_marker(root: Path, head: str) -> None:
    versions = await _check(
        "chroot", str(root), "dpkg-query", "-W", "-f=${Package}=${Version}\\n", *CHROOT_PACKAGES
    )
    (root / MARKER).write_text(f"{head}{versions}built={time.strftime('%FT%TZ', time.gmtime())}\n")


async def _add_packages(root: Path, packages: Sequence[str]) -> None:
    """Install into a built tree what CHROOT_PACKAGES gained since, at its slurmctld's own version
    (the mirror may carry a newer Slurm: the tree must stay one release)."""
    started = time.monotonic()
    held = _marker_packages(root)
    pinned = [f"{p}={held['slurmctld']}" if p.startswith("slurm") else p for p in packages]
    log.info("chroot_upgrade_started", root=str(root), packages=pinned)
    await _apt_install(root, pinned)
    suite = held.get("suite", "")
    await _write_marker(root, f"suite={suite}\n" if suite else "")
    log.info("chroot_upgrade_done", root=str(root), seconds=round(time.monotonic() - started, 1))


async def _chroot_release(name: str, build: bool) -> Release:
    root = default_chroot_root(name)
    if build:
        return await build_chroot(root, name=name)
    version = _marker_version(root)
    if not version:
        raise ReleaseUnavailable(f"not built at {root}")
    return Release(name, root.resolve(), version)


async def available_releases(*, build: bool = True) -> tuple[list[Release], list[str]]:
    """Every release usable here (in RELEASE_NAMES order), and the reasons for those that are not.

    The chroots are built side by side: each build mostly waits on the mirror and on dpkg."""
    results = await asyncio.gather(
        host_release(), *(_chroot_release(name, build) for name in CHROOTS), return_exceptions=True
    )
    found: list[Release] = []
    missing: list[str] = []
    for name, result in zip(RELEASE_NAMES, results, strict=True):
        if isinstance(result, Release):
            found.append(result)
        elif isinstance(result, ReleaseUnavailable):
            missing.append(f"{name}: {result}")
        else:
            raise result
    return found, missing
