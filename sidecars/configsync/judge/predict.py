"""What the workers' registration would say of a set, told before the swap.

slurmctld judges every registration against slurm.conf and gres.conf; a worker that reports less than
they now say is drained (harm.py undoes that after the fact). Some of it can be read off the files
and the fleet before anything is swapped, measured on 22.05, 24.11 and 26.05 in both shapes:

- a GRES whose gres.conf lines the change removes (the file dropped, or its lines): every worker
  configured with it registers 0 of it (`gres/gpu count reported lower than configured (0 < 1)`);
- a GRES typed in slurm.conf (`Gres=gpu:h100:2`) for which gres.conf gives only other types:
  the worker registers 0 of that type;
- a count above the devices gres.conf gives the worker (`(1 < 2)`);
- a NodeSet whose Feature no worker has: its partition gets no node at all;
- a NodeName line for a registered dynamic worker (24.11, 26.05): the node turns static and the
  worker stops answering, and the rollback does not bring it back (the judge sees it, the undo
  cannot mend it: so it must be refused before).

A worker's configured GRES is its NodeName line's `Gres=`, or, for a dynamic worker (Slinky's
`slurmd -Z --conf "Gres=gpu:1 ..."`), what slurmctld lists for it. Only what the change makes worse
is refused: a mismatch the running set already had drained its workers already and is left to the
operator. gres.conf with `AutoDetect` asks the driver: nothing is predicted of it. RealMemory and
CPUs are not predicted: slurmctld lists what slurm.conf says, not what a static worker has (FreeMem
is only a lower bound; the worker's figure shows only in the drain's reason, after the fact), and a
set cannot raise a dynamic worker's (its `--conf`'s, or what it has); the live judge (harm.py)
catches those, where Slurm drains for them (not under `SlurmdParameters=config_overrides`).

The fleet is read only when the change touches gres.conf, GresTypes, a node's Gres or a NodeSet's
Feature, or names a node no NodeName line named: an ordinary change costs no read of 1,000 nodes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import structlog

from sidecars.configsync.fileset.conffile import SlurmConf, expand
from sidecars.configsync.fileset.sources import FileSet
from sidecars.slurm import SlurmClient, SlurmError
from sidecars.slurm.models import Node

log = structlog.get_logger(__name__)

GRES_CONF = "gres.conf"
NAMED_AT_MOST = 5
_PAREN = re.compile(r"\([^)]*\)")
_COUNT = re.compile(r"^(\d+)([KMGTP]?)$", re.IGNORECASE)
_SCALE = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4, "p": 1024**5}


@dataclass(frozen=True, slots=True)
class GresSpec:
    name: str
    type: str | None
    count: int


def parse_gres(text: str) -> list[GresSpec]:
    """`gpu:2,gpu:a100:1(S:0),nic` as Slurm writes a node's Gres (a bare name counts 1)."""
    out: list[GresSpec] = []
    for item in _PAREN.sub("", text or "").split(","):
        parts = [p.strip() for p in item.strip().split(":")]
        if not parts or not parts[0] or parts[0] == "(null)":
            continue
        count = 1
        kind: str | None = None
        rest = parts[1:]
        if rest and _COUNT.match(rest[-1]):
            m = _COUNT.match(rest.pop())
            assert m is not None
            count = int(m.group(1)) * _SCALE[m.group(2).lower()]
        if rest and rest[0] and rest[0].lower() != "no_consume":
            kind = rest[0].lower()
        out.append(GresSpec(parts[0].lower(), kind, count))
    return out


@dataclass(frozen=True, slots=True)
class GresLine:
    name: str
    type: str | None
    devices: int
    nodes: frozenset[str] | None  # None: every node


def gres_lines(files: FileSet) -> list[GresLine] | None:
    """gres.conf's lines ([] when the set has none); None when `AutoDetect` leaves it to the driver."""
    entry = files.files.get(GRES_CONF)
    if entry is None:
        return []
    out: list[GresLine] = []
    for raw in entry.data.decode("utf-8", "replace").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        kv = {k.lower(): v for k, _, v in (w.partition("=") for w in line.split())}
        if "autodetect" in kv and kv["autodetect"].lower() != "off":
            return None
        if "name" not in kv:
            continue
        if "file" in kv:
            devices = len(expand(kv["file"]))
        elif "count" in kv and _COUNT.match(kv["count"]):
            m = _COUNT.match(kv["count"])
            assert m is not None
            devices = int(m.group(1)) * _SCALE[m.group(2).lower()]
        else:
            devices = 1
        nodes = frozenset(expand(kv["nodename"])) if "nodename" in kv else None
        out.append(GresLine(kv["name"].lower(), kv.get("type", "").lower() or None, devices, nodes))
    return out


def _configured(conf: SlurmConf, live: Mapping[str, Node]) -> dict[str, list[GresSpec]]:
    """Each worker's configured GRES: its NodeName line's, or for a dynamic worker Slurm's listing."""
    out = {name: parse_gres(f.get("gres", "")) for name, f in conf.node_definitions().items()}
    for name, node in live.items():
        if name not in out and node.gres:
            out[name] = parse_gres(node.gres)
    return {n: g for n, g in out.items() if g}


def _gres_problems(
    conf: SlurmConf, lines: list[GresLine] | None, live: Mapping[str, Node]
) -> dict[tuple[str, str], list[str]]:
    """(GRES, what goes wrong) -> the workers it goes wrong for."""
    out: dict[tuple[str, str], list[str]] = {}
    if lines is None:
        return out
    for node, specs in _configured(conf, live).items():
        for spec in specs:
            mine = [ln for ln in lines if ln.name == spec.name and (ln.nodes is None or node in ln.nodes)]
            if not mine:
                why = "gres.conf gives them none (Slurm drains them: count reported lower than configured)"
            elif spec.type is not None and all(ln.type != spec.type for ln in mine):
                types = sorted({ln.type or "untyped" for ln in mine})
                why = (
                    f"its Gres types it {spec.type}, gres.conf only {', '.join(types)} (Slurm drains "
                    "them: count reported lower than configured)"
                )
            else:
                have = sum(ln.devices for ln in mine if spec.type is None or ln.type == spec.type)
                if have >= spec.count:
                    continue
                why = (
                    f"{spec.count} configured, gres.conf gives {have} (Slurm drains them: count "
                    f"reported lower than configured ({have} < {spec.count}))"
                )
            out.setdefault((spec.name, why), []).append(node)
    return out


def _features(conf: SlurmConf, live: Mapping[str, Node]) -> set[str]:
    have: set[str] = set()
    for fields in conf.node_definitions().values():
        have |= {f for f in (fields.get("feature") or fields.get("features") or "").split(",") if f}
    for node in live.values():
        have |= set(node.features) | set(node.active_features)
    return have


def _nodeset_problems(old: SlurmConf, new: SlurmConf, live: Mapping[str, Node]) -> list[str]:
    was = {r.name: r.fields.get("feature") for r in old.of("nodeset")}
    used: dict[str, list[str]] = {}
    for p in new.of("partitionname"):
        for member in expand(p.fields.get("nodes", "")):
            used.setdefault(member, []).append(p.name)
    have = _features(new, live)
    out = []
    for r in new.of("nodeset"):
        feature = r.fields.get("feature")
        if not feature or was.get(r.name) == feature or r.name not in used:
            continue
        wanted = [f for f in re.split(r"[&|,]", feature) if f]
        if wanted and not any(f in have for f in wanted):
            parts = ", ".join(sorted(used[r.name]))
            out.append(
                f"{r.origin}: NodeSet {r.name} selects Feature={feature}, which no worker has: "
                f"partition {parts} would have none of its nodes"
            )
    return out


def _named_dynamic(old: SlurmConf, new: SlurmConf, live: Mapping[str, Node]) -> list[str]:
    """NodeName lines the change adds for a registered dynamic worker (`slurmd -Z`). Measured on
    24.11 and 26.05: slurmctld makes the node static, the worker's registration fails ("Node already
    exists in the node table") and the node stops answering; the rollback does not bring it back."""
    was = old.node_definitions()
    out = []
    for r in new.of("nodename"):
        if r.name.upper() == "DEFAULT":
            continue
        clash = [
            n for n in expand(r.name) if n not in was and n in live and "DYNAMIC_NORM" in live[n].state.flags
        ]
        if clash:
            out.append(
                f"{r.origin}: NodeName names the registered dynamic worker{'s' if len(clash) > 1 else ''} "
                f"{_few(clash)} (slurmd -Z): Slurm makes {'them' if len(clash) > 1 else 'it'} static, and "
                "its registration then fails (Node already exists in the node table)"
            )
    return out


def _touched(old: SlurmConf, new: SlurmConf, old_files: FileSet, files: FileSet) -> tuple[bool, bool]:
    """(the change touches GRES, it touches a NodeSet's Feature)."""
    a, b = old_files.files.get(GRES_CONF), files.files.get(GRES_CONF)
    gres = (a.data if a else None) != (b.data if b else None)
    gres |= old.options.get("grestypes") != new.options.get("grestypes")
    old_defs, new_defs = old.node_definitions(), new.node_definitions()
    gres |= any(old_defs.get(n, {}).get("gres") != f.get("gres") for n, f in new_defs.items())
    was = {r.name: r.fields.get("feature") for r in old.of("nodeset")}
    nodesets = any(was.get(r.name) != r.fields.get("feature") for r in new.of("nodeset"))
    return gres, nodesets


def _few(names: list[str]) -> str:
    listed = sorted(names)
    head = ", ".join(listed[:NAMED_AT_MOST])
    return head if len(listed) <= NAMED_AT_MOST else f"{head} and {len(listed) - NAMED_AT_MOST} more"


async def problems(
    client: SlurmClient, old: SlurmConf, new: SlurmConf, old_files: FileSet, files: FileSet
) -> list[str]:
    """What the workers' registration would refuse of `files` that it did not refuse of the running
    set; [] when nothing of it can be told (the fleet unreadable: the live judge still watches)."""
    gres, nodesets = _touched(old, new, old_files, files)
    named = set(new.node_definitions()) - set(old.node_definitions())
    if not gres and not nodesets and not named:
        return []
    try:
        live = {n.name: n for n in await client.node_listing()}
    except SlurmError as exc:
        log.warning("prediction_skipped", why="nodes unreadable", error=exc.message)
        return []
    out: list[str] = []
    if gres:
        before = _gres_problems(old, gres_lines(old_files), live)
        for (name, why), nodes in sorted(_gres_problems(new, gres_lines(files), live).items()):
            worse = sorted(set(nodes) - set(before.get((name, why), [])))
            if worse:
                out.append(f"GRES {name} of worker{'s' if len(worse) > 1 else ''} {_few(worse)}: {why}")
    if nodesets:
        out += _nodeset_problems(old, new, live)
    if named:
        out += _named_dynamic(old, new, live)
    return out
