"""The corpus of change sets config-sync must refuse or hold: a case, and the edits it is made of
(slurm.conf rewritten or appended to, a file added or dropped). Every `@T@` in an edit is the
target directory, where slurmctld reads the set."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

Files = dict[str, bytes]
Change = Callable[[Files, Files, str], tuple[Files, Files]]
ANY = frozenset({"rejected", "held", "restart_required"})


@dataclass(frozen=True)
class Case:
    name: str
    change: Change
    says: tuple[str, ...]  # the reason holds one of these (case-insensitive)
    kinds: frozenset[str] = ANY
    jobs: frozenset[str] = field(default_factory=frozenset)  # partitions whose job is named as at risk


def refused(name: str, change: Change, *says: str) -> Case:
    """A case refused outright: never held for a job, never waiting on a restart."""
    return Case(name, change, says, frozenset({"rejected"}))


def held(name: str, change: Change, says: tuple[str, ...], *partitions: str) -> Case:
    """A case held for the running jobs of these partitions, which the reason names as at risk."""
    return Case(name, change, says, frozenset({"held"}), frozenset(partitions))


def conf(edit: Callable[[str], str]) -> Change:
    def change(c: Files, s: Files, target: str) -> tuple[Files, Files]:
        return {**c, "slurm.conf": edit(c["slurm.conf"].decode().replace("@T@", target)).encode()}, s

    return change


def append(text: str) -> Change:
    def change(c: Files, s: Files, target: str) -> tuple[Files, Files]:
        return {**c, "slurm.conf": c["slurm.conf"] + text.replace("@T@", target).encode() + b"\n"}, s

    return change


def file(name: str, data: bytes | None, then: Change | None = None) -> Change:
    def change(c: Files, s: Files, target: str) -> tuple[Files, Files]:
        c = {**c}
        if data is None:
            c.pop(name, None)
        else:
            c[name] = data.replace(b"@T@", target.encode())
        return then(c, s, target) if then else (c, s)

    return change


def drop(prefix: str) -> Callable[[str], str]:
    return lambda t: "\n".join(ln for ln in t.splitlines() if not ln.startswith(prefix)) + "\n"


def node_line(t: str, name: str = "n1") -> str:
    return next(ln for ln in t.splitlines() if ln.startswith(f"NodeName={name} "))


def include(extra: bytes) -> Change:
    return file("extra.conf", extra, append("Include @T@/extra.conf"))


def kind(st: dict[str, Any]) -> str:
    if st["held_for_jobs"]:
        return "held"
    return "restart_required" if st["restart_required"] else "rejected"


def judged(sha: str) -> Callable[[dict[str, Any]], bool]:
    """A status that has judged the set `sha`: refused or applied it, nothing pending."""

    def done(st: dict[str, Any]) -> bool:
        return any(st[k] and st[k]["sha256"] == sha for k in ("rejected", "applied")) and not st["pending"]

    return done


def wrong_verdict(case: Case, st: dict[str, Any], jobs: Mapping[str, int]) -> list[str]:
    """How a refusal (status `st`) of `case` is not the one expected: its reason says none of
    `case.says`, its kind is not one of `case.kinds`, or it does not name as held the jobs of
    `case.jobs`'s partitions (`jobs`: partition -> its job)."""
    reason = st["rejected"]["reason"]
    wrong = []
    if not any(s.lower() in reason.lower() for s in case.says):
        wrong.append(f"reason {reason!r} has none of {case.says}")
    if kind(st) not in case.kinds:
        wrong.append(f"{kind(st)}, expected {sorted(case.kinds)} ({reason[:300]})")
    want = {jobs[p] for p in case.jobs}
    if not want <= set(st["held_for_jobs"]):
        wrong.append(f"held for {st['held_for_jobs']}, expected {sorted(want)}")
    return wrong
