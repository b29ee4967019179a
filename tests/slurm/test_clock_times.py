"""Slurm's printed local times (`2026-11-30T03:56:35`) read without strptime, to the same epoch."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator

import pytest

from sidecars.slurm import textformat


def strptime_epoch(text: str) -> int | None:
    """What parse_time returned before its fast path: the reference it must agree with."""
    v = textformat.nullable(text)
    if v is None:
        return None
    try:
        return int(time.mktime(time.strptime(v, "%Y-%m-%dT%H:%M:%S")))
    except ValueError:
        return None


@pytest.fixture(params=["Etc/UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"])
def zone(request: pytest.FixtureRequest) -> Iterator[str]:
    """The controller's zone: Slurm prints local time, daylight saving's gaps and repeats included."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = request.param
    time.tzset()
    try:
        yield request.param
    finally:
        if old is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = old
        time.tzset()


def odd_times() -> list[str]:
    rnd = random.Random(5)
    found = [
        f"{rnd.randint(1969, 2100):04d}-{rnd.randint(0, 13):02d}-{rnd.randint(0, 32):02d}"
        f"T{rnd.randint(0, 25):02d}:{rnd.randint(0, 61):02d}:{rnd.randint(0, 62):02d}"
        for _ in range(3_000)
    ]
    # daylight saving's edges in both hemispheres, Lord Howe's half hour among them
    found += [
        f"2026-{md}T{h:02d}:{m:02d}:00"
        for md in ("03-08", "03-29", "04-05", "10-04", "10-25", "11-01")
        for h in range(4)
        for m in (0, 15, 30, 59)
    ]
    return [
        *found,
        "2024-02-29T12:00:00", "2023-02-29T12:00:00", "2026-01-01T23:59:60", "2026-01-01T23:59:61",
        "2026-1-5T3:4:5", "2026-01-01 00:00:00", "0000-01-01T00:00:00", "9999-12-31T23:59:59",
        "\uff12\uff10\uff12\uff16-01-01T00:00:00",  # full-width digits: not Slurm's shape
        "2026-01-01T00:00:0x", "+026-11-30T03:56:35", "2026-11-30T03:56: 5",
        "  2026-11-30T03:56:35  ", "2026-11-30T03:56:35Z", "N/A", "None", "Unknown", "",
    ]  # fmt: skip


def test_every_printed_time_reads_as_strptime_read_it(zone: str) -> None:
    times = odd_times()
    assert [textformat.parse_time(t) for t in times] == [strptime_epoch(t) for t in times]


def test_slurms_own_shape_never_reaches_strptime(monkeypatch: pytest.MonkeyPatch) -> None:
    def slow(*_: object) -> time.struct_time:
        raise AssertionError("strptime called")

    expected = strptime_epoch("2026-11-30T03:56:35")
    monkeypatch.setattr(time, "strptime", slow)
    assert textformat.parse_time("2026-11-30T03:56:35") == expected
    with pytest.raises(AssertionError):
        textformat.parse_time("2026-1-5T3:4:5")  # any other shape is still strptime's to judge
