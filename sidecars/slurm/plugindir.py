"""Where a Slurm command we run may load plugins from: never from a ConfigMap's or Secret's volume,
never from a directory anyone but root could change.

Every Slurm command (and daemon) loads its plugins (`auth/munge`, `accounting_storage/...`) from
the `PluginDir=` of the slurm.conf it reads. A `PluginDir=` naming a mounted ConfigMap or Secret,
whose `binaryData` holds a shared object, would have our next `scontrol` or `sacctmgr` run the
config author's code in the process that holds the operator token or the database password. So,
before each command, the edge reads the `PluginDir=` lines of the file the command will read (and
of slurmdbd.conf beside it, for slurmdbd, and of every `Include`d file) and refuses the command
when an entry lies in a volume the kubelet fills (a directory holding `..data`: the layout of every
ConfigMap, Secret, projected and downward API volume), or when it or a directory above it is not
owned by root or is writable by anyone else. No `PluginDir=`: the compiled-in one (the image's).

Linear in the files' size and capped: a file over MAX_BYTES, or more than MAX_FILES includes, is
refused too (we cannot say what it names).
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from sidecars.runtime.trustedpath import Trust, UntrustedPath
from sidecars.slurm import naming

DEFAULT_CONF = Path("/etc/slurm/slurm.conf")
MAX_BYTES = 16 * 1024 * 1024  # one file; a slurm.conf of 10,000 nodes is well under 2 MiB
MAX_FILES = 64  # slurm.conf, slurmdbd.conf and their Includes
KUBELET_DATA = "..data"  # the symlink the kubelet swaps in every ConfigMap/Secret volume
# a match starts where no blank stands before it: searched through, a run of blanks is read once, not
# again from each of its characters (quadratic); matched at a line's start, nothing changes
_PLUGIN_DIR = re.compile(rb"(?<!\s)\s*+PluginDir\s*+=\s*+(?P<value>[^#\r\n]*)", re.IGNORECASE)  # one line
_INCLUDE = re.compile(rb"(?<!\s)\s*+Include\s+(?P<value>[^#\r\n]+)", re.IGNORECASE)
_ROOT_ONLY = Trust(frozenset({0}), frozenset({0}))


class PluginDirRefused(ValueError):
    """The command would load plugins from where a config author or another user could put them."""


def _conf_of(argv: Sequence[str], env: Mapping[str, str]) -> Path:
    """`env SLURM_CONF=... scontrol ...`: a wrapper's assignment wins, the last one (nearest the
    program) over the others; else the environment's."""
    assigned = [w.split("=", 1)[1] for w in argv if w.startswith("SLURM_CONF=")]
    return Path(assigned[-1] if assigned else env.get("SLURM_CONF") or DEFAULT_CONF)


def _read(path: Path) -> bytes | None:
    """The file's bytes; None when it does not exist (Slurm then uses its defaults or configless)."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:  # unreadable here: Slurm running as us cannot read it either
        raise PluginDirRefused(f"{path}: cannot be read ({exc.strerror})") from None
    if len(data) > MAX_BYTES:
        raise PluginDirRefused(f"{path} is over {MAX_BYTES} bytes: what it names is not read")
    return data


def _lines_with(data: bytes, lowered: bytes, needle: bytes) -> list[bytes]:
    """The lines of `data` that hold `needle` (case-blind), found without a regex over the whole
    file: at 10,000 nodes slurm.conf is ~750 KB, read before every command."""
    lines: list[bytes] = []
    at = lowered.find(needle)
    while at != -1:
        start = lowered.rfind(b"\n", 0, at) + 1
        end = lowered.find(b"\n", at)
        end = len(data) if end == -1 else end
        lines.append(data[start:end])
        at = lowered.find(needle, end)
    return lines


def _includes(conf: Path, data: bytes, lowered: bytes) -> list[Path]:
    found: list[Path] = []
    for m in (m for line in _lines_with(data, lowered, b"include") if (m := _INCLUDE.match(line))):
        name = m["value"].decode("utf-8", "replace").strip().strip('"')
        pattern = name if os.path.isabs(name) else str(conf.parent / name)
        found.extend(Path(p) for p in sorted(glob.glob(pattern)) if os.path.isfile(p))
    return found


def plugin_dirs(argv: Sequence[str], env: Mapping[str, str]) -> list[tuple[Path, str]]:
    """Every (file, PluginDir entry) the command would read: slurm.conf, its Includes and, for
    slurmdbd, slurmdbd.conf beside slurm.conf."""
    conf = _conf_of(argv, env)
    pending = [conf]
    if naming.program(argv[0]) == "slurmdbd" or "slurmdbd" in (naming.label(argv) or ""):
        pending.append(conf.parent / "slurmdbd.conf")
    seen: set[Path] = set()
    entries: list[tuple[Path, str]] = []
    while pending:
        path = pending.pop(0)
        if path in seen:
            continue
        seen.add(path)
        if len(seen) > MAX_FILES:
            raise PluginDirRefused(f"{conf}: more than {MAX_FILES} included files")
        data = _read(path)
        if data is None:
            continue
        lowered = data.lower()
        for line in _lines_with(data, lowered, b"plugindir"):
            m = _PLUGIN_DIR.match(line)
            if m is None:
                continue
            value = m["value"].decode("utf-8", "replace").strip().strip('"')
            entries.extend((path, e.strip()) for e in value.split(":") if e.strip())
        pending.extend(_includes(path, data, lowered))
    return entries


def _kubelet_volume(path: Path) -> Path | None:
    """The directory at or above `path` that holds `..data` (a kubelet-filled volume), if any."""
    for d in (path, *path.parents):
        if os.path.lexists(d / KUBELET_DATA):
            return d
    return None


def refusal(argv: Sequence[str], env: Mapping[str, str] | None = None) -> str | None:
    """Why this command must not run (one line), or None. Checked before every command: the files
    may change between two."""
    environ = os.environ if env is None else env
    try:
        entries = plugin_dirs(argv, environ)
    except PluginDirRefused as exc:
        return f"refused before running: {exc}"
    for conf, entry in entries:
        path = Path(os.path.normpath(entry))
        real = Path(os.path.realpath(path))
        volume = _kubelet_volume(path) or _kubelet_volume(real)
        if volume is not None:
            return (
                f"refused before running: PluginDir={entry} (in {conf}) lies in {volume}, a volume a "
                "ConfigMap or Secret fills: plugins are loaded only from the image's directory"
            )
        if not real.exists():
            continue  # nothing there to load; Slurm says what it misses
        try:
            _ROOT_ONLY.check_dir(path)
        except UntrustedPath as exc:
            return (
                f"refused before running: PluginDir={entry} (in {conf}): {exc}: plugins are loaded "
                "only from a directory root owns and nobody else may write"
            )
    return None
