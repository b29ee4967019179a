"""S1-S2: what the trust boundaries cost, beside a baseline measured in the same run.

- S1, a hostlist over the cap (`n[0-999][0-999999]`, 10^9 names in 18 characters) is refused from
  its size before anything is expanded: time and peak memory of the refusal; baseline: expanding
  the largest hostlist accepted (the cap, 100,000 names), which is what the refusal spares.
- S2, who is calling: identifying a worker agent by its ServiceAccount token once its TokenReview
  verdict is cached (hash, cache, the pod cache's answer) per request; baseline: the operator's
  token (two constant-time compares).

Usage: .venv/bin/python bench/input_bounds.py [--rounds 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import time
import tracemalloc

from _report import one_core, percentile, result

from sidecars.controlplane.http.access import POD_NAME, POD_UID, Access
from sidecars.kube import TokenReview
from sidecars.slurm import hostlist

HUGE = "n[0-999][0-999999]"
CAP = "n[000000-099999]"


def timed(fn: object, rounds: int) -> list[float]:
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        fn()  # type: ignore[operator]
        samples.append(time.perf_counter() - started)
    return samples


def refuse() -> None:
    try:
        hostlist.expand(HUGE)
    except hostlist.HostlistError:
        return
    raise AssertionError("not refused")


def peak(fn: object) -> int:
    tracemalloc.start()
    try:
        fn()  # type: ignore[operator]
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


async def identify(rounds: int) -> tuple[list[float], list[float]]:
    review = TokenReview(
        authenticated=True,
        username="system:serviceaccount:slurm:slurm-worker",
        audiences=("slurm-sidecars",),
        extra={POD_NAME: ("worker-1",), POD_UID: ("uid-1",)},
    )

    async def reviewer(token: str, audiences: tuple[str, ...]) -> TokenReview:
        return review

    access = Access(
        "o" * 64, "v" * 64, review=reviewer, audience="slurm-sidecars", locate=lambda ns, pod, uid: "n1"
    )
    agent = "Bearer eyJhbGciOiJSUzI1NiJ9." + "a" * 700 + "." + "b" * 340
    assert not isinstance(await access.identify(agent), str)  # the verdict is cached from here on
    ours, base = [], []
    for _ in range(rounds):
        started = time.perf_counter()
        await access.identify(agent)
        ours.append(time.perf_counter() - started)
        started = time.perf_counter()
        await access.identify("Bearer " + "o" * 64)
        base.append(time.perf_counter() - started)
    return ours, base


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2000)
    args = parser.parse_args()
    one_core()

    refusal = percentile(timed(refuse, args.rounds), 50)
    refusal_peak = peak(refuse)
    expansion = percentile(timed(lambda: hostlist.expand(CAP), 5), 50)
    expansion_peak = peak(lambda: hostlist.expand(CAP))
    print(f"refusal of {HUGE}: {refusal * 1e6:.1f} us, peak {refusal_peak / 1024:.1f} KiB")
    print(f"expansion of the cap ({CAP}): {expansion * 1e3:.1f} ms, peak {expansion_peak / 2**20:.1f} MiB")
    result(
        "S1",
        "hostlist of 10^9 names refused (p50, peak memory)",
        f"{refusal * 1e6:.0f} us, {refusal_peak / 1024:.0f} KiB",
        f"expanding the 100,000-name cap: {expansion * 1e3:.0f} ms, {expansion_peak / 2**20:.0f} MiB",
        "< 1 ms and < 64 KiB",
        refusal < 1e-3 and refusal_peak < 64 * 1024,
    )

    ours, base = asyncio.run(identify(args.rounds))
    p50, p99, b50 = percentile(ours, 50), percentile(ours, 99), percentile(base, 50)
    print(f"agent identified (cached review): p50 {p50 * 1e6:.1f} us, p99 {p99 * 1e6:.1f} us")
    print(f"operator identified: p50 {b50 * 1e6:.1f} us")
    result(
        "S2",
        "an agent's token identified per request (cached TokenReview, p50/p99)",
        f"{p50 * 1e6:.0f}/{p99 * 1e6:.0f} us",
        f"the operator's token: {b50 * 1e6:.0f} us",
        "p99 < 100 us",
        p99 < 100e-6,
    )


if __name__ == "__main__":
    main()
