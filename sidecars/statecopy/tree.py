"""Copying a directory tree with its owners, modes and times, and verifying a copy against a
manifest of every entry's kind, size and SHA-256 (a copy that cannot be read back is no rollback
point)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from pathlib import Path

# what each entry is: ("dir",) | ("link", target) | ("file", size, sha256)
Manifest = dict[str, list[str | int]]


class CopyError(Exception):
    """The copy or its check failed; the message says which path and why."""


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def manifest(root: Path, skip: Path | None = None) -> Manifest:
    """Every entry under `root` (relative paths), `skip` and what is under it left out."""
    found: Manifest = {}
    for here, dirs, files in os.walk(root):
        base = Path(here)
        if skip is not None:
            dirs[:] = [d for d in dirs if base / d != skip]
        for name in [*dirs, *files]:
            path = base / name
            rel = str(path.relative_to(root))
            st = path.lstat()
            if stat.S_ISLNK(st.st_mode):
                found[rel] = ["link", os.readlink(path)]
            elif stat.S_ISDIR(st.st_mode):
                found[rel] = ["dir"]
            elif stat.S_ISREG(st.st_mode):
                found[rel] = ["file", st.st_size, _digest(path)]
            else:
                raise CopyError(f"{path}: neither a file, a directory nor a link (mode {st.st_mode:o})")
    return found


def size_bytes(entries: Manifest) -> int:
    return sum(int(e[1]) for e in entries.values() if e[0] == "file")


def _copy_entry(src: Path, dest: Path) -> None:
    st = src.lstat()
    if stat.S_ISLNK(st.st_mode):
        os.symlink(os.readlink(src), dest)
    elif stat.S_ISDIR(st.st_mode):
        dest.mkdir(exist_ok=True)
        shutil.copystat(src, dest)
    else:
        shutil.copy2(src, dest, follow_symlinks=False)
    if os.geteuid() == 0:  # slurmctld runs as SlurmUser: the files must stay its own
        os.lchown(dest, st.st_uid, st.st_gid)


def copy_tree(src: Path, dest: Path, entries: Manifest) -> None:
    """The entries of `src` named in `entries` into `dest` (made), parents before children."""
    dest.mkdir(parents=True, exist_ok=True)
    for rel in sorted(entries, key=lambda r: (r.count("/"), r)):
        _copy_entry(src / rel, dest / rel)
    dirs = [rel for rel, e in entries.items() if e[0] == "dir"]
    for rel in sorted(dirs, key=lambda r: -r.count("/")):  # a child's copy touched its parent's time
        shutil.copystat(src / rel, dest / rel)


def verify(root: Path, expected: Manifest, skip: Path | None = None) -> None:
    """CopyError naming the first differences when `root` is not exactly `expected`."""
    seen = manifest(root, skip)
    wrong = sorted(r for r in expected.keys() | seen.keys() if expected.get(r) != seen.get(r))
    if wrong:
        raise CopyError(f"{root} differs from what was copied at {len(wrong)} paths: {', '.join(wrong[:5])}")


def save_manifest(path: Path, entries: Manifest) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(entries, sort_keys=True))
    os.replace(tmp, path)


def load_manifest(path: Path) -> Manifest:
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise CopyError(f"{path}: no readable manifest of the copy ({e})") from None
    if not isinstance(loaded, dict):
        raise CopyError(f"{path}: not a manifest")
    return loaded


def clear(root: Path, keep: Path | None = None) -> None:
    """Remove everything under `root` but `keep` (the copies, when they live inside it)."""
    for entry in root.iterdir():
        if entry == keep:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
