"""The HS256 key's checks on their own: binary is a key, a sample is not, and no reason quotes it."""

from __future__ import annotations

import random

import pytest

from sidecars.configsync.restd import key

_BYTES = random.Random(37)  # random bytes, the same in every xdist worker's collection


def _random(n: int) -> bytes:
    return _BYTES.randbytes(n)


@pytest.mark.parametrize(
    "data",
    [
        _random(32),
        b"\x00" + _random(30) + b"\n",  # binary, NULs and a newline included: dd's output
        _random(32).hex().encode(),  # `openssl rand -hex 32`: 64 printable bytes
        _random(key.MAX_BYTES),
    ],
    ids=["dd", "binary", "hex", "largest"],
)
def test_a_random_key_passes(data: bytes) -> None:
    assert key.problems("jwt_hs256.key", data) == []


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"", "empty"),
        (_random(31), "31 bytes: HS256 needs at least 32"),
        (b"0" * 32, "distinct bytes"),
        (b"my-example-jwt-key-0123456789abcdef", "placeholder"),
        (b"  -----BEGIN RSA PRIVATE KEY-----\n" + _random(64), "PEM"),
        (_random(key.MAX_BYTES + 1), "over the 65536-byte limit"),
    ],
    ids=["empty", "short", "one-byte", "sample", "pem", "huge"],
)
def test_an_unfit_key_is_refused_without_being_quoted(data: bytes, words: str) -> None:
    found = "; ".join(key.problems("jwt_hs256.key", data))
    assert words in found, found
    printable = data.decode("latin-1")
    assert not any(
        printable[i : i + 8] in found
        for i in range(0, max(len(printable) - 8, 0), 8)
        if printable[i : i + 8].isalnum()
    )
