"""A dev cluster's daemons, one at a time: munged, slurmdbd, slurmctld (daemonized, or held in the
foreground as our images run it) and each node's slurmd; started, stopped, crashed and restarted,
each start waited for until the daemon answers or its pid file names a live process."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import structlog

from sidecars.devcluster.base import ClusterBase, ClusterError, alive
from sidecars.devcluster.startwatch import DaemonDied, StartWatch
from sidecars.runtime import process
from sidecars.slurm.lastwords import last_words

log = structlog.get_logger(__name__)

STDERR_MARK = "--- slurmctld -D started at"


class ClusterDaemons(ClusterBase):
    """Each daemon on its own: started and waited for, stopped, crashed (SIGKILL), restarted."""

    async def _start_munge(self) -> None:
        m = self.dir / "munge"
        await self._exec(
            self.in_namespace(
                "munged",
                "-f",
                "-S",
                f"{m}/munge.sock",
                f"--key-file={m}/munge.key",
                f"--pid-file={m}/munged.pid",
                f"--log-file={m}/munged.log",
                f"--seed-file={m}/munged.seed",
            )
        )

    async def start_slurmdbd(self, timeout: float = 60.0, *, wait: bool = True) -> None:
        """Start slurmdbd on the cluster's database and wait until it answers (its first start
        creates the tables: seconds); without `wait`, return once it was started, as a container
        runtime restarting it does."""
        pidfile = self.dir / "run" / "slurmdbd.pid"
        if pidfile.exists() and self.hostpid("slurmdbd") is None:
            pidfile.unlink()  # slurmdbd would signal whatever process now has that PID
        watch = self.slurmdbd_watch()
        await self._start_daemon(self.in_namespace("slurmdbd"), watch)
        if wait:
            await self.wait_slurmdbd(watch, timeout)

    def slurmdbd_watch(self) -> StartWatch:
        """The watch on the slurmdbd about to start (made before its start: its log is read from there)."""
        return StartWatch(
            "slurmdbd",
            self._slurmdbd_log,
            lambda: self.hostpid("slurmdbd"),
            runs=lambda: self.runs("slurmdbd"),
        )

    async def wait_slurmdbd(self, watch: StartWatch, timeout: float) -> None:
        """Until slurmdbd answers; one that dies (a fatal, or a failed conversion's `error:` and
        its pid gone) is told at the next poll with its last words."""
        client = self.client(timeout=10.0)

        async def answering() -> bool:
            watch.check()
            return await client.accounting_ping()

        try:
            await watch.race(self._poll(answering, bool, timeout, "slurmdbd answering", interval=0.2))
        except DaemonDied:
            raise
        except ClusterError as e:
            raise ClusterError(f"{e}; slurmdbd's log: {self.slurmdbd_log_tail()}") from None

    async def _start_daemon(self, argv: list[str], watch: StartWatch | None) -> None:
        """Run a daemon's start (it forks and its first process returns); one that ends in error
        before it forks (a config it refuses) died at start, in the words it wrote."""
        try:
            await self._exec(argv)
        except ClusterError as e:
            if watch is None:
                raise
            words = last_words(str(e).split(": ", 1)[-1])
            raise DaemonDied(watch.daemon, words.line, time.time()) from e
        if watch is not None:
            watch.launched()

    async def stop_slurmdbd(self, timeout: float = 30.0) -> None:
        """Stop slurmdbd (SIGTERM: it finishes what it was writing) and wait until it is gone."""
        pid = self.hostpid("slurmdbd")
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        await self._poll(self._async(lambda: not alive(pid)), bool, timeout, "slurmdbd gone")

    @property
    def _slurmdbd_log(self) -> Path:
        return self.log_dir / "slurmdbd.log"

    def slurmdbd_log_tail(self, limit: int = 1500, since: int = 0) -> str:
        """The end of slurmdbd's log, of what it wrote past byte `since` (a start's own lines)."""
        with contextlib.suppress(OSError), self._slurmdbd_log.open("rb") as f:
            f.seek(since)
            return f.read().decode(errors="replace")[-limit:].strip()
        return ""

    async def start_slurmctld(self, timeout: float = 30.0) -> None:
        """Start slurmctld and wait until it answers; one that dies is told at the next poll
        (StartWatch: its process and its log), with its last words, not at `timeout`."""
        watch = StartWatch(
            "slurmctld",
            self.log_dir / "slurmctld.log",
            lambda: self.foreground_pid() or self.hostpid("slurmctld"),
            ended=lambda: None if self._ctld is None else self._ctld.returncode,
            more=self.ctld_stderr_tail if self.spec.foreground_ctld else str,
            runs=None if self.spec.foreground_ctld else lambda: self.runs("slurmctld"),
        )
        if self.spec.foreground_ctld:
            await self._start_foreground_ctld()
        else:
            await self._start_daemon(self.in_namespace("slurmctld"), watch)
        client = self.client(timeout=5.0)

        async def answering() -> bool:
            watch.check()
            return (await client.ping()).up

        await watch.race(self._poll(answering, bool, timeout, "slurmctld answering"))

    async def _start_foreground_ctld(self) -> None:
        if self._ctld is not None:
            if self.foreground_pid() is not None:
                raise ClusterError("the foreground slurmctld is still running")
            await self._reap_ctld(10)  # its slurmctld ended; nsenter is about to
        with open(self.ctld_stderr, "ab") as err:  # appended: every start's last words are kept
            err.write(f"{STDERR_MARK} {time.strftime('%FT%TZ', time.gmtime())}\n".encode())
            err.flush()
            # in a session of its own (runtime.process): a terminal's ^C is for pytest, not the controller
            self._ctld = await process.start(
                self.in_namespace("slurmctld", "-D", "-f", str(self.conf_path)),  # as our images run it
                stdout=err,
                stderr=err,
                cwd=self.dir,
            )

    async def plugin_dir(self) -> Path:
        """slurmctld's PluginDir as this host sees it (inside the chroot for that release)."""
        reported = Path((await self.client().show_config())["PluginDir"].split(":")[0])
        if self.release.root is None:
            return reported
        return self.release.root / reported.relative_to("/")

    def foreground_pid(self) -> int | None:
        """Host PID of the `slurmctld -D` this cluster started and holds, while it lives (else None)."""
        if self._ctld is None or self._ctld.returncode is not None:
            return None
        pid = self._ctld.pid
        with contextlib.suppress(OSError, ValueError, IndexError):
            child = int(Path(f"/proc/{pid}/task/{pid}/children").read_text().split()[0])
            return child if alive(child) else None
        return None

    @property
    def foreground_exit(self) -> int | None:
        """The exit status of the foreground slurmctld once it ended (-N: killed by signal N)."""
        return None if self._ctld is None else self._ctld.returncode

    def ctld_stderr_tail(self, limit: int = 1500) -> str:
        """The end of what the latest foreground slurmctld wrote (its fatal, when it died)."""
        with contextlib.suppress(OSError):
            text = self.ctld_stderr.read_text(errors="replace")
            return text.rsplit(STDERR_MARK, 1)[-1].split("\n", 1)[-1][-limit:].strip()
        return ""

    async def stop_slurmctld(self, *, crash: bool = False, timeout: float = 30.0) -> None:
        """Stop the controller: saving its state first (`scontrol shutdown slurmctld`), or, with
        `crash`, by SIGKILL, losing whatever it had not saved yet."""
        pid = self.foreground_pid() or self.hostpid("slurmctld")
        if pid is None:
            await self._reap_ctld(timeout)
            return
        gone = self._async(lambda: not alive(pid))
        if crash:
            os.kill(pid, signal.SIGKILL)
        else:
            await self.client(timeout=10.0).shutdown_controller()
            try:
                await self._poll(gone, bool, timeout / 3, "slurmctld gone after scontrol shutdown")
            except ClusterError:
                # seen once in a loaded full run: a 22.05 controller just restarted took the request
                # and did not end within 10 s. SIGTERM is its own graceful shutdown (state saved)
                log.warning("slurmctld_shutdown_slow", pid=pid, then="SIGTERM")
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
        await self._poll(gone, bool, timeout, "slurmctld gone")
        await self._reap_ctld(timeout)

    async def _reap_ctld(self, timeout: float) -> None:
        """Wait for the held foreground process to end (its slurmctld is gone or being killed)."""
        if self._ctld is None:
            return
        try:
            await self._ctld.wait(timeout)
        except TimeoutError:
            await self._ctld.kill()

    async def restart_slurmctld(self) -> None:
        await self.stop_slurmctld()
        await self.start_slurmctld()

    def slurmd_watch(self, name: str) -> StartWatch:
        """The watch on node `name`'s slurmd about to start (its log read from there)."""
        return StartWatch(
            f"slurmd {name}",
            self.log_dir / f"slurmd-{name}.log",
            lambda: self.hostpid(f"slurmd-{name}"),
            runs=lambda: self.runs("slurmd", "-N", name),
        )

    async def start_slurmd(self, name: str, *extra: str, watch: StartWatch | None = None) -> int:
        """Start one node's slurmd; returns its host PID once its pid file names a live process
        (with `watch`, one that dies first is told at the next poll, with its last words)."""
        (self.dir / "spool" / name).mkdir(parents=True, exist_ok=True)
        pidfile = self.dir / "run" / f"slurmd-{name}.pid"
        if pidfile.exists() and self.hostpid(f"slurmd-{name}") is None:
            # slurmd kills whatever its stale pid file names: that PID may now be a job's
            pidfile.unlink()
        await self._start_daemon(self.slurmd_argv(name, *extra), watch)

        def started() -> int | None:
            if watch is not None:
                watch.check()
            return self.hostpid(f"slurmd-{name}")

        pid = await self._poll(
            self._async(started),
            lambda p: p is not None,
            30,  # seconds only on a loaded machine (parallel test workers on two cores)
            f"slurmd {name} pid file",
        )
        assert pid is not None
        return pid

    async def kill_slurmd(self, name: str) -> int:
        """SIGKILL one node's slurmd (a crash); returns the host PID it had."""
        pid = self.hostpid(f"slurmd-{name}")
        if pid is None:
            raise ClusterError(f"slurmd {name} is not running")
        os.kill(pid, signal.SIGKILL)
        await self._poll(self._async(lambda: alive(pid)), lambda alive: not alive, 10, f"slurmd {name} gone")
        return pid
