"""Fixtures of the worker agent's tests (helpers live in agent_helpers.py)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def sockdir() -> Iterator[Path]:
    # unix socket paths must stay short (sun_path): not under pytest's deep tmp_path
    d = Path(tempfile.mkdtemp(prefix="wk-", dir="/tmp"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)
