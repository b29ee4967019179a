"""Fixtures of the tests that run several roles together (helpers come from each role's tests)."""

from tests.worker.conftest import sockdir

__all__ = ["sockdir"]
