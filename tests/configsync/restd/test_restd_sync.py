"""config-sync beside a real slurmrestd (`--daemon slurmrestd`): its slurm.conf and JWT key staged
0400 for slurmrestd's user (nobody), which slurmrestd (dropping to that user) runs on; a change
applied by a drained restart while clients are busy on slurmrestd, none of their requests dropped; a
key unfit for HS256 refused before anything is staged, and never shown."""

from __future__ import annotations

import asyncio
import contextlib
import random
import stat
from collections.abc import Callable
from typing import Any

import pytest

from sidecars.configsync.restd import inflight
from sidecars.devcluster import DevCluster
from sidecars.devcluster import restd as devrestd
from sidecars.devcluster.slurmconf import JWT_KEY
from tests.configsync.restd import load
from tests.configsync.restd.harness import DRAIN_SECONDS, RestdPod, restd_pod, slurm_conf_for
from tests.helpers import eventually

pytestmark = [pytest.mark.releases("slurm24", "slurm26"), pytest.mark.cluster(nodes=1, jwt=True)]

BUSY_REQUESTS = 40
_BYTES = random.Random(37)  # the same keys in every xdist worker's collection


async def _until(what: str, cond: Callable[[], bool], seconds: float = DRAIN_SECONDS) -> None:
    await eventually(cond, within=seconds, what=what)


async def _status_until(pod: RestdPod, what: str, cond: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    return await eventually(pod.status, cond, within=DRAIN_SECONDS, what=what)


def _staged_for_nobody(pod: RestdPod) -> None:
    for name in ("slurm.conf", JWT_KEY):
        st = (pod.target / name).stat()
        assert (stat.S_IMODE(st.st_mode), st.st_uid) == (0o400, devrestd.RESTD_UID), name


@pytest.mark.per_release("each release's slurmrestd ends its connections its own way when stopped")
async def test_a_change_is_applied_by_a_drained_restart_that_drops_no_request(cluster: DevCluster) -> None:
    token = await devrestd.token(cluster)
    async with restd_pod(cluster) as pod:
        _staged_for_nobody(pod)
        drainer = pod.drainer
        first = inflight.read(pod.port).listener
        async with load.clients(pod.port, token, routed=lambda: drainer.serving) as tally:
            await _until("busy", lambda: tally.ok >= BUSY_REQUESTS)
            slow = asyncio.create_task(
                load.slow_request(pod.port, token, lambda: drainer.waiting_on > 0, DRAIN_SECONDS)
            )
            try:
                conf = slurm_conf_for(cluster, pod.target) + "MessageTimeout=15\n"
                pod.conf.write({"slurm.conf": conf})
                # the pod leaves the Service while slurmrestd drains
                await _until("draining", lambda: drainer.waiting_on > 0)
                assert await pod.readyz() == 503
                status = await slow
            finally:
                if not slow.done():
                    slow.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await slow
            st = await _status_until(
                pod, "applied", lambda s: s["applied"]["generation"] == 2 and not s["pending"]
            )
            answered = tally.ok
            await _until("served again", lambda: tally.ok >= answered + BUSY_REQUESTS)
        print(
            f"\n{cluster.release.name}: {tally.ok} answered, {tally.dropped} dropped, "
            f"{tally.refused} refused; restart {st['restd']['last_restart']}"
        )
        assert status.startswith(b"HTTP/1.1 200"), status
        assert (tally.dropped, tally.refused) == (0, 0), tally.words
        assert st["restd"]["last_restart"]["cut"] == 0, st
        assert inflight.read(pod.port).listener not in (None, first)
        assert (pod.target / "slurm.conf").read_text() == conf
        _staged_for_nobody(pod)
        assert await pod.readyz() == 200


@pytest.mark.parametrize(
    ("key", "words"),
    [
        (b"", "is empty"),
        (_BYTES.randbytes(16), "is 16 bytes: HS256 needs at least 32"),
        (b"changeme-changeme-changeme-changeme", "placeholder"),
        (b"a" * 64, "distinct bytes"),
        (b"-----BEGIN PUBLIC KEY-----\nMIIB" + _BYTES.randbytes(40).hex().encode(), "PEM"),
        (_BYTES.randbytes(70_000), "over the 65536-byte limit"),
    ],
    ids=["empty", "short", "placeholder", "one-byte", "pem", "huge"],
)
async def test_a_key_unfit_for_hs256_is_refused_and_never_shown(
    cluster: DevCluster, key: bytes, words: str
) -> None:
    async with restd_pod(cluster) as pod:
        staged = (pod.target / JWT_KEY).read_bytes()
        listener = inflight.read(pod.port).listener
        pod.key.write({JWT_KEY: key})
        st = await _status_until(pod, "rejected", lambda s: bool(s["rejected"]) and not s["pending"])
        reason = st["rejected"]["reason"]
        assert words in reason, reason
        assert (pod.target / JWT_KEY).read_bytes() == staged
        assert inflight.read(pod.port).listener == listener  # slurmrestd was left alone
        shown = str(st) + str(await pod.status())
        for part in (key[i : i + 8] for i in range(0, min(len(key), 64), 8)):
            if len(part) == 8 and part.isascii() and part.decode().isprintable():
                assert part.decode() not in shown.replace("changeme", ""), "the key is shown"


async def test_a_key_slurmrestd_would_not_read_is_refused(cluster: DevCluster) -> None:
    """jwt_key naming a file outside the staged set (one slurmrestd's user may read, like its token
    file), or no token authentication at all: refused before the swap."""
    async with restd_pod(cluster) as pod:
        good = slurm_conf_for(cluster, pod.target)
        pod.conf.write({"slurm.conf": good.replace(f"{pod.target}/{JWT_KEY}", "/etc/passwd")})
        st = await _status_until(pod, "rejected", lambda s: bool(s["rejected"]) and not s["pending"])
        # (what AuthAltParameters says is redacted wherever it is shown: it may hold secrets)
        assert "is not a file of this set staged in" in st["rejected"]["reason"], st
        pod.conf.write({"slurm.conf": good.replace("AuthAltTypes=auth/jwt\n", "")})
        st = await _status_until(
            pod, "rejected again", lambda s: "AuthAltTypes" in str(s["rejected"]) and not s["pending"]
        )
        assert st["applied"]["generation"] == 1
