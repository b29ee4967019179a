"""`slurm-sidecars demo --tour`: walk through what the sidecars do, on the real local Slurm, and
exit 0 with a summary (1 when a step did not show what it should)."""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

from sidecars.cli import self_argv
from sidecars.demo import accounting, upgrade_tour
from sidecars.demo.narrate import StepFailed, cli, say, summary
from sidecars.demo.polling import until
from sidecars.demo.roll import DemoRoll
from sidecars.demo.stack import DemoStack
from sidecars.runtime import process
from sidecars.runtime.pdeathsig import die_with_parent


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


async def _window_node(stack: DemoStack, window: str, node: str) -> dict[str, Any]:
    body = await stack.get(f"{stack.control_plane_url}/v1/maintenance/{window}", auth=True)
    if not isinstance(body, dict) or node not in body.get("node_states", {}):
        raise StepFailed(f"no window {window} on {node}: {body}")
    return body["node_states"][node]  # type: ignore[no-any-return]


async def step_maintenance(stack: DemoStack) -> str:
    c = stack.cluster
    job = await c.sbatch("-w", "n3", "-t", "1", wrap="sleep 12")  # still running when the window starts
    await c.wait_job(job, "RUNNING", timeout=30)
    start = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3))
    out = await cli(
        stack,
        "maintenance",
        "create",
        "tour",
        "--nodes",
        "n3",
        "--start",
        start,
        "--duration",
        "10m",
        "--reason",
        "firmware update",
    )
    say(f"  $ slurm-sidecars maintenance create tour --nodes n3 --start {start} --duration 10m ...")
    for line in out.strip().splitlines():
        say(f"    {line}")
    (resv,) = [r for r in await c.client().reservations() if r.nodes == ("n3",)]
    if "MAINT" not in resv.flags:
        raise StepFailed(f"reservation {resv.name} is not a MAINT one: {resv.flags}")
    say(f"  Slurm holds reservation {resv.name} (MAINT) ahead of time; job {job} keeps running on n3")

    async def state(want: str) -> dict[str, Any] | None:
        report = await _window_node(stack, "tour", "n3")
        return report if report["state"] == want else None

    waiting = await until("the window to start and wait for the job", lambda: state("waiting"), timeout=20)
    say(f"  the window started: n3 drained by the control plane, {waiting['detail']}")
    await until("n3 ready once its job ended", lambda: state("ready"), timeout=30)
    finished = await c.wait_job(job, {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}, timeout=10)
    if finished.state != "COMPLETED":
        raise StepFailed(f"job {job} ended {finished.state}: a window must wait for jobs, never kill them")
    say(f"  job {job} COMPLETED (not killed); n3 is drained and empty: ready for its maintenance")
    await cli(stack, "maintenance", "delete", "tour")

    async def released() -> bool:
        node = await c.client().node("n3")
        return node is not None and not node.state.drain

    await until("n3 released", released, timeout=20)
    say("  $ slurm-sidecars maintenance delete tour: the window is over, its drain undone, n3 works again")
    return f"window on n3: reservation ahead of time, job {job} waited for, n3 drained then released"


async def step_unowned(stack: DemoStack) -> str:
    """Slurm drains a node itself (its prolog fails): nobody owns that drain, and the control plane
    finds it, says why in Slurm's words and how long ago, and leaves it for a person to lift."""
    c = stack.cluster
    before = (await _status(stack))["applied"]["generation"]
    good = stack.volume.files()["slurm.conf"].decode()
    stack.volume.update({"slurm.conf": good + "Prolog=/bin/false\n"})
    await until("the failing prolog applied", lambda: _applied_after(stack, before))
    say("  a config change gives every job a prolog that fails (Prolog=/bin/false)")
    job = await c.sbatch("-w", "n3", "-t", "1", wrap="true")

    async def found() -> dict[str, Any] | None:
        body = await stack.get(stack.control_plane_url + "/status", auth=True)
        assert isinstance(body, dict)
        listed = {u["node"]: u for u in body["unowned_drains"]["nodes"]}
        return listed.get("n3")

    drain = await until("n3 listed as a drain nobody owns", found)
    say(
        f"  Slurm drained n3 itself ('{drain['reason']}') and requeued job {job}: no sidecar, operator"
        f" or admin owns that drain; the control plane lists it as class {drain['class']},"
        " with its age, on the page, in `status`, /status, a metric and one Warning Event"
    )
    before = (await _status(stack))["applied"]["generation"]
    stack.volume.update({"slurm.conf": good})
    await until("the prolog removed", lambda: _applied_after(stack, before))

    async def n3_took_it() -> bool:
        # a job on a slurmd still on the set with the prolog would drain n3 again (the next step's
        # roll leaves someone else's drain alone): config-sync's verdict on the workers says it took it
        workers = (await _status(stack)).get("workers") or {}
        return str(workers.get("method", "")).startswith("none") or "n3" in workers.get("taken", [])

    await until("n3's slurmd on the set without the prolog", n3_took_it)
    await c.scancel(job)
    await c.client().resume(["n3"])  # what a person does once the cause is fixed

    async def back() -> bool:
        node = await c.client().node("n3")
        return node is not None and not node.state.drain and node.state.base != "DOWN"

    await until("n3 resumed", back)

    async def seen_back() -> bool:
        node = await stack.get(f"{stack.control_plane_url}/v1/nodes/n3", auth=True)
        return isinstance(node, dict) and "DRAIN" not in node["flags"]

    # the next step's roll reads the fleet from the control plane, which reads Slurm every second:
    # taken from an older read, n3 would still be someone else's drain, and left out of the roll
    await until("n3 resumed in the control plane's view", seen_back)
    say("  the prolog removed, job cancelled, and n3 resumed by hand (`scontrol update state=resume`)")
    return f"n3 drained by Slurm ({drain['reason']}) found as class {drain['class']}; resumed by hand"


async def step_upgrade(stack: DemoStack) -> str:
    c = stack.cluster
    # the first step's jobs run 30 and 5 minutes
    first = [j for j in await c.client().jobs() if j.state in {"RUNNING", "PENDING"}]
    for j in first:
        await c.scancel(j.job_id)
    if first:
        ids = ", ".join(str(j.job_id) for j in first)
        say(f"  ended the first step's jobs ({ids}): a real roll waits for them, the tour cannot")
    nodes = c.node_names
    # still running when the roll takes the first worker: that one's job is waited for
    jobs = [await c.sbatch("-w", n, "-t", "1", wrap="sleep 8") for n in nodes]
    for job in jobs:
        await c.wait_job(job, "RUNNING", timeout=30)
    say(f"  an 8 s job on every worker: {', '.join(f'{j} on {n}' for j, n in zip(jobs, nodes, strict=True))}")
    upgrade = await stack.get(stack.control_plane_url + "/v1/upgrade", auth=True)
    why = upgrade.get("unavailable") if isinstance(upgrade, dict) else None
    if why:
        say(f"  the control plane's own roll: {why}")
        say("  here the demo plays the StatefulSet: replacing a worker's pod restarts that node's slurmd")
    rolled = await DemoRoll(stack, "demo-2", "1", say).run()
    if rolled.most_out_at_once != 1:
        raise StepFailed(f"{rolled.most_out_at_once} workers out of service at once under a budget of 1")
    if not rolled.waited:
        raise StepFailed("the roll waited for no job")
    if set(rolled.pids) != set(nodes):
        raise StepFailed(f"slurmd replaced on {sorted(rolled.pids)} only, not on every worker")
    for job in jobs:
        if (await c.wait_job(job, {"COMPLETED", "FAILED", "CANCELLED"}, timeout=30)).state != "COMPLETED":
            raise StepFailed(f"job {job} did not complete: a roll must never kill a job")
    waited = "; ".join(f"waited for job {', '.join(map(str, j))} on {n}" for n, j in rolled.waited.items())
    return f"rolled {' > '.join(rolled.order)} one at a time (budget 1); {waited}; every job completed"


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
    ("A maintenance window", step_maintenance),
    ("A drain nobody owns", step_unowned),
    ("A paced upgrade", step_upgrade),
    ("A worker scaled in", step_drain),
    ("The metrics", step_metrics),
]


async def run_tour(stack: DemoStack) -> bool:
    results: list[tuple[str, bool, str]] = []
    steps = [
        *STEPS,
        *(accounting.STEPS if stack.accounting else []),
        *(upgrade_tour.STEPS if stack.upgrade_to is not None else []),
    ]
    for i, (title, step) in enumerate(steps, 1):
        say(f"\n[{i}/{len(steps)}] {title}")
        try:
            results.append((title, True, await step(stack)))
        except Exception as exc:
            say(f"  FAILED: {exc}")
            results.append((title, False, str(exc)))
    passed = summary(results)
    say(f"\nThe operator's page was at {stack.page_url} (viewer token: {stack.viewer_token_file});")
    say("run `slurm-sidecars demo` (without --tour) to keep the stack up and look at it.")
    return passed
