"""slurmdbd's release as `sacctmgr show config` gives it (lines shaped as 26.05.5 prints them); an
answer without it is an error, never a guess (the real daemons' answers are read by
test_cluster_upgrade.py on 24.11 and 26.05)."""

from __future__ import annotations

import pytest

from sidecars.slurm import SlurmParseError, Version, parse_dbd_version

ANSWER = """
Configuration data as of 2026-12-02T01:40:17
AccountingStorageHost  = 127.0.0.1
SLURM_CONF             = /tmp/slc-x/etc/slurm.conf
SLURM_VERSION          = 24.11.5

SlurmDBD configuration:
PurgeJobEnvAfter       = NONE
SLURMDBD_CONF          = /tmp/slc-x/etc/slurmdbd.conf
SLURMDBD_VERSION       = 26.05.5
SlurmUser              = root(0)
"""


def test_slurmdbds_own_release_not_the_clients() -> None:
    assert parse_dbd_version(ANSWER) == Version(26, 5, 5)


def test_an_answer_without_it_is_an_error() -> None:
    with pytest.raises(SlurmParseError, match="SLURMDBD_VERSION"):
        parse_dbd_version(ANSWER.replace("SLURMDBD_VERSION", "SLURMDBD_VERSIONX"))
    with pytest.raises(SlurmParseError):
        parse_dbd_version("SLURMDBD_VERSION = (null)\n")
