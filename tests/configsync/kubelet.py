"""The kubelet's atomic writer, reproduced for tests: how a ConfigMap or Secret volume changes on disk.

    VOL/..2026_11_30_03_04_05.123456789/   the files of this version (mode 0644, or 0600 for a Secret)
    VOL/..data -> ..2026_11_30_03_04_05.123456789
    VOL/slurm.conf -> ..data/slurm.conf

An update writes a new timestamped directory, points a fresh `..data_tmp` symlink at it, renames that
over `..data` (the atomic step), adds links for new files, removes links of files that left, then
deletes the old directory.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path


class Volume:
    def __init__(self, path: Path, mode: int = 0o644) -> None:
        self.path = path
        self.mode = mode
        self._seq = 0
        path.mkdir(parents=True, exist_ok=True)

    def _stamp(self) -> str:
        self._seq += 1  # the nanoseconds field also keeps two writes in one second apart
        t = time.time()
        return time.strftime("..%Y_%m_%d_%H_%M_%S", time.gmtime(t)) + f".{self._seq:09d}"

    def write(self, files: Mapping[str, bytes | str]) -> None:
        """One update of the volume to exactly `files`, as the kubelet does it."""
        old = os.readlink(self.path / "..data") if (self.path / "..data").is_symlink() else None
        new = self._stamp()
        d = self.path / new
        d.mkdir()
        for name, content in files.items():
            data = content.encode() if isinstance(content, str) else content
            (d / name).write_bytes(data)
            (d / name).chmod(self.mode)
        os.chmod(d, 0o755)
        tmp = self.path / "..data_tmp"
        os.symlink(new, tmp)
        os.rename(tmp, self.path / "..data")
        for name in files:
            link = self.path / name
            if not link.is_symlink():
                os.symlink(f"..data/{name}", link)
        for entry in os.listdir(self.path):
            if not entry.startswith("..") and entry not in files:
                (self.path / entry).unlink()
        if old:
            shutil.rmtree(self.path / old)

    def files(self) -> dict[str, bytes]:
        data = self.path / "..data"
        return {n: (data / n).read_bytes() for n in sorted(os.listdir(data))}
