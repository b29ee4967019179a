"""Hold rules: each a Slurm state (or a policy) under which a judged change waits instead of reaching
the daemon. A rule is one module implementing `rule.HoldRule`; adding one is that module and one
line in `RULES` (its outcome, Event, /status field, gauge label and history entry follow from it).

- jobs_at_risk.py: the change would end or requeue jobs (held until they are gone, or forced);
- restart_policy.py: the change needs a restart and `--restart-policy hold` is set.
"""

from __future__ import annotations

from sidecars.configsync.holds.jobs_at_risk import JobsAtRisk
from sidecars.configsync.holds.restart_policy import RestartPolicy
from sidecars.configsync.holds.rule import Change, Hold, HoldRule

__all__ = ["RULES", "Change", "Hold", "HoldRule", "first_hold", "rules"]

# every hold rule, in the order they are asked: the first that holds a change decides its outcome
RULES: tuple[type[HoldRule], ...] = (JobsAtRisk, RestartPolicy)


def rules() -> tuple[HoldRule, ...]:
    """One of each registered rule (a daemon's own: a rule may keep what it learnt)."""
    return tuple(rule() for rule in RULES)


async def first_hold(held_by: tuple[HoldRule, ...], change: Change) -> tuple[HoldRule, Hold] | None:
    """The first rule that holds the change, and its hold; None when every rule lets it pass."""
    for rule in held_by:
        hold = await rule.holds(change)
        if hold is not None:
            return rule, hold
    return None
