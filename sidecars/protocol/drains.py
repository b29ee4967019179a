"""What the sidecars write as a Slurm drain reason, and the drain API between the preStop hook and
the agent. A drain whose reason does not start with `REASON_PREFIX` is never ours to touch."""

from __future__ import annotations

from typing import Final, Literal

REASON_PREFIX: Final = "slurm-sidecars:"
# each writer's family: the prefix is followed by what it names
MAINTENANCE: Final = REASON_PREFIX + " maintenance "  # + the window's name
UPGRADE: Final = REASON_PREFIX + " upgrade "  # + the revision or release
GRES: Final = REASON_PREFIX + " gres "  # + what is short
HEALTH: Final = REASON_PREFIX + " health "  # + the Node's signals
AGENT: Final = REASON_PREFIX + " pod "  # + "NS/NAME terminating[: why]"
GPU_CHECK: Final = REASON_PREFIX + " gpu check failed: "  # + what the agent's check saw
CORDON: Final = (REASON_PREFIX + " kubernetes node ", " cordoned")  # around the Node's name
# Slinky's operator writes its own drains with this prefix and touches no other (IsNodeReasonOurs)
SLINKY_OPERATOR_PREFIX: Final = "slurm-operator:"

# a reason the hook or an agent's client adds: one line, bounded, so Slurm's whole reason stays short
REASON_MAX_CHARS: Final = 200

# the agent's answer to `POST /v1/drain` on its unix socket: {"result", "detail", "seconds"}
DrainResult = Literal["drained", "no_record", "timed_out"]
DRAINED: Final = "drained"  # nothing runs on the node any more
NO_RECORD: Final = "no_record"  # Slurm has no such node, or it is another pod's: nothing to drain
TIMED_OUT: Final = "timed_out"  # the deadline came first (the agent's policy then applies)
DRAIN_RESULTS: Final = frozenset[str]({DRAINED, NO_RECORD, TIMED_OUT})
DRAIN_DONE: Final = frozenset[str]({DRAINED, NO_RECORD})  # the pod may go


def agent_reason(namespace: str, pod: str, why: str = "") -> str:
    """An agent's drain of its own node, naming the pod."""
    return f"{AGENT}{namespace}/{pod} terminating" + (f": {why}" if why else "")


def reason_problem(reason: object) -> str | None:
    """Why an added reason is refused, or None: the rule both ends of the drain API apply."""
    if not isinstance(reason, str) or len(reason) > REASON_MAX_CHARS or "\n" in reason:
        return f"a single line of at most {REASON_MAX_CHARS} characters"
    return None
