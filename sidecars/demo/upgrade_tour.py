"""The tour's last step with `--upgrade-to`: a whole-cluster upgrade in Slurm's order (slurmdbd,
slurmctld, the workers) run by the control plane, watched stage by stage as `upgrade status` and the
operator's page show it; every job of before is there after, and one that ran through it is in sacct."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from sidecars.demo.narrate import StepFailed, cli, say
from sidecars.demo.polling import until
from sidecars.demo.stack import DemoStack
from sidecars.slurm import daemons, slurmdbd_version

LIVE = {"RUNNING", "PENDING", "CONFIGURING", "COMPLETING"}


async def _report(stack: DemoStack) -> dict[str, Any]:
    body = await stack.get(stack.control_plane_url + "/v1/upgrade", auth=True)
    if not isinstance(body, dict) or not isinstance(body.get("cluster"), dict):
        raise StepFailed(f"no whole-cluster upgrade in /v1/upgrade: {body}")
    return dict(body["cluster"])


async def _recorded(stack: DemoStack, job: int, timeout: float = 60.0) -> tuple[str, str]:
    deadline = time.monotonic() + timeout
    while (record := (await stack.cluster.sacct(job)).get(job, ("PENDING", "")))[0] in ("PENDING", "RUNNING"):
        if time.monotonic() > deadline:
            raise StepFailed(f"job {job}'s end did not reach sacct within {timeout:g}s: {record}")
        await asyncio.sleep(0.2)  # slurmdbd receives job events asynchronously
    return record


async def step_cluster_upgrade(stack: DemoStack) -> str:
    c, target = stack.cluster, stack.upgrade_to
    assert target is not None
    # the earlier steps' long jobs: a real roll waits for them, the tour cannot
    for j in await c.client().jobs():
        if j.state in LIVE:
            await c.scancel(j.job_id)
    go = c.out_dir / "cluster-upgrade-go"
    spanning = await c.sbatch("-t", "10", wrap=f"while [ ! -e {go} ]; do sleep 0.2; done")
    await c.wait_job(spanning, "RUNNING", timeout=30)
    held = await c.sbatch("--hold", wrap="true")
    before = {j.job_id for j in await c.client().jobs() if j.state in LIVE}
    drained = sorted(n.name for n in await c.client().nodes() if n.state.drain)
    say(f"  job {spanning} runs until the workers' stage; job {held} is held (pending) throughout")
    images = dict.fromkeys(daemons.UPGRADE_ORDER, target.name)
    status, answer = await stack.post(
        stack.control_plane_url + "/v1/upgrade/cluster", {"slurm_version": target.version, "images": images}
    )
    if status != 201:
        raise StepFailed(f"POST /v1/upgrade/cluster: {status} {answer}")
    say(f"  POST /v1/upgrade/cluster (upgrade start --slurm-version {target.version}): {status}")
    said: dict[str, str] = {}

    async def ended() -> dict[str, Any] | None:
        up = await _report(stack)
        for stage in up["stages"]:
            if said.get(stage["name"]) != stage["state"]:
                said[stage["name"]] = stage["state"]
                took = f" {stage['seconds']:.1f}s" if stage["seconds"] is not None else ""
                say(f"  {stage['name']:<10} {stage['state']}{took} {stage['detail']}".rstrip())
        if said.get("workers") == "running" and not go.exists():
            go.touch()
            say(f"  job {spanning} ends now: the workers' roll waits for each worker's jobs, never kills one")
        return up if up["state"] not in ("pending", "running", "paused") else None

    up = await until("the whole-cluster upgrade's end", ended, timeout=300)
    if up["state"] != "complete":
        raise StepFailed(
            f"the upgrade ended {up['state']}: {[(s['name'], s['detail']) for s in up['stages']]}"
        )
    status_lines = (await cli(stack, "upgrade", "status")).splitlines()
    for line in status_lines:
        say(f"  $ upgrade status | {line}")
    if not any(line.endswith(" (accounting)") for line in status_lines):
        raise StepFailed("`upgrade status` does not show slurmdbd's release (accounting)")
    rows = await _page_rows(stack)
    shown = "; ".join(f"{r['stage']} {r['state']}" for r in rows)
    say(f"  the page's Upgrades section: {shown}")
    if [r["state"] for r in rows] != ["done"] * 4:
        raise StepFailed(f"the page shows {rows}")
    after = {j.job_id: j.state for j in await c.client().jobs()}
    lost = sorted(before - set(after))
    if lost or after.get(held) != "PENDING":
        raise StepFailed(f"jobs lost {lost}; job {held} is {after.get(held)}")
    still = sorted(n.name for n in await c.client().nodes() if n.state.drain)
    if still != drained:
        raise StepFailed(f"drained before the upgrade: {drained}; after it: {still}")
    if drained:
        say(
            f"  {', '.join(drained)} moved too, and left drained as before (that drain was not the upgrade's)"
        )
    record = await _recorded(stack, spanning)
    ctld = (await c.client().show_config()).get("SLURM_VERSION", "?")
    dbd = await slurmdbd_version(c.client())
    say(f"  now slurmctld {ctld}, slurmdbd {dbd}; sacct: job {spanning} {record[0]} (exit {record[1]})")
    return (
        f"to {up['target']}: {len(before)} jobs all there after; slurmctld did not answer for "
        f"{up['slurmctld_unanswered_seconds']:.1f}s; job {spanning} ran through it, {record[0]} in sacct"
    )


async def _page_rows(stack: DemoStack) -> list[dict[str, Any]]:
    """The Upgrades section's stage rows, as the page reads them (with the viewer's token)."""
    doc = await stack.get(stack.control_plane_url + "/ui/api/state", viewer=True)
    if not isinstance(doc, dict):
        raise StepFailed(f"the page's state: {doc}")
    return [r for r in doc.get("upgrade", []) if "stage" in r]


STEPS: list[tuple[str, Callable[[DemoStack], Awaitable[str]]]] = [
    ("A whole-cluster upgrade (slurmdbd, slurmctld, the workers)", step_cluster_upgrade),
]
