"""The files every slurmd re-reads on reconfigure and no Slurm client parses (gres.conf, cgroup.conf):
what a slurmd dies of in them is refused before the set is staged. The dry run cannot tell: no
slurmctld reads them."""

from __future__ import annotations

import re

from sidecars.configsync.fileset.conffile import SlurmConf
from sidecars.configsync.fileset.sources import FileSet

# Keys of the files every slurmd re-reads on reconfigure (gres.conf(5), cgroup.conf(5), 22.05 and 24.11).
# No client parses them, and a 22.05 slurmd dies of an unknown key or a garbage line (measured), so the
# set is refused here instead.
AUX_KEYS = {
    "gres.conf": frozenset(
        {
            "autodetect",
            "count",
            "cores",
            "file",
            "flags",
            "links",
            "multiplefiles",
            "name",
            "nodename",
            "type",
        }
    ),
    "cgroup.conf": frozenset(
        {
            "allowedkmemspace",
            "allowedramspace",
            "allowedswapspace",
            "cgroupautomount",
            "cgroupmountpoint",
            "cgroupplugin",
            "cgroupreleaseagentdir",
            "constraincores",
            "constraindevices",
            "constrainkmemspace",
            "constrainramspace",
            "constrainswapspace",
            "enablecontrollers",
            "ignoresystemd",
            "ignoresystemdonfailure",
            "maxkmempercent",
            "maxrampercent",
            "maxswappercent",
            "memoryswappiness",
            "minkmemspace",
            "minramspace",
            "signalchildrenprocesses",
            "systemdtimeout",
            "taskaffinity",
        }
    ),
}


# values of those files that slurmd dies of (no slurmctld reads them, so the dry run cannot tell)
CGROUP_PLUGINS = frozenset({"autodetect", "cgroup/v1", "cgroup/v2", "disabled"})
_YES_NO = frozenset({"yes", "no", "true", "false", "1", "0"})
_NUMBER = re.compile(r"^\d+(\.\d+)?%?$")
_COUNT = re.compile(r"^\d+[KMGTP]?$", re.IGNORECASE)


def _aux_value(name: str, key: str, value: str, gres_types: set[str]) -> str | None:
    k = key.lower()
    if name == "gres.conf":
        if k == "name" and value.lower() not in gres_types:
            return f"GRES {value!r} is not in GresTypes ({','.join(sorted(gres_types)) or 'none'})"
        if k == "count" and not _COUNT.match(value):
            return f"Count={value!r} is not a count"
        return None
    if k == "cgroupplugin" and value.lower() not in CGROUP_PLUGINS:
        return f"CgroupPlugin={value!r} is none of {', '.join(sorted(CGROUP_PLUGINS))}"
    if (
        k.startswith(("constrain", "ignoresystemd")) or k in ("cgroupautomount", "signalchildrenprocesses")
    ) and (value.lower() not in _YES_NO):
        return f"{key}={value!r} is not yes or no"
    if (
        k.endswith(("space", "percent")) or k in ("memoryswappiness", "systemdtimeout")
    ) and not _NUMBER.match(value):
        return f"{key}={value!r} is not a number"
    return None


def aux_problems(files: FileSet, conf: SlurmConf | None = None) -> list[str]:
    problems: list[str] = []
    gres_types = {
        g.strip().lower() for g in ((conf.options.get("grestypes") if conf else None) or "").split(",")
    }
    gres_types.discard("")
    for name, keys in AUX_KEYS.items():
        entry = files.files.get(name)
        if entry is None:
            continue
        text = entry.data.decode("utf-8", "replace")
        for lineno, raw in enumerate(text.splitlines(), 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            for word in line.split():
                key, eq, _ = word.partition("=")
                if not eq:
                    problems.append(f"{name}:{lineno}: {line[:80]!r} is not Key=Value (slurmd dies of it)")
                    break
                if key.lower() not in keys:
                    problems.append(f"{name}:{lineno}: unknown key {key[:40]!r} (slurmd dies of it)")
                    break
                bad = _aux_value(name, key, word.partition("=")[2], gres_types)
                if bad:
                    problems.append(f"{name}:{lineno}: {bad} (slurmd dies of it)")
                    break
    return problems
