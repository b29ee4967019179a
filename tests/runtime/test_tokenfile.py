"""The agent's token is read again when the kubelet rotates it (a new file behind the `..data` link),
and the last good one is kept while the file is mid-swap or empty."""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecars.devcluster.volume import AtomicVolume
from sidecars.runtime.settings import ConfigError
from sidecars.runtime.tokenfile import TokenFile

# JWT-shaped, as long as a real projected token needs to be to pass the weak-token check
FIRST, SECOND, THIRD = (
    f"eyJhbGciOiJSUzI1NiJ9.{n}-9f8e7d6c5b4a3210.c2lnbmF0dXJl" for n in ("one", "two", "three")
)


def test_a_rotated_token_is_read_again(tmp_path: Path) -> None:
    volume = AtomicVolume(tmp_path / "projected")
    volume.write({"token": FIRST})
    token = TokenFile(volume.path / "token")
    assert token.value() == FIRST
    volume.write({"token": SECOND})  # the kubelet's swap of `..data`
    assert token.value() == SECOND
    volume.write({"other": "x"})  # gone for a moment: the last good one
    assert token.value() == SECOND
    volume.write({"token": ""})  # empty for a moment: the last good one
    assert token.value() == SECOND
    volume.write({"token": THIRD})
    assert token.value() == THIRD


def test_a_token_that_cannot_be_read_at_start_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        TokenFile(tmp_path / "missing")
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ConfigError, match="empty"):
        TokenFile(tmp_path / "empty")
