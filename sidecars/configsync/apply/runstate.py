"""Run-time node state kept across config-sync's reconfigure (issue 37, docs/node-state.md).

`scontrol reconfigure` loses node attributes set at run time with `scontrol update`, measured on
22.05, 24.11 and 26.05 in both shapes: features and Weight (back to slurm.conf's or the dynamic
node's registration), a topology placed in place (25.05+), and a DOWN set by an admin (the restarted
slurmd registers and `ReturnToService=2` returns it). Drains, Comment and Extra are kept; a run-time
Gres is refused to begin with. Whose the state is does not matter: ours (the control plane's
features, topology and drains), Slinky's operator's and an admin's are all put back.

Around each reconfigure: `hold` takes, from the fleet read before the change, what each node has and
the change does not itself set (a value the new files give the node differently is the change's, and
wins). Right after the reconfigure returns, `keep` reads the held nodes, puts back what differs, and
reads again to say whether it is back. A DOWN held on a node whose slurmd answers is lost later, at
that slurmd's registration (1.5 s after a 24.11/26.05 reconfigure, 3.7 s on 22.05, measured), so
with one held `keep` watches until `watch_seconds` (config-sync's registration wait) and puts it back
again each time. Whatever Slurm set itself (a "Not responding" DOWN) is Slurm's to lift, never held.

A restart of slurmctld on its saved state loses the same (measured on every release and shape), so
config-sync's restarts hold and keep it too, watching the whole registration window: the running
slurmds register with the new controller when they will.

What is lost is also what `plan` says a change's reconfigure (or restart) would wipe (`would_wipe`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from sidecars.configsync.fileset.conffile import SlurmConf
from sidecars.slurm import SlurmClient, SlurmError
from sidecars.slurm.models import Node
from sidecars.slurm.reasons import Owner, owner

log = structlog.get_logger(__name__)

POLL_SECONDS = 0.2  # how often a held DOWN is read while its slurmd may still register
NAMED_AT_MOST = 5

# the attributes a reconfigure loses, and the files' key that sets each one (a change that sets it
# for a node is that node's new value: not put back)
FEATURES, WEIGHT, TOPOLOGY, DRAIN, DOWN = "features", "weight", "topology", "drain", "down"
FILE_KEYS: dict[str, tuple[str, ...]] = {
    FEATURES: ("feature", "features"),
    WEIGHT: ("weight",),
    TOPOLOGY: ("topology",),
    DRAIN: ("state", "reason"),
    DOWN: ("state", "reason"),
}
# measured (docs/node-state.md): lost by every release and shape, but topology (25.05+ only; a
# Slinky worker's own registration gives it back) and drains (kept everywhere: held all the same,
# as the check that they are)
LOST = (FEATURES, WEIGHT, TOPOLOGY, DOWN)


@dataclass(frozen=True, slots=True)
class Held:
    """One node's run-time state, as it was before the change."""

    features: tuple[tuple[str, ...], tuple[str, ...]] | None = None  # (available, active)
    weight: int | None = None
    topology: str = ""
    drain: str | None = None  # the reason of a drain that is not Slurm's own
    down: str | None = None  # the reason of a DOWN that is not Slurm's own, slurmd answering

    def attributes(self) -> list[str]:
        return [a for a in (FEATURES, WEIGHT, TOPOLOGY, DRAIN, DOWN) if getattr(self, a)]


@dataclass
class Kept:
    """What `keep` did after one reconfigure (`/status` `node_state.last`, the history's reason)."""

    held: int = 0  # nodes with run-time state held
    put_back: dict[str, list[str]] = field(default_factory=dict)  # attribute -> nodes put back
    not_back: list[str] = field(default_factory=list)  # "node attribute: why", after the watch
    back_seconds: float | None = None  # the reconfigure's return until the last put-back read back
    watched_seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.not_back

    def describe(self) -> str:
        parts = [f"{a} of {few(names)}" for a, names in sorted(self.put_back.items())]
        said = f"run-time node state put back: {'; '.join(parts)}" if parts else ""
        if self.not_back:
            said = "; ".join(w for w in (said, f"not back: {few(self.not_back)}") if w)
        return said

    def as_json(self) -> dict[str, Any]:
        return {
            "held_nodes": self.held,
            "put_back": {a: sorted(n) for a, n in sorted(self.put_back.items())},
            "not_back": sorted(self.not_back),
            "back_seconds": None if self.back_seconds is None else round(self.back_seconds, 3),
            "watched_seconds": round(self.watched_seconds, 3),
        }


def few(names: Iterable[str]) -> str:
    listed = sorted(names)
    head = ", ".join(listed[:NAMED_AT_MOST])
    return head if len(listed) <= NAMED_AT_MOST else f"{head} and {len(listed) - NAMED_AT_MOST} more"


def _theirs(reason: str | None) -> str | None:
    """The reason of a state somebody set (us, the operator, an admin), None when Slurm set it."""
    text = (reason or "").strip()
    return text if text and owner(text) is not Owner.SLURM else None


def held_of(node: Node) -> Held:
    drain = _theirs(node.reason.text if node.reason else None) if "DRAIN" in node.state.flags else None
    # a slurmd that answers registers again and returns the node; a record without one never does
    answers = node.state.registered and node.slurmd_start_time is not None
    down = node.reason.text if node.reason and node.state.base == "DOWN" and answers else None
    return Held(
        features=(node.features, node.active_features),
        weight=node.weight,
        topology=node.topology,
        drain=drain,
        down=_theirs(down),
    )


def _changed_by(old: SlurmConf, new: SlurmConf) -> dict[str, set[str]]:
    """Node -> the attributes the change sets for it (its fields in the files differ)."""
    before, after = old.node_definitions(), new.node_definitions()
    out: dict[str, set[str]] = {}
    for name in set(before) | set(after):
        a, b = before.get(name, {}), after.get(name, {})
        for attr, keys in FILE_KEYS.items():
            if any(a.get(k) != b.get(k) for k in keys):
                out.setdefault(name, set()).add(attr)
    return out


def _from_files(node: Node, defined: Mapping[str, str] | None) -> tuple[bool, bool]:
    """(features, weight): whether the node's value is one a reconfigure would give back anyway (the
    files' value for a node they define; a dynamic node keeps its available features and its active
    ones become those, and its Weight goes back to 1): such a value needs no keeping."""
    if defined is None:
        return node.active_features == node.features, node.weight in (None, 1)
    said = sorted(f for f in (defined.get("feature") or defined.get("features") or "").split(",") if f)
    same = said == sorted(node.features) == sorted(node.active_features)
    return same, node.weight is None or defined.get("weight", "1") == str(node.weight)


def hold(nodes: Mapping[str, Node], old: SlurmConf, new: SlurmConf) -> dict[str, Held]:
    """What to keep of each node: what it has now that a reconfigure would lose (or, for drains,
    might), less what the change itself sets."""
    changed = _changed_by(old, new)
    files = old.node_definitions()
    out: dict[str, Held] = {}
    for name, node in nodes.items():
        h = held_of(node)
        mine = changed.get(name, set())
        same_features, same_weight = _from_files(node, files.get(name))
        # a state the files give (a record's `State=DRAIN Reason=...`) is no run-time state: every
        # reconfigure sets it again, and holding it would read a large cluster's records each change
        filed = (files.get(name) or {}).get("state", "").upper() in {"DRAIN", "DOWN"}
        h = Held(
            features=None if FEATURES in mine or same_features else h.features,
            weight=None if WEIGHT in mine or same_weight else h.weight,
            topology="" if TOPOLOGY in mine else h.topology,
            drain=None if DRAIN in mine or filed else h.drain,
            down=None if DOWN in mine or filed else h.down,
        )
        if h.attributes():
            out[name] = h
    return out


def lost(want: Held, now: Node) -> list[str]:
    """The held attributes `now` no longer has. A drain or DOWN is lost when the node is back in
    service, not when Slurm has since put it out of service for a reason of its own."""
    out = []
    if want.features is not None and (
        sorted(want.features[0]) != sorted(now.features)
        or sorted(want.features[1]) != sorted(now.active_features)
    ):
        out.append(FEATURES)
    if want.weight is not None and now.weight is not None and want.weight != now.weight:
        out.append(WEIGHT)
    if want.topology and now.topology != want.topology:
        out.append(TOPOLOGY)
    # a state Slurm set since (a registration refused: drained, INVALID) is the change's harm, for
    # the harm judge to see and undo (harm.py): never written over here
    slurms = owner(now.reason.text if now.reason else None) is Owner.SLURM
    if want.drain and "DRAIN" not in now.state.flags and not slurms:
        out.append(DRAIN)
    if want.down and now.state.base != "DOWN" and "DRAIN" not in now.state.flags and not slurms:
        out.append(DOWN)
    return out


def would_wipe(nodes: Mapping[str, Node], old: SlurmConf, new: SlurmConf) -> dict[str, list[str]]:
    """`plan`: attribute -> the nodes whose run-time value the change's reconfigure would lose
    (docs/node-state.md), and config-sync puts back right after it."""
    out: dict[str, list[str]] = {}
    for name, h in sorted(hold(nodes, old, new).items()):
        for attr in h.attributes():
            if attr in LOST:
                out.setdefault(attr, []).append(name)
    return out


class RunState:
    """Keeps the held run-time node state across one reconfigure."""

    def __init__(self, client: SlurmClient, *, watch_seconds: float, poll_seconds: float = POLL_SECONDS):
        self.client = client
        self.watch_seconds = watch_seconds
        self.poll_seconds = poll_seconds
        self.last: Kept | None = None

    async def _put_back(
        self, held: Mapping[str, Held], now: Mapping[str, Node], kept: Kept, refused: set[tuple[str, ...]]
    ) -> bool:
        """Put back what each node lost; True when something was. Nodes sharing a value share a call;
        a value Slurm refused (a topology the new file no longer has) is not sent again."""
        groups: dict[tuple[str, ...], list[str]] = {}
        for name, want in held.items():
            node = now.get(name)
            if node is None:
                continue  # gone from Slurm (the change removed it): nothing to put back on
            for attr in lost(want, node):
                key: tuple[str, ...]
                if attr == FEATURES:
                    assert want.features is not None
                    key = (attr, ",".join(want.features[0]), ",".join(want.features[1]))
                elif attr == WEIGHT:
                    key = (attr, str(want.weight))
                elif attr == TOPOLOGY:
                    key = (attr, want.topology)
                else:
                    key = (attr, str(want.drain if attr == DRAIN else want.down))
                groups.setdefault(key, []).append(name)
        for key, names in sorted(groups.items()):
            attr = key[0]
            if key in refused:
                continue
            try:
                if attr == FEATURES:
                    await self.client.update_nodes(names, AvailableFeatures=key[1], ActiveFeatures=key[2])
                elif attr == WEIGHT:
                    await self.client.update_nodes(names, Weight=key[1])
                elif attr == TOPOLOGY:
                    await self.client.set_topology(names, key[1])
                elif attr == DRAIN:
                    await self.client.drain(names, key[1])
                else:
                    await self.client.down(names, key[1])
            except (SlurmError, ValueError) as exc:
                log.warning("node_state_not_put_back", attribute=attr, nodes=few(names), error=str(exc))
                refused.add(key)
                continue
            log.info("node_state_put_back", attribute=attr, nodes=few(names))
            done = kept.put_back.setdefault(attr, [])
            done.extend(n for n in names if n not in done)
        return bool(groups)

    async def _read(self, names: Iterable[str]) -> dict[str, Node] | None:
        try:
            return await self.client.nodes_named(names)
        except SlurmError as exc:
            log.warning("node_state_unread", error=exc.message)
            return None

    async def keep(self, held: Mapping[str, Held], returned: float, *, watch: bool = False) -> Kept:
        """Right after the reconfigure returned (`returned`, monotonic): put back what was lost, read
        it back, and with a DOWN held (or `watch`: after a restart, whose slurmds register with the
        new slurmctld when they will) watch until `watch_seconds` after it, putting back again."""
        kept = Kept(held=len(held))
        self.last = kept
        if not held:
            return kept
        watching = watch or any(h.down for h in held.values())
        watch_until = returned + (self.watch_seconds if watching else 0.0)
        refused: set[tuple[str, ...]] = set()
        now = await self._read(held)
        while True:
            if now is not None and await self._put_back(held, now, kept, refused):
                now = await self._read(held)  # read back: the put-back shows, or says what did not
                if now is not None and not any(lost(h, now[n]) for n, h in held.items() if n in now):
                    kept.back_seconds = time.monotonic() - returned
            if time.monotonic() >= watch_until:
                break
            await asyncio.sleep(self.poll_seconds)
            now = await self._read(held)
        kept.watched_seconds = time.monotonic() - returned
        if now is None:
            kept.not_back = [f"{few(held)}: slurmctld could not be read"]
        else:
            kept.not_back = [
                f"{n} {attr}" for n, h in sorted(held.items()) if n in now for attr in lost(h, now[n])
            ]
        if kept.put_back or kept.not_back:
            log.info("node_state_kept", **kept.as_json())
        return kept
