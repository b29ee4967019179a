"""No set can stop config-sync (issue 33): each of the sets of one MiB that held it for minutes
(one word, 50,000 lines, a MiB secret value...) gets a verdict, recorded in the history, while
/livez answers the whole time (its loop-lag check included), and a good change after them is
applied. Each set is in slurm.conf beside the cluster's own lines, so Slurm's parser and the dry
run see it too."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from sidecars.configsync.fileset import conffile
from sidecars.configsync.fileset.sources import FileSet
from sidecars.configsync.fileset.stage import LastKnownGood
from sidecars.configsync.judge import restart, validate
from sidecars.devcluster import DevCluster
from sidecars.runtime import limits
from sidecars.runtime.looplag import LoopLagSettings
from tests.configsync.harness import config_sync, set_sha
from tests.helpers import eventually

MiB = 1 << 20

# each makes `n` bytes to append to slurm.conf
SETS: dict[str, Callable[[int], bytes]] = {
    "one-word comment": lambda n: b"#" + b"x" * (n - 2) + b"\n",
    "keys without values": lambda n: b"K= " * ((n - 1) // 3) + b"\n",
    "a MiB Feature list": lambda n: (
        b"NodeName=f1 CPUs=1 Features=" + b",".join(b"f%d" % i for i in range(n // 4))[: n - 40] + b"\n"
    ),
    "50,000 short lines": lambda n: b"".join(b"#%018d\n" % i for i in range(min(50_000, n // 20))),
    "one repeated key": lambda n: b"SchedulerParameters=x " * ((n - 1) // 22) + b"\n",
    "an unterminated quote": lambda n: b'SlurmctldParameters="' + b"y" * (n - 30) + b"\n",
    "a key-like run with no final newline": lambda n: b"Abc" * (n // 3),
    "a MiB secret value": lambda n: b"AccountingStoragePass=" + b"s" * (n - 30) + b"\n",
}
# a Slurm command run on a 1 MiB set (the client parse, the dry run) takes a few seconds on a
# loaded machine; the 5 s is measured by `make bench` (bench/long_input.py) on a quiet one
VERDICT_SECONDS = 60.0


def _size(files: FileSet | None) -> int:
    return sum(e.size for e in files.files.values()) if files is not None else 0


def on_the_loop(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The CPU-bound steps of a verdict and an apply (each 0.02-0.1 s on a MiB set, more on a loaded
    machine), named each time one runs on the event loop's thread over a set past
    `limits.OFF_LOOP_CHARS`. Which thread runs them is what the test asserts, not how long they
    take: a loaded machine can fake a duration, not a thread."""
    found: list[str] = []
    steps: list[tuple[Any, str, Callable[..., int]]] = [
        (conffile, "parse", lambda files, *_: _size(files)),  # the sets read (validation, apply, dry run)
        (restart, "classify", lambda old, new, current, files, *_: _size(files) + _size(current)),
        (LastKnownGood, "save", lambda self, applied: _size(applied.files)),  # the set kept, in base64
        (validate, "candidate_copy", lambda files, *_: _size(files)),  # the copy Slurm's parser reads
    ]
    for owner, name, size in steps:
        real = getattr(owner, name)

        def watched(*args: Any, _real: Any = real, _name: str = name, _size: Any = size) -> Any:
            loop_thread = threading.current_thread() is threading.main_thread()
            if loop_thread and _size(*args) >= limits.OFF_LOOP_CHARS:
                found.append(_name)
            return _real(*args)

        monkeypatch.setattr(owner, name, watched)
    return found


@pytest.mark.cluster(nodes=1)
@pytest.mark.per_release("each release's parser and dry run read the MiB sets their own way")
async def test_every_long_set_gets_a_verdict_while_livez_answers(
    cluster: DevCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = on_the_loop(monkeypatch)
    # the kubelet's view: /livez fails once the loop lagged past this (2 s: far over a healthy
    # loop's lag on a loaded machine, far under the minutes the sets held it for)
    async with config_sync(cluster, loop_lag=LoopLagSettings(bound_seconds=2.0)) as sync:
        url = f"http://127.0.0.1:{sync.running.port}/livez"
        refused: list[str] = []
        answers = 0
        done = asyncio.Event()

        async def probe() -> None:
            nonlocal answers
            async with aiohttp.ClientSession() as s:
                while not done.is_set():
                    async with s.get(url) as r:
                        answers += 1
                        if r.status != 200:
                            refused.append(await r.text())
                    await asyncio.wait([asyncio.ensure_future(done.wait())], timeout=0.2)

        prober = asyncio.create_task(probe())
        took: dict[str, float] = {}
        reasons: dict[str, str] = {}
        try:
            for name, make in SETS.items():
                files = sync.good()
                room = MiB - len(files["slurm.conf"])
                files["slurm.conf"] += make(room)
                assert len(files["slurm.conf"]) <= MiB, name
                wanted = set_sha(files)
                started = time.monotonic()
                sync.config.write(files)
                await eventually(
                    lambda: [g["sha256"] for g in sync.service.history_view()["generations"]],
                    lambda shas, w=wanted: w in shas,  # type: ignore[misc]
                    within=VERDICT_SECONDS,
                    what=f"a verdict on {name}",
                )
                took[name] = time.monotonic() - started
                reasons[name] = next(
                    g["reason"] for g in sync.service.history_view()["generations"] if g["sha256"] == wanted
                )
            # and the cluster's configuration still moves: a good change is applied
            files = sync.good()
            files["slurm.conf"] += b"# a good change after the long ones\n"
            sync.config.write(files)
            await sync.wait(set_sha(files), within=VERDICT_SECONDS)
        finally:
            done.set()
            await prober
        assert answers > 0 and not refused, refused
        assert not held, f"on the event loop over a MiB set: {sorted(set(held))}"
        # slurmctld takes past the dry run's timeout on a MiB of features (its time grows with their
        # square): refused by config-sync's cap, in its words, before any Slurm program reads it
        assert "features, over the cap of" in reasons["a MiB Feature list"], reasons
        print("verdicts:", {k: round(v, 2) for k, v in took.items()})
