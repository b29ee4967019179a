"""config-sync's words on the wire: the outcome of a change set (the `result` label of
`slurm_sidecars_config_applies_total`, a /history entry's `outcome`, /status `applied.outcome`) and
where a generation stands among HA controller pods (/status `ha.rollout.state`, the `state` label of
`slurm_sidecars_config_ha_rollout`), and the key of a set that forces a change past its jobs."""

from __future__ import annotations

from enum import StrEnum

# a key of the set that forces a change past the jobs it would end: its first line names who
FORCE_FILE = "slurm-sidecars.force"


class ConfigOutcome(StrEnum):
    APPLIED = "applied"  # verified on slurmctld (with HA peers: held by every controller pod)
    REJECTED = "rejected"  # refused before the swap: nothing reached the target
    ROLLED_BACK = "rolled_back"  # refused by the live daemon: the last known good set is back
    RESTART_REQUIRED = "restart_required"  # held: it needs a restart and --restart-policy is hold
    HELD = "held"  # held by a Slurm state (configsync/holds): the jobs it would end, ...
    # with HA peers (configsync/ha/rollout.py)
    STAGING = "staging"  # on this pod, not yet on every peer
    NOT_EVERYWHERE = "not_everywhere"  # a peer did not catch up in time
    SUPERSEDED = "superseded"  # replaced by a newer generation before every pod held it


class RolloutState(StrEnum):
    EVERYWHERE = "everywhere"
    STAGING = "staging"
    NOT_EVERYWHERE = "not everywhere"


# ---------------------------------------------------------------- HA controllers and the dry run
# (the words ha/ and dryrun/ write: /status `ha.role`, `ha.peers[].role`, `dry_run.isolation`)


class HaRole(StrEnum):
    """A controller as asked alone (slurm/standby.py): /status `ha.role` and each `ha.peers[].role`
    (what a peer's config-sync reads back), the `role` label of `slurm_sidecars_config_ha_role`."""

    IN_CONTROL = "in control"  # it serves requests: its config-sync is the one that writes
    STANDBY = "standby"  # it answers pings and refuses the rest
    DOWN = "down"  # its ping failed
    UNKNOWN = "unknown"  # it answered its ping but neither served nor refused as a standby


class Isolation(StrEnum):
    """How a dry run's slurmctld is kept off the cluster: /status `dry_run.isolation`, and
    `--dry-run-isolation` (with ISOLATION_AUTO)."""

    NETNS = "netns"  # a network namespace of its own (CAP_SYS_ADMIN)
    PORTS = "ports"  # closed ports only


ISOLATION_AUTO = "auto"  # the setting's default: netns when allowed, else ports
ISOLATION_SETTINGS = (ISOLATION_AUTO, *Isolation)  # what `--dry-run-isolation` takes


# ---- the service and its daemons' strategies (configsync/service, slurmdbd/, restd/)


class RestoredBy(StrEnum):
    """Who put the last known good set back over an unverified one (/status `restored.by`, the
    ConfigRestored Event's words)."""

    CONFIG_GUARD = "config-guard"  # slurmctld's start gate, as slurmctld (re)started
    CONFIG_SYNC = "config-sync"  # this sidecar: at its start, or a rollback of its own


class RestdTurnState(StrEnum):
    """Where this slurmrestd replica stands in the turn of drained restarts (/status `restd.turn.state`)."""

    FREE = "free"  # not asking for the turn
    WAITING = "waiting"  # a change waits for another replica to hand the turn back
    HOLDING = "holding"  # this replica drains and restarts now
