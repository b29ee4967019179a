"""slurmdbd.conf from its Secret: what config-sync refuses before staging is what the real slurmdbd
refuses (on every release), no message carries the storage password, and a change's restart need
is told key by key."""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecars.configsync.fileset import dbdconf
from sidecars.configsync.fileset.sources import FileEntry, FileSet
from sidecars.configsync.judge.validate import file_problems
from sidecars.devcluster import ClusterError, DevCluster

SECRET = "pw-Zq8rT3vN7xK2mB9c"
GOOD = (
    "AuthType=auth/munge\nDbdHost=h\nDbdPort=6819\nSlurmUser=root\n"
    f"StorageType=accounting_storage/mysql\nStoragePass={SECRET}\nStorageLoc=slurm_acct_db\n"
)


def test_a_good_file_passes() -> None:
    assert dbdconf.check(GOOD.encode(), 0o100600) == []
    assert dbdconf.check(GOOD.encode(), 0o100400) == []


@pytest.mark.parametrize(
    ("text", "mode", "said"),
    [
        (GOOD, 0o100644, "mode 0644"),
        (GOOD, 0o100640, "mode 0640"),
        (GOOD.replace("StorageType=accounting_storage/mysql\n", ""), 0o100600, "StorageType is required"),
        (GOOD.replace("accounting_storage/mysql", "accounting_storage/none"), 0o100600, "StorageType must"),
        (GOOD.replace("DbdPort=6819", "DbdPort=70000"), 0o100600, "dbdport is not a port"),
        (GOOD + "CommitDelay=soon\n", 0o100600, "commitdelay is not a whole number"),
        (GOOD + f"StoragePass {SECRET}\n", 0o100600, "line 8: not a Key=Value line"),
        (GOOD + "StoragePass=\n", 0o100600, "line 8: StoragePass has no value"),
    ],
    ids=["0644", "0640", "no-storagetype", "other-storage", "bad-port", "bad-number", "no-equals", "empty"],
)
def test_refused_and_said_without_the_password(text: str, mode: int, said: str) -> None:
    problems = dbdconf.check(text.encode(), mode)
    assert any(said in p for p in problems), problems
    assert not any(SECRET in p for p in problems)


def test_not_utf8_is_refused() -> None:
    assert dbdconf.check(b"StoragePass=\xff\n", 0o100600) == ["slurmdbd.conf is not UTF-8 text"]


def test_what_a_change_needs() -> None:
    assert (
        dbdconf.restart_reasons(GOOD.encode(), (GOOD + "DebugLevel=debug\nPurgeJobAfter=12\n").encode()) == []
    )
    reasons = dbdconf.restart_reasons(GOOD.encode(), GOOD.replace(SECRET, "other-secret-value-123").encode())
    assert reasons == ["storagepass changed (read by slurmdbd at start)"]
    assert not any(SECRET in r or "other-secret" in r for r in reasons)
    moved = dbdconf.restart_reasons(GOOD.encode(), GOOD.replace("6819", "6820").encode())
    assert moved == ["dbdport changed (read by slurmdbd at start)"]


@pytest.mark.timeout(180)
@pytest.mark.cluster(nodes=1, accounting=True)
@pytest.mark.parametrize(
    ("edit", "mode"),
    [
        (lambda text: text, 0o644),
        (lambda text: "\n".join(x for x in text.splitlines() if not x.startswith("StorageType=")), 0o600),
    ],
    ids=["world-readable", "no-storagetype"],
)
@pytest.mark.per_release("each release's slurmdbd refuses its own set of files")
async def test_what_we_refuse_the_real_slurmdbd_refuses(cluster: DevCluster, edit: object, mode: int) -> None:
    c = cluster
    path = c.dir / "etc" / dbdconf.CONF_NAME
    good = path.read_bytes()
    bad = edit(good.decode()).encode()  # type: ignore[operator]
    await c.stop_slurmdbd()
    path.write_bytes(bad)
    path.chmod(mode)
    assert dbdconf.check(bad, path.stat().st_mode), "config-sync would have let it through"
    with pytest.raises(ClusterError, match="slurmdbd"):
        await c.start_slurmdbd(timeout=20)
    assert c.hostpid("slurmdbd") is None
    # the previous file back (what config-sync's rollback does): slurmdbd answers again
    path.write_bytes(good)
    path.chmod(0o600)
    assert dbdconf.check(good, path.stat().st_mode) == []
    await c.start_slurmdbd()
    assert await c.client().accounting_ping()


def _set(mode: int) -> FileSet:
    return FileSet.build(
        [
            FileEntry("slurm.conf", b"ClusterName=c\n", 0o644, 14, Path("/cm")),
            FileEntry(dbdconf.CONF_NAME, GOOD.encode(), mode, len(GOOD), Path("/secret")),
        ]
    )


def test_config_sync_refuses_the_set_before_staging() -> None:
    problems = file_problems(_set(0o100644), None, "slurm.conf", 1 << 20)
    assert any("mode 0644" in p for p in problems) and not any(SECRET in p for p in problems)
    assert file_problems(_set(0o100600), None, "slurm.conf", 1 << 20) == []
