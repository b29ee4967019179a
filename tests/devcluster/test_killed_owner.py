"""A dev cluster ends with the process that owns it, however that process ends: a small owner killed
by SIGKILL, or a whole pytest run stopped by SIGTERM (its clusters in the run itself or in an xdist
worker), leaves no daemon, slurmstepd or job behind."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from sidecars.devcluster import Release
from sidecars.runtime.waits import within
from tests.devcluster import lifetime

REPO = Path(__file__).resolve().parents[2]


def _owner_argv(kind: str) -> list[str]:
    if kind.startswith("owner"):
        return [sys.executable, "-m", "tests.devcluster.lifetime"]
    # a whole pytest run, on its own or with an xdist worker holding the cluster
    workers = ["-p", "no:xdist"] if kind == "pytest" else ["-n", "1"]
    return [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-s",
        *workers,
        "-p",
        "no:cacheprovider",
        "--timeout=0",
        f"{lifetime.__file__}::test_hold_a_cluster_until_killed",
    ]


@pytest.mark.timeout(240)
# the host's packages and a chroot start their daemons differently; the two chroots alike
@pytest.mark.releases("slurm22", "slurm26")
@pytest.mark.parametrize(
    ("kind", "sig"),
    [
        ("owner", signal.SIGKILL),
        ("owner-accounting", signal.SIGKILL),  # its MariaDB and slurmdbd too
        ("pytest", signal.SIGTERM),
        ("xdist", signal.SIGTERM),
    ],
    ids=["owner-sigkill", "owner-accounting-sigkill", "pytest-sigterm", "xdist-sigterm"],
)
@pytest.mark.per_release(
    "the host's packages and a chroot's shims: each release's processes end their own way"
)
async def test_nothing_outlives_the_owner(
    release: Release, kind: str, sig: signal.Signals, tmp_path: Path
) -> None:
    info_file, log = tmp_path / "holding", tmp_path / "owner.log"
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            *_owner_argv(kind),
            cwd=REPO,
            env={
                **os.environ,
                lifetime.HOLD_ENV: lifetime.release_json(release),
                lifetime.INFO_ENV: str(info_file),
                **({lifetime.ACCOUNTING_ENV: "1"} if kind.endswith("accounting") else {}),
            },
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )
    info, watched = None, None
    try:
        info = await lifetime.wait_holding(proc, info_file, log)
        names = lifetime.ACCOUNTING_NAMES if kind.endswith("accounting") else lifetime.CLUSTER_NAMES
        watched = await lifetime.Watched.capture(proc.pid, info["init"], info["dir"], names=names)
        assert watched.names() >= names, watched.procs
        proc.send_signal(sig)
        await within(proc.wait(), 30)
        assert proc.returncode == -sig, log.read_text()[-3000:]
        left = await watched.wait_gone(lifetime.FEW_SECONDS)
        assert not left, f"still running after the owner was killed: {left}"
    finally:
        await lifetime.clean_up(proc, watched, info["dir"] if info is not None else None, release)
