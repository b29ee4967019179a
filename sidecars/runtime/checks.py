"""Named health checks: each answers (ok, detail); /livez and /readyz report every one of them."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from sidecars.runtime.waits import all_of, within

CheckFn = Callable[[], "CheckResult | Awaitable[CheckResult]"]


@dataclass(frozen=True, slots=True)
class CheckResult:
    ok: bool
    detail: str = ""

    def as_json(self) -> dict[str, object]:
        return {"ok": self.ok, "detail": self.detail}


@dataclass
class Checks:
    """A set of named checks, run together; one that raises or hangs counts as failed."""

    timeout: float = 2.0
    _checks: dict[str, CheckFn] = field(default_factory=dict)

    def add(self, name: str, fn: CheckFn) -> None:
        self._checks[name] = fn

    async def run(self) -> tuple[bool, dict[str, CheckResult]]:
        async def one(fn: CheckFn) -> CheckResult:
            try:
                value = fn()
                if inspect.isawaitable(value):
                    value = await within(value, self.timeout)
                return value
            except TimeoutError:
                return CheckResult(False, f"check did not answer within {self.timeout:g}s")
            except Exception as exc:  # a broken check must say so, not crash the probe endpoint
                return CheckResult(False, f"check failed: {exc}")

        names = list(self._checks)
        results = await all_of(*(one(self._checks[n]) for n in names))
        out = dict(zip(names, results, strict=True))
        return all(r.ok for r in results), out
