"""Typed views of what Slurm reports, the same whichever output format they were read from.

Only what the sidecars act on is modelled; volatile figures (CPU load, free memory) are left out so
that two reads of an unchanged cluster compare equal whatever path produced them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sidecars.protocol.configsync import HaRole

# Base node states as Slurm names them (upper case, as in `scontrol show node`).
BASE_STATES = frozenset(
    {
        "IDLE",
        "ALLOCATED",
        "MIXED",
        "DOWN",
        "ERROR",
        "FUTURE",
        "UNKNOWN",
        "PLANNED",
        "END",
        "EXTERNAL",
        "BLOCKED",
    }
)
# States that mean a job still holds the node.
BUSY_STATES = frozenset({"ALLOCATED", "MIXED"})


@dataclass(frozen=True, slots=True)
class NodeState:
    """A node's base state plus its flags, e.g. ALLOCATED + {DRAIN}."""

    base: str
    flags: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, text: str) -> NodeState:
        """Parse the `scontrol` form `ALLOCATED+DRAIN` (or `IDLE*`, where `*` means not responding)."""
        parts = [p for p in text.strip().upper().split("+") if p]
        if not parts:
            return cls("UNKNOWN")
        base = parts[0]
        flags = set(parts[1:])
        if base.endswith("*"):
            base = base.rstrip("*")
            flags.add("NOT_RESPONDING")
        return cls(base, frozenset(flags))

    @classmethod
    def from_words(cls, words: list[str]) -> NodeState:
        """Build from a list such as 24.11's `["ALLOCATED", "DRAIN"]`: the first base state wins."""
        upper = [w.upper() for w in words]
        base = next((w for w in upper if w in BASE_STATES), "UNKNOWN")
        return cls(base, frozenset(w for w in upper if w != base))

    @property
    def drain(self) -> bool:
        return "DRAIN" in self.flags

    @property
    def busy(self) -> bool:
        """A job still runs or is completing on the node."""
        return self.base in BUSY_STATES or "COMPLETING" in self.flags

    @property
    def drained(self) -> bool:
        """DRAIN set and nothing running or completing: safe to take away."""
        return self.drain and not self.busy

    @property
    def registered(self) -> bool:
        """slurmd has registered and answers: not FUTURE, not NOT_RESPONDING, not INVALID_REG."""
        if self.base in {"FUTURE", "UNKNOWN"}:
            return False
        return not ({"NOT_RESPONDING", "INVALID_REG", "INVALID"} & self.flags)

    def __str__(self) -> str:
        return "+".join([self.base, *sorted(self.flags)])


@dataclass(frozen=True, slots=True)
class Reason:
    text: str
    user: str | None = None
    time: int | None = None  # epoch seconds


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    state: NodeState
    reason: Reason | None
    cpus: int
    alloc_cpus: int
    real_memory: int
    features: tuple[str, ...]
    active_features: tuple[str, ...]
    gres: str  # as configured, e.g. "gpu:4"; "" when none
    gres_used: str  # e.g. "gpu:2"; "" when none
    address: str
    hostname: str
    partitions: tuple[str, ...]
    boot_time: int | None
    slurmd_start_time: int | None
    version: str | None
    port: int | None = None  # slurmd's port when the node has its own (a dynamic node's `--conf Port=`)
    comment: str = ""  # Slinky writes the pod's identity here as JSON
    # 25.05+: the node's place as `scontrol update topology=` set it (`name:unit[:...]`); "" when
    # none was set in place (the topology file's placement is not shown here) or before 25.05
    topology: str = ""
    weight: int | None = None  # scheduling Weight (`scontrol update weight=` changes it at run time)


@dataclass(frozen=True, slots=True)
class Job:
    job_id: int
    name: str
    user: str
    state: str  # RUNNING, PENDING, COMPLETING, ... (the first word of the state)
    state_reason: str
    partition: str
    nodes: tuple[str, ...]  # expanded
    submit_time: int | None
    start_time: int | None  # None while pending
    end_time: int | None  # expected end (start + limit) while running; None when unknown
    time_limit_minutes: int | None  # None = unlimited
    cpus: int
    # GPU (gres "gpu") indices per node, from the allocation detail: {"n1": (0, 1)}
    gpu_indices: dict[str, tuple[int, ...]] = field(default_factory=dict, compare=True, hash=False)
    node_count: int = 0  # nodes requested (pending) or allocated (running)
    gpus_per_node: int = 0  # GPUs requested per node (`--gres=gpu:N`), 0 when none

    @property
    def running(self) -> bool:
        return self.state in {"RUNNING", "COMPLETING", "SUSPENDED"}


@dataclass(frozen=True, slots=True)
class Partition:
    name: str
    nodes: tuple[str, ...]  # expanded
    state: str  # UP, DOWN, DRAIN, INACTIVE
    max_time_minutes: int | None  # None = unlimited
    total_cpus: int


@dataclass(frozen=True, slots=True)
class Reservation:
    """`scontrol show reservation`: what the maintenance windows rest on."""

    name: str
    start: int | None  # epoch seconds
    end: int | None
    nodes: tuple[str, ...]  # expanded
    flags: frozenset[str]
    state: str  # ACTIVE, INACTIVE
    comment: str | None
    users: str | None


@dataclass(frozen=True, slots=True)
class Ping:
    """`scontrol ping`: which controllers answer, in `SlurmctldHost` order.

    With several controllers a backup in standby answers pings too, so `up` alone does not say who
    is in control. Slurm's own rule does: a controller that takes control shuts down those listed
    before it, and a primary that starts takes control back, so the first one up is in control
    (or, for a few seconds during a takeover, about to be)."""

    up: bool
    controllers: dict[str, bool]  # "<role>:<host>" -> up, e.g. "primary:ctld-a", "backup:ctld-b"

    def hosts(self) -> list[str]:
        """The controllers' host names, in `SlurmctldHost` order."""
        return [key.split(":", 1)[-1] for key in self.controllers]

    @property
    def in_control(self) -> str | None:
        """The host of the controller in control (the first one up), None when none answers."""
        return next((key.split(":", 1)[-1] for key, up in self.controllers.items() if up), None)

    def role(self, host: str) -> HaRole:
        """What `host` is: in control, a standby that answers (healthy, ready to take over), down,
        or unknown (not a `SlurmctldHost` of this configuration)."""
        for key, up in self.controllers.items():
            if key.split(":", 1)[-1] == host:
                if not up:
                    return HaRole.DOWN
                return HaRole.IN_CONTROL if host == self.in_control else HaRole.STANDBY
        return HaRole.UNKNOWN


@dataclass(frozen=True, slots=True)
class BootTime:
    """slurmctld's BOOT_TIME and the moment of the query that read it ("Configuration data as of"),
    as Slurm prints them: local time, 1-s resolution. None where the output had no such line."""

    booted: str | None
    asked: str | None


@dataclass(frozen=True, slots=True)
class Version:
    major: int
    minor: int
    micro: int

    @classmethod
    def parse(cls, text: str) -> Version:
        """`slurm-wlm 22.05.8` / `slurm 24.11.5` / `24.11.5` -> Version."""
        word = text.strip().split()[-1]
        nums = [int("".join(ch for ch in p if ch.isdigit()) or 0) for p in word.split(".")[:3]]
        while len(nums) < 3:
            nums.append(0)
        return cls(nums[0], nums[1], nums[2])

    def at_least(self, major: int, minor: int = 0) -> bool:
        return (self.major, self.minor) >= (major, minor)

    def __str__(self) -> str:
        return f"{self.major}.{self.minor:02d}.{self.micro}"


@dataclass(frozen=True, slots=True)
class JobPlacement:
    """What a pending or running job depends on in the configuration: where it runs or may run."""

    job_id: int
    state: str  # RUNNING, PENDING, ...
    partitions: tuple[str, ...]  # a pending job may name several
    nodes: tuple[str, ...]  # expanded; empty while pending
    reservation: str  # "" when none
    qos: str

    @property
    def running(self) -> bool:
        return self.state in {"RUNNING", "COMPLETING", "SUSPENDED", "CONFIGURING"}


@dataclass(frozen=True, slots=True)
class JobNodes:
    """The nodes a pending or running job holds or names: what a node record's delete must wait for.
    A pending job that names a node (`--nodelist`, ReqNodeList) is not found by `squeue --nodelist`
    (measured on 26.05), and deleting the node kills it at the next reconfigure (slurm-bridge#43)."""

    job_id: int
    state: str  # RUNNING, PENDING, ...
    nodes: tuple[str, ...]  # expanded: allocated ones; empty while pending
    requested: tuple[str, ...]  # expanded: ReqNodeList, the nodes it asked for by name

    def names(self, node: str) -> bool:
        return node in self.nodes or node in self.requested
