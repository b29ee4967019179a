"""The releases the suite runs on: each test id names the Slurm it really ran, and a test can ask
for some releases only."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sidecars.devcluster import Release
from sidecars.devcluster.release import CHROOTS, ReleaseUnavailable, build_chroot, default_chroot_root

ROOT = Path(__file__).parent.parent.parent


@pytest.mark.per_release("each release's version is its own")
def test_the_id_names_the_version(release: Release, request: pytest.FixtureRequest) -> None:
    major = request.node.callspec.id.removeprefix("slurm")
    assert release.version.split(".")[0] == major, (request.node.callspec.id, release)
    if release.root is not None:  # a chroot: its marker says which suite it was built from
        suite = (release.root / ".slurm-chroot").read_text().splitlines()[0]
        assert suite == f"suite={CHROOTS[release.name].suite}"


@pytest.mark.releases("slurm26")
def test_sid_apt_ignores_its_expired_release_file(release: Release) -> None:
    assert release.root is not None
    conf = (release.root / "etc/apt/apt.conf.d/99slurm-sidecars").read_text()
    assert 'Acquire::Check-Valid-Until "false";' in conf


@pytest.mark.releases("slurm24", "slurm26")
@pytest.mark.per_release("the marker's own test: it runs on each release it names")
def test_the_releases_marker_selects(release: Release, request: pytest.FixtureRequest) -> None:
    assert request.node.callspec.id in {"slurm24", "slurm26"} and release.name in {"chroot", "sid"}


def test_an_unmarked_test_runs_on_one_release(release: Release) -> None:
    assert release.name in {"host", "chroot", "sid"}


def test_the_marker_leaves_out_the_other_releases() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", __file__],
        cwd=ROOT,
        env={**os.environ, "SIDECARS_NO_SLURM": "1"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    ids = {line.split("::")[1] for line in out.splitlines() if "::test_the_releases_marker" in line}
    assert ids == {"test_the_releases_marker_selects[slurm24]", "test_the_releases_marker_selects[slurm26]"}
    assert "test_sid_apt_ignores_its_expired_release_file[slurm26]" in out
    assert "test_sid_apt_ignores_its_expired_release_file[slurm22]" not in out
    # only a per_release test runs on every release (tests/releases.py)
    assert sum("::test_the_id_names_the_version[" in line for line in out.splitlines()) == 3
    assert sum("::test_an_unmarked_test_runs_on_one_release[" in line for line in out.splitlines()) == 1


async def test_an_unknown_release_is_a_clear_error() -> None:
    with pytest.raises(
        ReleaseUnavailable, match=r"no chroot release named 'bookworm' \(one of: chroot, sid\)"
    ):
        await build_chroot(name="bookworm")
    with pytest.raises(ReleaseUnavailable, match="no chroot release"):
        default_chroot_root("host")


def test_each_chroot_has_its_own_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", "/var/cache/x")
    monkeypatch.delenv("SIDECARS_SLURM_CHROOT", raising=False)
    monkeypatch.setenv("SIDECARS_SLURM_SID_CHROOT", "/srv/sid")
    assert default_chroot_root() == Path("/var/cache/x/slurm-sidecars/slurm-trixie-root")
    assert default_chroot_root("sid") == Path("/srv/sid")
