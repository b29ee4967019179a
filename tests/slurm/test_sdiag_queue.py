"""slurmctld's queue of records for slurmdbd, read from `sdiag` as each release prints it."""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecars.slurm import textformat
from sidecars.slurm.errors import SlurmParseError

DATA = Path(__file__).parent.parent / "data"


@pytest.mark.timeout(10)
@pytest.mark.parametrize("release", ["slurm-22.05", "slurm-24.11", "slurm-26.05"])
def test_the_queue_is_read_from_every_releases_sdiag(release: str) -> None:
    text = (DATA / release / "sdiag.txt").read_text()
    assert textformat.sdiag_dbd_queue(text) == 0  # captured on a quiet cluster
    busy = text.replace("DBD Agent queue size: 0", "DBD Agent queue size: 2323")
    assert textformat.sdiag_dbd_queue(busy) == 2323


@pytest.mark.timeout(10)
def test_an_answer_without_the_queue_is_a_parse_error() -> None:
    with pytest.raises(SlurmParseError, match="DBD Agent queue size"):
        textformat.sdiag_dbd_queue("Server thread count:  1\nAgent queue size:     0\n")
