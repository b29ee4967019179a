"""The HS256 key slurmrestd (and slurmctld) sign and check tokens with, judged before it is staged.

Slurm reads the file whole as the key (`AuthAltParameters=jwt_key=FILE`) and checks only that others
may not read it. HS256 needs a key at least as long as its hash, 256 bits (RFC 7518 section 3.2), and
Slurm's JWT guide makes one of 32 random bytes (`dd if=/dev/random bs=32 count=1`). A key is bytes:
binary is expected, and nothing of it is ever logged, shown or put in a reason; a reason says only its
length and what kind of problem it has.
"""

from __future__ import annotations

MIN_BYTES = 32  # HS256: 256 bits (RFC 7518 3.2)
MAX_BYTES = 64 * 1024  # a key is 32-64 bytes; a larger file is a mistake (and is read whole by Slurm)
MIN_DISTINCT_BYTES = 8  # 32 random bytes have ~30 distinct values; "aaaa..." or "0000..." has 1
# what a sample or chart ships in place of a key: refused, never staged
PLACEHOLDERS = (
    b"changeme",
    b"change-me",
    b"change_me",
    b"placeholder",
    b"replace",
    b"example",
    b"secret",
    b"xxxxxxxx",
)
PEM = b"-----BEGIN"


def problems(name: str, data: bytes) -> list[str]:
    """Why `data` is not a key slurmrestd should run with; [] when it is. Linear in its size."""
    size = len(data)
    if size == 0:
        return [f"the JWT key {name} is empty"]
    if size > MAX_BYTES:
        return [f"the JWT key {name} is {size} bytes, over the {MAX_BYTES}-byte limit for an HS256 key"]
    if data.lstrip().startswith(PEM):
        return [
            f"the JWT key {name} is a PEM file: jwt_key= takes the raw HS256 key "
            "(public keys for RS256 go in a JWKS file, jwks=)"
        ]
    found: list[str] = []
    if size < MIN_BYTES:
        found.append(
            f"the JWT key {name} is {size} bytes: HS256 needs at least {MIN_BYTES} "
            "(256 bits, RFC 7518 3.2; `dd if=/dev/random bs=32 count=1` makes one)"
        )
    if len(set(data)) < MIN_DISTINCT_BYTES:
        found.append(
            f"the JWT key {name} has fewer than {MIN_DISTINCT_BYTES} distinct bytes: not a random key"
        )
    lowered = data.lower()
    if any(word in lowered for word in PLACEHOLDERS):
        found.append(
            f"the JWT key {name} holds a placeholder word (changeme, example, secret...): not a real key"
        )
    return found
