"""What a hold rule is: a Slurm state (or a policy) under which a judged change waits rather than
reaches slurmctld. One rule is one module implementing `HoldRule`; `holds/__init__.py` lists them.

The daemon asks each rule, in the list's order, about every change that passed validation; the
first that holds it decides the outcome. From the rule alone come everything said of a held change:
the history entry's and the `slurm_sidecars_config_applies_total` counter's outcome
(`rule.outcome`), the Kubernetes Event (`rule.event`), /status `rejected.held_by` and the gauge
`slurm_sidecars_config_held{rule}` (`rule.name`), and the reason (`Hold.reason`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from sidecars.configsync.fileset.sources import FileSet
from sidecars.configsync.judge.validate import Verdict
from sidecars.configsync.settings import Settings
from sidecars.protocol.configsync import ConfigOutcome
from sidecars.protocol.events import EventReason
from sidecars.slurm import SlurmClient

__all__ = ["Change", "Hold", "HoldRule"]


@dataclass(frozen=True, slots=True)
class Change:
    """A change set that passed validation, as a rule sees it."""

    files: FileSet
    verdict: Verdict
    settings: Settings
    client: SlurmClient  # the live daemon's Slurm (a rule may ask it about its state)
    daemon: str  # the daemon it is for: slurmctld, or slurmdbd (config-sync --daemon)
    # nothing runs on the applied set yet (first start, or the daemon not started): the change is
    # installed for the daemon to start on, not applied to a running one
    installs: bool


@dataclass(frozen=True, slots=True)
class Hold:
    reason: str  # why, in words an operator acts on (the Event's, /status's, the history's)
    jobs: tuple[int, ...] = ()  # the jobs it is held for (/status `held_for_jobs`)
    restart_required: bool = False  # /status `restart_required`, its gauge


class HoldRule(Protocol):
    """One reason to hold a change. `again`: the state may change by itself (jobs end), so a held
    set is judged again at every pass (the re-hash timer); otherwise only a new set is judged."""

    name: str  # snake_case: /status `rejected.held_by`, the `rule` label of the held gauge
    outcome: ConfigOutcome
    event: EventReason
    again: bool

    async def holds(self, change: Change) -> Hold | None:
        """The hold, or None when this rule lets the change pass."""
        ...
