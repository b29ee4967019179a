"""Hostlist expressions: expansion, compression, and agreement with Slurm's own `scontrol show hostnames`."""

from __future__ import annotations

import pytest
from hypothesis import given
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


async def test_expansion_matches_scontrol(cluster: DevCluster) -> None:
    client = cluster.client()
    for expr in ["gpu-[01-03,20]", "a[1-2]-b[3-4]", "n1,n[3-5]", "x[008-011]"]:
        r = await client.run("scontrol", "show", "hostnames", expr)
        assert r.stdout.split() == hostlist.expand(expr), expr
        r2 = await client.run("scontrol", "show", "hostlist", ",".join(hostlist.expand(expr)))
        assert sorted(hostlist.expand(r2.stdout.strip())) == sorted(hostlist.expand(expr))
