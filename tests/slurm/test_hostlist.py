"""Hostlist expressions: expansion, compression, and agreement with Slurm's own `scontrol show hostnames`."""

from __future__ import annotations

import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecars.devcluster import DevCluster
from sidecars.slurm import hostlist


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("gpu-[01-03,20]", ["gpu-01", "gpu-02", "gpu-03", "gpu-20"]),
        ("a[1-2]-b[3-4]", ["a1-b3", "a1-b4", "a2-b3", "a2-b4"]),
        ("n1,n[3-5]", ["n1", "n3", "n4", "n5"]),
        ("n7", ["n7"]),
        ("login,n[9-10]", ["login", "n9", "n10"]),
        ("", []),
        ("(null)", []),
    ],
)
def test_expand_examples(expr: str, names: list[str]) -> None:
    assert hostlist.expand(expr) == names


@pytest.mark.parametrize(
    "bad", ["n[1-", "n]1[", "n[3-1]", "n[a-b]", "n[1-2", "n[[1]]", "n[]", "n[0-99999999]"]
)
def test_expand_rejects_malformed(bad: str) -> None:
    with pytest.raises(hostlist.HostlistError):
        hostlist.expand(bad)


def test_compress_examples() -> None:
    assert hostlist.compress(["n1", "n2", "n3", "n5"]) == "n[1-3,5]"
    assert hostlist.compress(["gpu-01", "gpu-02", "gpu-10"]) == "gpu-[01-02],gpu-10"
    assert hostlist.compress(["login", "n1"]) == "login,n1"
    assert hostlist.compress([]) == ""


names = st.lists(
    st.builds(
        lambda prefix, num, pad: f"{prefix}{str(num).zfill(pad)}",
        st.sampled_from(["n", "gpu-", "a1-b", "rack2-node"]),
        st.integers(0, 300),
        st.sampled_from([0, 0, 3]),
    ),
    max_size=40,
)


@given(names)
def test_compress_then_expand_gives_the_same_set(xs: list[str]) -> None:
    out = hostlist.expand(hostlist.compress(xs))
    assert sorted(out) == sorted(set(xs))
    assert len(out) == len(set(xs))


@given(names)
def test_compress_is_stable(xs: list[str]) -> None:
    once = hostlist.compress(xs)
    assert hostlist.compress(hostlist.expand(once)) == once


@pytest.mark.per_release("agreement with each release's own scontrol show hostnames")
async def test_expansion_matches_scontrol(cluster: DevCluster) -> None:
    client = cluster.client()
    for expr in ["gpu-[01-03,20]", "a[1-2]-b[3-4]", "n1,n[3-5]", "x[008-011]"]:
        r = await client.run("scontrol", "show", "hostnames", expr)
        assert r.stdout.split() == hostlist.expand(expr), expr
        r2 = await client.run("scontrol", "show", "hostlist", ",".join(hostlist.expand(expr)))
        assert sorted(hostlist.expand(r2.stdout.strip())) == sorted(hostlist.expand(expr))


@pytest.mark.parametrize(
    ("expr", "size"),
    [
        ("n[0-999][0-999999]", 10**9),
        ("n[0-99][0-99999]", 10**7),
        ("a[1-2]-b[3-4],c,d[01-10,20]", 4 + 1 + 11),
        ("n[0-999999999999999999]", 10**18),
    ],
)
def test_size_is_counted_without_expanding(expr: str, size: int) -> None:
    # a billion names counted exactly: only arithmetic on the ranges can do that here
    assert hostlist.count(expr, limit=10**20, max_bytes=10**30) == size


@pytest.mark.parametrize(
    "huge",
    [
        "n[0-999][0-999999]",
        "n[0-99][0-99999]",
        "a[0-316],b[0-316][0-316]",  # each part small, the sum over the cap
        ",".join(["n[0-99999]"] * 2),
        "n[" + ",".join(["0-9999"] * 11) + "]",
    ],
)
def test_a_hostlist_over_the_cap_is_refused_before_expansion(huge: str) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(hostlist.HostlistError, match="more than 100000"):
            hostlist.expand(huge)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # expanding even the cap's 100,000 names would take megabytes; the refusal takes almost nothing
    assert peak < 256 * 1024


def test_a_number_too_long_for_a_node_is_refused() -> None:
    with pytest.raises(hostlist.HostlistError, match="too long"):
        hostlist.count("n[1-" + "9" * 5000 + "]")


def test_the_cap_itself_expands() -> None:
    assert len(hostlist.expand("n[000000-099999]")) == hostlist.MAX_NAMES


@pytest.mark.parametrize(
    "long_names",
    [
        "x" * 4080 + "[0-99999]",  # 4,089 characters: ~420 MiB of names under the count cap
        "a" * 2000 + "[0-9999]" + "b" * 2000,
        ",".join(["y" * 400 + "[0-9999]"] * 5),  # each part small, the sum over the cap
    ],
)
def test_a_hostlist_of_long_names_is_refused_by_its_bytes_before_expansion(long_names: str) -> None:
    assert hostlist.count(long_names, max_bytes=1 << 40) <= hostlist.MAX_NAMES  # the count cap passes
    tracemalloc.start()
    try:
        with pytest.raises(hostlist.HostlistError, match=f"more than {hostlist.MAX_BYTES} bytes of names"):
            hostlist.expand(long_names)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 256 * 1024


ranged = st.builds(
    lambda prefix, lo, span, pad, suffix: f"{prefix}[{str(lo).zfill(pad)}-{lo + span}]{suffix}",
    st.text("abc-", max_size=5),
    st.integers(0, 2000),
    st.integers(0, 300),
    st.integers(0, 5),
    st.text("xyz", max_size=3),
)


@settings(deadline=5000)  # a budget per example, generous for a loaded machine
@given(st.lists(ranged, min_size=1, max_size=3))
def test_the_bytes_counted_are_the_bytes_expanded(parts: list[str]) -> None:
    expr = ",".join(parts)
    names = hostlist.expand(expr)
    assert hostlist.count(expr, max_bytes=sum(len(n) + 1 for n in names)) == len(names)
    if names:
        with pytest.raises(hostlist.HostlistError, match="bytes of names"):
            hostlist.count(expr, max_bytes=sum(len(n) + 1 for n in names) - 1)
