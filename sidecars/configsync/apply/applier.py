"""Reconfigure slurmctld (or restart it) and verify it really took the new set.

`scontrol reconfigure` returning 0 proves little: 24.11 keeps its old config on a bad file (and says
only `Unspecified error`), and "Configuration data as of" is only the query time. So a change counts
as applied when slurmctld keeps answering through a settle period, the values that changed in the
files are what it now reports, and no node that was up went DOWN.

At size (1,000 nodes) the node list is the one costly read: the settings and partitions are polled,
the fleet is read once, at the end, and serves both the node checks and the workers' verdict. Only
nodes a change is about are judged: a record Slurm does not list (FUTURE; CLOUD on 22.05), one that
is DOWN, powered down or never registered, or a dynamic node, never fails a change it is not part of.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import structlog

from sidecars.configsync.apply import harm as fleet_harm
from sidecars.configsync.apply import runstate
from sidecars.configsync.apply.views import SlurmView, settings_view
from sidecars.configsync.apply.workers import WorkerCheck, answered
from sidecars.configsync.fileset.conffile import SlurmConf
from sidecars.runtime import files, offloop
from sidecars.runtime.waits import until_set
from sidecars.slurm import SlurmClient, SlurmError, SlurmTimeout
from sidecars.slurm.models import Node
from sidecars.slurm.textformat import parse_minutes

log = structlog.get_logger(__name__)

DOWN_SECONDS = 2.0  # a controller that says DOWN this long after a change died of it
NAMED_AT_MOST = 5  # a reason names this many nodes, then "and N more"
# what a node or a record weighs in the judgement of the fleet after a change, as characters read
# (offloop.sized): a node's listing is a few hundred; a fleet of ~650 nodes and up is judged in a thread
FLEET_CHARS_PER_NODE = 100
# records Slurm keeps out of its node listings: FUTURE always, powered-down CLOUD ones on 22.05
_UNLISTED_STATES = ("future", "cloud")

T = TypeVar("T")

_LOG_TROUBLE = re.compile(r"\b(error|fatal)\b|reconfigure failed", re.IGNORECASE)
_HARMLESS = re.compile(
    r"pmix|Could not open .* state file|No such file or directory, retrying|"
    r"_refresh_assoc_mgr|is not a valid character or block device",
    re.IGNORECASE,
)


@dataclass
class ApplyOutcome:
    ok: bool
    reason: str = ""
    controller_died: bool = False
    took_request: bool = False  # slurmctld accepted the reconfigure/restart (it may run part of the set)
    settled: bool = True  # False: a later change cut the settle period short
    steps: list[str] = field(default_factory=list)
    reconfigure_seconds: float | None = None  # `scontrol reconfigure` until it returned
    harm: fleet_harm.Harm | None = None  # what the change did to the fleet's health (harm.py)
    since: float | None = None  # the change's time (epoch): what Slurm set after it is the change's
    # the run-time node state held across the reconfigure, and what was put back (runstate.py)
    held: dict[str, runstate.Held] = field(default_factory=dict)
    kept: runstate.Kept | None = None


def few(names: Iterable[str], limit: int = NAMED_AT_MOST) -> str:
    """`a, b, c and 997 more`: a reason stays readable however many nodes it is about."""
    listed = sorted(names)
    head = ", ".join(listed[:limit])
    return head if len(listed) <= limit else f"{head} and {len(listed) - limit} more"


_UNITS = ("seconds", "secs", "sec")


def _norm(value: str | None) -> str:
    """A setting's value as compared: case, quotes and a unit of seconds aside. A few ms for a MiB
    value (a pattern anchored at the end was tried at every position: 0.2 s each, on the loop)."""
    v = (value or "").strip().lower()
    unit = next((u for u in _UNITS if v.endswith(u)), None)
    if unit is not None:
        v = v[: -len(unit)].rstrip()
    return v.replace('"', "")


def setting_mismatches(old: SlurmConf, new: SlurmConf, before: SlurmView, after: SlurmView) -> list[str]:
    """Options and partitions changed in the files that slurmctld does not report."""
    out: list[str] = []
    for key in sorted(set(old.options) | set(new.options)):
        a, b = old.options.get(key), new.options.get(key)
        if b is None or _norm(a) == _norm(b) or key not in after.config or key not in before.config:
            continue  # a removed key falls back to a default we cannot know; unreported ones go unchecked
        was, now = _norm(before.config[key]), _norm(after.config[key])
        if now == was and _norm(b) != now:
            out.append(f"{key} is still {after.config[key]!r} (file says {b!r})")
    new_parts, old_parts = new.partitions(), old.partitions()
    if new_parts and set(new_parts) != set(after.partitions):
        out.append(f"partitions are {sorted(after.partitions)}, the files define {sorted(new_parts)}")
    for name, rec in new_parts.items():
        seen = after.partitions.get(name)
        if seen is None or (name in old_parts and old_parts[name].fields == rec.fields):
            continue
        want_max = rec.fields.get("maxtime")
        if want_max is not None and parse_minutes(want_max) != seen.max_time_minutes:
            out.append(f"partition {name} MaxTime is {seen.max_time_minutes} min, the files say {want_max}")
        want_state = rec.fields.get("state")
        if want_state is not None and want_state.upper() != seen.state.upper():
            out.append(f"partition {name} State is {seen.state}, the files say {want_state}")
    return out


def _fleet_mismatches(
    old: SlurmConf, new: SlurmConf, before: SlurmView, listed: Mapping[str, Node]
) -> tuple[list[str], list[str]]:
    return node_mismatches(old, new, before, listed), unlisted_added(old, new, listed)


def unlisted_added(old: SlurmConf, new: SlurmConf, listed: Mapping[str, Node]) -> list[str]:
    """Nodes the change adds to the files that slurmctld does not list, but should: a FUTURE record
    (and a powered-down CLOUD one on 22.05) is never listed, and a node the change does not add was
    there before it, listed or not, so neither says anything about this change."""
    old_names = set(old.node_names())
    defined = new.node_definitions()
    return sorted(
        name
        for name, fields in defined.items()
        if name not in old_names
        and name not in listed
        and fields.get("state", "").lower() not in _UNLISTED_STATES
    )


def node_mismatches(
    old: SlurmConf, new: SlurmConf, before: SlurmView, after: Mapping[str, Node]
) -> list[str]:
    """Nodes whose features the change set and slurmctld does not report; answering nodes that went
    DOWN or INVALID. Read from one listing of the fleet; each kind of failure names a few nodes."""
    out: list[str] = []
    old_fields, new_fields = old.node_definitions(), new.node_definitions()
    for name, fields in new_fields.items():
        seen_node = after.get(name)
        if seen_node is None or old_fields.get(name, {}).get("feature") == fields.get("feature"):
            continue
        want = tuple(f for f in (fields.get("feature") or fields.get("features") or "").split(",") if f)
        if sorted(want) != sorted(seen_node.features):
            out.append(f"node {name} features are {list(seen_node.features)}, the files say {list(want)}")
    went: dict[tuple[str, str], list[str]] = {}
    for name, node in before.nodes.items():
        now_node = after.get(name)
        if name not in new_fields or now_node is None or not answered(node):
            continue
        why = now_node.reason.text if now_node.reason else "no reason"
        if now_node.state.base == "DOWN":
            went.setdefault(("went DOWN", why), []).append(name)
        elif {"INVALID", "INVALID_REG"} & (now_node.state.flags - node.state.flags):
            went.setdefault(("became INVALID", why), []).append(name)
    for (what, why), names in sorted(went.items()):
        out.append(f"node{'s' if len(names) > 1 else ''} {few(names)} {what} ({why})")
    return out


class LogTail:
    """New error lines of slurmctld's log since `mark()`, when the log is readable from here."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.offset = 0

    def mark(self) -> None:
        self.offset = 0 if self.path is None else files.size_of(self.path)

    def trouble(self, limit: int = 6) -> list[str]:
        read = None if self.path is None else files.read_since(self.path, self.offset, 256 * 1024)
        if read is None:
            return []
        text = read[0].decode("utf-8", "replace")
        lines = [ln.split("] ", 1)[-1].strip() for ln in text.splitlines()]
        return [ln for ln in lines if _LOG_TROUBLE.search(ln) and not _HARMLESS.search(ln)][:limit]


class Applier:
    def __init__(
        self,
        client: SlurmClient,
        *,
        settle_seconds: float,
        restart_timeout: float,
        log_path: Path | None = None,
        registration_seconds: float = 10.0,
    ) -> None:
        self.client = client
        self.settle_seconds = settle_seconds
        self.restart_timeout = restart_timeout
        self.registration_seconds = registration_seconds
        self.tail = LogTail(log_path)
        # the configless workers took it too (workers.py), waited for as long as Slurm needs
        self.workers = WorkerCheck(client, wait=registration_seconds)
        self.last_harm: fleet_harm.Harm | None = None  # the judge's verdict on the last change
        # run-time node state a reconfigure loses, put back right after it, watched as long as a
        # registration may still take it (runstate.py)
        self.runstate = runstate.RunState(client, watch_seconds=registration_seconds)

    async def _answers(self, deadline: float) -> bool:
        while True:
            with contextlib.suppress(SlurmError):
                if (await self.client.ping()).up:
                    return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.2)

    async def _watched(self, read: Callable[[], Awaitable[T]]) -> T | None:
        """What `read` returns, or None once slurmctld has not answered a ping for DOWN_SECONDS.

        A read of a dead controller blocks: scontrol retries the connection ~9 s (22.05 and 24.11)
        and the client retries that, while `scontrol ping` says DOWN at once. A foreground slurmctld
        (our images) that cannot start on the new files dies right after answering the reconfigure."""
        task = asyncio.ensure_future(read())
        down_since: float | None = None
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=0.2)
                if done:
                    return task.result()
                if (await self.client.ping()).up:
                    down_since = None
                elif down_since is None:
                    down_since = time.monotonic()
                elif time.monotonic() - down_since >= DOWN_SECONDS:
                    return None
        finally:
            # the read's own end is always collected, an error included: given up on, it may have
            # failed meanwhile, and an error nobody retrieves is asyncio's "never retrieved"
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _read(self, read: Callable[[], Awaitable[T]]) -> T | SlurmError | None:
        """`_watched`, with a failed read returned: None means slurmctld stopped answering."""
        try:
            got: T | None = await self._watched(read)
        except SlurmError as exc:
            if not await self._answers(time.monotonic() + DOWN_SECONDS):
                return None
            return exc
        return got

    async def verify(
        self,
        old: SlurmConf,
        new: SlurmConf,
        before: SlurmView,
        *,
        wait: float,
        interrupt: asyncio.Event | None = None,
        since: float | None = None,
        workers: bool = True,
    ) -> ApplyOutcome:
        """Poll the settings until the new values show (at most `wait` s), then keep checking
        through the settle period, which `interrupt` (a later change waiting) ends early: the later
        change's own verification keeps watching slurmctld, so it never waits for this one's settle.
        Then the fleet is read once, for the node checks and, given the change's time `since`, the
        workers' verdict (workers.py, with `workers`) and the harm judge's (harm.py)."""
        settle_end = time.monotonic() + self.settle_seconds
        deadline = time.monotonic() + max(wait, 1.0)
        problems: list[str] = []
        seen_ok = False
        settled = True
        after = before
        while True:
            # an answer to these reads is also the proof that slurmctld answers
            got = await self._read(lambda: settings_view(self.client))
            if got is None:
                return ApplyOutcome(
                    False, "slurmctld stopped answering after the change", controller_died=True
                )
            if isinstance(got, SlurmError):
                problems = [f"slurmctld could not be read: {got.message}"]
            else:
                after = got
                problems = setting_mismatches(old, new, before, after)
            now = time.monotonic()
            if not problems:
                seen_ok = True
                if now >= settle_end or (interrupt is not None and interrupt.is_set()):
                    settled = now >= settle_end
                    break
            elif seen_ok or now >= deadline:
                return ApplyOutcome(False, "; ".join(problems))
            if not seen_ok:
                await asyncio.sleep(0.02)
            elif interrupt is None:
                await asyncio.sleep(min(0.5, max(0.0, settle_end - now)))
            else:
                await until_set(interrupt, min(0.5, max(0.0, settle_end - now)))
        return await self._fleet(old, new, before, after, since, settled, workers=workers)

    async def _fleet(
        self,
        old: SlurmConf,
        new: SlurmConf,
        before: SlurmView,
        after: SlurmView,
        since: float | None,
        settled: bool,
        *,
        workers: bool = True,
    ) -> ApplyOutcome:
        """The one read of every node after the change, and what it shows. The workers are waited
        for until each registered again (workers.py); the harm judge reads what that read (harm.py),
        so a change that hurts nobody waits for nothing more."""
        nodes = await self._read(self.client.node_listing)
        if nodes is None:
            return ApplyOutcome(False, "slurmctld stopped answering after the change", controller_died=True)
        if isinstance(nodes, SlurmError):
            return ApplyOutcome(False, f"slurmctld's nodes could not be read: {nodes.message}")
        listed = {n.name: n for n in nodes}
        # every node of both sets' records against the listing: CPU-bound with the fleet's size
        size = (len(listed) + len(old.records) + len(new.records)) * FLEET_CHARS_PER_NODE
        problems, missing = await offloop.sized(size, _fleet_mismatches, old, new, before, listed)
        if missing:  # the listing leaves some states out: asked by name, with FUTURE ones shown
            try:
                found = await self.client.nodes_named(missing)
            except SlurmError as exc:
                return ApplyOutcome(False, f"slurmctld's nodes could not be read: {exc.message}")
            unknown = [n for n in missing if n not in found]
            if unknown:
                problems.append(f"nodes {few(unknown)} are not known to slurmctld")
        verdict = None
        latest = listed
        if since is not None and workers:
            verdict = await self.workers.verify(since, before.nodes, nodes, after.config)
            latest = {**listed, **self.workers.latest}
        harm = None
        if since is not None:
            harm = await offloop.sized(
                len(latest) * FLEET_CHARS_PER_NODE,
                fleet_harm.judge,
                before.nodes,
                latest,
                since,
                before.partitions,
                after.partitions,
            )
            self.last_harm = harm
            if not harm.ok:
                problems.append(harm.reason())
        if problems:
            return ApplyOutcome(False, "; ".join(problems), settled=settled, harm=harm, since=since)
        if verdict is not None and not verdict.ok:
            return ApplyOutcome(False, verdict.reason(), settled=settled, harm=harm, since=since)
        return ApplyOutcome(True, settled=settled, harm=harm, since=since)

    async def reconfigure(
        self, old: SlurmConf, new: SlurmConf, before: SlurmView, *, interrupt: asyncio.Event | None = None
    ) -> ApplyOutcome:
        self.tail.mark()
        held = runstate.hold(before.nodes, old, new)
        since = time.time()
        asked = time.monotonic()
        late: str | None = None
        try:  # 23.11 on, a reconfigure is a new slurmctld: it gets a restart's time to answer
            await self.client.reconfigure(timeout=self.restart_timeout)
        except SlurmTimeout as exc:
            # a late answer is no refusal: slurmctld may be running the set already, and what it
            # reports below decides; a rollback on a guess would be a second reconfigure for nothing
            late = exc.message
            log.warning("reconfigure_answer_late", error=exc.message)
        except SlurmError as exc:
            await asyncio.sleep(0.2)  # slurmctld logs why a moment after it answered
            words = [exc.message, *self.tail.trouble()]
            alive = await self._answers(time.monotonic() + 3.0)
            return ApplyOutcome(False, "; ".join(w for w in words if w), controller_died=not alive)
        returned = time.monotonic()
        took = returned - asked
        # what the reconfigure took is put back at once, beside the verification (which waits); a
        # change that fails is rolled back, and the rollback's reconfigure keeps it again
        wait = self.restart_timeout if late else 3.0
        outcome = await _verified(
            held,
            self.runstate.keep(held, returned),
            self.verify(old, new, before, wait=wait, interrupt=interrupt, since=since),
        )
        outcome.reconfigure_seconds = took
        if not outcome.ok:
            said = [late or "", outcome.reason, *self.tail.trouble()]
            outcome.reason = "; ".join(w for w in said if w)
        return outcome

    async def reconfigure_back(self, held: Mapping[str, runstate.Held]) -> runstate.Kept:
        """A rollback's `scontrol reconfigure` to the good set, and the run-time node state held
        before the change put back after it. Raises SlurmError when slurmctld refuses it."""
        await self.client.reconfigure(timeout=self.restart_timeout)
        return await self.runstate.keep(held, time.monotonic())

    async def _boot_time(self) -> str | None:
        """slurmctld's BOOT_TIME once its clock has left that second. BOOT_TIME has 1-s resolution,
        so a controller restarted within the second the old one booted in (a quick container restart
        after a recent start) would look unrestarted; this waits out that second (at most ~1 s)."""
        for _ in range(12):
            try:
                boot = await self.client.boot_time(timeout=5.0)
            except SlurmError:
                return None
            if boot.booted is None or boot.asked is None or boot.asked != boot.booted:
                return boot.booted
            await asyncio.sleep(0.1)
        return boot.booted

    async def restart(self, old: SlurmConf, new: SlurmConf, before: SlurmView) -> ApplyOutcome:
        """`scontrol shutdown`: slurmctld saves its state and exits; its container starts it again.
        It is back when it answers with another BOOT_TIME (polling ping alone can miss a quick restart).
        A restart loses the run-time node state a reconfigure does (docs/node-state.md): held before,
        put back beside the verification, watched until every slurmd may have registered again."""
        self.tail.mark()
        held = runstate.hold(before.nodes, old, new)
        booted = await self._boot_time() or before.config.get("boot_time")
        since = time.time()
        try:
            await self.client.shutdown_controller()
        except SlurmTimeout as exc:  # late is no refusal: a new BOOT_TIME below says it restarted
            log.warning("shutdown_answer_late", error=exc.message)
        except SlurmError as exc:
            return ApplyOutcome(False, f"scontrol shutdown failed: {exc.message}")
        deadline = time.monotonic() + self.restart_timeout
        while True:
            left = max(0.5, deadline - time.monotonic())
            try:  # unretried: the deadline is ours to keep, not the client's retry budget
                if (await self.client.boot_time(timeout=min(5.0, left))).booted != booted:
                    break
            except SlurmError:
                pass  # down, as expected for a while
            if time.monotonic() >= deadline:
                return ApplyOutcome(
                    False,
                    f"slurmctld did not come back within {self.restart_timeout:g}s of the restart",
                    controller_died=True,
                )
            await asyncio.sleep(0.2)
        return await _verified(
            held,
            self.runstate.keep(held, time.monotonic(), watch=True),
            self.verify(old, new, before, wait=10.0, since=since, workers=False),
        )


async def _verified(
    held: dict[str, runstate.Held], keep: Awaitable[runstate.Kept], verify: Awaitable[ApplyOutcome]
) -> ApplyOutcome:
    """A change's verification, with the run-time node state it lost put back beside it (`keep`):
    what was put back is counted only for a change that passed; its end is collected either way."""
    keeping = asyncio.ensure_future(keep)
    try:
        outcome = await verify
        if outcome.ok:
            outcome.kept = await keeping
    finally:
        keeping.cancel()  # a no-op once it ended
        await asyncio.gather(keeping, return_exceptions=True)  # its end collected, whatever it was
    outcome.took_request = True
    outcome.held = held
    return outcome
