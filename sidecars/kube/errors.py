"""What the Kubernetes edge raises: kubernetes-asyncio's own exception never leaves this package."""

from __future__ import annotations


class KubeError(Exception):
    """The API server refused a call (after the retries of this edge): its HTTP status and reason."""

    def __init__(self, operation: str, status: int, reason: str) -> None:
        self.operation = operation
        self.status = status
        self.reason = reason
        super().__init__(f"{operation}: HTTP {status} {reason}".rstrip())


class Fenced(KubeError):
    """A write not sent: this replica does not hold the Lease (with margin) at the moment of sending."""

    def __init__(self, operation: str) -> None:
        super().__init__(operation, 0, "not sent: this replica does not hold the Lease")


class WatchSilent(KubeError):
    """A watch that sent nothing, not even a bookmark, for longer than the bound (a half-open
    connection, an API server that accepted it and went quiet): the cache lists again."""

    def __init__(self, operation: str, seconds: float) -> None:
        super().__init__(operation, 0, f"watch silent for {seconds:g}s")


class LeaseConflict(Exception):
    """Someone else created or updated the Lease first (HTTP 409): re-read it."""
