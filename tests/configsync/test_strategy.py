"""A daemon config-sync keeps is one strategy (service/strategy.py: read, judge, apply) that the one
service runs, on the service's own state, installer and reporter. Shown here with a daemon made up in
the test: no subclass of the service, no private method overridden, and the service's words (/status,
/history, generations, the last known good set) come out as for slurmctld's, with the strategy's own
fields beside them and none of slurmctld's."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from sidecars.configsync.dryrun.runner import DryRunner
from sidecars.configsync.fileset.sources import FileSet
from sidecars.configsync.judge.validate import Verdict
from sidecars.configsync.service.daemon import ConfigSync
from sidecars.configsync.service.installing import Installer
from sidecars.configsync.settings import Settings
from sidecars.devcluster.volume import AtomicVolume
from sidecars.protocol.configsync import ConfigOutcome
from sidecars.slurm import SlurmClient
from tests.helpers import RecordingEvents
from tests.settings import build

CONF = "toy.conf"


@dataclass
class ToyJudge:
    dry_runner: DryRunner | None = None

    async def validate(self, files: FileSet, current: FileSet | None) -> Verdict:
        entry = files.files.get(CONF)
        if entry is None or b"bad" in entry.data:
            return Verdict(False, f"{CONF} is missing or bad")
        return Verdict(True)


@dataclass
class ToyStrategy:
    """A daemon that takes its file when told (as slurmdbd's `sacctmgr reconfigure`)."""

    installer: Installer
    daemon: str = "toyd"
    validator: ToyJudge = field(default_factory=ToyJudge)
    read_seen: list[str] = field(default_factory=list)
    took: list[str] = field(default_factory=list)

    def read(self, files: FileSet) -> FileSet:
        self.read_seen.append(files.short)
        return files

    async def judge(
        self, files: FileSet, current: FileSet | None, seen: float, *, startup: bool
    ) -> Verdict | None:
        do = self.installer
        verdict = await self.validator.validate(files, current)
        if not verdict.ok:
            await do.reject(files, verdict.reason, ConfigOutcome.REJECTED, seen)
            return None
        if current is None:
            await do.install(files, seen, reason="toyd is not running yet: it starts on this set")
            return None
        return verdict

    async def apply(self, files: FileSet, current: FileSet, verdict: Verdict, seen: float) -> None:
        async with self.installer.unverified(files) as generation:
            self.took.append(files.short)  # the daemon re-reads its file
        assert await self.installer.verified()
        await self.installer.keep(files, generation, seen=seen, reason="toyd took it", message="toyd took it")

    def status(self) -> dict[str, Any]:
        return {"daemon": self.daemon, "took": len(self.took)}


async def test_a_daemon_is_one_strategy_the_service_runs(tmp_path: Path) -> None:
    source = AtomicVolume(tmp_path / "vol")
    source.write({CONF: "a=1\n"})
    settings = build(
        Settings, sources=(source.path,), target=tmp_path / "target", state_dir=tmp_path / "state"
    )
    strategies: list[ToyStrategy] = []

    def make(installer: Installer) -> ToyStrategy:
        strategies.append(ToyStrategy(installer))
        return strategies[-1]

    service = ConfigSync(settings, SlurmClient(), CollectorRegistry(), RecordingEvents(), strategy=make)
    [toy] = strategies
    assert service.strategy is toy and service.validator is toy.validator and service.ctld is None

    await service.start()  # nothing staged: installed for the daemon to start on
    st = service.status()
    assert service.ready and st["applied"]["generation"] == 1 and toy.took == []
    assert st["daemon"] == "toyd" and st["took"] == 0
    assert not {"workers", "harm", "node_state"} & set(st), "slurmctld's fields on another daemon's /status"

    source.write({CONF: "a=2\n"})
    await service.sync_once()
    st = service.status()
    assert st["applied"]["generation"] == 2 and not st["pending"] and st["took"] == 1
    kept = service.lkg.load()  # the last known good set, under --state-dir
    assert kept is not None and kept.generation == 2

    source.write({CONF: "bad\n"})
    await service.sync_once()
    st = service.status()
    assert st["applied"]["generation"] == 2 and st["rejected"]["reason"] == f"{CONF} is missing or bad"
    assert toy.took == [toy.took[0]] and len(toy.read_seen) == 3  # every set read through the strategy
    outcomes = [g["outcome"] for g in service.history_view()["generations"]]
    assert outcomes == [ConfigOutcome.REJECTED, ConfigOutcome.APPLIED, ConfigOutcome.APPLIED]
