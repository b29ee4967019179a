"""pytest-timeout's alarm held off while pytest makes a test's report (a pytest plugin: tests/conftest.py
loads it).

With the signal method, the alarm raises in whatever runs when the time is up. On a loaded machine
that can be pytest itself, formatting a slow failure's traceback (`ast.parse` of the test's source):
the exception then breaks pytest's own hook (INTERNALERROR, in CPython 3.11 a SystemError from the
parser) and the whole run ends there, xdist's other workers included. While a report is made the
alarm is only noted; a test whose time ran out then gets a failed report saying so.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Generator
from typing import Any

import pytest


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    if threading.current_thread() is not threading.main_thread():
        return (yield)  # signal handlers are the main thread's alone, as is the alarm's
    fired: list[int] = []

    def note(signum: int, frame: Any) -> None:
        fired.append(signum)

    previous = signal.signal(signal.SIGALRM, note)
    try:
        report = yield
    finally:
        signal.signal(signal.SIGALRM, previous)
    if fired:
        said = f"\n\n{report.longrepr}" if report.longrepr else ""
        report.outcome = "failed"
        report.longrepr = f"Timeout: the test's time ran out while its {call.when} report was made{said}"
    return report
