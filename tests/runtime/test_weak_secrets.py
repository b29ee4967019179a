"""Every daemon, client and init step refuses an empty, short, repetitive or placeholder key or
token: exit 2, one line on stderr that names the file and never shows the value."""

from __future__ import annotations

import asyncio
import os
import secrets
import sys
from pathlib import Path

import pytest

CLI = str(Path(sys.executable).parent / "slurm-sidecars")

# what manifests/base shipped before, a copied example, and the plainly weak
WEAK_TOKENS = {
    "placeholder": "REPLACE-ME-with-a-long-random-token",
    "example": "an-example-token-from-the-docs-0123456789",
    "short": "s3cret",
    "empty": "\n",
    "repetitive": "a" * 64,
    "periodic": "abcdefgh" * 4,  # 8 distinct characters, 32 long: guessable as its first 8
}
WEAK_KEYS = {
    "placeholder": b"REPLACE-ME-with-1024-random-bytes-before-the-first-apply",
    "short": os.urandom(16),
    "empty": b"",
    "repetitive": b"\0" * 1024,
    "periodic": secrets.token_bytes(16) * 64,  # 1,024 bytes of which 16 are random
}


def commands(token: Path, sock: Path) -> dict[str, list[str]]:
    cp = ["--control-plane", "http://127.0.0.1:9", "--token-file", str(token)]
    return {
        "control-plane": ["control-plane", "--http", "127.0.0.1:0", "--token-file", str(token)],
        "worker": ["worker", "--node-name", "n1", "--http", "127.0.0.1:0", "--socket", str(sock), *cp],
        "status": ["status", *cp],
        "maintenance": ["maintenance", "list", *cp],
        "upgrade": ["upgrade", "status", *cp],
    }


async def run(*argv: str) -> tuple[int | None, str]:
    proc = await asyncio.create_subprocess_exec(
        CLI,
        *argv,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "SIDECARS_KUBERNETES": "off"},
    )
    _, err = await proc.communicate()
    return proc.returncode, err.decode()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("weak", list(WEAK_TOKENS))
async def test_a_weak_token_is_refused_by_every_command_that_reads_one(
    weak: str, tmp_path: Path, sockdir: Path
) -> None:
    token = tmp_path / "token"
    token.write_text(WEAK_TOKENS[weak])
    for role, argv in commands(token, sockdir / "agent.sock").items():
        code, err = await run(*argv)
        assert code == 2 and err.count("\n") == 1, (role, code, err)
        assert str(token) in err, (role, err)
        if WEAK_TOKENS[weak].strip():
            assert WEAK_TOKENS[weak].strip() not in err, (role, err)  # never the value itself


@pytest.mark.timeout(60)
async def test_a_generated_token_passes_the_check(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(secrets.token_hex(32) + "\n")  # as the docs say: openssl rand -hex 32
    # past the token: the command then fails on what it was given to fail on, the address
    code, err = await run("control-plane", "--http", "nope", "--token-file", str(token))
    assert code == 2 and "--http" in err and "token" not in err, err


@pytest.mark.timeout(60)
@pytest.mark.parametrize("weak", list(WEAK_KEYS))
async def test_the_init_steps_key_check_refuses_a_weak_munge_key(weak: str, tmp_path: Path) -> None:
    good, bad = tmp_path / "good.key", tmp_path / "munge.key"
    good.write_bytes(os.urandom(1024))  # dd if=/dev/urandom bs=1024 count=1
    bad.write_bytes(WEAK_KEYS[weak])
    assert await run("check-secret", "--file", str(good)) == (0, "")
    code, err = await run("check-secret", "--file", str(good), "--file", str(bad))
    assert code == 2 and err.count("\n") == 1 and str(bad) in err, err
