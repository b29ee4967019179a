"""`slurm-sidecars state copy|restore --state-dir DIR --copy-dir DIR`: run while slurmctld is stopped.

copy: DIR's tree copied to COPY (made new; refused when it exists, or when its file system has no
room), then read back and checked against the manifest taken of the state; the manifest is kept as
COPY.manifest.json. restore: the copy checked against its manifest first (a damaged copy is never
put back), then the state's content replaced by the copy's and checked again.

A copy directory inside the state directory (the volume's root is the StateSaveLocation) is left
out of both. Exit 0 when done, 1 with one line on stderr when not; nothing is half done silently:
a failed copy removes what it wrote, a failed restore says the state must be restored again.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import structlog

from sidecars.runtime.settings import PATH, add_flags, declared, setting, settings_from
from sidecars.statecopy import tree

log = structlog.get_logger(__name__)

ACTIONS = ("copy", "restore")


@declared(kw_only=True)
class StateCopySettings:
    state_dir: Path = setting(help="the StateSaveLocation", conv=PATH, required=True)
    copy_dir: Path = setting(
        help="the copy: made by copy, read by restore (same volume)", conv=PATH, required=True
    )


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=ACTIONS, help="copy the state aside, or put a copy back")
    add_flags(p, StateCopySettings)


def _manifest_path(copy_dir: Path) -> Path:
    return copy_dir.with_name(copy_dir.name + ".manifest.json")


def _inside(path: Path, root: Path) -> Path | None:
    """The entry of `root` that holds `path` (left out of the state's tree), or None."""
    try:
        rel = path.relative_to(root)
    except ValueError:
        return None
    return root / rel.parts[0] if rel.parts else None


def copy(state: Path, dest: Path) -> int:
    if not state.is_dir():
        raise tree.CopyError(f"{state}: no such state directory")
    if dest.exists():
        raise tree.CopyError(f"{dest}: exists already (a copy is never written over)")
    skip = _inside(dest, state)
    entries = tree.manifest(state, skip)
    need = tree.size_bytes(entries)
    dest.parent.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(dest.parent).free
    if need > free:
        raise tree.CopyError(f"no room for the state copy: {need} bytes needed, {free} free on {dest.parent}")
    try:
        tree.copy_tree(state, dest, entries)
        tree.verify(dest, entries)
        tree.save_manifest(_manifest_path(dest), entries)
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)  # no copy that looks whole and is not
        raise
    log.info("state_copied", state=str(state), copy=str(dest), entries=len(entries), bytes=need)
    return 0


def restore(saved: Path, state: Path) -> int:
    entries = tree.load_manifest(_manifest_path(saved))
    tree.verify(saved, entries)  # a damaged copy is not put back
    if not state.is_dir():
        raise tree.CopyError(f"{state}: no such state directory")
    keep = _inside(saved, state)
    tree.clear(state, keep)
    try:
        tree.copy_tree(saved, state, entries)
        tree.verify(state, entries, keep)
    except (OSError, tree.CopyError) as e:
        why = f"the restore stopped half way ({e}): run it again before slurmctld starts"
        raise tree.CopyError(why) from e
    log.info("state_restored", state=str(state), copy=str(saved), entries=len(entries))
    return 0


def main(args: argparse.Namespace) -> int:
    settings = settings_from(StateCopySettings, args)
    state, copy_dir = settings.state_dir, settings.copy_dir
    try:
        if args.action == "copy":
            return copy(state, copy_dir)
        return restore(copy_dir, state)
    except (OSError, tree.CopyError) as e:
        print(f"slurm-sidecars state {args.action}: {e}", file=sys.stderr)
        return 1
