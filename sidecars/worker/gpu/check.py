"""The worker's own GPUs, checked with `nvidia-smi` where it is: a GPU with uncorrectable ECC errors,
rows or pages waiting for a reset, or one the driver has lost (Xid 79, "fallen off the bus") fails
readiness and asks for a drain of this node, with a reason naming the GPU and the fault; once the
check passes again, a drain of this kind is lifted (only one whose reason says it is the GPU check's).

What each Xid leaves in nvidia-smi's answer: Xid 48 (double-bit ECC) and 94/95 (contained/uncontained
ECC) raise `ecc.errors.uncorrected.volatile.total`; Xid 63/64 (row remapping) show in
`remapped_rows.pending`/`.failure`; Xid 79 makes the tool itself fail ("Unable to determine the device
handle for GPU ...", "GPU is lost") or print "[GPU requires reset]" in the GPU's fields.

A driver the tool cannot reach is a fault only where this agent has seen the GPUs healthy (the driver
was there and went away); on a node where it never answered (a node coming up, a driver being
installed or rolled while the agent starts) it is "unknown", so a driver roll across the fleet
drains nothing it had not already seen working.

Only a fault the tool states is one: a tool that is missing (auto: no GPUs here to check), hangs
(killed at the timeout), or prints what we cannot read is "unknown". Unknown never drains (a broken
tool fleet-wide, after a driver roll, must not drain the fleet) and fails readiness only after
`UNKNOWN_LIMIT` checks in a row, saying so. The command runs with the agent's environment, found on
its PATH, and only when no uid but root and the agent's own could have put it there or changed it
(runtime/trustedpath.py): a tool a job could plant is never run, and the check says "unknown".
"""

from __future__ import annotations

import csv
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import structlog

from sidecars.protocol import drains
from sidecars.runtime.checks import CheckResult
from sidecars.runtime.process import ProcessTimeout, run
from sidecars.runtime.trustedpath import Trust, UntrustedPath

log = structlog.get_logger(__name__)

FIELDS = (
    "index",
    "uuid",
    "pci.bus_id",
    "ecc.errors.uncorrected.volatile.total",
    "retired_pages.pending",
    "remapped_rows.pending",
    "remapped_rows.failure",
)
QUERY = ("--query-gpu=" + ",".join(FIELDS), "--format=csv,noheader,nounits")
REASON = drains.GPU_CHECK  # drains of ours start so; nothing else is lifted
UNKNOWN_LIMIT = 3
LOST = ("Unable to determine the device handle", "GPU is lost", "GPU requires reset")
NO_DRIVER = "couldn't communicate with the NVIDIA driver"
DRIVER_GONE = "nvidia-smi cannot reach the NVIDIA driver"  # the fault, where the GPUs were healthy before
NOT_SUPPORTED = {"[N/A]", "N/A", "[Not Supported]", "Not Supported"}


def gpu_reason(fault: str) -> str:
    return (REASON + fault)[
        : drains.REASON_MAX_CHARS
    ]  # Slurm keeps reasons short; the GPU and the fault lead


def is_gpu_reason(reason: str | None) -> bool:
    return reason is not None and reason.startswith(REASON)


@dataclass(frozen=True, slots=True)
class GpuVerdict:
    state: str  # healthy, faulty, unknown, absent (not checked)
    faults: tuple[str, ...] = ()
    detail: str = ""
    gpus: int = 0


def judge(returncode: int, stdout: str, stderr: str, *, driver_seen: bool = False) -> GpuVerdict:
    """nvidia-smi's answer to QUERY, judged; `driver_seen`: the GPUs were healthy before (a driver
    that cannot be reached is then a fault, else unknown)."""
    said = (stdout + "\n" + stderr).strip()
    lost = [line.strip() for line in said.splitlines() if any(m in line for m in LOST)]
    if lost and (returncode != 0 or not stdout.strip()):  # the tool itself failed on a lost GPU
        return GpuVerdict("faulty", tuple(lost[:4]), "nvidia-smi: " + lost[0])
    if NO_DRIVER in said:
        first = said.splitlines()[0][:200]
        if not driver_seen:
            return GpuVerdict("unknown", detail=f"no driver seen on this node yet: {first}")
        return GpuVerdict("faulty", (DRIVER_GONE,), first)
    if returncode != 0:
        return GpuVerdict("unknown", detail=f"nvidia-smi exited {returncode}: {said[:200]!r}")
    rows = [r for r in csv.reader(stdout.splitlines(), skipinitialspace=True) if r]
    if not rows:
        return GpuVerdict("unknown", detail="nvidia-smi listed no GPU")
    faults: list[str] = []
    for row in rows:
        if len(row) != len(FIELDS):
            return GpuVerdict(
                "unknown", detail=f"nvidia-smi printed what we cannot read: {','.join(row)[:120]!r}"
            )
        values = dict(zip(FIELDS, (v.strip() for v in row), strict=True))
        gpu = f"GPU {values['index']} ({values['pci.bus_id']})"
        if not values["index"].isdigit():
            return GpuVerdict(
                "unknown", detail=f"nvidia-smi printed what we cannot read: {','.join(row)[:120]!r}"
            )
        for name, value in values.items():
            if value.startswith("[") and value not in NOT_SUPPORTED:
                faults.append(f"{gpu}: {name} {value}")  # [GPU requires reset], [Unknown Error]
        ecc = values["ecc.errors.uncorrected.volatile.total"]
        if ecc.isdigit() and int(ecc) > 0:
            faults.append(f"{gpu}: {ecc} uncorrectable ECC errors")
        elif ecc not in NOT_SUPPORTED and not ecc.startswith("[") and not ecc.isdigit():
            return GpuVerdict("unknown", detail=f"nvidia-smi printed what we cannot read: {ecc[:60]!r}")
        for name, what in (
            ("retired_pages.pending", "pages waiting for retirement (reset needed)"),
            ("remapped_rows.pending", "rows waiting for remapping (reset needed)"),
            ("remapped_rows.failure", "row remapping failed"),
        ):
            if values[name] == "Yes":
                faults.append(f"{gpu}: {what}")
    if faults:
        return GpuVerdict("faulty", tuple(dict.fromkeys(faults)), faults[0], len(rows))
    return GpuVerdict("healthy", detail=f"{len(rows)} GPU{'s' * (len(rows) != 1)} healthy", gpus=len(rows))


@dataclass
class GpuCheck:
    """The check, its last verdict, and the unknowns in a row (`mode`: auto, on or off)."""

    mode: str
    timeout_seconds: float
    env: Mapping[str, str]
    verdict: GpuVerdict = field(default_factory=lambda: GpuVerdict("absent", detail="not checked yet"))
    unknown_in_a_row: int = 0
    checked_at: float | None = None

    def tool(self) -> str | None:
        return shutil.which("nvidia-smi", path=self.env.get("PATH")) if self.mode != "off" else None

    async def once(self) -> GpuVerdict:
        tool = self.tool()
        if tool is None:
            why = "off" if self.mode == "off" else "no nvidia-smi on PATH"
            verdict = GpuVerdict("absent" if self.mode != "on" else "unknown", detail=why)
        else:
            try:
                Trust.ours().check_file(tool)  # the agent's powers must not run a job's planted tool
                done = await run([tool, *QUERY], timeout=self.timeout_seconds, env=dict(self.env))
                # the driver was there: healthy before, or already gone since (still the same fault)
                seen = self.verdict.state == "healthy" or self.verdict.faults == (DRIVER_GONE,)
                stderr = done.stderr.decode("utf-8", "replace")
                verdict = judge(done.returncode, done.text(), stderr, driver_seen=seen)
            except UntrustedPath as exc:
                verdict = GpuVerdict("unknown", detail=f"nvidia-smi not run: {exc}")
            except ProcessTimeout:
                verdict = GpuVerdict(
                    "unknown", detail=f"nvidia-smi gave no answer within {self.timeout_seconds:g}s"
                )
            except OSError as exc:
                verdict = GpuVerdict("unknown", detail=f"nvidia-smi could not be run: {exc.strerror}")
        self.unknown_in_a_row = self.unknown_in_a_row + 1 if verdict.state == "unknown" else 0
        if verdict.state != self.verdict.state or verdict.faults != self.verdict.faults:
            log.info("gpu_check", state=verdict.state, detail=verdict.detail, faults=list(verdict.faults))
        if verdict.state != "unknown" or self.unknown_in_a_row >= UNKNOWN_LIMIT:
            self.verdict = verdict
        elif self.verdict.state == "absent":
            self.verdict = verdict  # nothing better known yet
        self.checked_at = time.time()
        return verdict

    def check(self) -> CheckResult:
        v = self.verdict
        if v.state == "faulty":
            return CheckResult(False, "; ".join(v.faults)[:500])
        if v.state == "unknown":
            limit = self.unknown_in_a_row >= UNKNOWN_LIMIT or self.mode == "on"
            return CheckResult(not limit, f"unknown ({self.unknown_in_a_row} in a row): {v.detail}")
        return CheckResult(True, v.detail)

    def as_json(self) -> dict[str, object]:
        v = self.verdict
        return {
            "mode": self.mode,
            "state": v.state,
            "faults": list(v.faults),
            "detail": v.detail,
            "gpus": v.gpus,
            "unknown_in_a_row": self.unknown_in_a_row,
            "checked_at": self.checked_at,
        }
