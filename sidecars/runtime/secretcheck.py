"""Refusing a key or token nobody should run on: empty, short, repetitive or a placeholder.

The manifests ship no secret values, but a copied example or a left-over `REPLACE-ME` would
otherwise authenticate a cluster with a value anyone can read in a repository.
"""

from __future__ import annotations

import re

MIN_TOKEN_CHARS = 32  # `openssl rand -hex 16` and up: 128 bits
MIN_KEY_BYTES = 32  # munged refuses shorter keys too; the docs make 1024 bytes
MIN_DISTINCT = 8  # "aaaa...": long enough, and guessable

# words that mark an example value, never one made by `openssl rand` or `dd if=/dev/urandom`
_PLACEHOLDER = re.compile(
    r"replace|change[-_ .]?me|changeit|placeholder|example|insecure|dummy|default|your[-_ ]|xxxx|<[a-z _-]+>",
    re.IGNORECASE,
)


def weakness(value: bytes, min_length: int) -> str | None:
    """Why `value` must not be used as a secret, or None when it may."""
    data = value.strip()
    if not data:
        return "is empty"
    if len(data) < min_length:
        return f"is {len(data)} bytes long, shorter than {min_length}"
    # only a text value can be a placeholder; random bytes spell words by chance. The word found is
    # said, never the value
    text = data.decode("ascii") if data.isascii() else ""
    found = _PLACEHOLDER.search(text) if text.isprintable() else None
    if found:
        word = found.group(0).lower()
        return f"looks like a placeholder (it says {word!r}): generate one (docs/security.md)"
    if len(set(data)) < MIN_DISTINCT:
        return f"has fewer than {MIN_DISTINCT} distinct bytes"
    period = smallest_period(data)
    if period <= len(data) // 2:  # "abcdefgh" x 4: as guessable as its first 8 bytes
        return f"repeats a block of {period} bytes"
    return None


def smallest_period(data: bytes) -> int:
    """The length of the shortest block whose repetition (the last one maybe cut short) is `data`:
    from the longest border (a prefix that is also a suffix), linear in the length (Knuth-Morris-Pratt)."""
    border = [0] * len(data)
    k = 0
    for i in range(1, len(data)):
        while k and data[i] != data[k]:
            k = border[k - 1]
        if data[i] == data[k]:
            k += 1
        border[i] = k
    return len(data) - (border[-1] if data else 0)
