"""Jobs on a dev cluster and waiting for states: `sbatch`, `sacct`, `scancel`, a queue filled with
held jobs at size, and polling until a job or node is in the state asked for."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

from sidecars.devcluster.base import ClusterBase, ClusterError
from sidecars.runtime import process
from sidecars.slurm import Job, Node

# slurmctld saves its jobs at most this long after a change is scheduled (SAVE_MAX_WAIT in Slurm's
# state_save.c, not configurable): a save asked for comes within it on a quiet machine
SLURM_SAVE_MAX_WAIT_SECONDS = 5.0
# a loaded machine runs 5-10x slower, and the request itself is a command to run first
JOB_STATE_SAVED_TIMEOUT_SECONDS = 12 * SLURM_SAVE_MAX_WAIT_SECONDS


class ClusterJobs(ClusterBase):
    """Jobs submitted and cancelled, and polls until a job or a node reaches a state."""

    async def sbatch(self, *args: str, wrap: str = "sleep 300") -> int:
        """Submit a batch job; returns its id. Output goes to DIR/out."""
        argv = ["sbatch", "--parsable", f"--chdir={self.out_dir}", f"--output={self.out_dir}/slurm-%j.out"]
        done = await process.run([*argv, *args, "--wrap", wrap], timeout=None, env=self.env, cwd=self.out_dir)
        if done.returncode != 0:
            raise ClusterError(f"sbatch failed: {done.stderr.decode().strip()}")
        return int(done.stdout.decode().strip().split(";")[0])

    async def sacct(self, *job_ids: int) -> dict[int, tuple[str, str]]:
        """Job id -> (state, exit code) as slurmdbd recorded each job's allocation (accounting shape);
        a job it has no record of yet is absent. Every job of the last day when no id is given."""
        argv = ["sacct", "-n", "-P", "-X", "--format=JobID,State,ExitCode"]
        argv += ["-j", ",".join(map(str, job_ids))] if job_ids else ["-S", "now-1days"]
        done = await process.run(argv, timeout=30, env=self.env, cwd=self.out_dir)
        if done.returncode != 0:
            raise ClusterError(f"sacct failed: {done.stderr.decode().strip()}")
        records = {}
        for line in done.stdout.decode().splitlines():
            job, state, code = line.split("|")
            records[int(job)] = (state.split()[0], code)  # "CANCELLED by 0" -> CANCELLED
        return records

    async def submit_held(self, count: int, *, loops: int = 8) -> list[int]:
        """Submit `count` individual held batch jobs (`sbatch --hold`, no arrays: each is a job of its
        own in the state, as a busy cluster's queue is) and return their ids. `loops` sbatch loops
        run side by side inside the namespace, saving a shim's nsenter per job: 10,000 jobs take
        about 25 s here. The cluster's MaxJobCount (`ClusterSpec.max_job_count`) must leave room."""
        if count <= 0:
            return []
        loop = (
            'i=0; while [ "$i" -lt "$1" ]; do '
            f"sbatch --hold --parsable --job-name=held --chdir={self.out_dir} --output=/dev/null "
            "--wrap true || exit 1; i=$((i+1)); done"
        )
        shares = [count // loops + (1 if k < count % loops else 0) for k in range(loops)]
        # seconds only on a loaded machine; measured about 2.5 ms of wall time per job here
        timeout = 60 + 0.05 * count
        async with asyncio.TaskGroup() as group:  # one loop failing stops the others
            runs = [
                group.create_task(
                    self._exec(self.in_namespace("sh", "-c", loop, "sh", str(n)), timeout=timeout),
                    name=f"devcluster-held-jobs-{k}",
                )
                for k, n in enumerate(shares)
                if n
            ]
        texts = [run.result() for run in runs]
        ids = [int(line.split(";")[0]) for text in texts for line in text.split() if line[:1].isdigit()]
        if len(ids) != count:
            raise ClusterError(f"submitted {len(ids)} held jobs of {count}")
        return sorted(ids)

    async def job_state_saved(self, job_id: int, timeout: float = JOB_STATE_SAVED_TIMEOUT_SECONDS) -> None:
        """Until slurmctld's saved job state (StateSaveLocation/job_state) holds job `job_id` as it
        is now: what a restarted, dry-run or backup controller recovers is only what was saved.

        The save is asked for, not waited for by its file's time: a save after "now" never comes
        when the one that holds the job's last change was written before we looked (Slurm saves a
        change at once when it saved nothing for 5 s, then nothing until the next change or its
        5-minute checkpoint). A unique AdminComment is set on the job (an admin-only field nothing
        of ours reads; the update schedules a save), and the wait is for the saved bytes to hold
        that marker: that save was made after the update, so after everything seen before it."""
        marker = f"slurm-sidecars-saved-{uuid.uuid4().hex}"
        await self._exec(
            [
                "env",
                f"PATH={self.env['PATH']}",
                f"SLURM_CONF={self.conf_path}",
                "scontrol",
                "update",
                f"JobId={job_id}",
                f"AdminComment={marker}",
            ]
        )
        saved = self.dir / "state" / "job_state"
        needle = marker.encode()

        def holds() -> bool:
            try:
                return needle in saved.read_bytes()
            except OSError:  # between a release's renames there is a moment without the file
                return False

        await self._poll(self._async(holds), bool, timeout, f"job {job_id} in the saved job state")

    async def scancel(self, job_id: int, *args: str) -> None:
        await self._exec(
            ["env", f"PATH={self.env['PATH']}", f"SLURM_CONF={self.conf_path}", "scancel", *args, str(job_id)]
        )

    async def wait_job(self, job_id: int, states: set[str] | str, timeout: float = 30.0) -> Job:
        """Poll until the job is in one of `states` (e.g. RUNNING, COMPLETED)."""
        wanted = {states} if isinstance(states, str) else states
        client = self.client(timeout=5.0)

        async def read() -> Job | None:
            return await client.job(job_id)

        job = await self._poll(
            read, lambda j: j is not None and j.state in wanted, timeout, f"job {job_id} in {sorted(wanted)}"
        )
        assert job is not None
        return job

    async def wait_nodes(
        self, ok: Callable[[list[Node]], bool], timeout: float = 30.0, what: str = "nodes"
    ) -> list[Node]:
        client = self.client(timeout=5.0)
        return await self._poll(client.nodes, ok, timeout, what)

    async def wait_node(
        self, name: str, ok: Callable[[Node], bool], timeout: float = 30.0, what: str = ""
    ) -> Node:
        client = self.client(timeout=5.0)

        async def read() -> Node | None:
            return await client.node(name)

        node = await self._poll(read, lambda n: n is not None and ok(n), timeout, what or f"node {name}")
        assert node is not None
        return node
