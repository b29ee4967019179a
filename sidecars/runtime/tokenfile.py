"""A bearer token read from a file each time it may have changed: a projected ServiceAccount token
is rotated by the kubelet (it swaps the volume's `..data` link), so a copy read once at start
would expire under a long-running agent."""

from __future__ import annotations

import os
from pathlib import Path

from sidecars.runtime.settings import read_token


class TokenFile:
    """`value()`: the file's token, re-read when the file seen through its links changed."""

    def __init__(self, path: Path, what: str = "--token-file") -> None:
        self.path = path
        self._what = what
        self._seen: tuple[int, int, int] | None = None
        # unreadable or empty now: ConfigError at start, not a 401 at the first request
        self._token = read_token(str(path), what)

    def value(self) -> str:
        try:
            st = os.stat(self.path)
        except OSError:
            return self._token  # mid-swap, or gone for a moment: the last good one
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        if key != self._seen:
            try:
                self._token = read_token(str(self.path), self._what)
            except ValueError:  # emptied or unreadable for a moment: the last good one, read again next time
                return self._token
            self._seen = key
        return self._token
