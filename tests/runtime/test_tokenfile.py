"""The agent's token is read again when the kubelet rotates it (a new file behind the `..data` link),
and the last good one is kept while the file is mid-swap or empty."""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecars.devcluster.volume import AtomicVolume
from sidecars.runtime.settings import ConfigError
from sidecars.runtime.tokenfile import TokenFile


def test_a_rotated_token_is_read_again(tmp_path: Path) -> None:
    volume = AtomicVolume(tmp_path / "projected")
    volume.write({"token": "first.jwt.token"})
    token = TokenFile(volume.path / "token")
    assert token.value() == "first.jwt.token"
    volume.write({"token": "second.jwt.token"})  # the kubelet's swap of `..data`
    assert token.value() == "second.jwt.token"
    volume.write({"other": "x"})  # gone for a moment: the last good one
    assert token.value() == "second.jwt.token"
    volume.write({"token": ""})  # empty for a moment: the last good one
    assert token.value() == "second.jwt.token"
    volume.write({"token": "third.jwt.token"})
    assert token.value() == "third.jwt.token"


def test_a_token_that_cannot_be_read_at_start_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        TokenFile(tmp_path / "missing")
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ConfigError, match="empty"):
        TokenFile(tmp_path / "empty")
