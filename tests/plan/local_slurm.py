"""A CI runner's local Slurm, for each release we test: the host's own (22.05), or a chroot's
(24.11, 26.05) behind a directory of wrappers put first on PATH, as a runner with Slurm installed
under another prefix puts its `bin` and `sbin` there.

Each wrapper runs the chroot's command in a mount namespace of its own where the host's /tmp is the
chroot's /tmp: the plan writes its scratch copy of the set there (TMPDIR) and the chroot's Slurm
reads it at the same path. 24.11 and later start auth/munge by encoding a credential, so the
`slurmctld` wrapper gives it the munged a runner would have: a private one with a fresh key, in a
PID namespace whose init is slurmctld, so that it ends when slurmctld does (nothing is left behind).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from sidecars.devcluster import Release

CHROOT_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"

_MOUNTS = (
    'mount --rbind /tmp "$R/tmp"; mount --rbind /dev "$R/dev"; mount -t proc proc "$R/proc"\n'
    'mount -t tmpfs -o mode=755 tmpfs "$R/run"\n'
)
_MUNGED = (
    'mkdir -m 700 "$R/run/munge"\n'
    'chroot "$R" /usr/sbin/mungekey -c -k /run/munge/munge.key\n'
    'chroot "$R" /usr/sbin/munged --force -S /run/munge/munge.socket.2 --key-file /run/munge/munge.key'
    " --pid-file /run/munge/munged.pid --log-file /run/munge/munged.log --seed-file /run/munge/seed\n"
)


def _wrapper(root: Path, command: str, munged: bool) -> str:
    pidns = "-p -f --kill-child " if munged else ""
    body = (
        "R=$0\n"
        + _MOUNTS
        + (_MUNGED if munged else "")
        + f'exec chroot "$R" /usr/bin/env PATH={CHROOT_PATH} {command} "$@"'
    )
    return (
        "#!/bin/sh\n"
        f"# {command} of the Slurm in {root}, with the host's /tmp\n"
        f'exec unshare -m {pidns}-- sh -ec {shlex.quote(body)} {shlex.quote(str(root))} "$@"\n'
    )


def local_slurm(release: Release, scratch: Path, *, munged: bool = True) -> dict[str, str]:
    """The environment that makes `release` the local Slurm of a `plan` run; `scratch` lies under
    /tmp and becomes its TMPDIR (the wrappers live there too). `munged=False`: a runner without one."""
    env = {"TMPDIR": str(scratch)}
    if release.root is None:
        return env
    bin_dir = scratch / "slurm-bin"
    bin_dir.mkdir()
    for name, command, with_munged in (
        ("scontrol", "/usr/bin/scontrol", False),  # the parse: no credential
        ("slurmctld", "/usr/sbin/slurmctld", munged),
    ):
        path = bin_dir / name
        path.write_text(_wrapper(release.root, command, with_munged))
        path.chmod(0o755)
    env["PATH"] = f"{bin_dir}:{os.environ['PATH']}"
    return env
