"""`slurm-sidecars demo --tour`: walk through what the sidecars do, on the real local Slurm, and
exit 0 with a summary (1 when a step did not show what it should)."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

from sidecars.cli import self_argv
from sidecars.demo import accounting
from sidecars.demo.stack import DemoStack
from sidecars.runtime import process
from sidecars.runtime.pdeathsig import die_with_parent


class StepFailed(RuntimeError):
    pass


def say(text: str = "") -> None:
    print(text, flush=True)


async def until(what: str, check: Callable[[], Awaitable[Any]], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise StepFailed(f"timed out after {timeout:g}s waiting for {what}")
        await asyncio.sleep(0.05)


async def _status(stack: DemoStack) -> dict[str, Any]:
    body = await stack.get(stack.config_sync_url + "/status")
    assert isinstance(body, dict)
    return body


async def step_jobs(stack: DemoStack) -> str:
    c = stack.cluster
    ids = [
        await c.sbatch("-w", "n1", "--gres=gpu:2", "-t", "30", wrap="sleep 600"),
        await c.sbatch("-w", "n2", "-t", "5", wrap="sleep 600"),
    ]
    for job in ids:
        await c.wait_job(job, "RUNNING", timeout=30)
    say(f"  jobs {ids[0]} (2 GPUs, 30 min limit) on n1 and {ids[1]} (5 min) on n2 are RUNNING")
    mapping = c.dir / "gpu-jobs" / "n1"

    async def mapped() -> dict[str, str]:
        found = {p.name: p.read_text().strip() for p in mapping.glob("[0-9]*")} if mapping.exists() else {}
        return found if len(found) == 2 else {}

    files = await until("the GPU job-mapping files on n1", mapped, timeout=15)
    say(f"  dcgm-exporter job-mapping files on n1 (GPU index -> job): {dict(sorted(files.items()))}")
    return f"2 jobs running; GPUs {','.join(sorted(files))} of n1 mapped to job {ids[0]}"


async def step_valid_change(stack: DemoStack) -> str:
    client = stack.cluster.client()
    before = (await _status(stack))["applied"]["generation"]
    conf = stack.volume.files()["slurm.conf"].decode()
    new = re.sub(r"MaxTime=\S+", "MaxTime=120", conf)
    started = time.monotonic()
    stack.volume.update({"slurm.conf": new})
    say(
        "  edited slurm.conf in the ConfigMap volume (kubelet-style ..data swap): partition MaxTime 60 -> 120"
    )
    await until("the change applied", lambda: _applied_after(stack, before))
    seconds = time.monotonic() - started
    (part,) = await client.partitions()
    if part.max_time_minutes != 120:
        raise StepFailed(f"slurmctld reports MaxTime={part.max_time_minutes}, not 120")
    say(f"  applied and verified in {seconds:.2f}s (includes the settle period); scontrol shows MaxTime=120")
    return f"valid change applied and verified in {seconds:.2f}s"


async def _applied_after(stack: DemoStack, generation: int) -> bool:
    status = await _status(stack)
    return bool(status["applied"]["generation"] > generation and not status["pending"])


async def step_broken_change(stack: DemoStack) -> str:
    client = stack.cluster.client()
    pid = stack.cluster.hostpid("slurmctld")
    good = stack.volume.files()["slurm.conf"].decode()
    stack.volume.update({"slurm.conf": good + "ThisIsNotAKey=1\n"})
    say("  added a line Slurm does not know (ThisIsNotAKey=1) to slurm.conf")

    async def rejected() -> dict[str, Any] | None:
        status = await _status(stack)
        return status["rejected"] if status.get("rejected") and not status["pending"] else None

    rejection = await until("the rejection", rejected)
    say(f"  rejected: {rejection['reason']}")
    if not (await client.ping()).up or stack.cluster.hostpid("slurmctld") != pid:
        raise StepFailed("slurmctld did not keep running")
    on_disk = (stack.cluster.conf_path).read_text()
    if "ThisIsNotAKey" in on_disk:
        raise StepFailed("the broken file reached slurmctld's directory")
    say(f"  slurmctld kept PID {pid} and answers; its directory still holds the last known good set")
    stack.volume.update({"slurm.conf": good})
    return "broken change rejected in Slurm's words; scheduler untouched"


async def step_scale_in(stack: DemoStack) -> str:
    async def fleet() -> list[dict[str, Any]]:
        nodes = await stack.get(stack.control_plane_url + "/v1/nodes", auth=True)
        assert isinstance(nodes, list)
        return nodes if all(n["jobs"] for n in nodes if n["name"] in {"n1", "n2"}) else []

    nodes = await until("the control plane's view of the running jobs", fleet, timeout=10)
    order = await stack.get(stack.control_plane_url + "/v1/scale-in-order", auth=True)
    assert isinstance(order, list)
    now = time.time()
    busy = {n["name"]: n.get("busy_until") for n in nodes}

    def label(name: str) -> str:
        until_ = busy.get(name)
        return "idle" if not until_ or until_ <= now else f"busy for {int(until_ - now)}s more"

    say("  scale-in order (first to go first): " + ", ".join(f"{n} ({label(n)})" for n in order))
    if order and order[0] in {"n1", "n2"}:
        raise StepFailed(f"a busy node ranks first: {order}")
    return "scale-in order: " + " > ".join(order)


async def step_drain(stack: DemoStack) -> str:
    c = stack.cluster
    done_file = c.out_dir / "n3-job-done"
    # the job stamps its own end, to the nanosecond, where the host can read it
    job = await c.sbatch("-w", "n3", "-t", "2", wrap=f"sleep 4; date +%s.%N > {done_file}")
    await c.wait_job(job, "RUNNING", timeout=30)
    say(f"  job {job} (4 s of work) runs on n3; n3's pod is told to terminate: preStop runs the drain hook")
    started = time.monotonic()
    hook = await process.run(
        self_argv("drain-hook", "--socket", str(stack.sockets["n3"]), "--timeout-seconds", "60"),
        timeout=None,  # the hook keeps its own --timeout-seconds
        env=c.env,
        merge_stderr=True,
        preexec_fn=die_with_parent(),
    )
    hook_done = time.time()
    finished = await c.wait_job(job, {"COMPLETED", "FAILED", "CANCELLED"}, timeout=10)
    if hook.returncode != 0 or finished.state != "COMPLETED":
        raise StepFailed(f"drain hook exit {hook.returncode}, job {finished.state}: {hook.text(500)}")
    node = await c.client().node("n3")
    if c.slinky:  # a dynamic node: the agent deletes its record once drained, as Slinky scales in
        if node is not None:
            raise StepFailed(f"n3's record is still there after the hook: {node}")
        now = "drained, then its dynamic record deleted"
    elif node is None or not node.state.drained:
        raise StepFailed(f"n3 is not drained after the hook: {node}")
    else:
        now = str(node.state)
    lag = hook_done - float(done_file.read_text())
    say(
        f"  job {job} COMPLETED (not killed); the hook returned {lag:.2f}s after the job's last command,"
        f" {time.monotonic() - started:.1f}s after it was called; n3 is {now}"
    )
    return f"n3 drained, its job completed, the hook returned {lag:.2f}s after the job ended"


async def step_metrics(stack: DemoStack) -> str:
    wanted = (
        "slurm_sidecars_config_applies_total",
        "slurm_sidecars_drain_seconds_count",
        "slurm_sidecars_slurm_commands_total",
    )
    shown = 0
    for role in stack.roles.values():
        text = await stack.get(role.url + "/metrics")
        assert isinstance(text, str)
        for line in text.splitlines():
            if line.startswith(wanted) and not line.endswith(" 0.0"):
                say(f"  {role.name}: {line}")
                shown += 1
    return f"{shown} metric series shown"


STEPS: list[tuple[str, Callable[[DemoStack], Awaitable[str]]]] = [
    ("Submit jobs", step_jobs),
    ("A valid config change", step_valid_change),
    ("A broken config change", step_broken_change),
    ("The scale-in order", step_scale_in),
    ("A worker scaled in", step_drain),
    ("The metrics", step_metrics),
]


async def run_tour(stack: DemoStack) -> bool:
    results: list[tuple[str, bool, str]] = []
    steps = [*STEPS, *(accounting.STEPS if stack.accounting else [])]
    for i, (title, step) in enumerate(steps, 1):
        say(f"\n[{i}/{len(steps)}] {title}")
        try:
            results.append((title, True, await step(stack)))
        except Exception as exc:
            say(f"  FAILED: {exc}")
            results.append((title, False, str(exc)))
    say("\nSummary")
    for title, ok, note in results:
        say(f"  {'ok  ' if ok else 'FAIL'} {title}: {note}")
    say(f"\nThe operator's page was at {stack.page_url} (viewer token: {stack.viewer_token_file});")
    say("run `slurm-sidecars demo` (without --tour) to keep the stack up and look at it.")
    return all(ok for _, ok, _ in results)
