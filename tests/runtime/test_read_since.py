"""Reading what a daemon appended to its log since a mark (runtime/files.py): the path comes from a
config author, or lies in a volume another container writes, so what stands there is not trusted."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

from sidecars.runtime.files import read_since, size_of
from sidecars.runtime.waits import within

# the read returns at once, refused: this bounds only the regression (a thread blocked in open())
REGRESSION_SECONDS = 30.0


def test_what_was_appended_since_the_mark_and_a_new_file_from_its_start(tmp_path: Path) -> None:
    log = tmp_path / "daemon.log"
    log.write_bytes(b"old line\n")
    mark = size_of(log)
    with log.open("ab") as f:
        f.write(b"fatal: new line\n")
    assert read_since(log, mark, 1024) == (b"fatal: new line\n", mark)
    assert read_since(log, mark, 5) == (b"fatal", mark)  # never more than asked
    log.write_bytes(b"rotated\n")  # shorter than the mark: a new file, all of it new
    assert read_since(log, mark, 1024) == (b"rotated\n", 0)
    assert read_since(tmp_path / "none.log", 0, 1024) is None and size_of(tmp_path / "none.log") == 0


def test_a_link_in_its_place_is_not_followed(tmp_path: Path) -> None:
    secret = tmp_path / "only-this-container-reads-it"
    secret.write_bytes(b"error: the key\n")
    log = tmp_path / "daemon.log"
    log.symlink_to(secret)
    assert read_since(log, 0, 1024) is None
    assert size_of(log) == 0


async def test_a_fifo_in_its_place_is_not_waited_on(tmp_path: Path) -> None:
    log = tmp_path / "daemon.log"
    os.mkfifo(log)
    # no writer ever comes: a plain open would block its thread for good
    try:
        assert await within(asyncio.to_thread(read_since, log, 0, 1024), REGRESSION_SECONDS) is None
    finally:  # a reader blocked there (the regression) is let go, so the run can end
        with contextlib.suppress(OSError):  # ENXIO: no reader waits, as it should be
            os.close(os.open(log, os.O_WRONLY | os.O_NONBLOCK))
    assert size_of(log) == 0
