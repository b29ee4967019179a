"""The drain fails closed: only Slurm's own word ends it, a fault in the agent is said as JSON,
and the hook tells a fault that will pass from one that will not (giving up at once on the latter)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from sidecars.devcluster import DevCluster, free_port
from sidecars.drainhook import drain
from sidecars.runtime.http import serve, serve_unix
from sidecars.runtime.waits import within
from sidecars.worker.backoff import Backoff
from tests.fakekube import FakeKube, write_kubeconfig
from tests.helpers import RecordingEvents, eventually
from tests.worker import agents
from tests.worker.agents import hook, running_agent, settings_for, slurm_commands, token_file

TOKEN = "s3cret-token-2f7a9c4e1b8d6053a7e1"
CLI = str(Path(sys.executable).parent / "slurm-sidecars")

# what a control plane (or whatever stands at its URL) can answer that is not its word on the node
NOT_AN_ANSWER: dict[str, Callable[[str], web.Response]] = {
    "html_404": lambda name: web.Response(
        status=404, text="<html><body>404 Not Found</body></html>", content_type="text/html"
    ),
    "router_json_404": lambda name: web.json_response({"error": "Not Found"}, status=404),
    "other_node_404": lambda name: web.json_response(
        {"error": "no node x9 in Slurm", "node": "x9", "slurm": "no_record"}, status=404
    ),
    "http_500": lambda name: web.json_response({"error": "boom"}, status=500),
    "garbage_200": lambda name: web.Response(text="<html>welcome</html>", content_type="text/html"),
    "wrong_shape_200": lambda name: web.json_response({"name": name, "state": "IDLE"}),
}


def _api_shape(name: str) -> web.Response:
    body = {"error": f"no node {name} in Slurm", "node": name, "slurm": "no_record"}
    return web.json_response(body, status=404)


@contextlib.asynccontextmanager
async def standing_in(answer: Callable[[str], web.Response] | None) -> AsyncIterator[str]:
    """A stand-in at the control plane's URL that answers every node request with `answer`, or,
    with None, accepts each and never answers (a frozen control plane)."""
    released = asyncio.Event()

    async def handle(request: web.Request) -> web.Response:
        if answer is None:
            await released.wait()
            return web.Response(status=503)
        return answer(request.match_info["name"])

    app = web.Application()
    app.router.add_get("/v1/nodes/{name}", handle)
    app.router.add_post("/v1/nodes/{name}/{action}", handle)
    async with serve(app, "127.0.0.1", 0) as port:
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            released.set()


@pytest.mark.parametrize("shape", [*NOT_AN_ANSWER, "api_shape_404", "frozen"])
@pytest.mark.cluster(nodes=1)
@pytest.mark.releases("slurm24")  # the answers are ours; test_coordinated.py falls back per release
async def test_a_control_plane_fault_never_ends_a_drain_while_a_job_runs(
    cluster: DevCluster, sockdir: Path, shape: str
) -> None:
    # the control plane's own "no record" included: Slurm itself has the node and a job on it
    answer = None if shape == "frozen" else NOT_AN_ANSWER.get(shape, _api_shape)
    async with standing_in(answer) as url:
        s = settings_for(cluster, sockdir, control_plane=url, token_file=token_file(sockdir, TOKEN))
        async with running_agent(cluster, s):
            job, returned = await agents.drained_under_a_job(cluster, s, wrap="sleep 4; echo finished")
    done = await agents.completed(cluster, job)
    assert (cluster.out_dir / f"slurm-{job}.out").read_text().strip() == "finished"
    assert done.end_time is not None and returned >= done.end_time


@pytest.mark.cluster(nodes=1)
async def test_no_record_from_the_control_plane_is_confirmed_with_slurm(
    cluster: DevCluster, sockdir: Path
) -> None:
    async with standing_in(_api_shape) as url:
        s = settings_for(
            cluster, sockdir, node="gone1", control_plane=url, token_file=token_file(sockdir, TOKEN)
        )
        async with running_agent(cluster, s) as agent:
            before = slurm_commands(agent).get("scontrol", 0)
            code, answer = await hook(s, within=30)
            assert (code, answer["result"]) == (0, "no_record"), answer
            assert slurm_commands(agent).get("scontrol", 0) > before, "Slurm was never asked"


@pytest.mark.cluster(nodes=1)
@pytest.mark.releases("slurm22")  # the record is ours, not Slurm's: one release shows it
async def test_an_unwritable_drain_record_still_drains(cluster: DevCluster, sockdir: Path) -> None:
    events = RecordingEvents()
    s = settings_for(cluster, sockdir)
    async with running_agent(cluster, s, events) as agent:
        # the record's place taken by a directory: every write of it fails, as on a full volume
        agent.drainer.path.mkdir()
        (agent.drainer.path / "x").touch()
        job = await cluster.sbatch("-t", "1", wrap="sleep 4; echo finished")
        await cluster.wait_job(job, "RUNNING")
        code, answer = await hook(s, within=60)
        assert (code, answer["result"]) == (0, "drained"), answer
        assert "DrainNotRecorded" in events.reasons()
    assert (await cluster.wait_job(job, {"COMPLETED", "FAILED", "CANCELLED"})).state == "COMPLETED"


@pytest.mark.cluster(nodes=1)
async def test_the_agent_answers_json_errors(cluster: DevCluster, sockdir: Path) -> None:
    s = settings_for(cluster, sockdir)
    async with running_agent(cluster, s):
        code, why = await drain_at(s.socket_path, "/v1/drain", "not json")
        assert code == 400 and why == {"error": "body is not JSON", "retry": False}
        code, why = await drain_at(s.socket_path, "/v1/nowhere", "{}")
        assert code == 404 and why["retry"] is False and isinstance(why["error"], str)


async def drain_at(socket: Path, path: str, body: str) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=str(socket))) as session,
        session.post(f"http://agent{path}", data=body, timeout=aiohttp.ClientTimeout(total=10)) as r,
    ):
        return r.status, await r.json(content_type=None)


# --------------------------------------------------------------------------- the hook alone

Answer = Callable[[], web.Response]


@contextlib.asynccontextmanager
async def agent_answering(sockdir: Path, answers: list[Answer]) -> AsyncIterator[str]:
    """A stand-in agent on a unix socket: the answers in turn, the last one for ever after."""
    asked: list[int] = []

    async def handle(_: web.Request) -> web.Response:
        asked.append(1)
        return answers[min(len(asked), len(answers)) - 1]()

    app = web.Application()
    app.router.add_post("/v1/drain", handle)
    async with serve_unix(app, str(sockdir / "standin.sock")) as path:
        yield path


@pytest.mark.parametrize(
    "answer",
    [
        lambda: web.Response(status=500, text="<html>Internal Server Error</html>", content_type="text/html"),
        lambda: web.json_response({"error": "agent fault: OSError: no space", "retry": False}, status=500),
        lambda: web.json_response({"error": "reason: a single line", "retry": False}, status=400),
        lambda: web.json_response({"result": "maybe"}),
    ],
    ids=["html_500", "agent_fault", "bad_request", "unknown_result"],
)
async def test_the_hook_gives_up_at_once_on_a_permanent_failure(sockdir: Path, answer: Answer) -> None:
    events = RecordingEvents()
    async with agent_answering(sockdir, [answer]) as path:
        started = time.monotonic()
        code, why = await drain(path, 600, None, events)
    assert code == 1 and isinstance(why, str) and "permanent" in why, why
    assert time.monotonic() - started < 30, "retried a failure that cannot pass"
    assert [(r, t) for r, _, t in events.events] == [("DrainHookGaveUp", "Warning")]


async def test_the_hook_reports_a_transient_failure_and_goes_on(sockdir: Path) -> None:
    events = RecordingEvents()

    def busy() -> web.Response:
        return web.json_response({"error": "starting", "retry": True}, status=503)

    def done() -> web.Response:
        return web.json_response({"result": "drained", "detail": "drained (IDLE+DRAIN)", "seconds": 1})

    async with agent_answering(sockdir, [busy, busy, done]) as path:
        code, answer = await drain(path, 60, None, events)
    assert (code, answer) == (0, {"result": "drained", "detail": "drained (IDLE+DRAIN)", "seconds": 1})
    assert [(r, t) for r, _, t in events.events] == [("DrainHookRetrying", "Warning")]
    assert "503" in events.events[0][1]


async def test_the_hook_waits_for_an_agent_not_up_yet(sockdir: Path) -> None:
    events = RecordingEvents()
    path = sockdir / "standin.sock"
    waiting = asyncio.ensure_future(drain(str(path), 60, None, events))
    try:
        # the connection refused, reported as transient
        await eventually(lambda: events.events, what="a transient failure reported")
        assert events.reasons() == ["DrainHookRetrying"]
        done = lambda: web.json_response({"result": "drained", "detail": "ok", "seconds": 0})  # noqa: E731
        async with agent_answering(sockdir, [done]):
            code, _ = await asyncio.shield(waiting)
        assert code == 0
    finally:
        waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiting


# --------------------------------------------------------------------------- the control plane away


def test_the_fallback_backs_off_with_jitter() -> None:
    waits = [Backoff(0.25, 15.0, rng=random.Random(seed)) for seed in (1, 2)]
    series = [[b.failed() for _ in range(10)] for b in waits]
    for run in series:
        ceilings = [min(15.0, 0.25 * 2**i) for i in range(10)]
        assert all(c / 2 <= w <= c for w, c in zip(run, ceilings, strict=True)), run
    assert series[0] != series[1]  # two agents that fell back together do not come back together
    waits[0].reset()
    assert waits[0].failed() <= 0.25


@pytest.mark.cluster(nodes=1)
@pytest.mark.releases("slurm26")  # the backoff is ours, not Slurm's: one release shows it
async def test_a_drain_with_the_control_plane_away_backs_off(cluster: DevCluster, sockdir: Path) -> None:
    away = f"http://127.0.0.1:{free_port()}"  # nothing listens there: the control plane is down
    s = settings_for(
        cluster, sockdir, control_plane=away, token_file=token_file(sockdir, TOKEN), fallback_max_seconds=15.0
    )
    async with running_agent(cluster, s) as agent:
        job = await cluster.sbatch("-t", "1", wrap="sleep 8; echo finished")
        await cluster.wait_job(job, "RUNNING")
        before = sum(slurm_commands(agent).values())
        code, answer = await hook(s, within=60)
        assert (code, answer["result"]) == (0, "drained"), answer
        looks = sum(slurm_commands(agent).values()) - before
        assert agent.source.mode == "fallback"
    done = await cluster.wait_job(job, {"COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL"})
    assert done.state == "COMPLETED"
    # a fixed poll every drain_poll_seconds (0.2 s) would have asked Slurm 40 times and more
    assert looks <= 20, looks


async def test_the_hook_process_says_why_in_its_output_and_the_pods_events(
    sockdir: Path, tmp_path: Path, fake_kube: tuple[FakeKube, str]
) -> None:
    fake, url = fake_kube
    kubeconfig = write_kubeconfig(tmp_path / "config", url, fake.token)
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),  # stands in for the pod's service account
        "KUBERNETES_SERVICE_HOST": "10.0.0.1",
        "POD_NAME": "worker-n1",
        "POD_NAMESPACE": "slurm",
    }

    def fault() -> web.Response:
        return web.json_response({"error": "agent fault: OSError: no space", "retry": False}, status=500)

    async with agent_answering(sockdir, [fault]) as path:
        proc = await asyncio.create_subprocess_exec(
            CLI, "drain-hook", "--socket", path, "--timeout-seconds", "600",
            env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            _, err = await within(proc.communicate(), 60)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    assert proc.returncode == 1, err
    assert b"DrainHookGaveUp: gave up: permanent failure: HTTP 500: agent fault" in err, err
    (event,) = fake.events
    assert (event["reason"], event["type"]) == ("DrainHookGaveUp", "Warning")
    assert event["involvedObject"]["name"] == "worker-n1" and "no space" in event["message"]
