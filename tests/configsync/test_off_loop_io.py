"""config-sync's file work runs off its event loop (issue 33): reading the sources (a MiB set, and
its secret values learnt for the redactor, once re-read on the loop at a log line: 0.14 s under
load), and writing the set into the target with its fsyncs (Target.swap), its verification and
the last known good set. Which thread runs them is what is asserted, not how long they take: a
loaded machine can fake a duration, not a thread."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from sidecars.configsync.fileset import sources
from sidecars.configsync.fileset.stage import LastKnownGood, Target
from sidecars.devcluster import DevCluster
from sidecars.runtime.redact import REDACTED
from tests.configsync.harness import config_sync, set_sha

PASSWORD = b"pw-off-the-loop-5e1f"


def on_the_loop(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The file steps named each time one runs on the event loop's thread."""
    found: list[str] = []
    for owner, name in (
        (sources, "read_source"),  # the service's read, and the secret values' once
        (Target, "swap"),
        (Target, "verified"),
        (LastKnownGood, "save"),
    ):
        real = getattr(owner, name)

        def watched(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            if threading.current_thread() is threading.main_thread():
                found.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(owner, name, watched)
    return found


@pytest.mark.cluster(nodes=1)
async def test_sources_read_and_the_set_written_off_the_loop(
    cluster: DevCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = on_the_loop(monkeypatch)
    async with config_sync(cluster) as sync:
        files = sync.good()
        files["slurm.conf"] += b"AccountingStoragePass=" + PASSWORD + b"\n"
        sync.config.write(files)
        await sync.wait(set_sha(files))
        # the value learnt from the set the service read (in its thread): no text shows it
        judged = next(g for g in sync.service.history_view()["generations"] if g["sha256"] == set_sha(files))
        diff = next(f["diff"] for f in judged["files"] if f["name"] == "slurm.conf")
        assert PASSWORD.decode() not in repr(sync.service.history_view())
        assert f"AccountingStoragePass={REDACTED}" in diff
    assert not held, f"on the event loop: {sorted(set(held))}"
