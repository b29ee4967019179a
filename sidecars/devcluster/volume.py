"""A ConfigMap/Secret volume laid out exactly as the kubelet's atomic writer lays it out.

    DIR/..2026_11_30_03_04_05.123456789/slurm.conf   the files of one version
    DIR/..data -> ..2026_11_30_03_04_05.123456789     swapped atomically on every update
    DIR/slurm.conf -> ..data/slurm.conf                one symlink per user-visible file

An update writes a new timestamped directory, points a `..data_tmp` symlink at it and renames that
over `..data` (the one atomic step), adds symlinks for new files, removes those of deleted files,
then removes the old directory. The demo plays the ConfigMap with it, and tests reproduce the
kubelet's updates with it, including the moments in between.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path

DATA = "..data"


class AtomicVolume:
    def __init__(self, path: Path, mode: int = 0o644) -> None:
        self.path = path
        self.mode = mode  # 0o600 for a Secret
        self._counter = 0
        path.mkdir(parents=True, exist_ok=True)

    def _stamp(self) -> str:
        self._counter += 1
        now = time.time()
        base = time.strftime("%Y_%m_%d_%H_%M_%S", time.gmtime(now))
        return f"..{base}.{int(now * 1e9) % 1_000_000_000:09d}{self._counter:03d}"

    def files(self) -> dict[str, bytes]:
        """What a reader of the volume sees now."""
        data = self.path / DATA
        if not data.exists():
            return {}
        return {p.name: p.read_bytes() for p in sorted(data.iterdir()) if p.is_file()}

    def write(self, files: Mapping[str, str | bytes], *, keep_old: bool = False) -> Path:
        """Publish a new version holding exactly `files`; returns the new timestamped directory."""
        data = self.path / DATA
        old_target = os.readlink(data) if data.is_symlink() else None
        old_names = set(self.files())
        stamp = self.path / self._stamp()
        stamp.mkdir()
        stamp.chmod(0o755)
        for name, content in files.items():
            if "/" in name or name.startswith(".."):
                raise ValueError(f"bad file name in volume: {name!r}")
            path = stamp / name
            path.write_bytes(content.encode() if isinstance(content, str) else content)
            path.chmod(self.mode)
        tmp = self.path / "..data_tmp"
        if tmp.is_symlink():
            tmp.unlink()
        tmp.symlink_to(stamp.name)
        os.rename(tmp, data)  # the atomic swap
        for name in files:
            link = self.path / name
            if not link.is_symlink():
                link.symlink_to(f"{DATA}/{name}")
        for name in old_names - set(files):
            (self.path / name).unlink(missing_ok=True)
        if old_target and not keep_old:
            shutil.rmtree(self.path / old_target, ignore_errors=True)
        return stamp

    def update(self, changes: Mapping[str, str | bytes | None]) -> Path:
        """A new version from the current one with some files changed (None removes a file)."""
        files: dict[str, str | bytes] = dict(self.files())
        for name, content in changes.items():
            if content is None:
                files.pop(name, None)
            else:
                files[name] = content
        return self.write(files)
