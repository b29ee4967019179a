"""A credential for Slurm's own HTTP endpoints (26.05): a JWT in `X-SLURM-USER-TOKEN`.

What 26.05 takes, read from its source (src/slurmctld/http.c, src/interfaces/http_auth.c) and
measured here on 26.05.5: over TCP only auth/jwt authenticates an HTTP request (munge and
auth/slurm have no HTTP form; http_auth/local needs a unix socket, which slurmctld's port is not).
Its plugins are loaded only when `SlurmctldHttpAuthParameters` is set (`jwt_key=FILE`): without it
every credential, a good one too, is answered 401. `/readyz?verbose` then takes root's or
SlurmUser's token only; `/metrics/*` behind `MetricsAuthUsers` (or `PrivateData`) takes root's,
SlurmUser's and the listed users'.

Two sources, as the deployment has them:
- a token file (`scontrol token` output, a Secret rotated by someone else): read at each use, so a
  rotation is seen; an expired token is Slurm's 401, said as such;
- the HS256 key itself (the Secret slurmctld reads, `jwt_hs256.key`): a token is minted per use for
  one user, living a minute. The key mints any user's token, root's too, so it is taken only from
  a file no other uid may read, as Slurm itself requires of it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import stat
import time
from pathlib import Path

from sidecars.runtime.settings import PATH, ConfigError, declared, setting

TOKEN_HEADER = "X-SLURM-USER-TOKEN"
MAX_KEY_BYTES = 64 * 1024  # an HS256 key; Slurm mmaps its file whole
MAX_TOKEN_CHARS = 16 * 1024
LIFESPAN_SECONDS = 60  # a minted token: one request's worth, with room for a slow machine's clock


class CredentialError(Exception):
    """No token can be had from the source given: why, in one line (never the secret)."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def mint(key: bytes, user: str, lifespan_seconds: float = LIFESPAN_SECONDS, now: float | None = None) -> str:
    """An HS256 JWT for `user` as auth/jwt reads it (`sun`, `exp`, `iat`)."""
    at = int(time.time() if now is None else now)
    head = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    claims = {"iat": at, "exp": at + int(lifespan_seconds), "sun": user}
    body = _b64(json.dumps(claims, separators=(",", ":")).encode())
    sig = _b64(hmac.new(key, f"{head}.{body}".encode(), hashlib.sha256).digest())
    return f"{head}.{body}.{sig}"


def _read_capped(path: Path, cap: int, what: str) -> bytes:
    try:
        with path.open("rb") as f:
            st = os.fstat(f.fileno())
            data = f.read(cap + 1)
    except OSError as exc:
        raise CredentialError(f"{what}: cannot read {path}: {exc.strerror}") from None
    if len(data) > cap:
        raise CredentialError(f"{what}: {path} is larger than {cap} bytes")
    if what == "--jwt-key-file" and st.st_mode & stat.S_IRWXO:
        # as Slurm's own check of this key: whoever reads it can pose as root to Slurm
        raise CredentialError(f"{what}: {path} is open to other users (mode {stat.S_IMODE(st.st_mode):o})")
    return data


@declared()
class Credential:
    """Where the token for Slurm's HTTP endpoints comes from: at most one of the two files (the
    probe's flags, read at each probe)."""

    token_file: Path | None = setting(
        default=None,
        flag="--slurm-token-file",
        conv=PATH,
        help="probe controller|metrics: a file holding a JWT for Slurm's own HTTP endpoints (26.05: "
        "root's or SlurmUser's for /readyz?verbose), read at each probe",
    )
    key_file: Path | None = setting(
        default=None,
        flag="--jwt-key-file",
        conv=PATH,
        help="probe controller|metrics: Slurm's HS256 key (jwt_hs256.key, no access for other users): "
        "a one-minute token for --jwt-user is minted per probe",
    )
    user: str = setting(  # root, or SlurmUser for /readyz?verbose
        default="slurm",
        flag="--jwt-user",
        help="the user a token minted with --jwt-key-file names (SlurmUser or root)",
    )

    def __post_init__(self) -> None:
        if self.token_file is not None and self.key_file is not None:
            raise ConfigError("--slurm-token-file and --jwt-key-file: give one, not both")

    @property
    def given(self) -> bool:
        return self.token_file is not None or self.key_file is not None

    def describe(self) -> str:
        if self.token_file is not None:
            return f"token file {self.token_file}"
        if self.key_file is not None:
            return f"a token for {self.user} minted with {self.key_file}"
        return "no credential"

    def headers(self) -> dict[str, str]:
        """The request's header; CredentialError when the source gives none."""
        if self.token_file is not None:
            raw = _read_capped(self.token_file, MAX_TOKEN_CHARS, "--slurm-token-file")
            token = raw.decode(errors="replace").strip()
            if token.count(".") != 2 or any(c.isspace() for c in token):
                raise CredentialError(f"--slurm-token-file: {self.token_file} holds no JWT")
            return {TOKEN_HEADER: token}
        if self.key_file is not None:
            key = _read_capped(self.key_file, MAX_KEY_BYTES, "--jwt-key-file")
            if not key:
                raise CredentialError(f"--jwt-key-file: {self.key_file} is empty")
            return {TOKEN_HEADER: mint(key, self.user)}
        return {}
