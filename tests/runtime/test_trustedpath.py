"""Which paths a job's user could change: owners, modes, sticky directories and symlinks."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from sidecars.runtime.files import replace_atomically
from sidecars.runtime.trustedpath import Trust, UntrustedPath

NOBODY = 65534  # an uid that is neither root nor ours

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give files to another uid")


def tree(base: Path) -> Path:
    base.chmod(0o755)
    (base / "safe").mkdir(mode=0o755)
    (base / "safe" / "slurm.conf").write_text("ClusterName=x\n")
    return base


def test_a_directory_only_root_writes_is_trusted_and_a_world_writable_one_is_not(sockdir: Path) -> None:
    base = tree(sockdir)
    trust = Trust.ours()
    assert trust.check_file(base / "safe" / "slurm.conf") == base / "safe" / "slurm.conf"
    (base / "safe").chmod(0o777)  # what the kubelet makes of an emptyDir
    with pytest.raises(UntrustedPath, match="writable by every user"):
        trust.check_file(base / "safe" / "slurm.conf")
    (base / "safe").chmod(0o775)
    os.chown(base / "safe", 0, NOBODY)
    with pytest.raises(UntrustedPath, match=f"writable by group {NOBODY}"):
        trust.check_dir(base / "safe")
    assert Trust.ours(extra_gids={NOBODY}).check_dir(base / "safe") == base / "safe"


def test_an_entry_someone_else_owns_is_refused_even_below_a_sticky_directory(sockdir: Path) -> None:
    base = tree(sockdir)
    (base / "sticky").mkdir()
    (base / "sticky").chmod(0o1777)  # like /tmp: others may add names, not take ours
    (base / "sticky" / "ours").mkdir(mode=0o755)
    (base / "sticky" / "theirs").mkdir(mode=0o755)
    os.chown(base / "sticky" / "theirs", NOBODY, NOBODY)
    trust = Trust.ours()
    assert trust.check_dir(base / "sticky" / "ours")
    with pytest.raises(UntrustedPath, match=f"owned by uid {NOBODY}"):
        trust.check_dir(base / "sticky" / "theirs")
    with pytest.raises(UntrustedPath, match="writable by every user"):
        trust.check_dir(base / "sticky")  # where we would put our own files: names could be planted


def test_symlinks_are_followed_only_where_a_trusted_uid_put_them(sockdir: Path) -> None:
    base = tree(sockdir)
    (base / "run").mkdir(mode=0o755)
    (base / "run" / "conf").symlink_to(base / "safe")  # as slurmd links /run/slurm/conf to its cache
    trust = Trust.ours()
    assert trust.check_file(base / "run" / "conf" / "slurm.conf") == base / "safe" / "slurm.conf"
    # a job's own directory, linked from a safe place: the target is checked too
    (base / "job").mkdir(mode=0o755)
    os.chown(base / "job", NOBODY, NOBODY)
    (base / "job" / "slurm.conf").write_text("PluginDir=/job\n")
    (base / "run" / "conf").unlink()
    (base / "run" / "conf").symlink_to(base / "job")
    with pytest.raises(UntrustedPath, match=f"job is owned by uid {NOBODY}"):
        trust.check_file(base / "run" / "conf" / "slurm.conf")
    # a link planted in a directory anyone can write is never followed
    (base / "run").chmod(0o777)
    (base / "run" / "conf").unlink()
    (base / "run" / "conf").symlink_to(base / "safe")
    with pytest.raises(UntrustedPath, match="writable by every user"):
        trust.check_file(base / "run" / "conf" / "slurm.conf")


def test_a_socket_is_checked_as_a_socket_and_by_its_owner(sockdir: Path) -> None:
    base = tree(sockdir)
    path = base / "safe" / "agent.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        kinds = frozenset({stat.S_IFSOCK})
        assert Trust.ours().check_file(path, kinds=kinds) == path
        with pytest.raises(UntrustedPath, match="is not a socket"):
            Trust.ours().check_file(base / "safe" / "slurm.conf", kinds=kinds)
        os.chown(path, NOBODY, NOBODY)
        with pytest.raises(UntrustedPath, match=f"owned by uid {NOBODY}"):
            Trust.ours().check_file(path, kinds=kinds)


def test_a_planted_temporary_name_neither_stops_nor_redirects_a_write(sockdir: Path) -> None:
    base = tree(sockdir)
    victim = base / "victim"
    victim.write_text("keep\n")
    record = base / "safe" / "drain-n1.json"
    (base / "safe" / ".drain-n1.json.tmp").symlink_to(victim)  # the old fixed name
    (base / "safe" / ".tmp-").write_text("planted")
    replace_atomically(record, '{"pod": "p"}', mode=0o600)
    assert record.read_text() == '{"pod": "p"}' and stat.S_IMODE(record.stat().st_mode) == 0o600
    assert victim.read_text() == "keep\n"
