"""dcgm-exporter's GPU -> job files: one file per GPU index (the name), holding the job id(s) running
on it, one per line. Rebuilt from Slurm's allocation on every reconcile, so a job whose epilog never
ran cannot leave a GPU attributed to it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from pathlib import Path

import structlog

from sidecars.runtime.files import TEMP_PREFIX, replace_atomically
from sidecars.slurm import Job

log = structlog.get_logger(__name__)

# A job holds its GPUs until it stops running; COMPLETING means its processes are being killed.
HOLDING_STATES = frozenset({"RUNNING", "SUSPENDED"})


def gpu_jobs(jobs: Iterable[Job], node: str) -> dict[int, list[int]]:
    """GPU index -> job ids (sorted) of the jobs holding GPUs on `node`."""
    out: dict[int, set[int]] = {}
    for job in jobs:
        if job.state not in HOLDING_STATES:
            continue
        for index in job.gpu_indices.get(node, ()):
            out.setdefault(index, set()).add(job.job_id)
    return {i: sorted(ids) for i, ids in out.items()}


class JobMapping:
    """The files in one directory. Only names that are GPU indices (and our temp files) are ours."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory

    def current(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for entry in self.dir.iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError, ValueError):
                    out[int(entry.name)] = [int(w) for w in entry.read_text().split()]
        return out

    def job_ids(self) -> set[int]:
        return {j for ids in self.current().values() for j in ids}

    def _write(self, index: int, ids: list[int]) -> None:
        replace_atomically(self.dir / str(index), "".join(f"{j}\n" for j in ids))

    def reconcile(self, wanted: Mapping[int, list[int]]) -> bool:
        """Make the directory say exactly `wanted`; returns whether anything changed."""
        changed = False
        have = self.current()
        for entry in self.dir.iterdir():
            gone = entry.name.isdigit() and int(entry.name) not in wanted
            stale = entry.name.startswith(TEMP_PREFIX) or gone
            if stale and entry.is_file():
                with contextlib.suppress(FileNotFoundError):
                    entry.unlink()
                changed = True
                if entry.name.isdigit():
                    log.info("gpu_job_file_removed", gpu=entry.name, jobs=have.get(int(entry.name)))
        for index, ids in sorted(wanted.items()):
            if have.get(index) != ids:
                self._write(index, ids)
                changed = True
                log.info("gpu_job_file_written", gpu=index, jobs=ids)
        return changed
