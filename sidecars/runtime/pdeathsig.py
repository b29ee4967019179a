"""A child that dies with its parent: `preexec_fn=die_with_parent()` for a subprocess we own.

Linux's PR_SET_PDEATHSIG makes the kernel signal the child when the *thread* that forked it ends
(asyncio forks from the event loop's thread, so: when the loop's thread or the process ends), by
any means, SIGKILL included. It survives exec, so it holds for a wrapper (`unshare`) and what it
execs; not for the wrapper's own children, which need their own (`unshare --kill-child`).
"""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Callable

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(sig: signal.Signals = signal.SIGKILL, *, parent: int | None = None) -> Callable[[], None]:
    """A preexec function that has the child get `sig` when its parent thread ends.

    prctl is looked up here, in the parent: between fork and exec only the call itself runs (a
    dlopen there could wait forever on a lock another thread held at the fork)."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid() if parent is None else parent

    def preexec() -> None:
        if prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != parent:  # the parent died before the line above: nobody will signal us
            os.kill(os.getpid(), sig)

    return preexec


def tie_to_parent(sig: signal.Signals = signal.SIGKILL) -> None:
    """Have this process get `sig` when its parent ends: for a process started by code that is not
    ours (a pytest-xdist worker), which cannot be given a preexec function."""
    die_with_parent(sig, parent=os.getppid())()
