"""What a JSON Web Token says about itself: when it expires, when it was issued, for whom.

Read, not verified: the signature is slurmctld's to check (with its jwt key, which we never hold for
this). We only need to know how long a token that callers present has left, to warn before it runs
out (a token that expires is refused without a word to the caller's operator: slurm-operator #240).
Slurm's tokens (`scontrol token`) carry `exp`, `iat` and `sun` (the Slurm user name).
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass

MAX_TOKEN_CHARS = 16 * 1024  # Slurm's are ~200 characters; anything near this is not a token of ours


@dataclass(frozen=True, slots=True)
class TokenClaims:
    expires_at: float | None  # epoch seconds; None: the token says it never expires
    issued_at: float | None
    user: str  # `sun`, else `sub`; "" when neither is there


def read(token: str) -> TokenClaims:
    """The claims of `token` (header.payload.signature); ValueError saying what is wrong with it.
    Linear in the token's length, which is capped."""
    token = token.strip()
    if len(token) > MAX_TOKEN_CHARS:
        raise ValueError(f"longer than {MAX_TOKEN_CHARS} characters: not a token")
    parts = token.split(".")
    if len(parts) != 3 or not all(parts):
        raise ValueError("not a JSON Web Token (three dot-separated parts expected)")
    try:
        payload = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise ValueError("its payload is not base64url-encoded JSON") from None
    if not isinstance(payload, dict):
        raise ValueError("its payload is not a JSON object")
    return TokenClaims(_epoch(payload, "exp"), _epoch(payload, "iat"), _user(payload))


def _epoch(payload: dict[str, object], key: str) -> float | None:
    value = payload.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"its {key!r} claim is not a number of seconds: {str(value)[:40]!r}")
    return float(value)


def _user(payload: dict[str, object]) -> str:
    for key in ("sun", "sub"):
        value = payload.get(key)
        if isinstance(value, str):
            return value[:64]
    return ""
